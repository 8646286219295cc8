import gc
import os

import pytest

# Two CPU devices for JAX (set before anything imports it), so that the unusual-kinds
# tests can make an array sharded across devices.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import arrayport
from producer import build_extension, build_producer, compiler


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help="also run the slow tests (marked slow: the GPU suite on the "
                          "simulator, each framework in its own process, the long fuzz and "
                          "property runs, the benchmarks, the docs site); CI runs them. "
                          "ARRAYPORT_SLOW_TESTS=1 does the same")


def pytest_collection_modifyitems(config, items):
    """Tests marked slow skip, saying how to run them, unless --slow (the README's plain
    ``pytest`` is the quick suite; .ci/run runs everything)."""
    if config.getoption("--slow") or os.environ.get("ARRAYPORT_SLOW_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="slow: pytest --slow runs it (CI does)")
    gpu_suite_required = os.environ.get("ARRAYPORT_REQUIRE_GPU_SUITE") == "1"
    for item in items:
        if "slow" in item.keywords and not (gpu_suite_required
                                             and item.nodeid.startswith("tests/test_gpu_suite.py")):
            item.add_marker(skip)


def pytest_collection_finish(session):
    """Everything alive once the tests are collected — the frameworks' modules above all —
    is moved out of the collector's way (gc.freeze): the leak checks call gc.collect() after
    each test, which walked PyTorch's, JAX's and TensorFlow's objects every time (a third of
    the suite's time). What the tests create stays collectable."""
    gc.collect()
    gc.freeze()


def pytest_configure(config):
    """``pytest -m gpu`` runs the GPU suite on the CUDA driver simulator (tests/cudasim/,
    issue 32) and the HIP runtime simulator (tests/hipsim/, issue 54), loaded as this
    process's libcuda.so.1 and libamdhip64.so before anything opens a driver — unless
    ARRAYPORT_GPU=hardware asks for a real GPU's driver (and runtime)."""
    if (config.getoption("markexpr") == "gpu"
            and os.environ.get("ARRAYPORT_GPU", "simulator") == "simulator"):
        import cudasim
        import hipsim
        cudasim.install()
        hipsim.install()   # ROCm's runtime too: the suite runs on both vendors (issue 54)
    if config.getoption("markexpr") != "gpu":
        # The main suite's JAX arrays are CPU arrays: on a machine with a GPU and JAX's CUDA
        # plugin its default device would be the GPU, and tests of host memory would get
        # device arrays (issue 44). JAX on a GPU is the GPU suite's (pytest -m gpu). Set
        # before anything imports JAX; its children (the CLI's workers) inherit it.
        os.environ.setdefault("JAX_PLATFORMS", "cpu")


def pytest_ignore_collect(collection_path, config):
    """tests/frameworks runs one framework per process, through tests/test_frameworks.py
    (which sets ARRAYPORT_FRAMEWORK_PROCESS): never in the suite's own process."""
    if collection_path.name == "frameworks" and not os.environ.get("ARRAYPORT_FRAMEWORK_PROCESS"):
        return True
    return None


@pytest.fixture(scope="session")
def producer(tmp_path_factory):
    """The hand-built C DLPack producer (tests/helpers/dlpack_producer.c)."""
    if compiler() is None:
        pytest.skip("no C compiler to build the test producer")
    return build_producer(tmp_path_factory.mktemp("producer"))


@pytest.fixture(scope="session")
def buffer_exporter(tmp_path_factory):
    """The test-only C extension exporting arbitrary Py_buffers (tests/helpers/buffer_exporter.c)."""
    if compiler() is None:
        pytest.skip("no C compiler to build the buffer exporter")
    return build_extension("buffer_exporter", tmp_path_factory.mktemp("buffer_exporter"))


@pytest.fixture(scope="session")
def capi_consumer(tmp_path_factory):
    """The out-of-tree C consumer of the exchange API and arrayport's C API
    (tests/helpers/capi_consumer.c), built against the installed headers only."""
    if compiler() is None:
        pytest.skip("no C compiler to build the C API consumer")
    return build_extension("capi_consumer", tmp_path_factory.mktemp("capi_consumer"))


class LiveCounts:
    """Exact deltas of arrayport's private live counters and the producer's deleter calls."""

    def __init__(self, producer=None):
        self.producer = producer
        gc.collect()
        self.start = self.now()

    def now(self):
        counts = dict(arrayport._core.live_counts())
        if self.producer is not None:
            counts["producer_deleter_calls"] = self.producer.deleter_calls
        return counts

    def delta(self):
        gc.collect()
        now = self.now()
        return {key: now[key] - self.start[key] for key in now if now[key] != self.start[key]}


@pytest.fixture
def live(request):
    """Counters snapshot; `live.delta()` is what changed since the test began."""
    producer = request.getfixturevalue("producer") if "producer" in request.fixturenames else None
    return LiveCounts(producer)


@pytest.fixture
def without_cuda(monkeypatch):
    """The CUDA driver as a machine without one has it (also on a machine with a GPU)."""
    from arrayport.gpu import cuda as cuda_driver
    from arrayport.gpu.library import NativeLibrary

    missing = NativeLibrary("cuda", "the CUDA driver", ("libarrayport-no-such-cuda.so",),
                            cuda_driver.CudaUnavailable, {}, lambda library: None)
    monkeypatch.setattr(cuda_driver.driver, "library", missing)
    return missing
