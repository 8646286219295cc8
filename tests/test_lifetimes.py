"""Lifetimes with exact deltas: refcounts, arrayport's live counters, the producer's
deleter count; deleters from other threads; Views alive at interpreter exit."""

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import arrayport as ap
from optional import needs
from producer import spec


def test_import_holds_the_producers_tensor_until_the_view_dies(live):
    source = np.arange(10.0)
    before = sys.getrefcount(source)
    view = ap.from_dlpack(source.__dlpack__(max_version=(1, 3)))
    # NumPy's managed tensor holds the array until arrayport calls its deleter.
    assert sys.getrefcount(source) == before + 1
    assert live.delta() == {"imported": 1}
    del view
    assert sys.getrefcount(source) == before
    assert live.delta() == {}


def test_view_of_an_ndarray_holds_exactly_one_reference(live):
    source = np.arange(10.0)
    before = sys.getrefcount(source)
    view = ap.from_dlpack(source)
    # Read from NumPy's C API: the View's owner field is the only reference, no tensor.
    assert sys.getrefcount(source) == before + 1 and view.owner is source
    assert live.delta() == {}
    del view
    assert sys.getrefcount(source) == before


def test_export_holds_the_view_until_the_consumer_deletes(live):
    view = ap.from_dlpack(np.arange(3.0))
    before = sys.getrefcount(view)
    capsule = view.__dlpack__(max_version=(1, 3))
    assert sys.getrefcount(view) == before + 1
    assert live.delta() == {"exported": 1}
    consumer = np.from_dlpack(capsule_owner(capsule))
    del capsule
    assert sys.getrefcount(view) == before + 1  # NumPy now owns the export
    del consumer
    assert sys.getrefcount(view) == before
    assert live.delta() == {}


class capsule_owner:
    """Hands one prepared capsule to a consumer's from_dlpack."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("max_version", [None, (1, 3)])
def test_unconsumed_export_is_freed_by_its_capsule(live, max_version):
    view = ap.from_dlpack(np.arange(3.0))
    for _ in range(100):
        view.__dlpack__(max_version=max_version)
    assert live.delta() == {}


@pytest.mark.parametrize("max_version", [None, (1, 3)])
def test_exported_deleter_runs_on_a_native_thread_without_the_gil(producer, live, max_version):
    view = ap.from_dlpack(np.arange(3.0))
    before = sys.getrefcount(view)
    capsule = view.__dlpack__(max_version=max_version)
    assert producer.delete_in_native_thread(capsule) == 0
    assert sys.getrefcount(view) == before
    del capsule
    assert live.delta() == {}


def drop_on_another_thread(box):
    thread = threading.Thread(target=box.clear)
    thread.start()
    thread.join()


def test_imported_deleter_runs_once_when_the_last_view_dies_on_another_thread(producer, live):
    first = [ap.from_dlpack(producer.capsule(spec()))]
    second = [ap.from_dlpack(first[0])]  # a second View on the same memory (via re-export)
    drop_on_another_thread(first)
    assert "producer_deleter_calls" not in live.delta()  # `second` still holds it
    drop_on_another_thread(second)
    assert live.delta() == {"producer_deleter_calls": 1}


def test_many_imports_and_exports_leave_nothing_behind(producer, live):
    for _ in range(200):
        view = ap.from_dlpack(producer.capsule(spec()))
        np.from_dlpack(view)
        ap.from_dlpack(view.__dlpack__(max_version=(1, 3)))
        ap.from_dlpack(view, copy=True)
    del view
    assert live.delta() == {"producer_deleter_calls": 200}


def run_python(code, *extra_paths):
    script = f"import sys; sys.path[:0] = {list(extra_paths)!r}\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)


@needs("torch")
def test_views_and_exports_alive_at_interpreter_exit_do_not_crash():
    result = run_python("""
        import numpy as np, arrayport as ap, torch
        KEEP = []
        for i in range(50):
            view = ap.from_dlpack(np.arange(i + 1.0))
            KEEP += [view, view.__dlpack__(max_version=(1, 3)), view.__dlpack__(),
                     torch.from_dlpack(view), np.from_dlpack(view), ap.from_dlpack(view)]
        KEEP.append(KEEP)  # a cycle, collected during finalization
        print("done")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"


def test_deleter_called_after_finalization_does_not_crash(producer):
    tests_dir = str(producer.path.parent)
    result = run_python(f"""
        import numpy as np, arrayport as ap
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
        from producer import Producer
        producer = Producer(__import__('pathlib').Path({str(producer.path)!r}))
        view = ap.from_dlpack(np.arange(3.0))
        assert producer.delete_at_process_exit(view.__dlpack__(max_version=(1, 3))) == 0
        print("exiting")
    """, tests_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["exiting", "deleter ran after finalization"]


@needs("torch")
def test_every_kind_of_holder_alive_at_exit_and_freed_during_finalization():
    """Buffers exported from Views, Views leasing other objects' buffers, Views of torch
    tensors and JAX-free capsules, ndarrays based on Views, a daemon thread still holding
    Views, and a module global only finalization frees: no crash, clean exit."""
    result = run_python("""
        import threading, time, types, sys
        import numpy as np, arrayport as ap, torch
        KEEP = []
        for i in range(20):
            source = np.arange(i + 1.0)
            view = ap.view(source)
            KEEP += [memoryview(view), ap.view(bytearray(i + 1)), ap.view(memoryview(b"x" * (i + 1))),
                     ap.view(torch.arange(i + 1)), ap.to_numpy(view), np.exp(view),
                     view.__dlpack__(max_version=(1, 3)), ap.to_torch(view)]
        module = types.ModuleType("holder")
        module.views = [ap.view(np.ones(3)) for _ in range(10)]
        module.capsule = ap.view(np.ones(2)).__dlpack__(max_version=(1, 3))
        sys.modules["holder"] = module

        def hold_forever(views):
            while True:
                time.sleep(0.01)
        threading.Thread(target=hold_forever, args=([ap.view(np.ones(4))] * 3,),
                         daemon=True).start()
        print("done")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
