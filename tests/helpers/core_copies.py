"""What the tests of the copies the core issues itself share, for either vendor
(tests/test_gpu_device_copy.py: CUDA's, tests/test_gpu_hip_copy.py: ROCm's): counting the
general path's copies, making a copy through the general path alone, and the description
of a copy's View the two paths are held to."""

from __future__ import annotations

from arrayport import _core


class GeneralCopies:
    """Counts the general path's copies (gpu/copies.py's copy_view, the copy hook's) for one
    test (``monkeypatch``)."""

    def __init__(self, monkeypatch):
        from arrayport.gpu import copies
        self.count = 0
        real = copies.copy_view

        def counted(*args, **kwargs):
            self.count += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(copies, "copy_view", counted)


def through_general_path(set_direct, make):
    """``make()`` with the core's own copies of one vendor off (``set_direct``: the core's
    switch for that vendor's floor, ``set_cuda_floor_direct`` or ``set_hip_floor_direct``):
    the general path makes every copy."""
    previous = set_direct(False)
    try:
        return make()
    finally:
        set_direct(previous)


def described(view):
    """What a copy's View says of itself: the two paths' copies must say the same."""
    return (view.shape, view.strides, view.dtype, view.nbytes, str(view.device), view.readonly,
            view.is_copy, view.is_c_contiguous, view.protocol, _core.pending_stream(view),
            _core.producer_stream(view))
