"""Copies made visible (issue 45): ``arrayport.explain`` says what a conversion would do
without moving data, and ``CopyWarning`` announces every copy nobody asked for, when asked.

explain is held to the conversion itself: for each case, what it says (zero-copy, a copy,
refused) is what ``arrayport.to`` then does — shared memory compared by address."""

import warnings

import numpy as np
import pytest

import arrayport as ap
from optional import needs, optional_module

torch = optional_module("torch")


def frozen(values=None):
    array = np.arange(6.0).reshape(2, 3) if values is None else values
    array.flags.writeable = False
    return array


def address(x):
    return ap.view(x).ptr


# ---- explain -----------------------------------------------------------------------------------

def cases():
    """(label, producer factory, target, options): everyday conversions with each outcome."""
    found = [
        ("numpy to numpy", lambda: np.arange(6.0), "numpy", {}),
        ("read-only to numpy", frozen, "numpy", {}),
        ("read-only to numpy, copy=True", frozen, "numpy", {"copy": True}),
        ("memoryview to numpy", lambda: memoryview(bytearray(8)), "numpy", {}),
    ]
    if torch is not None:
        found += [
            ("read-only to torch", frozen, "torch", {}),
            ("read-only to torch, shared", frozen, "torch", {"readonly": "share"}),
            ("negative strides to torch", lambda: np.arange(6.0)[::-1], "torch", {}),
            ("negative strides to torch, copy=False", lambda: np.arange(6.0)[::-1], "torch",
             {"copy": False}),
            ("torch to numpy", lambda: torch.arange(6.0), "numpy", {}),
            ("conjugate tensor to numpy",
             lambda: torch.tensor([1 + 1j, 2 - 1j]).conj(), "numpy", {}),
        ]
    return found


@pytest.mark.parametrize("label, make, target, options", cases(), ids=[c[0] for c in cases()])
def test_explain_says_what_the_conversion_then_does(label, make, target, options):
    x = make()
    told = ap.explain(x, target, **options)
    assert isinstance(told.reason, str) and told.reason and told.target == target
    if told.refused:
        with pytest.raises((BufferError, TypeError, ValueError)):
            ap.to(x, target, **options)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # readonly="share" warns, as it should
        result = ap.to(x, target, **options)
    shared = address(result) == address(x) if not told.copies else None
    if told.copies:
        try:
            same = address(result) == address(x)
        except ap.NeedsCopy:    # the producer has no memory holding its values: a copy
            same = False
        assert not same, f"{label}: explained as a copy, but the result shares memory"
    else:
        assert shared, f"{label}: explained as zero-copy, but the result is a copy"


def test_explain_moves_no_data_and_gives_the_converters_reason():
    told = ap.explain(frozen(), "numpy", copy=True)
    assert told.copies and "copy=True asks for a copy" in told.reason
    assert str(told).startswith("numpy: a copy (read through dlpack): copy=True asks")


@needs("torch")
def test_explain_of_a_read_only_array_for_torch_names_the_policy():
    told = ap.explain(frozen(), "torch")
    assert (told.route, told.copies, told.refused) == ("dlpack", True, False)
    assert "read-only" in told.reason and "readonly='share'" in told.reason
    assert str(told) == f"torch: a copy (read through dlpack): {told.reason}"
    refused = ap.explain(np.arange(6.0)[::-1], "torch", copy=False)
    assert refused.refused and "but copy=False" in refused.reason
    assert str(refused).startswith("torch: refused (read through dlpack): to_torch:")


@needs("torch")
def test_explain_tells_the_warning_a_shared_read_only_conversion_gives():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        told = ap.explain(frozen(), "torch", readonly="share")
    assert not told.copies and "ReadOnlySharedWarning" in told.reason


@needs("torch")
def test_explain_of_a_lazy_conjugate_says_its_memory_does_not_hold_the_values():
    told = ap.explain(torch.tensor([1 + 1j]).conj(), "numpy")
    assert told.copies and told.route == "dlpack" and "conjugate bit" in told.reason


def test_explain_of_something_no_protocol_reads_is_a_refusal():
    told = ap.explain(object(), "numpy")
    assert told.refused and told.route == "none arrayport reads"


# ---- CopyWarning ------------------------------------------------------------------------------

