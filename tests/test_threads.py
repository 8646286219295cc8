"""Threads: 8 threads exchanging the same and different arrays at once, deleters running on
native threads without the GIL, Views made on one thread and freed on another. Results
must be right and every counter exact afterwards."""

import queue
import sys
import threading

import numpy as np
import pytest

import arrayport as ap
from producer import spec

THREADS = 8
ROUNDS = 300


def run_threads(work):
    """Run ``work(index)`` on THREADS threads started together; re-raise the first failure."""
    barrier = threading.Barrier(THREADS)
    failures = []

    def body(index):
        barrier.wait()
        try:
            work(index)
        except BaseException as error:  # reported on the main thread
            failures.append(error)
    threads = [threading.Thread(target=body, args=(i,)) for i in range(THREADS)]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    if failures:
        raise failures[0]


def test_threads_exchanging_the_same_array(producer, live):
    shared = np.arange(64.0)
    torch = pytest.importorskip("torch")

    def work(index):
        for _ in range(ROUNDS):
            view = ap.view(shared)
            again = ap.from_dlpack(view.__dlpack__(max_version=(1, 3)))
            assert again.ptr == view.ptr and ap.to_numpy(again)[5] == 5.0
            assert torch.from_dlpack(view)[7].item() == 7.0
            assert np.from_dlpack(again)[9] == 9.0
            capsule_view = ap.from_dlpack(producer.capsule(spec()))
            assert capsule_view.shape == (2, 3)
    run_threads(work)
    assert live.delta() == {"producer_deleter_calls": THREADS * ROUNDS}


def test_threads_writing_their_own_arrays_through_views(live):
    arrays = [np.zeros(256, np.int64) for _ in range(THREADS)]

    def work(index):
        for round_ in range(ROUNDS):
            target = ap.to_numpy(ap.from_dlpack(ap.view(arrays[index]).__dlpack__(
                max_version=(1, 3))))
            target[round_ % 256] = index * 1000 + round_
            np.add(ap.view(arrays[index][:1]), 0, out=ap.view(arrays[index][:1]))
    run_threads(work)
    for index, array in enumerate(arrays):
        assert array[(ROUNDS - 1) % 256] == index * 1000 + ROUNDS - 1
    assert live.delta() == {}


def test_views_made_on_one_thread_die_on_another(producer, live):
    handoff = queue.Queue()

    def work(index):
        if index % 2 == 0:  # makers
            for _ in range(ROUNDS):
                view = ap.from_dlpack(producer.capsule(spec()))
                handoff.put((view, view.__dlpack__(max_version=(1, 3)), memoryview(view)))
        else:  # takers: the last references die here
            for _ in range(ROUNDS):
                view, capsule, buffer = handoff.get()
                assert ap.from_dlpack(capsule).ptr == view.ptr
                buffer.release()
                del view, capsule, buffer
    run_threads(work)
    assert live.delta() == {"producer_deleter_calls": THREADS // 2 * ROUNDS}


def test_exported_deleters_run_on_native_threads_concurrently(producer, live):
    view = ap.view(np.arange(10.0))
    before = sys.getrefcount(view)

    def work(index):
        for round_ in range(ROUNDS):
            versioned = (index + round_) % 2 == 0
            capsule = view.__dlpack__(max_version=(1, 3) if versioned else None)
            # consumed, then deleted by a pthread with the GIL released
            assert producer.delete_in_native_thread(capsule) == 0
    run_threads(work)
    assert sys.getrefcount(view) == before
    assert live.delta() == {}
