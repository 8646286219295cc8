"""Views through the engines users run (issue 17): Dask (serialization, dask.array chunks, a
LocalCluster of two worker processes) and Ray (object store, zero-copy read-only on receipt).
Each engine's tests skip when it is not installed."""

import numpy as np
import pytest

import arrayport as ap
from optional import needs


@needs("distributed")
def test_dask_serializes_views_with_their_own_family_zero_copy():
    import pickle

    from distributed.protocol import deserialize, serialize
    pickle.dumps(ap.view(b"x"))   # registers, if distributed came after arrayport
    view = ap.view(np.arange(1 << 16, dtype=np.float64))
    header, frames = serialize(view)
    assert header["serializer"] == "dask" and header["type"].endswith("View")
    assert len(frames) == 1 and memoryview(frames[0]).nbytes == view.nbytes
    assert np.frombuffer(frames[0], np.uint8).ctypes.data == view.ptr, "no copy sent"
    back = deserialize(header, frames)
    assert back.ptr == view.ptr and not back.readonly      # in process: the same memory
    # A frame arriving read-only: a writable View is copied once into writable memory (as
    # Dask does for NumPy), a read-only one stays zero-copy.
    arrived = deserialize(header, [bytes(frames[0])])
    assert not arrived.readonly and arrived.ptr != view.ptr
    frozen = ap.view(np.arange(4.0)).as_readonly()
    header, frames = serialize(frozen)
    received = bytes(frames[0])
    back = deserialize(header, [received])
    assert back.readonly and back.ptr == np.frombuffer(received, np.uint8).ctypes.data
    np.testing.assert_array_equal(np.asarray(back), np.arange(4.0))
    strided = ap.view(np.arange(12.0).reshape(3, 4))[:, ::2]
    np.testing.assert_array_equal(np.asarray(deserialize(*serialize(strided))),
                                  np.arange(12.0).reshape(3, 4)[:, ::2])


@needs("dask")
def test_dask_weighs_a_view_by_its_bytes():
    from dask.sizeof import sizeof
    assert sizeof(ap.view(np.zeros(1 << 16))) >= (1 << 16) * 8


@needs("dask")
def test_dask_arrays_over_views():
    import dask
    import dask.array as da
    view = ap.view(np.arange(24.0).reshape(4, 6))
    chunked = da.from_array(view, chunks=(2, 3))
    assert chunked.dtype == np.float64 and chunked.sum().compute() == 276.0
    assert isinstance(chunked.blocks[1, 1].compute(), ap.View)
    parts = [da.from_delayed(dask.delayed(ap.view)(np.full(3, float(i))), shape=(3,),
                             dtype=np.float64) for i in range(3)]
    assert da.concatenate(parts).sum().compute() == 9.0


def _chunk(i):
    import numpy as np

    import arrayport as ap
    return ap.view(np.full(1000, float(i)))


def _total(view):
    import numpy as np
    return float(np.asarray(view).sum())


@needs("distributed")
def test_a_local_cluster_moves_view_chunks_between_workers():
    from distributed import Client, LocalCluster
    with LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        workers = list(client.scheduler_info()["workers"])
        assert len(workers) == 2
        # Chunks made on one worker, summed on the other: every View crosses a process.
        chunks = [client.submit(_chunk, i, workers=[workers[i % 2]], pure=False)
                  for i in range(4)]
        totals = [client.submit(_total, chunk, workers=[workers[(i + 1) % 2]])
                  for i, chunk in enumerate(chunks)]
        assert client.gather(totals) == [0.0, 1000.0, 2000.0, 3000.0]
        returned = client.gather(chunks[3])
        assert isinstance(returned, ap.View) and np.asarray(returned)[0] == 3.0
        echoed = client.submit(lambda v: v, ap.view(np.arange(5.0))).result()
        np.testing.assert_array_equal(np.asarray(echoed), np.arange(5.0))


@needs("ray")
def test_ray_object_store_gives_zero_copy_read_only_views():
    import ray
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        view = ap.view(np.arange(1 << 16, dtype=np.float64))
        reference = ray.put(view)
        first, second = ray.get(reference), ray.get(reference)
        assert first.readonly and first.ptr == second.ptr   # the store's pages, not copies
        np.testing.assert_array_equal(np.asarray(first), np.asarray(view))

        @ray.remote
        def describe(x):
            import numpy as np
            return type(x).__name__, x.readonly, float(np.asarray(x).sum())

        assert ray.get(describe.remote(reference)) == ("View", True, float(np.arange(1 << 16).sum()))
    finally:
        ray.shutdown()


@needs("distributed")
@pytest.mark.parametrize("first", ["arrayport", "distributed.protocol"])
def test_the_family_is_registered_whatever_the_import_order(first):
    """A process that reads Views sent with the family must have it registered: arrayport
    imported before distributed leaves a one-shot import hook that registers it."""
    import subprocess
    import sys
    second = "distributed.protocol" if first == "arrayport" else "arrayport"
    code = (f"import sys, importlib; importlib.import_module({first!r}); "
            f"importlib.import_module({second!r})\n"
            "from arrayport import engines\n"
            "from distributed.protocol import dask_deserialize\n"
            "import arrayport\n"
            "print(engines._dask_family_registered, dask_deserialize.dispatch(arrayport.View) "
            "is not None, any(type(f).__name__ == '_AfterImport' and f.name == "
            "'distributed.protocol' for f in sys.meta_path))")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120)
    assert child.stdout.split() == ["True", "True", "False"], child.stderr
