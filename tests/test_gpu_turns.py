"""gpu/turns.py: one thread per key does the slow work of device sharing's receiver (issue
55); a turn ends only by the thread that holds it, and those waiting then look again."""

import threading
import time

from arrayport.gpu.turns import Turns


def test_the_first_taker_has_the_turn_and_the_next_waits_for_its_end():
    turns, lock = Turns(), threading.Lock()
    with lock:
        assert turns.take("block") is None             # this thread's turn
    seen = {}

    def second():
        with lock:
            seen["turn"] = turns.take("block")
        seen["ended"] = seen["turn"].wait(30)
    waiter = threading.Thread(target=second)
    waiter.start()
    while "turn" not in seen:
        time.sleep(0.001)
    assert seen["turn"] is not None and not seen["turn"].is_set()
    with lock:
        assert turns.take("other") is None             # another key: no wait
        turns.end_mine("other")
        turns.end_mine("block")
    waiter.join(30)
    assert seen["ended"] is True
    with lock:
        assert turns.take("block") is None             # over: the next taker's turn
        turns.end_mine("block")


def test_a_turn_is_ended_only_by_its_own_thread():
    turns, lock = Turns(), threading.Lock()
    with lock:
        assert turns.take("block") is None

    def not_the_holder():
        with lock:
            turns.end_mine("block")                     # another thread's turn: kept
    seen = {}

    def a_taker():
        with lock:
            seen["waiting"] = turns.take("block")
    for target in (not_the_holder, a_taker):
        other = threading.Thread(target=target)
        other.start()
        other.join(30)
    waiting = seen["waiting"]
    assert waiting is not None and not waiting.is_set()   # still this thread's turn
    with lock:
        turns.end_mine("block")
    assert waiting.is_set()


def test_a_threads_own_turn_left_unended_is_taken_afresh():
    """A thread whose turn was never ended (interrupted in the ``finally`` that ends it)
    takes the key afresh rather than waiting on itself for ever; those waiting on the old
    turn look again."""
    turns, lock = Turns(), threading.Lock()
    with lock:
        assert turns.take("block") is None
    seen = {}

    def waiter():
        with lock:
            seen["old"] = turns.take("block")
    other = threading.Thread(target=waiter)
    other.start()
    other.join(30)
    assert not seen["old"].is_set()
    with lock:
        assert turns.take("block") is None              # its own again, not a wait
    assert seen["old"].is_set()                         # the old turn's waiters look again
    with lock:
        turns.end_mine("block")
