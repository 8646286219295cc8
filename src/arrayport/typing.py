"""Types for code that passes arrays to arrayport: protocols for what it accepts, and
element-type markers for ``View[...]`` and ``Spec[...]``.

- ``SupportsDLPack``, ``SupportsArrayInterface``, ``SupportsCudaArrayInterface``,
  ``SupportsBuffer``, ``SupportsArray``: the protocols an input may speak (each
  ``runtime_checkable``, so ``isinstance`` works too); ``ArrayLike`` is their union, what
  ``ap.view`` and ``ap.require`` take.
- ``Float32``, ``Int64``, … : markers of the element type, for annotations only:
  ``def kernel(x: ap.View[Float32]) -> None``. ``ap.require(x, dtype="float32")`` and
  ``ap.Spec(dtype="float32")`` are typed ``View[Float32]`` / ``Spec[Float32]`` for type
  checkers (the stubs' overloads); at run time ``View[Float32]`` is ``View``.

Imported on demand (``import arrayport.typing``), never by ``import arrayport``.
"""

from __future__ import annotations

from typing import Any, Protocol, Union, runtime_checkable

from arrayport._core import View

__all__ = [
    "ArrayLike", "SupportsArray", "SupportsArrayInterface", "SupportsBuffer",
    "SupportsCudaArrayInterface", "SupportsDLPack", "DTypeMarker", "Bool", "Int8", "Int16",
    "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float16", "BFloat16",
    "Float32", "Float64", "Complex64", "Complex128",
]


@runtime_checkable
class SupportsDLPack(Protocol):
    """An array with DLPack's two methods (any signature of ``__dlpack__``: producers
    older than DLPack 1.0 take only ``stream``)."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __dlpack_device__(self) -> Any: ...


@runtime_checkable
class SupportsArrayInterface(Protocol):
    """An object with NumPy's ``__array_interface__`` (version 3), attribute or property."""

    @property
    def __array_interface__(self) -> dict[str, Any]: ...


@runtime_checkable
class SupportsCudaArrayInterface(Protocol):
    """An object with the CUDA Array Interface (version 3), attribute or property."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...


@runtime_checkable
class SupportsBuffer(Protocol):
    """An object exporting the buffer protocol (PEP 688's ``__buffer__``; at run time
    before Python 3.12, ``isinstance`` cannot see C-level buffers — use ``memoryview``)."""

    def __buffer__(self, flags: int, /) -> memoryview: ...


@runtime_checkable
class SupportsArray(Protocol):
    """An object with NumPy's ``__array__``."""

    def __array__(self, *args: Any, **kwargs: Any) -> Any: ...


ArrayLike = Union[SupportsDLPack, SupportsArrayInterface, SupportsCudaArrayInterface,
                  SupportsBuffer, SupportsArray, View]


class DTypeMarker:
    """Base of the element-type markers: annotations only, never instantiated."""

    name: str = ""

    def __init_subclass__(cls, name: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.name = name

    def __new__(cls) -> DTypeMarker:
        raise TypeError(f"{cls.__name__} marks an element type in annotations; it has no "
                        f"instances (use arrayport.DType({cls.name!r}) for a type value)")


class Bool(DTypeMarker, name="bool"): ...
class Int8(DTypeMarker, name="int8"): ...
class Int16(DTypeMarker, name="int16"): ...
class Int32(DTypeMarker, name="int32"): ...
class Int64(DTypeMarker, name="int64"): ...
class UInt8(DTypeMarker, name="uint8"): ...
class UInt16(DTypeMarker, name="uint16"): ...
class UInt32(DTypeMarker, name="uint32"): ...
class UInt64(DTypeMarker, name="uint64"): ...
class Float16(DTypeMarker, name="float16"): ...
class BFloat16(DTypeMarker, name="bfloat16"): ...
class Float32(DTypeMarker, name="float32"): ...
class Float64(DTypeMarker, name="float64"): ...
class Complex64(DTypeMarker, name="complex64"): ...
class Complex128(DTypeMarker, name="complex128"): ...
