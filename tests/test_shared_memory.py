"""Views in POSIX shared memory (issue 17): View.share() / View.from_shared(handle) —
writes visible across processes, read-only handles, the lifetime rules (creator unlinks;
killed creator cleaned up by the resource tracker; nothing left in /dev/shm), unguessable
owner-only names, and bad handles as clear errors."""

import gc
import multiprocessing
import os
import pickle
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import arrayport as ap

SHM = Path("/dev/shm")
pytestmark = pytest.mark.skipif(not SHM.is_dir(), reason="needs /dev/shm (POSIX shared memory)")


def segments():
    return {p.name for p in SHM.iterdir() if p.name.startswith("arrayport-")}


@pytest.fixture
def no_leftovers():
    before = segments()
    yield
    gc.collect()
    assert segments() <= before, "a segment was left in /dev/shm"


def test_share_and_attach_in_the_same_process(no_leftovers):
    source = np.arange(12.0).reshape(3, 4)
    handle = ap.view(source).T.share()             # non-contiguous: copied once, C order
    assert handle.shape == (4, 3) and handle.nbytes == 96 and not handle.readonly
    first, second = ap.View.from_shared(handle), ap.View.from_shared(handle)
    np.testing.assert_array_equal(np.asarray(first), source.T)
    assert first.ptr != source.ctypes.data and first.protocol == "shared"
    np.asarray(first)[0, 0] = 99.0
    assert np.asarray(second)[0, 0] == 99.0       # one segment, two mappings
    handle.unlink()
    assert np.asarray(first)[0, 0] == 99.0        # pages outlive the name
    with pytest.raises(BufferError, match="is gone \\(its creator unlinked it or exited\\)"):
        ap.View.from_shared(handle)
    handle.unlink()                               # idempotent in the creator


def test_names_are_unguessable_and_owner_only(no_leftovers):
    first, second = ap.view(b"ab").share(), ap.view(b"ab").share()
    try:
        assert first.name != second.name
        assert len(first.name) == len("/arrayport-") + 32
        mode = stat.S_IMODE(os.stat(SHM / first.name.lstrip("/")).st_mode)
        assert mode == 0o600
    finally:
        first.unlink()
        second.unlink()


def test_read_only_views_share_read_only(no_leftovers):
    frozen = np.arange(4, dtype=np.int32)
    frozen.flags.writeable = False
    handle = ap.view(frozen).share()
    try:
        attached = ap.View.from_shared(handle)
        assert handle.readonly and attached.readonly
        with pytest.raises(ValueError, match="read-only"):
            np.asarray(attached)[0] = 1
        forced = ap.view(np.zeros(2)).share(readonly=True)
        assert ap.View.from_shared(forced).readonly
        forced.unlink()
    finally:
        handle.unlink()


@pytest.mark.parametrize("make", [
    lambda: np.zeros(0), lambda: np.float32(3.5), lambda: np.arange(6, dtype=np.uint8)[::2]],
    ids=["size-0", "0-d", "strided"])
def test_edge_layouts(make, no_leftovers):
    source = np.asarray(make())
    handle = ap.view(source).share()
    try:
        np.testing.assert_array_equal(np.asarray(ap.View.from_shared(handle)), source)
    finally:
        handle.unlink()


def _write_through(handle, value):
    np.asarray(ap.View.from_shared(handle))[...] = value


def test_writes_are_visible_in_both_processes(no_leftovers):
    view = ap.view(np.zeros(1000))
    handle = view.share()
    try:
        mine = ap.View.from_shared(handle)
        context = multiprocessing.get_context("spawn")
        child = context.Process(target=_write_through, args=(handle, 7.0))
        child.start()
        child.join(60)
        assert child.exitcode == 0
        assert np.all(np.asarray(mine) == 7.0)
    finally:
        handle.unlink()


def test_only_the_creator_unlinks(no_leftovers):
    handle = ap.view(b"abcd").share()
    try:
        stranger = pickle.loads(pickle.dumps(handle))
        code = textwrap.dedent(f"""
            import pickle, sys, arrayport as ap
            handle = pickle.loads({pickle.dumps(stranger)!r})
            view = ap.View.from_shared(handle)
            try:
                handle.unlink()
            except BufferError as error:
                print("refused:", error)
            print(bytes(memoryview(view)))
        """)
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=60)
        assert "refused: shared: " in child.stdout and "only its creator unlinks it" in child.stdout
        assert "b'abcd'" in child.stdout
        assert handle.name.lstrip("/") in segments(), "the attacher's exit unlinked nothing"
    finally:
        handle.unlink()


def _wait_until_gone(name, seconds=20.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if name not in segments():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("ending", ["exit", "sigkill"])
def test_the_creators_end_removes_the_name(ending):
    code = textwrap.dedent(f"""
        import os, signal, sys, arrayport as ap, numpy as np
        handle = ap.view(np.arange(4.0)).share()
        print(handle.name, flush=True)
        sys.stdin.readline()
        if {ending!r} == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    name = child.stdout.readline().strip().lstrip("/")
    assert name in segments()
    child.stdin.write("\n")
    child.stdin.flush()
    child.wait(60)
    assert child.returncode == (-signal.SIGKILL if ending == "sigkill" else 0)
    assert _wait_until_gone(name), f"/dev/shm/{name} outlived its killed creator"


@pytest.mark.parametrize("change, error, message", [
    (dict(name="/etc/passwd"), ValueError, "is not the name of an arrayport segment"),
    (dict(name="/arrayport-" + "0" * 32), BufferError, "is gone"),
    (dict(nbytes=10**6), BufferError, "holds 32 bytes, the handle says 1000000"),
    (dict(nbytes=-1), ValueError, "nbytes must be an int >= 0"),
    (dict(shape=(100,)), BufferError, "shared: the array reaches bytes 0..800 of a 32-byte"),
    (dict(kind="cuda-ipc"), BufferError, "handles of kind 'cuda-ipc' are not supported"),
])
def test_bad_handles_are_clear_errors(change, error, message, no_leftovers, live):
    from arrayport.shared import SharedHandle
    handle = ap.view(np.arange(4.0)).share()
    try:
        fields = dict(kind=handle.kind, name=handle.name, nbytes=handle.nbytes,
                      item=handle.item, shape=handle.shape, strides=handle.strides,
                      readonly=handle.readonly)
        fields.update(change)
        with pytest.raises(error, match=message):
            ap.View.from_shared(SharedHandle(**fields))
        with pytest.raises(TypeError, match="expected an arrayport.SharedHandle"):
            ap.View.from_shared({"name": handle.name})
    finally:
        handle.unlink()
    gc.collect()
    assert live.delta() == {}


def test_device_views_are_refused(monkeypatch):
    import fake_gpu
    fake_gpu.FakeCuda(monkeypatch)
    with pytest.raises(BufferError, match="in cuda:0 memory; share a host copy"):
        fake_gpu.device_view(np.zeros(2)).share()
