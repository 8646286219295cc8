"""Views in shared memory (issues 17 and 31): View.share() / View.from_shared(handle) —
writes visible across processes, read-only segments that no handle can make writable
(kernel seals on Linux), segments no process can truncate under a reader, the lifetime
rules (creator unlinks; a killed creator leaves nothing), unguessable owner-only names, and
bad or altered handles as clear errors.

Both kinds of segment run here: "memfd" (what Linux uses) and "posix-shm" (the fallback
elsewhere), each through the same tests where the rule is the same."""

import fcntl
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
import types
from pathlib import Path

import numpy as np
import pytest

import arrayport as ap
from arrayport import shared
from arrayport.shared import SharedHandle

SHM = Path("/dev/shm")
HAS_MEMFD = hasattr(os, "memfd_create") and Path("/proc/self/fd").is_dir()
KINDS = [pytest.param("memfd", marks=pytest.mark.skipif(not HAS_MEMFD, reason="memfd is Linux's")),
         pytest.param("posix-shm", marks=pytest.mark.skipif(not SHM.is_dir(),
                                                            reason="needs /dev/shm"))]


@pytest.fixture(params=KINDS)
def kind(request, monkeypatch):
    """Which kind of segment share() makes in this test."""
    monkeypatch.setattr(shared, "_KIND", request.param)
    return request.param


def segments():
    """Every arrayport segment this machine has a name for (posix-shm) or this process
    holds open (memfd)."""
    found = set()
    if SHM.is_dir():
        found |= {p.name for p in SHM.iterdir() if p.name.startswith("arrayport-")}
    if HAS_MEMFD:
        for entry in Path("/proc/self/fd").iterdir():
            try:
                target = os.readlink(entry)
            except OSError:
                continue
            if target.startswith("/memfd:arrayport-"):
                found.add(target[len("/memfd:"):].split(" ")[0])
    return found


@pytest.fixture
def no_leftovers(monkeypatch):
    """No segment this test made outlives it. Only this process's names count: /dev/shm is
    the machine's, and a parallel run's other workers make segments there meanwhile (a
    memfd test once failed on one of theirs under pytest -n 16)."""
    made = set()
    token_hex = shared.secrets.token_hex

    def recorded(nbytes):
        token = token_hex(nbytes)
        made.add(f"arrayport-{token}")
        return token
    monkeypatch.setattr(shared, "secrets", types.SimpleNamespace(token_hex=recorded))
    yield made
    gc.collect()
    assert not segments() & made, "a segment was left behind"


def altered(handle, **change):
    fields = {name: getattr(handle, name) for name in SharedHandle.__slots__}
    fields.update(change)
    return SharedHandle(**fields)


def attachable(handle):
    try:
        ap.View.from_shared(handle)
    except BufferError as error:
        assert "is gone" in str(error), error
        return False
    return True


def test_share_and_attach_in_the_same_process(kind, no_leftovers):
    source = np.arange(12.0).reshape(3, 4)
    handle = ap.view(source).T.share()             # non-contiguous: copied once, C order
    assert handle.shape == (4, 3) and handle.nbytes == 96 and not handle.readonly
    assert no_leftovers == {handle.name[1:]}       # the segment the fixture watches
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


def test_a_handle_names_its_element_type(kind, no_leftovers):
    handle = ap.view(np.arange(4, dtype=np.complex64)).share()
    assert handle.item == shared.SharedItem(code=5, bits=64, lanes=1, padded=False)
    assert (handle.item.code, handle.item.bits) == (5, 64)
    assert handle.dtype == ap.DType("complex64")
    back = pickle.loads(pickle.dumps(handle))      # the named fields survive the trip
    assert back.item.bits == 64
    np.testing.assert_array_equal(np.asarray(ap.View.from_shared(back)),
                                  np.arange(4, dtype=np.complex64))
    handle.unlink()


def test_names_are_unguessable_and_owner_only(kind, no_leftovers):
    first, second = ap.view(b"ab").share(), ap.view(b"ab").share()
    try:
        assert first.kind == second.kind == kind
        assert first.name != second.name
        assert len(first.name) == len("/arrayport-") + 32
        if kind == "posix-shm":
            mode = stat.S_IMODE(os.stat(SHM / first.name.lstrip("/")).st_mode)
            assert mode == 0o400 and first.readonly    # bytes: read-only; else 0o600
        else:   # found through the creator's /proc entry, which only its user may open
            assert first.pid == os.getpid() and first.fd >= 0
    finally:
        first.unlink()
        second.unlink()


@pytest.mark.skipif(not HAS_MEMFD or os.geteuid() != 0,
                    reason="needs root, to run a child as another user")
