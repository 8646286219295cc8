"""Fuzzing aimed at derived Views (issue 31): chains of layout operations — slicing with
huge and negative steps, integer indexes, new axes, transposes, reshapes, reinterpreting
the element type — over huge broadcasts (extents near 2**61..2**63, zero and negative
strides, padded sub-byte types), then every export and copy of the result.

The oracle is NumPy doing the same chain on the same array: arrayport must give the same
shape, byte strides, first byte and byte count, or refuse where NumPy refuses. The results
are then exported (buffer, ``__array_interface__``, DLPack, pickle 5) and copied; copies
of small results are compared with NumPy's, copies of results too large for any machine
must be a MemoryError. A wrapped byte count reads or writes outside the array, so the whole
run happens in a child process (a crash is a failed test with the last chain printed, not a
dead test run).

Short run in the suite (ARRAYPORT_FUZZ_EXAMPLES chains, 300 by default, deterministic);
long run: ``ARRAYPORT_FUZZ_EXAMPLES=20000 pytest tests/test_fuzz_layout_chains.py``; under
the sanitizers: ``bash reliability/sanitize.sh tests/test_fuzz_layout_chains.py``.
"""

import os
import re

from isolated import run_isolated
from optional import needs

EXAMPLES = int(os.environ.get("ARRAYPORT_FUZZ_EXAMPLES", "300"))

