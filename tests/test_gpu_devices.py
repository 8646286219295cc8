"""The device layer on a real NVIDIA GPU (`pytest -m gpu`): where pointers live, copies in
every direction bit for bit, the stream race, and arrays moving between PyTorch, CuPy, JAX,
Numba and arrayport both ways. Skipped, with the reason, without PyTorch on a CUDA device;
each other library is skipped on its own when it is missing."""

import ctypes

import numpy as np
import pytest

import arrayport as ap
from arrayport.gpu import cuda as cuda_driver

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device (PyTorch sees none)", allow_module_level=True)

DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16",
          "float32", "float64", "complex64", "complex128"]


def torch_dtype(name):
    return getattr(torch, name)


def sample(name, shape=(6, 10), device="cuda:0"):
    """A tensor of dtype ``name`` whose every element differs from its neighbours."""
    values = torch.arange(int(np.prod(shape)), dtype=torch.float64, device=device)
    values = (values * 7 + 3).remainder(113).reshape(shape)
    if name == "bool":
        return (values.remainder(2) == 1)
    return values.to(torch_dtype(name))


def host_bytes(tensor):
    """The bytes of ``tensor`` in C order, read by PyTorch itself."""
    flat = tensor.contiguous().cpu().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def tensor_of(view):
    return torch.from_dlpack(view)


LAYOUTS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.T,
    "sliced": lambda t: t[1:5, 2::3],
    "flipped": lambda t: t.flip(0),  # PyTorch copies on flip; the View is then contiguous
}


# ---- where memory lives ------------------------------------------------------------------

def test_every_memory_kind_is_located():
    device_tensor = torch.ones(4, device="cuda:0")
    pinned = torch.ones(4).pin_memory()
    assert cuda_driver.driver.locate_pointer(device_tensor.data_ptr()) == (2, 0)
    assert cuda_driver.driver.locate_pointer(pinned.data_ptr()) == (3, 0)
    with pytest.raises(BufferError, match="not memory CUDA knows"):
        cuda_driver.driver.locate_pointer(np.zeros(4).ctypes.data)
    cupy = pytest.importorskip("cupy")
    managed = cupy.cuda.malloc_managed(256)
    assert cuda_driver.driver.locate_pointer(managed.ptr) == (13, 0)


def test_a_pinned_cai_export_is_labelled_cuda_host():
    pinned = torch.arange(4.0).pin_memory()
    interface = {"shape": (4,), "typestr": "<f4", "data": (pinned.data_ptr(), False),
                 "version": 3, "stream": None}
    holder = type("Pinned", (), {"__cuda_array_interface__": interface, "keep": pinned})()
    view = ap.View.from_cuda_array_interface(holder)
    assert view.device == (3, 0)
    assert ap.to_numpy(view).tolist() == [0.0, 1.0, 2.0, 3.0]  # the CPU reads pinned memory


# ---- copies in every direction, bit for bit ---------------------------------------------

@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", DTYPES)
def test_device_to_device_and_host(name, layout):
    source = LAYOUTS[layout](sample(name))
    view = ap.view(source)
    on_device = view.copy()
    assert on_device.device == (2, 0) and on_device.is_copy and on_device.is_c_contiguous
    assert on_device.ptr != view.ptr
    assert host_bytes(tensor_of(on_device)) == host_bytes(source)
    on_host = view.copy(device="cpu")
    assert on_host.device == (1, 0)
    assert ctypes.string_at(on_host.ptr, on_host.nbytes) == host_bytes(source)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", DTYPES)
def test_host_to_device_and_pinned(name, layout):
    source = LAYOUTS[layout](sample(name, device="cpu"))
    view = ap.view(source)
    on_device = view.copy(device="cuda:0")
    assert on_device.device == (2, 0) and on_device.is_copy
    assert host_bytes(tensor_of(on_device)) == host_bytes(source)
    pinned = view.copy(device="cuda_host")  # pinned memory: the host reads it directly
    assert pinned.device == (3, 0) and pinned.is_copy
    assert ctypes.string_at(pinned.ptr, pinned.nbytes) == host_bytes(source)
    assert host_bytes(tensor_of(pinned.copy(device="cuda:0"))) == host_bytes(source)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="one GPU: no peer copy to test")
def test_copy_between_gpus():
    source = sample("float32").T
    copy = ap.view(source).copy(device="cuda:1")
    assert copy.device == (2, 1)
    assert host_bytes(tensor_of(copy)) == host_bytes(source)


def test_copy_runs_on_the_given_stream_and_says_so():
    stream = torch.cuda.Stream()
    source = sample("float32")
    copy = ap.view(source).copy(stream=stream.cuda_stream)
    assert copy.__cuda_array_interface__["stream"] == stream.cuda_stream
    stream.synchronize()
    assert host_bytes(tensor_of(copy)) == host_bytes(source)


def test_from_dlpack_device_and_copy_options():
    source = sample("int32", device="cpu")
    moved = ap.from_dlpack(source, device="cuda:0")
    assert moved.device == (2, 0)
    assert host_bytes(tensor_of(moved)) == host_bytes(source)
    again = ap.from_dlpack(tensor_of(moved), copy=True)
    assert again.ptr != moved.ptr and again.is_copy


# ---- the stream race ----------------------------------------------------------------------

SLEEP_CYCLES = 200_000_000  # ~0.1 s on any current GPU: the producer is still busy