def test_another_user_cannot_attach_a_memfd_segment(monkeypatch):
    monkeypatch.setattr(shared, "_KIND", "memfd")
    handle = ap.view(b"secret").share()
    try:
        code = textwrap.dedent(f"""
            import os, pickle, arrayport as ap
            handle = pickle.loads({pickle.dumps(handle)!r})
            os.setgid(65534); os.setuid(65534)          # nobody
            try:
                ap.View.from_shared(handle)
            except BufferError as error:
                print("refused:", error)
        """)
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=60)
        assert "refused: from_shared: segment" in child.stdout, child.stdout + child.stderr
        assert "may not read (another user's)" in child.stdout
    finally:
        handle.unlink()


def test_read_only_views_share_read_only(kind, no_leftovers):
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
def test_edge_layouts(make, kind, no_leftovers):
    source = np.asarray(make())
    handle = ap.view(source).share()
    try:
        np.testing.assert_array_equal(np.asarray(ap.View.from_shared(handle)), source)
    finally:
        handle.unlink()


def _write_through(handle, value):
    np.asarray(ap.View.from_shared(handle))[...] = value


def test_writes_are_visible_in_both_processes(kind, no_leftovers):
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


def test_only_the_creator_unlinks(kind, no_leftovers):
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
        assert attachable(handle), "the attacher's exit removed the segment"
    finally:
        handle.unlink()


