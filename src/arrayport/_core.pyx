# cython: language_level=3
# Cython's checks stay on (boundscheck, wraparound, Python division): indexing and dividing
# Python objects that user code handed in must raise, never read past a tuple's end.
# C arrays and pointers are never checked by Cython; every one of their indexes is bounded
# by a validated ndim (<= MAX_NDIM) — see the "who checks what" list in docs/reliability.md.
"""arrayport._core — the one compiled module that owns all of arrayport's C state.

Its parts, each named for what it defines, are included below in dependency order (the
order also runs their module-level statements): the shared declarations; the ``View``
type and its facade; host copies; how a View's description is filled and checked;
DLPack import; the policy hooks; the CUDA driver's floor; stream order (every rule of
it); the plan of a strided copy on a GPU; device copies issued from C (CUDA's, then
ROCm's); the buffer protocol;
the NumPy and CUDA array interfaces and ``__array__``; PyTorch's bits; what producers
leave out; Arrow; the DLPack exchange API (consumer, then producer and the C API); the
``view`` dispatch; the converters' fast paths; NumPy's C API; layout operations;
contracts. Each part's header lists what it uses of the others (checked by
tests/test_architecture.py, which also prints the parts' graph and fails on a new pair of
parts that use each other). Here: only the includes, and the live counters every part
feeds.
"""

# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_view.pxi: View

include "_core_base.pxi"
include "_core_view.pxi"
include "_core_host_copy.pxi"
include "_core_describe.pxi"
include "_core_dlpack.pxi"
include "_core_hooks.pxi"
include "_core_cuda_floor.pxi"
include "_core_hip_floor.pxi"
include "_core_streams.pxi"
include "_core_kernel_plan.pxi"
include "_core_device_copy.pxi"
include "_core_hip_copy.pxi"
include "_core_buffer.pxi"
include "_core_interface.pxi"
include "_core_torch_bits.pxi"
include "_core_producers.pxi"
include "_core_arrow.pxi"
include "_core_exchange.pxi"
include "_core_dispatch.pxi"
include "_core_capi.pxi"
include "_core_convert.pxi"
include "_core_numpy.pxi"
include "_core_layout.pxi"
include "_core_contract.pxi"

# Views exist only as the core builds them: Python's View.__new__(View) is refused (the
# core's own calls go straight to Cython's allocator). See ap_seal_constructor.
ap_seal_constructor(<PyTypeObject*>View)


def live_counts():
    """Private lifetime counters: exported managed tensors not yet deleted, imported
    managed tensors still held, host copy buffers still allocated, Py_buffer exports of
    other objects still held, tensors made by the exchange-API allocator not yet deleted."""
    return {
        "exported": ap_counter_get(&ap_live_exported),
        "imported": ap_counter_get(&ap_live_imported),
        "host_buffers": ap_counter_get(&ap_live_host_buffers),
        "buffer_leases": ap_counter_get(&ap_live_buffer_leases),
        "allocated": ap_counter_get(&ap_live_allocated),
    }