@needs("torch")
def test_unasked_copies_warn_only_when_watched():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ap.to_torch(frozen())                        # not watched: silent, as before
    with ap.warn_on_copies():
        with pytest.warns(ap.CopyWarning, match="to_torch copied the data: the data is "
                                                "read-only") as caught:
            ap.to_torch(frozen())
        assert caught[0].filename == __file__        # pointed at the user's call
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ap.to_torch(frozen(), copy=True)         # asked for: no warning
            ap.to_torch(np.arange(3.0))              # shared: no warning
            ap.to_numpy([1, 2, 3])                   # Python values: a copy by nature
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ap.to_torch(frozen())                        # the block is over


@needs("torch")
def test_a_copy_resolved_in_the_core_warns_too():
    conjugate = torch.tensor([1 + 1j, 2 - 2j]).conj()
    with ap.warn_on_copies(), pytest.warns(ap.CopyWarning, match="conjugate bit"):
        assert ap.to_numpy(conjugate).tolist() == [1 - 1j, 2 + 2j]


class OnlyCopies:
    """A producer whose ``__array__`` can only copy (NeedsCopy for ``arrayport.view``)."""

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("OnlyCopies cannot share its values")
        return np.arange(3.0)


def test_warn_on_copies_is_also_a_switch():
    ap.warn_on_copies()
    try:
        with pytest.warns(ap.CopyWarning, match="arrayport copied the data: array: "):
            assert ap.to_numpy(OnlyCopies()).tolist() == [0.0, 1.0, 2.0]
    finally:
        ap.warn_on_copies(False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ap.to_numpy(OnlyCopies())
        ap.to_numpy(OnlyCopies(), copy=True)


def test_explain_of_a_producer_that_can_only_copy():
    told = ap.explain(OnlyCopies(), "numpy")
    assert told.copies and told.route == "__array__" and "cannot share" in told.reason
    assert ap.explain(OnlyCopies(), "numpy", copy=False).refused


def test_the_environment_variable_turns_the_warnings_on():
    import os
    import subprocess
    import sys
    code = ("import warnings, numpy as np, arrayport as ap\n"
            "class OnlyCopies:\n"
            "    def __array__(self, dtype=None, copy=None):\n"
            "        if copy is False: raise ValueError('no')\n"
            "        return np.arange(3.0)\n"
            "warnings.simplefilter('error')\n"
            "try:\n"
            "    ap.to_numpy(OnlyCopies())\n"
            "except ap.CopyWarning as w:\n"
            "    print('warned:', w)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "ARRAYPORT_WARN_COPIES": "1"})
    assert "warned: arrayport copied the data" in result.stdout, result.stderr


# ---- what a review found (each failed before its fix) ----------------------------------------

def test_explain_of_python_values_says_they_are_copied():
    told = ap.explain([1, 2, 3], "numpy")
    assert told.copies and "Python list, which holds no array memory" in told.reason
    assert ap.explain([1, 2, 3], "numpy", copy=False).refused
    with ap.warn_on_copies(), warnings.catch_warnings():
        warnings.simplefilter("error")
        ap.to_numpy([1, 2, 3])                      # a copy by nature: not announced


@needs("dask")
def test_explain_of_a_copy_only_copy_true_makes_is_a_copy_not_a_refusal():
    import dask.array as da
    lazy = da.arange(6, chunks=3)
    assert ap.explain(lazy, "numpy").refused           # arrayport refuses lazy arrays
    told = ap.explain(lazy, "numpy", copy=True)        # ... unless the copy is asked for
    assert told.copies and not told.refused and "copy=True makes the copy" in told.reason
    assert ap.to(lazy, "numpy", copy=True).tolist() == list(range(6))


def test_contract_copies_are_announced():
    with ap.warn_on_copies(), pytest.warns(ap.CopyWarning,
                                           match=r"require copied the data: expected "
                                                 r"C-contiguous"):
        ap.require(np.arange(4.0)[::-1], order="C")
    with ap.warn_on_copies(), warnings.catch_warnings():
        warnings.simplefilter("error")
        ap.require(np.arange(4.0)[::-1], order="C", copy=True)   # asked


def test_blocks_in_two_threads_do_not_end_each_other():
    import threading
    inside, leave = threading.Event(), threading.Event()

    def other_block():
        with ap.warn_on_copies():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other_block)
    with ap.warn_on_copies():
        thread.start()
        inside.wait(10)
    try:   # our block ended, the other thread's has not: still watched
        with pytest.warns(ap.CopyWarning):
            ap.to_numpy(OnlyCopies())
    finally:
        leave.set()
        thread.join(10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ap.to_numpy(OnlyCopies())                   # both ended


@needs("torch")
def test_explain_leaves_the_warnings_module_alone():
    import warnings as module
    filters = list(module.filters)
    ap.explain(frozen(), "torch", readonly="share")
    assert module.filters == filters
