"""A process that device sharing records (issue 55) is its pid and its start
(``gpu.processes``): a receiver that ended while holding an export, an asker of a pool's
descriptor, an exporter whose pool is imported here — none is mistaken for the later
process the kernel gave its pid to. No GPU needed: leases and the receiver's imports are
host bookkeeping (a fake driver stands for the pool calls)."""

import os
import subprocess
import sys
import time

import pytest

from arrayport.gpu import ipc_lease, ipc_pool, processes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="device sharing reads /proc (Linux only)")


def test_this_process_is_alive_and_a_later_start_under_its_pid_is_another():
    pid, start = processes.me()
    assert pid == os.getpid() and start > 0
    assert processes.alive(pid, start)
    assert not processes.alive(pid, start + 1)       # a process given this pid later
    assert not processes.alive(pid, start - 1)       # an earlier one that had it
    assert processes.alive(pid, 0)                   # start unknown: the pid decides


def test_an_ended_child_is_gone_before_and_after_it_is_waited_for():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    start = processes.start_of(child.pid)
    assert start > 0 and processes.alive(child.pid, start)   # running
    child.stdin.close()                                      # it ends now
    deadline = time.monotonic() + 30
    while state_of(child.pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert state_of(child.pid) == "Z"                        # a zombie: not waited for yet
    assert not processes.alive(child.pid, start)
    child.wait()
    assert not processes.alive(child.pid, start)
    assert not processes.alive(0, 0) and not processes.alive(-5, 0)


def state_of(pid: int) -> str:
    """Process ``pid``'s state letter (Z: a zombie)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def test_a_process_named_with_parentheses_and_spaces_is_read_right():
    """/proc/<pid>/stat's name field may hold ") (" and spaces; the start is read after the
    last parenthesis."""
    child = subprocess.Popen([sys.executable, "-c", (
        "import ctypes, sys; ctypes.CDLL(None).prctl(15, b'x) 1 2 (y', 0, 0, 0); "
        "print('named', flush=True); sys.stdin.read()")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"named\n"
        with open(f"/proc/{child.pid}/stat", "rb") as stat:
            assert b"(x) 1 2 (y)" in stat.read()
        start = processes.start_of(child.pid)
        assert start > 0 and processes.alive(child.pid, start)
        assert not processes.alive(child.pid, start + 1)
    finally:
        child.stdin.close()
        child.wait()


def lease_with_slot(pid: int, mappings: int, start: int):
    """A lease that was opened, with one receiver's slot written as given."""
    token = os.urandom(16)
    lease = ipc_lease.Lease(token)
    os.pwrite(lease.descriptor, ipc_lease._HEADER.pack(1, ipc_lease.OPEN, token), 0)
    os.pwrite(lease.descriptor, ipc_lease._SLOT.pack(pid, mappings, start), ipc_lease._SLOTS_AT)
    return lease, token


def test_a_holder_whose_pid_another_process_was_given_holds_nothing():
    """A slot whose pid now names a later process (another start) is an ended receiver's:
    cleared, the export ends, and the process now under that pid is not a holder to whom
    the server would hand the pool's descriptor."""
    pid, start = processes.me()
    lease, _ = lease_with_slot(pid, 2, start + 1)
    try:
        assert not lease.held_by(pid)
        assert lease.settle(linger=0.0, unopened_after=60.0)
    finally:
        lease.close()
    lease, _ = lease_with_slot(pid, 2, start)            # the same process: a holder
    try:
        assert lease.held_by(pid)
        assert not lease.settle(linger=0.0, unopened_after=60.0)
    finally:
        lease.close()


def test_a_receiver_given_an_ended_holders_pid_starts_its_own_count():
    """A receiver whose pid is in a slot an ended process left takes that slot with its own
    count (not the ended one's), gives it back to zero, and the export can end."""
    pid, start = processes.me()
    lease, token = lease_with_slot(pid, 5, start + 1)
    try:
        descriptor, slot = ipc_lease.take(pid, lease.descriptor, token)
        assert slot == 0
        assert ipc_lease._SLOT.unpack(os.pread(lease.descriptor, ipc_lease._SLOT.size,
                                               ipc_lease._SLOTS_AT)) == (pid, 1, start)
        ipc_lease.give_back(descriptor, slot)
        assert ipc_lease._SLOT.unpack(os.pread(lease.descriptor, ipc_lease._SLOT.size,
                                               ipc_lease._SLOTS_AT)) == (pid, 0, start)
        assert lease.settle(linger=0.0, unopened_after=60.0)
    finally:
        lease.close()


class PoolDriver:
    """The pool calls ``release_pool`` makes: the imports dropped."""

    def __init__(self):
        self.dropped = []

    def drop_imported_pool(self, pool):
        self.dropped.append(pool)


@pytest.mark.parametrize("later, dropped", [(True, [7]), (False, [])])
def test_an_import_of_an_ended_exporters_pool_goes_with_its_last_mapping(later, dropped):
    """A receiver drops its import of a pool once its last mapping went and the exporter
    has ended — also where a later process now has the exporter's pid."""
    pid, start = processes.me()
    name = f"arrayport-{pid}-{start + 1 if later else start}-0123456789abcdef"
    key = (name, 1, 0)
    made = ipc_pool._Import(7, False)
    made.users = 1
    ipc_pool._imported[key] = made
    driver = PoolDriver()
    try:
        ipc_pool.release_pool(driver, key)
        assert driver.dropped == dropped
        assert (key in ipc_pool._imported) == (not dropped)
    finally:
        ipc_pool._imported.pop(key, None)
