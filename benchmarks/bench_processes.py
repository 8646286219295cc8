"""Views across processes beside NumPy arrays through the same paths, in one run.

    python benchmarks/bench_processes.py [--mib 256] [--repeat 5] [--dask-mib 64]

1. pickle 5 out of band to another process: the pickle and its buffers written to a pipe,
   the child unpickles (zero-copy over what it received) and answers; View vs ndarray.
2. View.share(): the handle sent to another process, which maps the segment and answers —
   at 4 KiB and at the full size (O(1) in the size is the promise); share()'s one copy is
   timed on its own, beside share() of an ``empty_shared`` View (filled in place: no copy).
3. In band: a View vs the same ndarray as the argument of a ProcessPoolExecutor task
   (multiprocessing's own pickles, protocol 4 on Python < 3.14).
4. Dask LocalCluster(processes=True): a round trip of a View vs the same ndarray through a
   worker (submit identity, gather).
Medians of --repeat runs, milliseconds; the ratios are measured in this run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import pickle
import statistics
import time

import numpy as np

import arrayport as ap
from _timing import cpu_model


def _receiver(connection):
    """Child: unpickle what arrives (out-of-band buffers or a shared handle), answer."""
    while True:
        message = connection.recv()
        if message == "stop":
            return
        kind, count = message
        if kind == "pickle":
            data = connection.recv_bytes()
            buffers = [connection.recv_bytes() for _ in range(count)]
            received = pickle.loads(data, buffers=buffers)
        else:
            received = ap.View.from_shared(pickle.loads(connection.recv_bytes()))
        connection.send(ap.view(received).nbytes)


def _nbytes(x):
    """A ProcessPoolExecutor task: what arrived, in bytes (the argument was unpickled)."""
    return ap.view(x).nbytes


def _send_pickled(connection, obj):
    buffers = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    connection.send(("pickle", len(buffers)))
    connection.send_bytes(data)
    for buffer in buffers:
        connection.send_bytes(buffer.raw())
    return connection.recv()


def _send_handle(connection, handle):
    connection.send(("shared", 0))
    connection.send_bytes(pickle.dumps(handle))
    return connection.recv()


def _median_ms(function, repeat):
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def _alternating_ms(first, second, repeat):
    a, b = [], []
    for _ in range(repeat):
        for function, samples in ((first, a), (second, b)):
            start = time.perf_counter()
            function()
            samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(a), statistics.median(b)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--dask-mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"# {cpu_model()}; arrayport {ap.__version__}, numpy {np.__version__}; medians of "
          f"{args.repeat}, ms")
    array = np.random.default_rng(0).random(args.mib * (1 << 20) // 8)
    view = ap.view(array)

    context = multiprocessing.get_context("spawn")
    parent, child_end = context.Pipe()
    child = context.Process(target=_receiver, args=(child_end,))
    child.start()
    try:
        ours, numpy_ms = _alternating_ms(lambda: _send_pickled(parent, view),
                                         lambda: _send_pickled(parent, array), args.repeat)
        print(f"{'pickle 5 out of band, ' + str(args.mib) + ' MiB':<44} View {ours:9.2f}  "
              f"ndarray {numpy_ms:9.2f}  ratio {ours / numpy_ms:5.2f}")
        small = ap.view(np.zeros(4096 // 8))
        share_ms = _median_ms(view.share, 1)   # the one copy (its handle is collected)
        big_handle, small_handle = view.share(), small.share()
        try:
            big_ms, small_ms = _alternating_ms(lambda: _send_handle(parent, big_handle),
                                               lambda: _send_handle(parent, small_handle),
                                               args.repeat)
        finally:
            big_handle.unlink()
            small_handle.unlink()
        print(f"{'share(): handle to a child, ' + str(args.mib) + ' MiB vs 4 KiB':<44} big  "
              f"{big_ms:9.2f}  small   {small_ms:9.2f}  ratio {big_ms / small_ms:5.2f}")
        print(f"{'share(): the one copy into the segment':<44} {share_ms:9.2f}")
        filled = ap.empty_shared(array.shape, array.dtype)
        np.asarray(filled)[...] = array        # the data made in place (here: copied in)
        in_place_ms = _median_ms(filled.share, args.repeat)
        print(f"{'share() of an empty_shared View (no copy)':<44} {in_place_ms:9.2f}  "
              f"vs the copy  ratio {in_place_ms / share_ms:5.3f}")
        filled.share().unlink()
        parent.send("stop")
    finally:
        child.join(30)

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        pool.submit(_nbytes, ap.view(np.zeros(8))).result()    # warm: the worker imports
        ours, numpy_ms = _alternating_ms(lambda: pool.submit(_nbytes, view).result(),
                                         lambda: pool.submit(_nbytes, array).result(),
                                         args.repeat)
    print(f"{'in band to a ProcessPoolExecutor, ' + str(args.mib) + ' MiB':<44} View {ours:9.2f}  "
          f"ndarray {numpy_ms:9.2f}  ratio {ours / numpy_ms:5.2f}")

    try:
        from distributed import Client, LocalCluster
    except ImportError:
        print("# dask.distributed not installed: Dask row skipped")
        return
    payload = np.random.default_rng(1).random(args.dask_mib * (1 << 20) // 8)
    payload_view = ap.view(payload)
    with LocalCluster(processes=True, n_workers=1, threads_per_worker=1,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        def round_trip(obj):
            return client.submit(lambda x: x, obj, pure=False).result()
        round_trip(payload_view), round_trip(payload)   # warm-up: workers import arrayport
        ours, numpy_ms = _alternating_ms(lambda: round_trip(payload_view),
                                         lambda: round_trip(payload), args.repeat)
    print(f"{'Dask LocalCluster round trip, ' + str(args.dask_mib) + ' MiB':<44} View {ours:9.2f}  "
          f"ndarray {numpy_ms:9.2f}  ratio {ours / numpy_ms:5.2f}")


if __name__ == "__main__":
    main()
