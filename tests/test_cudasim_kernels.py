"""The CUDA driver simulator's modules and kernel launches (issue 41), each rule broken on
purpose: a module belongs to the context it was loaded in, a PTX ISA newer than the driver
is refused, the launch limits are the driver's, parameters are captured at launch, a launch
is ordered on its stream like any other work, and a kernel that touches memory it may not
is the GPU's illegal address — after which the context's synchronizations say so. The kernel
run is arrayport's own strided copy, compiled as C into the simulator from its source
(src/arrayport/gpu/kernels/), loaded from the PTX arrayport ships."""

import ctypes

import numpy as np
import pytest

from arrayport.gpu.kernels import ptx_image, strided_copy
from test_cudasim_rules import (  # noqa: F401  (fixtures)
    NON_BLOCKING, PATH, SUCCESS, INVALID_VALUE, INVALID_CONTEXT, INVALID_HANDLE, alloc, cuda,
    handle, on_device, sim, u64)

pytestmark = pytest.mark.skipif(PATH is None, reason="the CUDA driver simulator is not built")

NOT_FOUND, NOT_SUPPORTED, ILLEGAL_ADDRESS = 500, 801, 700
INVALID_IMAGE, UNSUPPORTED_PTX_VERSION = 200, 222
KERNEL = b"arrayport_strided_copy"


