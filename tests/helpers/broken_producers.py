"""Deliberately broken DLPack producers, as ``arrayport check`` factories
(``arrayport check broken_producers:wrong_capsule_name`` with this folder on PYTHONPATH).
Each wraps a NumPy array and breaks one rule; the tests prove the checker catches it."""

import numpy as np

from arrayport.cli import capsules


class _Wrapper:
    def __init__(self, array):
        self.array = np.array(array)

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if stream is not None:
            raise ValueError("stream must be None on CPU")
        return self._export(max_version, dl_device, copy)

    def _export(self, max_version, dl_device, copy):
        return self.array.__dlpack__(max_version=max_version, dl_device=dl_device, copy=copy)


class _WrongName(_Wrapper):
    def _export(self, *args):
        capsule = super()._export(*args)
        name = capsules.name(capsule)
        capsules.rename(capsule, (name.replace("dltensor", "dl_tensor")).encode())
        return capsule


class _NeverDeletes(_Wrapper):
    def _export(self, *args):
        capsule = super()._export(*args)
        capsules.drop_destructor(capsule)  # the managed tensor (and the array) leak
        return capsule


class _AcceptsStreamZero(_Wrapper):
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self._export(max_version, dl_device, copy)  # any stream, even 0 on CPU


def wrong_capsule_name(array):
    return _WrongName(array)


def deleter_never_called(array):
    return _NeverDeletes(array)


def accepts_stream_zero(array):
    return _AcceptsStreamZero(array)


def well_behaved(array):
    return _Wrapper(array)
