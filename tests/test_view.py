"""arrayport.View's own contract: immutable, truthful metadata, a helpful repr."""

import numpy as np
import pytest

import arrayport as ap


def test_view_is_immutable():
    view = ap.from_dlpack(np.ones((2, 3)))
    for name in ("shape", "strides", "dtype", "ptr", "readonly", "owner", "device"):
        with pytest.raises(AttributeError):
            setattr(view, name, None)
    with pytest.raises(AttributeError):
        view.anything_new = 1


def test_repr_names_the_essentials():
    source = np.zeros((2, 3), dtype=np.int16)[:, ::2]
    source.flags.writeable = False
    text = repr(ap.from_dlpack(source))
    for part in ("arrayport.View", "int16[2, 2]", "on cpu", "strides=(6, 4)", "readonly",
                 "via dlpack", "owner=numpy.ndarray"):
        assert part in text


@pytest.mark.parametrize("shape,strides,c,f", [
    ((3, 1), (1, 99), True, True),       # size-1 dimensions are ignored
    ((1, 4), (99, 1), True, True),
    ((2, 3), (3, 1), True, False),
    ((2, 3), (1, 2), False, True),
    ((0, 3), (7, 5), True, True),        # no elements: contiguous
    ((2, 0, 3), (1, 1, 1), True, True),
    ((2, 3), (6, 2), False, False),
    ((), (), True, True),
])
def test_contiguity_rules(producer, shape, strides, c, f):
    from producer import spec
    view = ap.from_dlpack(producer.capsule(spec(shape=shape, strides=strides)))
    assert (view.is_c_contiguous, view.is_f_contiguous) == (c, f)


def test_sizes_and_pointer():
    source = np.zeros((4, 5), dtype=np.complex64)[1:, 2:]
    view = ap.from_dlpack(source)
    assert (view.ndim, view.size, view.itemsize, view.nbytes) == (2, 9, 8, 72)
    assert view.ptr == source.__array_interface__["data"][0]
    assert view.owner is source and view.protocol == "dlpack" and not view.is_copy
