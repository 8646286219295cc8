"""Shared lifetime assertion: a View keeps its source alive exactly as long as it lives."""

import gc
import weakref


def assert_view_keeps_source_alive(make_source, make_view):
    """``make_view(source)`` must keep ``source`` alive after its last name is gone, and let
    it go as soon as the View (and whatever it returned) is dropped."""
    source = make_source()
    ref = weakref.ref(source)
    view = make_view(source)
    del source
    gc.collect()
    assert ref() is not None, "the source died while the View was alive"
    del view
    gc.collect()
    assert ref() is None, "the source outlived the View"