def busy_producer():
    """Streams A and B, and a tensor of zeros that a producer kernel on A fills with 1s
    after a long sleep: until then, reading it anywhere but after A gives 0s."""
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    data = torch.zeros(1 << 20, device="cuda:0")
    torch.cuda.synchronize()
    with torch.cuda.stream(a):
        torch.cuda._sleep(SLEEP_CYCLES)
        data.fill_(1.0)
    return a, b, data


def race(through_arrayport):
    """A consumer on stream B reads the busy producer's tensor through arrayport with no
    host synchronization. Returns what B read."""
    a, b, data = busy_producer()
    with torch.cuda.stream(b):
        seen = through_arrayport(data, a, b).clone()
    torch.cuda.synchronize()
    return seen


def through_cuda_array_interface(data, a, b):
    interface = dict(data.__cuda_array_interface__, stream=a.cuda_stream)
    holder = type("Producer", (), {"__cuda_array_interface__": interface, "keep": data})()
    return torch.from_dlpack(ap.view(holder, stream=b.cuda_stream))


def through_dlpack_export(data, a, b):
    interface = dict(data.__cuda_array_interface__, stream=a.cuda_stream)
    holder = type("Producer", (), {"__cuda_array_interface__": interface, "keep": data})()
    view = ap.View.from_cuda_array_interface(holder)  # pending work on A
    return torch.from_dlpack(view)  # PyTorch passes B: the export makes B wait on A


@pytest.mark.parametrize("route", [through_cuda_array_interface, through_dlpack_export])
def test_stream_race_is_won_with_events(route):
    assert route(torch.zeros(1, device="cuda:0"), torch.cuda.Stream(), torch.cuda.Stream()) \
        is not None
    seen = race(route)
    assert bool((seen == 1).all()), "the consumer read before the producer had written"


@pytest.mark.parametrize("route", [through_cuda_array_interface, through_dlpack_export])
def test_stream_race_is_lost_with_synchronization_off(route):
    """The same exchange with arrayport's synchronization off reads stale data: the race
    test above can fail."""
    with ap.no_implicit_sync():
        seen = race(route)
    assert bool((seen == 0).all()), "no stale data: the race did not happen (GPU too fast?)"


def test_copy_waits_for_the_producer_stream():
    a, b, data = busy_producer()
    interface = dict(data.__cuda_array_interface__, stream=a.cuda_stream)
    holder = type("Producer", (), {"__cuda_array_interface__": interface, "keep": data})()
    copy = ap.View.from_cuda_array_interface(holder).copy(stream=b.cuda_stream)
    b.synchronize()
    assert bool((tensor_of(copy) == 1).all())


# ---- every pair of libraries, both ways -----------------------------------------------------

def make_torch(host):
    return torch.from_numpy(host).cuda()


def make_cupy(host):
    return pytest.importorskip("cupy").asarray(host)


def make_jax(host):
    jax = pytest.importorskip("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("JAX sees no GPU")
    return jax.device_put(host, gpus[0])


def make_numba(host):
    return pytest.importorskip("numba.cuda").to_device(host)


def read_back(array):
    """Host bytes of any of the libraries' device arrays, or of a View."""
    if isinstance(array, ap.View):
        array = torch.from_dlpack(array)
    if isinstance(array, torch.Tensor):
        return array.cpu().numpy()
    if hasattr(array, "copy_to_host"):
        return array.copy_to_host()
    if type(array).__module__.startswith("cupy"):
        return array.get()
    return np.asarray(array)  # JAX


def consume_torch(view):
    return torch.from_dlpack(view)


def consume_cupy(view):
    return pytest.importorskip("cupy").from_dlpack(view)


def consume_jax(view):
    pytest.importorskip("jax")
    return ap.to(view, "jax")


def consume_numba(view):
    return pytest.importorskip("numba.cuda").as_cuda_array(view)


def consume_arrayport(view):
    return view.copy()


PRODUCERS = {"torch": make_torch, "cupy": make_cupy, "jax": make_jax, "numba": make_numba}
CONSUMERS = {"torch": consume_torch, "cupy": consume_cupy, "jax": consume_jax,
             "numba": consume_numba, "arrayport": consume_arrayport}
SHARED = ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64",
          "complex64", "complex128"]


@pytest.mark.parametrize("name", SHARED)
@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize("producer", list(PRODUCERS))
def test_every_pair_through_arrayport(producer, consumer, name):
    host = (np.arange(24).reshape(4, 6) % 7).astype(name)
    if consumer == "numba" and name in ("bool", "float16"):
        pytest.skip("Numba's CUDA arrays take no bool/float16 through the CUDA Array Interface")
    made = PRODUCERS[producer](host)
    view = ap.view(made)
    assert view.device == (2, 0)
    if consumer == "jax" and name in JAX_NARROWS and not jax_holds_64_bits():
        # JAX without jax_enable_x64 would narrow the data: arrayport refuses (as on the host)
        with pytest.raises(TypeError, match="JAX would narrow"):
            CONSUMERS[consumer](view)
        return
    result = CONSUMERS[consumer](view)
    np.testing.assert_array_equal(read_back(result), host)


JAX_NARROWS = {"int64", "uint64", "float64", "complex128"}   # without jax_enable_x64


def jax_holds_64_bits():
    import jax
    return bool(jax.config.jax_enable_x64)


def test_copy_into_managed_memory():
    source = sample("float64").T
    copy = ap.view(source).copy(device="cuda_managed")
    assert copy.device == (13, 0)
    assert cuda_driver.driver.locate_pointer(copy.ptr) == (13, 0)
    back = copy.copy(device="cpu")
    assert ctypes.string_at(back.ptr, back.nbytes) == host_bytes(source)