@pytest.fixture
def kernels(cuda):
    cuda.cuModuleLoadData.argtypes = [ctypes.POINTER(handle), ctypes.c_char_p]
    cuda.cuModuleUnload.argtypes = [handle]
    cuda.cuModuleGetFunction.argtypes = [ctypes.POINTER(handle), handle, ctypes.c_char_p]
    cuda.cuLaunchKernel.argtypes = [handle] + [ctypes.c_uint] * 7 + [
        handle, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
    return cuda


def load(cuda, image=None):
    module = handle()
    status = cuda.cuModuleLoadData(ctypes.byref(module), image or ptx_image("strided_copy"))
    return status, module


def function_of(cuda, module):
    function = handle()
    assert cuda.cuModuleGetFunction(ctypes.byref(function), module, KERNEL) == SUCCESS
    return function


def launch(cuda, function, params, stream=None, grid=(1, 1, 1), block=(256, 1, 1), shared=0):
    arguments = (ctypes.c_void_p * 1)(ctypes.addressof(params))
    return cuda.cuLaunchKernel(function, *grid, *block, shared, stream, arguments, None)


def upload(cuda, values):
    device = alloc(cuda, values.nbytes)
    assert cuda.cuMemcpyHtoD_v2(device, values.ctypes.data, values.nbytes) == SUCCESS
    return device


def download(cuda, device, like):
    out = np.empty_like(like)
    assert cuda.cuMemcpyDtoH_v2(out.ctypes.data, device, out.nbytes) == SUCCESS
    return out


def transpose_params(source, destination, shape=(3, 5), itemsize=4):
    rows, columns = shape
    return strided_copy.plan((columns, rows), (itemsize, columns * itemsize), itemsize,
                             source, destination)


def test_the_shipped_kernel_runs_from_its_c_build(kernels, on_device):
    on_device(0)
    status, module = load(kernels)
    assert status == SUCCESS
    values = np.arange(15, dtype=np.float32).reshape(3, 5)
    source, destination = upload(kernels, values), alloc(kernels, values.nbytes)
    assert launch(kernels, function_of(kernels, module),
                  transpose_params(source, destination)) == SUCCESS
    assert kernels.cuCtxSynchronize() == SUCCESS
    np.testing.assert_array_equal(download(kernels, destination, values.T.copy()), values.T)
    for pointer in (source, destination):
        kernels.cuMemFree_v2(pointer)
    assert kernels.cuModuleUnload(module) == SUCCESS
    assert kernels.cuModuleUnload(module) == INVALID_HANDLE   # once only


def test_images_the_driver_cannot_read_are_refused(kernels, on_device):
    on_device(0)
    assert load(kernels, b"not a module\0")[0] == INVALID_IMAGE
    newer = ptx_image("strided_copy").replace(b".version 8.0", b".version 9.9")
    assert load(kernels, newer)[0] == UNSUPPORTED_PTX_VERSION
    # The PTX and the simulator's C build disagree on the parameter struct: a kernel defect.
    size = ctypes.sizeof(strided_copy.Params)
    resized = ptx_image("strided_copy").replace(f"_param_0[{size}]".encode(),
                                                f"_param_0[{size - 8}]".encode())
    assert resized != ptx_image("strided_copy")
    assert load(kernels, resized)[0] == INVALID_IMAGE


def test_a_module_needs_a_context_and_knows_its_entries(kernels, on_device):
    assert load(kernels)[0] == INVALID_CONTEXT
    on_device(0)
    status, module = load(kernels)
    function = handle()
    assert kernels.cuModuleGetFunction(ctypes.byref(function), module, b"no_such") == NOT_FOUND
    kernels.cuModuleUnload(module)
    assert kernels.cuModuleGetFunction(ctypes.byref(function), module, KERNEL) == INVALID_HANDLE


@pytest.mark.parametrize("grid, block, shared", [
    ((1, 1, 1), (1025, 1, 1), 0), ((1, 1, 1), (512, 4, 1), 0), ((1, 1, 1), (1, 1, 65), 0),
    ((1, 65536, 1), (32, 1, 1), 0), ((0, 1, 1), (32, 1, 1), 0), ((1, 1, 1), (32, 1, 1), 49153)])
def test_launch_limits_are_the_drivers(kernels, on_device, grid, block, shared):
    on_device(0)
    status, module = load(kernels)
    params = transpose_params(0, 0)
    assert launch(kernels, function_of(kernels, module), params, grid=grid, block=block,
                  shared=shared) == INVALID_VALUE
    kernels.cuModuleUnload(module)


def test_a_function_launches_only_in_its_own_context(kernels, on_device):
    on_device(0)
    status, module = load(kernels)
    function = function_of(kernels, module)
    on_device(1)   # device 1's context is current now: its streams are not the module's
    assert launch(kernels, function, transpose_params(0, 0)) == INVALID_CONTEXT
    kernels.cuModuleUnload(module)


def test_parameters_are_captured_at_launch_and_the_launch_is_ordered_on_its_stream(
        kernels, sim, on_device):
    on_device(0)
    sim.set_delay_us(20000)
    status, module = load(kernels)
    values = np.arange(15, dtype=np.float32).reshape(3, 5)
    source, destination = upload(kernels, values), alloc(kernels, values.nbytes)
    stream = handle()
    kernels.cuStreamCreate(ctypes.byref(stream), NON_BLOCKING)
    params = transpose_params(source, destination)
    assert launch(kernels, function_of(kernels, module), params, stream) == SUCCESS
    params.src = params.dst = 0   # too late to matter: the driver took a copy
    assert kernels.cuStreamQuery(stream) != SUCCESS   # still queued: launches are asynchronous
    assert kernels.cuStreamSynchronize(stream) == SUCCESS
    np.testing.assert_array_equal(download(kernels, destination, values.T.copy()), values.T)
    sim.set_delay_us(2000)
    kernels.cuStreamDestroy_v2(stream)
    for pointer in (source, destination):
        kernels.cuMemFree_v2(pointer)
    kernels.cuModuleUnload(module)


def test_an_illegal_address_faults_the_launch_and_the_context_says_so(kernels, sim, on_device):
    # In a child process: the fault is sticky for the context, as a GPU's is.
    import subprocess
    import sys
    import textwrap
    from test_cudasim_rules import CHILD_ON_DEVICE_0
    code = CHILD_ON_DEVICE_0 + textwrap.dedent(f"""
        from arrayport.gpu.kernels import ptx_image, strided_copy
        h = ctypes.c_void_p
        cuda.cuModuleLoadData.argtypes = [ctypes.POINTER(h), ctypes.c_char_p]
        cuda.cuModuleGetFunction.argtypes = [ctypes.POINTER(h), h, ctypes.c_char_p]
        cuda.cuLaunchKernel.argtypes = [h] + [ctypes.c_uint] * 7 + [
            h, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
        module, function = h(), h()
        assert cuda.cuModuleLoadData(ctypes.byref(module), ptx_image("strided_copy")) == 0
        assert cuda.cuModuleGetFunction(ctypes.byref(function), module, {KERNEL!r}) == 0
        device = ctypes.c_uint64()
        cuda.cuMemAlloc_v2(ctypes.byref(device), 60)
        host = (ctypes.c_char * 60)()   # pageable host memory: no kernel may read it
        params = strided_copy.plan((5, 3), (4, 20), 4, ctypes.addressof(host), device.value)
        arguments = (ctypes.c_void_p * 1)(ctypes.addressof(params))
        assert cuda.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, None, arguments, None) == 0
        print(cuda.cuCtxSynchronize(), cuda.cuCtxSynchronize())
    """)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == [str(ILLEGAL_ADDRESS)] * 2
    assert "cudasim: kernel arrayport_strided_copy: illegal address" in child.stderr


def test_a_kernel_without_a_c_build_loads_but_cannot_run(kernels, on_device):
    on_device(0)
    renamed = ptx_image("strided_copy").replace(KERNEL, b"someone_elses_kernel")
    status, module = load(kernels, renamed)
    assert status == SUCCESS
    function = handle()
    assert kernels.cuModuleGetFunction(ctypes.byref(function), module,
                                       b"someone_elses_kernel") == SUCCESS
    assert launch(kernels, function, transpose_params(0, 0)) == NOT_SUPPORTED
    kernels.cuModuleUnload(module)


def test_these_tests_leave_no_module_loaded(sim):
    assert sim.live_modules() == 0


# ---- misaligned accesses: a unit as wide as the run, at an address it does not divide -------

MISALIGNED_ADDRESS = 716


def reset_device(cuda, device):
    """After a deliberate fault, which is sticky for the context (every later call in it
    answers the fault's error, as on a GPU): the device's primary context reset, so that the
    next test finds it usable. Its memory, streams and modules go with it."""
    assert cuda.cuDevicePrimaryCtxReset_v2(device) == SUCCESS


@pytest.mark.parametrize("kernel, unit, src_offset, dst_offset, fault", [
    ("plain", 16, 4, 0, True),      # a 16-byte load at an address 4 mod 16
    ("plain", 16, 0, 8, True),      # a 16-byte store at 8 mod 16
    ("plain", 8, 4, 0, True),
    ("plain", 4, 2, 0, True),
    ("plain", 2, 1, 0, True),
    ("plain", 4, 4, 12, False),     # each address a multiple of its unit: fine
    ("plain", 1, 3, 5, False),
    ("tiles", 8, 4, 0, True),       # the tiled kernel's loads too
    ("tiles", 8, 8, 0, False),
], ids=lambda value: str(value))
def test_a_unit_wider_than_its_address_allows_faults_as_misaligned(
        kernels, sim, on_device, kernel, unit, src_offset, dst_offset, fault):
    # A GPU loads and stores a 2-, 4-, 8- or 16-byte unit in one access that must be aligned
    # to its size; the strided copy moves "units as wide as the contiguous run", and a host
    # plan that picked too wide a unit for the addresses would fault on a GPU with
    # CUDA_ERROR_MISALIGNED_ADDRESS (sticky). Parameters made by hand, past the planner.
    on_device(0)
    status, module = load(kernels)
    values = (np.arange(1024) % 251).astype(np.uint8)
    source, destination = upload(kernels, values), alloc(kernels, 1024)
    span = 64 if kernel == "plain" else 64 * unit     # the tiles: 8 x 8 units
    if kernel == "plain":
        params = strided_copy._plain(unit, [(64 // unit, unit)], source + src_offset,
                                     destination + dst_offset)
        name, grid, block = KERNEL, (1, 1, 1), (256, 1, 1)
    else:                                     # an 8 x (count // 8) transpose of units
        side = 8
        params = strided_copy.plan_tiles(unit, [(side, side * unit), (side, unit)],
                                         source + src_offset, destination + dst_offset)
        assert params is not None
        name, grid, block = b"arrayport_transpose_tiles", (1, 1, 1), (32, 8, 1)
    function = handle()
    assert kernels.cuModuleGetFunction(ctypes.byref(function), module, name) == SUCCESS
    before = sim.counters()
    assert launch(kernels, function, params, grid=grid, block=block) == SUCCESS
    status = kernels.cuCtxSynchronize()
    counts = {key: sim.counters()[key] - before[key] for key in before}
    if not fault:
        assert (status, counts["misaligned_accesses"], counts["kernel_faults"]) == (SUCCESS, 0, 0)
        out = download(kernels, destination, np.zeros(1024, np.uint8))
        moved = values[src_offset:src_offset + span]
        if kernel == "tiles":
            moved = moved.reshape(8, 8, unit).transpose(1, 0, 2).reshape(-1)
        assert out[dst_offset:dst_offset + span].tolist() == moved.tolist()
        for pointer in (source, destination):
            assert kernels.cuMemFree_v2(pointer) == SUCCESS
        assert kernels.cuModuleUnload(module) == SUCCESS
        return
    assert status == MISALIGNED_ADDRESS
    assert (counts["misaligned_accesses"], counts["kernel_faults"]) == (1, 1)
    # sticky: the context refuses everything, its memory unreadable, until reset
    assert kernels.cuMemAlloc_v2(ctypes.byref(u64()), 8) == MISALIGNED_ADDRESS
    assert kernels.cuCtxSynchronize() == MISALIGNED_ADDRESS
    reset_device(kernels, 0)                 # its memory and the module went with it
    assert kernels.cuModuleUnload(module) == INVALID_HANDLE
    assert kernels.cuCtxSynchronize() == SUCCESS


class _OnTheSimulator:
    """What ``strided_copy.launch`` asks of arrayport's driver, answered by the simulator's
    own entry points: arrayport's host side plans, this launches it as planned."""

    def __init__(self, cuda, module):
        self.cuda, self.module = cuda, module

    def launch_kernel(self, ordinal, module, kernel, grid, block, params, stream):
        function = handle()
        assert self.cuda.cuModuleGetFunction(ctypes.byref(function), self.module,
                                             kernel.encode()) == SUCCESS
        arguments = (ctypes.c_void_p * 1)(ctypes.addressof(params))
        assert self.cuda.cuLaunchKernel(function, *grid, *block, 0, stream, arguments,
                                        None) == SUCCESS
        return True


def _layouts():
    """(name, itemsize, shape, strides in elements): the layout classes the kernels serve."""
    for itemsize in (1, 2, 4, 8, 16):
        yield from ((name, itemsize, shape, strides) for name, shape, strides in (
            ("transposed", (6, 10), (1, 6)),
            ("transposed-tiles", (16, 24), (1, 16)),
            ("row-slice", (5, 8), (16, 1)),
            ("column-slice", (7, 3), (9, 2)),
            ("reversed-rows", (4, 6), (-6, 1)),
            ("reversed-elements", (3, 5), (5, -1)),
            ("broadcast", (3, 5), (0, 1)),
            ("permuted-3d", (3, 4, 5), (1, 15, 3)),
            ("strided-3d", (2, 3, 4), (40, 12, 2)),
        ))


def test_arrayports_plans_never_pick_a_misaligned_unit(kernels, sim, on_device, monkeypatch):
    # arrayport's host side (strided_copy.launch: reduce, plan_tiles, the launch) over every
    # layout class and element size, the source starting at every byte offset up to 15 and
    # the destination at some: each unit it picks divides both addresses and every stride —
    # no copy faults as misaligned, and each arrives bit for bit. The source is memory of
    # this simulator, opened through its own handle, not arrayport's driver: the core's
    # question before a launch (is the source memory the device reads?) has its own tests
    # (tests/test_gpu_device_copy.py), and here the answer is yes.
    from arrayport import _core
    monkeypatch.setattr(_core, "kernel_source_refusal", lambda view, ordinal: None)
    on_device(0)
    status, module = load(kernels)
    rng = np.random.default_rng(11)
    size = 8192
    host = rng.integers(0, 256, size, dtype=np.uint8)
    source, destination = upload(kernels, host), alloc(kernels, size)
    driver = _OnTheSimulator(kernels, module)
    sim.set_delay_us(0)
    before = sim.counters()
    wrong, launched = [], 0
    try:
        for name, itemsize, shape, strides in _layouts():
            byte_strides = tuple(s * itemsize for s in strides)
            low = sum((n - 1) * s for n, s in zip(shape, byte_strides) if s < 0)
            for src_offset in range(16):
                for dst_offset in (0, 8, 4, 1):
                    first = 32 - low + src_offset            # low <= 0: room before it
                    view = type("View", (), dict(shape=shape, strides=byte_strides,
                                                 itemsize=itemsize, ptr=source + first))
                    expected = np.ndarray(shape, np.dtype((np.void, itemsize)), host, first,
                                          byte_strides)
                    nbytes = expected.nbytes
                    assert strided_copy.launch(driver, 0, destination + dst_offset, view,
                                               None)
                    launched += 1
                    status = kernels.cuCtxSynchronize()
                    if status != SUCCESS:
                        wrong.append((name, itemsize, src_offset, dst_offset, status))
                        reset_device(kernels, 0)
                        return   # the context went: report what was found
                    out = np.zeros(size, np.uint8)
                    assert kernels.cuMemcpyDtoH_v2(out.ctypes.data, destination, size) == 0
                    if out[dst_offset:dst_offset + nbytes].tobytes() != \
                            np.ascontiguousarray(expected).tobytes():
                        wrong.append((name, itemsize, src_offset, dst_offset, "values"))
    finally:
        sim.set_delay_us(2000)
        assert wrong == [], wrong
    counts = {key: sim.counters()[key] - before[key] for key in before}
    assert launched == 9 * 5 * 16 * 4
    assert counts["misaligned_accesses"] == counts["kernel_faults"] == 0
    assert counts["cuLaunchKernel"] == launched
    for pointer in (source, destination):
        assert kernels.cuMemFree_v2(pointer) == SUCCESS
    assert kernels.cuModuleUnload(module) == SUCCESS


# ---- peer access: a kernel touches another device's memory only once it may -----------------

PROT_NONE, PROT_READWRITE = 0, 3


def contiguous_copy(source, destination, nbytes=64):
    """The plain kernel's parameters for ``nbytes`` contiguous bytes (16-byte units)."""
    return strided_copy.plan((nbytes // 4,), (4,), 4, source, destination)


class _Device:
    """Device ``n``'s context current (pushed by ``on_device``), its module loaded, and the
    kernel launched there: a copy of 64 bytes, whose outcome (the synchronization's status)
    is returned."""

    def __init__(self, cuda, on_device, n):
        self.cuda, self.n = cuda, n
        self.context = on_device(n)
        self.load()

    def load(self):
        status, self.module = load(self.cuda)
        assert status == SUCCESS
        self.function = function_of(self.cuda, self.module)

    def current(self):
        assert self.cuda.cuCtxSetCurrent(self.context) == SUCCESS
        return self

    def copy(self, source, destination):
        self.current()
        assert launch(self.cuda, self.function, contiguous_copy(source, destination)) == SUCCESS
        return self.cuda.cuCtxSynchronize()

    def reset(self):
        """After the deliberate fault (sticky): reset, and load the module again."""
        reset_device(self.cuda, self.n)
        self.load()


def test_a_kernel_reads_a_peers_memory_only_with_peer_access(kernels, sim, on_device):
    # cuCtxEnablePeerAccess: "all allocations from peerContext will immediately be accessible
    # by the current context" — one way. Without it, a kernel touching another device's
    # cuMemAlloc memory is the GPU's illegal address (sticky); copies need no access.
    values = (np.arange(64) * 3).astype(np.uint8)
    zero = _Device(kernels, on_device, 0)
    on_zero = upload(kernels, values)
    one = _Device(kernels, on_device, 1)
    before = sim.counters()
    on_one = alloc(kernels, 64)
    assert one.copy(on_zero, on_one) == ILLEGAL_ADDRESS            # no access yet
    assert sim.counters()["peer_access_faults"] - before["peer_access_faults"] == 1
    one.reset()
    on_one = alloc(kernels, 64)
    kernels.cuCtxEnablePeerAccess.argtypes = [handle, ctypes.c_uint]
    kernels.cuCtxDisablePeerAccess.argtypes = [handle]
    assert kernels.cuCtxEnablePeerAccess(zero.context, 0) == SUCCESS   # device 1 -> 0
    assert one.copy(on_zero, on_one) == SUCCESS
    assert download(kernels, on_one, values).tolist() == values.tolist()
    # one way: device 0's kernels still may not touch device 1's memory
    assert zero.copy(on_one, on_zero) == ILLEGAL_ADDRESS
    zero.reset()
    on_zero = upload(kernels, values)
    assert sim.counters()["peer_access_faults"] - before["peer_access_faults"] == 2
    # and a reset of device 0 ended device 1's access to it (a new context)
    assert one.copy(on_zero, on_one) == ILLEGAL_ADDRESS
    one.reset()
    on_one = alloc(kernels, 64)
    # copies between the devices need no access: the driver stages them
    kernels.cuMemcpyAsync.argtypes = [u64, u64, ctypes.c_size_t, handle]
    assert kernels.cuMemcpyAsync(on_one, on_zero, 64, None) == SUCCESS
    assert kernels.cuCtxSynchronize() == SUCCESS
    assert download(kernels, on_one, values).tolist() == values.tolist()
    for device, pointer in ((one, on_one), (zero, on_zero)):
        device.current()
        assert kernels.cuMemFree_v2(pointer) == SUCCESS
        assert kernels.cuModuleUnload(device.module) == SUCCESS


def test_a_kernel_reads_a_peers_pool_block_only_once_the_pool_grants_its_device(
        kernels, sim, on_device):
    # A pool's blocks follow the pool's access (cuMemPoolSetAccess), not the contexts' peer
    # access: a kernel of device 1 reading a block of a device-0 pool faults until the pool
    # grants device 1, whatever cuCtxEnablePeerAccess said.
    from test_cudasim_rules import (PoolProps, pool_access, set_pool_access)
    values = (np.arange(64) * 5).astype(np.uint8)
    zero = _Device(kernels, on_device, 0)
    pool = handle()
    assert kernels.cuMemPoolCreate(ctypes.byref(pool), ctypes.byref(
        PoolProps(allocType=1, locationType=1, locationId=0))) == SUCCESS
    block = u64()
    kernels.cuMemAllocFromPoolAsync.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t, handle,
                                                handle]
    assert kernels.cuMemAllocFromPoolAsync(ctypes.byref(block), 64, pool, None) == SUCCESS
    assert kernels.cuMemcpyHtoD_v2(block.value, values.ctypes.data, 64) == SUCCESS
    one = _Device(kernels, on_device, 1)
    on_one = alloc(kernels, 64)
    kernels.cuCtxEnablePeerAccess.argtypes = [handle, ctypes.c_uint]
    assert kernels.cuCtxEnablePeerAccess(zero.context, 0) == SUCCESS   # not the pool's rule
    before = sim.counters()["peer_access_faults"]
    assert pool_access(kernels, pool, 1) == (SUCCESS, PROT_NONE)
    assert one.copy(block.value, on_one) == ILLEGAL_ADDRESS
    assert sim.counters()["peer_access_faults"] - before == 1
    one.reset()
    on_one = alloc(kernels, 64)
    assert set_pool_access(kernels, pool, (1, PROT_READWRITE)) == SUCCESS
    assert one.copy(block.value, on_one) == SUCCESS
    assert download(kernels, on_one, values).tolist() == values.tolist()
    assert set_pool_access(kernels, pool, (1, PROT_NONE)) == SUCCESS   # taken back
    assert one.copy(block.value, on_one) == ILLEGAL_ADDRESS
    one.reset()
    zero.current()
    kernels.cuMemFreeAsync.argtypes = [u64, handle]
    assert kernels.cuMemFreeAsync(block.value, None) == SUCCESS
    assert kernels.cuCtxSynchronize() == SUCCESS
    kernels.cuMemPoolDestroy.argtypes = [handle]
    assert kernels.cuMemPoolDestroy(pool) == SUCCESS
    assert kernels.cuModuleUnload(zero.module) == SUCCESS
    one.current()
    assert kernels.cuModuleUnload(one.module) == SUCCESS


@pytest.mark.parametrize("how", ["unloaded", "reset"])
def test_a_function_of_a_module_gone_never_launches(kernels, sim, on_device, how):
    # A module unloaded, or destroyed with its context (cuDevicePrimaryCtxReset, another
    # library's call in a shared process): its function handles are dead. On a GPU a launch
    # through one is undefined behaviour; the simulator is the strict side — the launch is
    # CUDA_ERROR_INVALID_HANDLE, counted — even once new modules took the place of the old
    # (a handle is never reused, so a stale one is never a new module's function).
    on_device(0)
    status, module = load(kernels)
    stale = function_of(kernels, module)
    values = np.arange(15, dtype=np.float32).reshape(3, 5)
    if how == "unloaded":
        assert kernels.cuModuleUnload(module) == SUCCESS
    else:
        reset_device(kernels, 0)
    modules = [load(kernels)[1] for _ in range(4)]                # new ones, in its place
    fresh = [function_of(kernels, m) for m in modules]
    assert stale.value not in [f.value for f in fresh]
    source, destination = upload(kernels, values), alloc(kernels, values.nbytes)
    before = sim.counters()["dead_function_launches"]
    assert launch(kernels, stale, transpose_params(source, destination)) == INVALID_HANDLE
    assert sim.counters()["dead_function_launches"] - before == 1
    assert launch(kernels, fresh[0], transpose_params(source, destination)) == SUCCESS
    assert kernels.cuCtxSynchronize() == SUCCESS
    np.testing.assert_array_equal(download(kernels, destination, values.T.copy()), values.T)
    for pointer in (source, destination):
        assert kernels.cuMemFree_v2(pointer) == SUCCESS
    for m in modules:
        assert kernels.cuModuleUnload(m) == SUCCESS


def test_the_kernel_rule_tests_leave_nothing_behind(sim):
    assert (sim.live(), sim.live_modules()) == ((0, 0, 0), 0)
