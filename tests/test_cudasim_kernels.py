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