_CHILD = """
import pickle, sys
from hypothesis import HealthCheck, given, settings, strategies as st

COPY_LIMIT = 1 << 20          # results up to this many bytes are copied and compared
UNALLOCATABLE = 1 << 50       # copies of results this large must be a MemoryError
counts = {"chains": 0, "operations": 0, "refused together": 0, "copied": 0,
          "too large": 0, "refused past NumPy's limit": 0}


def countable(array):
    '''NumPy's constructor rule, which arrayport keeps for every View: the product of the
    non-zero extents, in bytes, fits in int64.'''
    product = array.dtype.itemsize
    for extent in array.shape:
        product *= extent or 1
    return product <= 2**63 - 1

try:
    import ml_dtypes
    SUBBYTE = [np.dtype(ml_dtypes.float4_e2m1fn)]
except ImportError:
    # as many choices either way: what the deterministic run reaches (huge copies
    # included) must not depend on which optional libraries are installed
    SUBBYTE = [np.dtype("u1")]
DTYPES = [np.dtype(t) for t in ("u1", "i2", "f4", "f8", "c16")] + SUBBYTE
HUGE = [2**k + d for k in (31, 32, 60, 61, 62, 63) for d in (-1, 0, 1)]


@st.composite
def bases(draw):
    dtype = draw(st.sampled_from(DTYPES))
    row = np.arange(draw(st.integers(1, 6))).astype(dtype)
    if draw(st.booleans()):
        row = row[::-1]                                  # negative strides underneath
    extents = draw(st.lists(st.one_of(st.sampled_from(HUGE), st.integers(0, 5)),
                            min_size=0, max_size=3))
    shape = (*extents, row.shape[0])
    try:
        return np.broadcast_to(row, shape)               # NumPy's limit is the rule
    except ValueError:
        return row


def apply(kind, seed, array):
    '''The same operation as a function of one array (NumPy's or a View), drawn from seed.'''
    import random
    rng = random.Random(seed)
    ndim, shape = array.ndim, array.shape
    if kind == "slice" and ndim:
        key = []
        for extent in shape:
            bound = lambda: rng.choice([None, rng.randint(-extent - 2, extent + 2),
                                        2**63 - 1, -(2**63)])
            key.append(slice(bound(), bound(), rng.choice([None, 1, 2, -1, -3, 2**62,
                                                           -(2**62)])))
        return lambda a: a[tuple(key)]
    if kind == "index" and ndim:
        axis = rng.randrange(ndim)
        index = rng.choice([0, -1, shape[axis] - 1, shape[axis], -shape[axis] - 1])
        key = (slice(None),) * axis + (index, Ellipsis)   # NumPy: a 0-d array, not a scalar
        return lambda a: a[key]
    if kind == "newaxis":
        return lambda a: a[None, ..., None]
    if kind == "T":
        return lambda a: a.T
    if kind == "permute" and ndim:
        axes = list(range(ndim))
        rng.shuffle(axes)
        return lambda a: a.transpose(axes) if isinstance(a, np.ndarray) else a.permute(axes)
    if kind == "reshape" and ndim >= 2:
        axis = rng.randrange(ndim - 1)
        merged = shape[:axis] + (shape[axis] * shape[axis + 1],) + shape[axis + 2:]
        target = merged if rng.random() < 0.7 else (-1,)
        return lambda a: (a.reshape(target, copy=False) if isinstance(a, np.ndarray)
                          else a.reshape(target))
    if kind == "view_as":
        same = {1: "i1", 2: "u2", 4: "i4", 8: "i8", 16: "c16"}[array.dtype.itemsize]
        other = rng.choice([same, "u1", "f8"])
        return lambda a: a.view(np.dtype(other)) if isinstance(a, np.ndarray) \\
            else a.view_as(np.dtype(other).name)
    return lambda a: a


def layout(x):
    '''(shape, byte strides, first byte, byte count) of an ndarray or View; the stride of
    an axis of extent <= 1 is never stepped along, so it is not compared (NumPy keeps the
    product of a huge step, which wraps; arrayport keeps the base's stride), nor are an
    empty array's strides and start, which reach no byte.'''
    if isinstance(x, np.ndarray):
        strides, first = x.strides, x.__array_interface__["data"][0]
    else:
        strides, first = x.strides, x.ptr
    empty = 0 in x.shape
    strides = tuple(None if empty or n <= 1 else s for s, n in zip(strides, x.shape))
    return (x.shape, strides, None if empty else first, x.nbytes)   # empty: reaches nothing


def exports(view, expected):
    '''Every way out of arrayport, held to NumPy's view of the same elements.'''
    if view.dtype.numpy_native:
        assert layout(np.asarray(view)) == layout(expected)
        assert layout(np.from_dlpack(view))[:3] == layout(expected)[:3]
        assert memoryview(view).nbytes == expected.nbytes
    if expected.nbytes <= COPY_LIMIT:
        copies = [view.copy(), view.host_copy(),
                  pickle.loads(pickle.dumps(view, protocol=5)),
                  pickle.loads(pickle.dumps(view, protocol=4))]
        for copy in copies:
            assert ap.to_numpy(copy).tobytes() == np.ascontiguousarray(expected).tobytes()
        counts["copied"] += 1
    elif expected.nbytes >= UNALLOCATABLE:
        for make in (view.copy, view.host_copy, lambda: ap.to_numpy(view, copy=True),
                     lambda: pickle.dumps(view, protocol=4)):
            try:
                make()
            except MemoryError:
                continue
            raise AssertionError(f"a copy of {expected.nbytes} bytes did not fail")
        counts["too large"] += 1


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(bases(), st.lists(st.tuples(st.sampled_from(["slice", "index", "newaxis", "T",
                                                      "permute", "reshape", "view_as"]),
                                   st.integers(0, 2**32)), max_size=5))
def chains(base, steps):
    counts["chains"] += 1
    array, view = base, ap.view(base)
    assert layout(view) == layout(array)
    for kind, seed in steps:
        if array.ndim > 30:
            break
        op = apply(kind, seed, array)
        print("chain:", array.dtype, array.shape, array.strides, kind, seed, flush=True)
        try:
            next_array = op(array)
        except (IndexError, ValueError, TypeError) as numpy_refusal:
            try:
                op(view)
            except (IndexError, ValueError, TypeError, BufferError):
                counts["refused together"] += 1
                break
            raise AssertionError(f"NumPy refused {kind} ({numpy_refusal}), arrayport did not")
        counts["operations"] += 1
        try:
            next_view = op(view)
        except BufferError as refusal:
            # NumPy's views skip its own constructor's rule (the non-zero extents' bytes
            # fit in int64); arrayport keeps it for every View, so it may refuse those.
            if countable(next_array):
                raise AssertionError(f"arrayport refused {kind} that NumPy did: {refusal}")
            counts["refused past NumPy's limit"] += 1
            break
        assert layout(next_view) == layout(next_array), (kind, layout(next_view),
                                                         layout(next_array))
        array, view = next_array, next_view
        exports(view, array)


chains()
print("summary:", " ".join(f"{k.replace(' ', '_')}={v}" for k, v in counts.items()))
"""


@needs("hypothesis")
def test_layout_chains_over_huge_broadcasts_match_numpy_in_a_child():
    output = run_isolated(f"EXAMPLES = {EXAMPLES}\n", _CHILD, timeout=1200)
    summary = re.search(r"summary: chains=(\d+) operations=(\d+) refused_together=(\d+) "
                        r"copied=(\d+) too_large=(\d+) refused_past_NumPy's_limit=(\d+)",
                        output)
    assert summary, output[-2000:]
    chains, operations, refused, copied, too_large, _ = map(int, summary.groups())
    assert chains >= EXAMPLES
    # The run must have reached what it is for: operations, copies, and refusals of huge
    # copies (a strategy change that stopped producing them would pass vacuously).
    assert operations > chains and copied > 0 and too_large > 0 and refused > 0, summary[0]
