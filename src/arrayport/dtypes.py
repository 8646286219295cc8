"""Element types as DLPack 1.3 names them: a type code, bits per lane, and lanes.

``DType`` covers every DLPack 1.3 code, including bfloat16, the eight float8 formats, two
float6 and one float4 format. Sub-byte types (float6, float4) are *packed* (little
bit-endian, several elements per byte) unless *padded*, where each element takes one byte;
DLPack signals padding per tensor with ``IS_SUBBYTE_TYPE_PADDED``, so it is part of the DType.

Equality:
- ``DType == DType`` compares code, bits, lanes and padding;
- ``DType == "float32"`` compares names (so padded and packed float4 both equal ``"float4_e2m1fn"``);
- ``DType == numpy.float32`` / ``numpy.dtype("float32")`` converts the NumPy dtype (NumPy
  itself is only imported if the caller already did).
"""

from __future__ import annotations

import enum
import sys

__all__ = ["DType", "DTypeCode"]


class DTypeCode(enum.IntEnum):
    """DLPack ``DLDataTypeCode`` values (ABI: never renumbered)."""

    INT = 0
    UINT = 1
    FLOAT = 2
    OPAQUE_HANDLE = 3
    BFLOAT = 4
    COMPLEX = 5
    BOOL = 6
    FLOAT8_E3M4 = 7
    FLOAT8_E4M3 = 8
    FLOAT8_E4M3B11FNUZ = 9
    FLOAT8_E4M3FN = 10
    FLOAT8_E4M3FNUZ = 11
    FLOAT8_E5M2 = 12
    FLOAT8_E5M2FNUZ = 13
    FLOAT8_E8M0FNU = 14
    FLOAT6_E2M3FN = 15
    FLOAT6_E3M2FN = 16
    FLOAT4_E2M1FN = 17
    BCOMPLEX = 18   # complex of two bfloat16 (bits 32); added upstream after the 1.3 tag


# Bit widths each code may carry. The named minifloat formats have exactly one width.
_BITS_FOR_CODE: dict[int, tuple[int, ...]] = {
    DTypeCode.INT: (8, 16, 32, 64),
    DTypeCode.UINT: (8, 16, 32, 64),
    DTypeCode.FLOAT: (16, 32, 64),
    DTypeCode.OPAQUE_HANDLE: (8, 16, 32, 64),
    DTypeCode.BFLOAT: (16,),
    DTypeCode.COMPLEX: (32, 64, 128),  # complex32 is PyTorch's chalf
    DTypeCode.BOOL: (8,),
    **{code: (8,) for code in range(DTypeCode.FLOAT8_E3M4, DTypeCode.FLOAT8_E8M0FNU + 1)},
    DTypeCode.FLOAT6_E2M3FN: (6,),
    DTypeCode.FLOAT6_E3M2FN: (6,),
    DTypeCode.FLOAT4_E2M1FN: (4,),
    DTypeCode.BCOMPLEX: (32,),
}

_SIZED_PREFIX = {
    DTypeCode.INT: "int",
    DTypeCode.UINT: "uint",
    DTypeCode.FLOAT: "float",
    DTypeCode.COMPLEX: "complex",
    DTypeCode.OPAQUE_HANDLE: "opaque_handle",
}


def _base_name(code: int, bits: int) -> str:
    if code in _SIZED_PREFIX:
        return f"{_SIZED_PREFIX[code]}{bits}"
    if code == DTypeCode.BFLOAT:
        return "bfloat16"
    if code == DTypeCode.BOOL:
        return "bool"
    if code == DTypeCode.BCOMPLEX:
        return "bcomplex32"
    return DTypeCode(code).name.lower()  # float8_e4m3fn, float6_e2m3fn, float4_e2m1fn, ...


_CODE_BITS_BY_NAME: dict[str, tuple[int, int]] = {
    _base_name(code, bits): (code, bits)
    for code, widths in _BITS_FOR_CODE.items()
    for bits in widths
}

# The NumPy "kind" letters that map directly onto DLPack codes.
_CODE_FOR_NUMPY_KIND = {"b": DTypeCode.BOOL, "i": DTypeCode.INT, "u": DTypeCode.UINT,
                        "f": DTypeCode.FLOAT, "c": DTypeCode.COMPLEX}
_SUBBYTE_CODES = (DTypeCode.FLOAT6_E2M3FN, DTypeCode.FLOAT6_E3M2FN, DTypeCode.FLOAT4_E2M1FN)