def _wait_until_gone(handle, seconds=20.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not attachable(handle):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("ending", ["exit", "sigkill"])
def test_the_creators_end_removes_the_segment(ending, kind):
    code = textwrap.dedent(f"""
        import os, pickle, signal, sys, arrayport as ap, numpy as np
        from arrayport import shared
        shared._KIND = {kind!r}
        handle = ap.view(np.arange(4.0)).share()
        print(pickle.dumps(handle).hex(), flush=True)
        sys.stdin.readline()
        if {ending!r} == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    handle = pickle.loads(bytes.fromhex(child.stdout.readline().strip()))
    assert handle.kind == kind
    attached = ap.View.from_shared(handle)       # while the creator lives
    child.stdin.write("\n")
    child.stdin.flush()
    child.wait(60)
    assert child.returncode == (-signal.SIGKILL if ending == "sigkill" else 0)
    assert _wait_until_gone(handle), f"{handle.name} outlived its creator"
    assert np.asarray(attached).tolist() == [0.0, 1.0, 2.0, 3.0]   # pages outlive it


@pytest.mark.parametrize("change, error, message", [
    (dict(name="/etc/passwd"), ValueError, "is not the name of an arrayport segment"),
    (dict(name="/arrayport-" + "0" * 32), BufferError, "is gone"),
    (dict(nbytes=10**6), BufferError, "holds 32 bytes, the handle says 1000000"),
    (dict(nbytes=-1), ValueError, "nbytes must be an int >= 0"),
    (dict(shape=(100,)), BufferError, "shared: the array reaches bytes 0..800 of a 32-byte"),
    (dict(kind="cuda-ipc"), BufferError, "handles of kind 'cuda-ipc' are not supported"),
    (dict(readonly=1), ValueError, "readonly must be a bool"),
    (dict(item=(99, 8, 1, False)), BufferError, "shared: unknown dtype code 99"),
    (dict(item=(2, 64, 1)), ValueError, "item must be DLPack's \\(code, bits, lanes, padded\\)"),
    (dict(item=(2, 64, 1, 0)), ValueError, "item must be DLPack's"),
    (dict(strides=(1000,)), BufferError, "shared: the array reaches bytes"),
    (dict(strides=(-8,)), BufferError, "shared: the array reaches bytes"),
    (dict(shape=(2**62,), strides=(0,)), BufferError, "holds more bytes than fit in int64"),
])
def test_bad_handles_are_clear_errors(change, error, message, kind, no_leftovers, live):
    handle = ap.view(np.arange(4.0)).share()
    try:
        with pytest.raises(error, match=message):
            ap.View.from_shared(altered(handle, **change))
        with pytest.raises(TypeError, match="expected an arrayport.SharedHandle"):
            ap.View.from_shared({"name": handle.name})
    finally:
        handle.unlink()
    gc.collect()
    assert live.delta() == {}


@pytest.mark.skipif(not HAS_MEMFD, reason="memfd is Linux's")
@pytest.mark.parametrize("change, error, message", [
    (dict(pid="child"), BufferError, "is gone"),           # another process's descriptor
    (dict(fd=0), BufferError, "is gone"),                  # not the segment: stdin
    (dict(fd=10**6), BufferError, "is gone"),
    (dict(pid=0), ValueError, "pid must be a process id"),
    (dict(fd=-1), ValueError, "fd must be a descriptor"),
    (dict(pid="1"), ValueError, "pid must be a process id"),
    (dict(pid=1), BufferError, "is gone|may not read"),    # init: gone, or not ours to read
    (dict(kind="posix-shm"), BufferError, "is gone"),      # no such posix-shm name
])
def test_altered_memfd_locations_are_refused(change, error, message, monkeypatch, live):
    monkeypatch.setattr(shared, "_KIND", "memfd")
    handle = ap.view(np.arange(4.0)).share()
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    if change.get("pid") == "child":
        change = dict(pid=other.pid, fd=0)                 # its stdin: a pipe, not ours
    try:
        with pytest.raises(error, match=message):
            ap.View.from_shared(altered(handle, **change))
    finally:
        handle.unlink()
        other.communicate(b"", timeout=60)
    gc.collect()
    assert live.delta() == {}


# ---- issue 31, cases 3 and 4: read-only below Python, no truncation under a reader --------

_ATTACH_FLIPPED_AND_WRITE = """
    import pickle, numpy as np, arrayport as ap
    from arrayport.shared import SharedHandle
    handle = pickle.loads(bytes.fromhex({hex!r}))
    fields = {{name: getattr(handle, name) for name in SharedHandle.__slots__}}
    fields["readonly"] = False                      # the attack: one field flipped
    try:
        np.asarray(ap.View.from_shared(SharedHandle(**fields)))[0] = 99.0
        print("wrote")
    except BufferError as error:
        print("refused:", error)
"""


@pytest.mark.skipif(not HAS_MEMFD, reason="kernel seals are Linux's")
def test_a_read_only_share_cannot_be_written_through_an_altered_handle(monkeypatch):
    # Before: the segment was created read-write; flipping `readonly` in the handle gave a
    # writable mapping whose writes showed in every "read-only" one.
    monkeypatch.setattr(shared, "_KIND", "memfd")
    handle = ap.view(np.arange(4.0)).share(readonly=True)
    try:
        reader = ap.View.from_shared(handle)
        code = textwrap.dedent(_ATTACH_FLIPPED_AND_WRITE.format(hex=pickle.dumps(handle).hex()))
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=60)
        assert child.returncode == 0, child.stderr
        assert child.stdout.startswith("refused: from_shared: segment"), child.stdout
        assert "is sealed read-only" in child.stdout
        assert np.asarray(reader).tolist() == [0.0, 1.0, 2.0, 3.0]
        # Below the handle too: the kernel refuses a writable open's writes and mappings,
        # even from the creator and even for root.
        path = f"/proc/{handle.pid}/fd/{handle.fd}"
        descriptor = os.open(path, os.O_RDWR)
        try:
            with pytest.raises(PermissionError):
                os.pwrite(descriptor, b"x" * 8, 0)
            import mmap
            with pytest.raises(PermissionError):
                mmap.mmap(descriptor, 32)
            assert fcntl.fcntl(descriptor, fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE
        finally:
            os.close(descriptor)
        assert np.asarray(reader).tolist() == [0.0, 1.0, 2.0, 3.0]
    finally:
        handle.unlink()


def test_a_read_only_posix_shm_segment_refuses_a_writable_attach_by_mode(monkeypatch):
    # The fallback's enforcement is the file mode (0o400): enough against an altered handle
    # for an ordinary user; root ignores modes (docs/processes.md says so).
    if not SHM.is_dir():
        pytest.skip("needs /dev/shm")
    monkeypatch.setattr(shared, "_KIND", "posix-shm")
    handle = ap.view(np.arange(4.0)).share(readonly=True)
    try:
        mode = stat.S_IMODE(os.stat(SHM / handle.name.lstrip("/")).st_mode)
        assert mode == 0o400
        if os.geteuid() != 0:
            with pytest.raises(BufferError, match="is read-only, but the handle says writable"):
                ap.View.from_shared(altered(handle, readonly=False))
    finally:
        handle.unlink()


@pytest.mark.skipif(not HAS_MEMFD, reason="kernel seals are Linux's")
@pytest.mark.parametrize("readonly", [False, True])
def test_no_process_can_truncate_a_segment_under_its_readers(readonly, monkeypatch):
    # Before: another process's ftruncate(0) made every reader's next access a SIGBUS.
    monkeypatch.setattr(shared, "_KIND", "memfd")
    handle = ap.view(np.arange(1024.0)).share(readonly=readonly)
    try:
        reader = ap.View.from_shared(handle)
        code = textwrap.dedent(f"""
            import os
            descriptor = os.open("/proc/{handle.pid}/fd/{handle.fd}", os.O_RDWR)
            for size in (0, 1, 10**6):
                try:
                    os.ftruncate(descriptor, size)
                    print("truncated", size)
                except PermissionError:
                    print("refused", size)
        """)
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=60)
        assert child.stdout.split() == ["refused", "0", "refused", "1", "refused", "1000000"]
        assert float(np.asarray(reader).sum()) == sum(range(1024))   # alive, no SIGBUS
    finally:
        handle.unlink()


# ---- empty_shared: a View to fill in place, shared without a copy (issue 45) -------------------

def test_an_empty_shared_view_is_filled_in_place_and_shared_without_a_copy(kind, no_leftovers,
                                                                        monkeypatch):
    view = ap.empty_shared((3, 4), "float32")
    assert view.shape == (3, 4) and view.dtype == np.float32 and not view.readonly
    assert np.asarray(view).tolist() == [[0.0] * 4] * 3         # zero-filled, as pages are
    np.asarray(view)[:] = np.arange(12, dtype=np.float32).reshape(3, 4)
    monkeypatch.setattr(shared._core, "copy_into_buffer",
                        lambda *args: pytest.fail("share() of an empty_shared View copied"))
    handle = view.share()
    assert (handle.kind, handle.shape, handle.nbytes, handle.readonly) == (kind, (3, 4), 48,
                                                                           False)
    assert view.share().name == handle.name                     # the one segment, every time
    attached = ap.View.from_shared(handle)
    assert np.asarray(attached).tolist() == np.arange(12.0).reshape(3, 4).tolist()
    np.asarray(view)[0, 0] = 99                                 # later writes, both ways
    assert np.asarray(attached)[0, 0] == 99
    np.asarray(attached)[2, 3] = -1
    assert np.asarray(view)[2, 3] == -1
    handle.unlink()


def test_an_empty_shared_view_reaches_another_process(kind, no_leftovers):
    view = ap.empty_shared(1000)
    np.asarray(view)[:] = 3.0
    handle = view.share()
    try:
        context = multiprocessing.get_context("spawn")
        with context.Pool(1) as pool:
            pool.apply(_write_through, (handle, 5.0))
        assert set(np.asarray(view).tolist()) == {5.0}          # the child wrote our memory
    finally:
        handle.unlink()


def test_read_only_after_hands_out_read_only_handles(kind, no_leftovers):
    view = ap.empty_shared(4, "int32", readonly_after=True)
    np.asarray(view)[:] = 7                                     # this process still writes
    handle = view.share()
    try:
        attached = ap.View.from_shared(handle)
        assert handle.readonly and attached.readonly
        with pytest.raises(ValueError, match="read-only"):
            np.asarray(attached)[0] = 1
        with pytest.raises(ValueError, match="readonly_after=True"):
            view.share(readonly=False)
        np.asarray(view)[0] = 8
        assert np.asarray(attached)[0] == 8
    finally:
        handle.unlink()


def test_a_part_of_an_empty_shared_view_is_shared_by_a_copy(kind, no_leftovers):
    view = ap.empty_shared((4, 2), "uint8")
    np.asarray(view)[:] = 1
    whole, part = view.share(), view[1:].share()
    assert part.name != whole.name and part.shape == (3, 2)
    np.asarray(view)[3, 1] = 9
    assert np.asarray(ap.View.from_shared(part))[2, 1] == 1     # a copy, made at share()
    whole.unlink()
    part.unlink()


@pytest.mark.parametrize("shape, dtype, error, match", [
    ((-1,), "float32", ValueError, "non-negative ints"),
    ((2.5,), "float32", ValueError, "non-negative ints"),
    ((4,), "float4_e2m1fn", ValueError, "packed float4_e2m1fn"),
    ((4,), "no-such-type", (ValueError, TypeError), "no-such-type"),
])
def test_empty_shared_refuses_what_it_cannot_make(shape, dtype, error, match, no_leftovers):
    with pytest.raises(error, match=match):
        ap.empty_shared(shape, dtype)


def test_an_unlinked_empty_shared_view_is_shared_again_by_a_copy(kind, no_leftovers):
    view = ap.empty_shared(3)
    first = view.share()
    first.unlink()
    again = view.share()                            # a live segment, not the dead handle
    assert again.name != first.name
    assert np.asarray(ap.View.from_shared(again)).tolist() == [0.0, 0.0, 0.0]
    again.unlink()


def test_an_empty_shared_segment_that_cannot_be_mapped_leaves_nothing(kind, no_leftovers,
                                                                      monkeypatch):
    def refuse(*args):
        raise OSError(12, "Cannot allocate memory")
    monkeypatch.setattr(shared, "_Segment", refuse)
    with pytest.raises(MemoryError, match="cannot map 128 bytes.*Cannot allocate memory"):
        ap.empty_shared(16)
    assert no_leftovers and not set(shared._created) & {f"/{n}" for n in no_leftovers}
