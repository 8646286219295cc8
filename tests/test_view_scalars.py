"""Python's scalar conversions of a View answer as NumPy's ndarray does (issue 44):
``bool``, ``float``, ``int``, ``complex`` and ``operator.index`` of one element; ``bool`` of
none or several is a ValueError, so ``if v:`` cannot silently mean "is not None". On the
host here; of device memory in tests/test_gpu_scalars.py (copied to the host for the value,
as ``float`` of a PyTorch CUDA scalar is)."""

import operator

import numpy as np
import pytest

import arrayport as ap


def numpys_answer(call, array):
    try:
        return call(array)
    except (TypeError, ValueError) as error:
        return type(error)


@pytest.mark.parametrize("value", [0.0, 2.5, -1.0])
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_the_numbers_of_one_element_are_numpys(value, shape):
    # what NumPy answers for its own array, a View answers: 0-d converts; NumPy 2.4 refuses
    # float() of a 1-element array with dimensions, and so does a View of one there
    array = np.full(shape, value)
    view = ap.view(array)
    for call in (bool, float, int, complex):
        assert numpys_answer(call, view) == numpys_answer(call, array), (call, shape)
    assert float(ap.view(np.array(value))) == value


def test_the_truth_of_none_or_several_elements_is_a_value_error():
    for array in (np.zeros(3), np.zeros((2, 2)), np.zeros(0)):
        with pytest.raises(ValueError, match="truth value of an array"):
            bool(ap.view(array))
        with pytest.raises(TypeError, match="only length-1 arrays"):
            float(ap.view(array))


def test_index_takes_integer_scalars_only():
    assert operator.index(ap.view(np.array(7, np.int64))) == 7
    assert list(range(10))[ap.view(np.array(3, np.int32))] == 3
    with pytest.raises(TypeError):
        operator.index(ap.view(np.array(2.0)))
    with pytest.raises(TypeError, match="scalar index"):
        operator.index(ap.view(np.array([3])))


def test_types_numpy_holds_through_ml_dtypes_convert_too():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    view = ap.view(np.array(1.5, dtype=ml_dtypes.bfloat16))
    assert float(view) == 1.5 and bool(view)