def dtype_problem(code: int, bits: int, lanes: int) -> str | None:
    """Why (code, bits, lanes) is not a valid DLPack 1.3 type, or None if it is."""
    widths = _BITS_FOR_CODE.get(code)
    if widths is None:
        return f"unknown dtype code {code}"
    if bits not in widths:
        allowed = " or ".join(str(w) for w in widths)
        return f"dtype code {code} ({DTypeCode(code).name.lower()}) needs bits {allowed}, got {bits}"
    if lanes < 1:
        return f"dtype lanes must be >= 1, got {lanes}"
    return None


class DType:
    """A DLPack element type: every DLPack 1.3 type, equal to NumPy dtypes and names.

    Parameters
    ----------
    spec : str, numpy.dtype, DType or DTypeCode
        ``DType("float32")``, ``DType(numpy.float32)``, ``DType(DTypeCode.FLOAT, 32)``,
        ``DType("float32x4")`` (4 lanes), ``DType("bfloat16")``.
    bits, lanes : int, optional
        With a ``DTypeCode``: the bits of one lane and the lanes.
    padded : bool
        Sub-byte types only: one byte an element (DLPack's ``IS_SUBBYTE_TYPE_PADDED``).

    Examples
    --------
    >>> import numpy as np, arrayport as ap
    >>> ap.DType("bfloat16").bits, ap.DType(np.float32) == "float32"
    (16, True)
    """

    __slots__ = {
        "code": "The DLPack type code (a DTypeCode: INT, UINT, FLOAT, BFLOAT, COMPLEX, …).",
        "bits": "Bits of one lane (4 for float4_e2m1fn, 16 for bfloat16).",
        "lanes": "Lanes per element (1 for scalars, 4 for float32x4).",
        "padded": "Whether a sub-byte type is stored one element per byte (DLPack's "
                  "IS_SUBBYTE_TYPE_PADDED); False for types of 8 bits or more.",
        "name": "The type's name: \"float32\", \"bfloat16\", \"float32x4\".",
        "_hash": "The name's hash, computed once.",
    }

    code: DTypeCode
    bits: int
    lanes: int
    padded: bool
    name: str

    def __new__(cls, spec: object, bits: int | None = None, lanes: int = 1,
                *, padded: bool = False) -> DType:
        if bits is not None:
            return _make(spec, bits, lanes, padded)
        if isinstance(spec, DType):
            return spec
        if isinstance(spec, str):
            return _from_name(spec, padded)
        return _from_foreign(spec)

    @property
    def numpy_native(self) -> bool:
        """Whether NumPy holds this type natively (bool, int, uint, float16/32/64,
        complex64/128; one lane): the one statement of this fact in Python. The core's C
        fast paths mirror it (``_numpy_reads``), and a test holds the two equal."""
        if self.lanes != 1:
            return False
        if self.code in (DTypeCode.INT, DTypeCode.UINT):
            return self.bits in (8, 16, 32, 64)
        if self.code == DTypeCode.FLOAT:
            return self.bits in (16, 32, 64)
        if self.code == DTypeCode.COMPLEX:
            return self.bits in (64, 128)
        return self.code == DTypeCode.BOOL and self.bits == 8

    @property
    def is_subbyte(self) -> bool:
        """Whether one lane has fewer than 8 bits (float4, float6)."""
        return self.bits < 8

    @property
    def itemsize(self) -> int | None:
        """Bytes one element occupies; None when a packed sub-byte element has no whole
        number of bytes (float4_e2m1fn: half a byte; float4_e2m1fnx2: one byte)."""
        bits = self.storage_bits
        return bits // 8 if bits % 8 == 0 else None

    @property
    def storage_bits(self) -> int:
        """Bits one element occupies in memory (padded sub-byte elements take a byte)."""
        return (8 if self.padded and self.bits < 8 else self.bits) * self.lanes

    def to_numpy(self):
        """The NumPy dtype for this type.

        Returns
        -------
        numpy.dtype
            bfloat16 and the minifloats are ``ml_dtypes`` types.

        Raises
        ------
        TypeError
            Packed sub-byte and multi-lane types (NumPy has none), or ml_dtypes is missing.

        Examples
        --------
        >>> import arrayport as ap
        >>> ap.DType("int16").to_numpy()
        dtype('int16')
        """
        import numpy as np

        if self.lanes != 1:
            raise TypeError(f"DType: NumPy has no dtype for the {self.lanes}-lane type {self.name}")
        if self.code in _CODE_FOR_NUMPY_KIND.values() and self.name != "complex32":
            return np.dtype(self.name)
        if self.code in _SUBBYTE_CODES and not self.padded:
            raise TypeError(f"DType: NumPy has no dtype for packed {self.name} (only padded)")
        try:
            import ml_dtypes
        except ImportError:
            ml_dtypes = None
        if ml_dtypes is not None and hasattr(ml_dtypes, self.name):
            return np.dtype(getattr(ml_dtypes, self.name))
        hint = " (install ml_dtypes)" if ml_dtypes is None else ""
        raise TypeError(f"DType: NumPy has no dtype for {self.name}{hint}")

    @property
    def dtype(self):
        """The NumPy dtype (``to_numpy()``), under the attribute name NumPy's ``np.dtype(obj)``
        reads: ``np.dtype(ap.DType("float32"))`` and ``np.zeros(3, dtype=view.dtype)`` work,
        and so do libraries that call ``np.dtype`` on an array's ``.dtype`` (Dask)."""
        return self.to_numpy()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DType):
            return (self.code, self.bits, self.lanes, self.padded) == (
                other.code, other.bits, other.lanes, other.padded)
        if isinstance(other, str):
            return self.name == other
        try:
            other_dtype = _from_foreign(other)
        except (TypeError, ValueError):
            return NotImplemented
        return self.name == other_dtype.name

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        suffix = ", padded" if self.padded and self.is_subbyte else ""
        return f"DType({self.name!r}{suffix})"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self):
        return (_make, (int(self.code), self.bits, self.lanes, self.padded))

    def __setattr__(self, name, value):
        raise AttributeError("DType is immutable")


_CACHE: dict[tuple[int, int, int, bool], DType] = {}


def _make(code: int, bits: int, lanes: int = 1, padded: bool = False) -> DType:
    """The one DType for (code, bits, lanes, padded); validated, cached."""
    key = (code, bits, lanes, padded)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    problem = dtype_problem(code, bits, lanes)
    if problem is not None:
        raise ValueError(f"DType: {problem}")
    self = object.__new__(DType)
    name = _base_name(code, bits) + (f"x{lanes}" if lanes != 1 else "")
    for field, value in (("code", DTypeCode(code)), ("bits", bits), ("lanes", lanes),
                         ("padded", bool(padded) and bits < 8), ("name", name),
                         ("_hash", hash(name))):
        object.__setattr__(self, field, value)
    _CACHE[key] = self
    return self


def _from_name(text: str, padded: bool) -> DType:
    name = text.strip().lower()
    entry, lanes = _CODE_BITS_BY_NAME.get(name), 1
    if entry is None:  # a vector type: "<base>x<lanes>", e.g. float32x4
        base, _, count = name.rpartition("x")  # no re: importing arrayport stays light
        if base and count.isascii() and count.isdigit():
            entry, lanes = _CODE_BITS_BY_NAME.get(base), int(count)
    if entry is None:
        raise ValueError(f"DType: unknown dtype name {text!r}")
    return _make(entry[0], entry[1], lanes, padded)


def _from_foreign(obj: object) -> DType:
    """DType from a NumPy dtype or scalar type, or anything printing as 'torch.<name>'."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, (numpy.dtype, type)):
        try:
            dt = numpy.dtype(obj)
        except TypeError:
            raise TypeError(f"DType: {obj!r} is not a dtype") from None
        return from_numpy_dtype(dt)
    text = str(obj)
    if text.startswith("torch."):
        return _from_name(text[len("torch."):], padded=False)
    raise TypeError(f"DType: cannot make a dtype from {type(obj).__name__} {obj!r}")


def from_numpy_dtype(dt) -> DType:
    """DType for a NumPy dtype; ml_dtypes types map by name (their sub-byte types are padded)."""
    if dt.byteorder == (">" if sys.byteorder == "little" else "<"):
        raise ValueError(f"DType: {dt} is not in native byte order; DLPack has none other")
    if dt.fields is None and dt.subdtype is None:
        entry = _CODE_BITS_BY_NAME.get(dt.name)
        if entry is not None and entry[0] != DTypeCode.OPAQUE_HANDLE:
            return _make(entry[0], entry[1], 1, padded=entry[1] < 8)
        code = _CODE_FOR_NUMPY_KIND.get(dt.kind)
        if code is not None and dtype_problem(code, dt.itemsize * 8, 1) is None:
            return _make(code, dt.itemsize * 8)
    raise TypeError(f"DType: NumPy dtype {dt} has no DLPack equivalent")
