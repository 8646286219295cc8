"""Element-type spellings of the host protocols, both ways:

- NumPy array-interface *type strings* (``"<f4"``, ``"|b1"``) and ``descr`` lists, used by
  ``__array_interface__`` and ``__cuda_array_interface__``;
- PEP 3118 *format strings* (``"d"``, ``"<i"``, ``"Zf"``), used by the buffer protocol
  (import only: the common formats, and every export format, are spelled in C in
  ``_csrc/core_support.h``; this module explains everything else).

DLPack has no byte order but the native one and no structured types, so both are refused
with ``BufferError``; so is every kind DLPack cannot hold (strings, objects, datetimes…).

Types these protocols cannot spell (bfloat16, float8/6/4, complex32, float128, opaque
handles, multi-lane types) follow one convention, documented in docs/decisions.md: the type
string is raw bytes, ``"|V<itemsize>"``, and ``descr`` is ``[(<DLPack name>, "|V<itemsize>")]``.
NumPy then sees an opaque one-field record named after the type (never an integer), and
arrayport reads the name back. The buffer protocol has no such escape: it refuses them, and
so do packed sub-byte types in every protocol (their elements have no byte address).

Import parses are cached in one place, the compiled core (which calls these only on its
own cache miss); export spellings (``typestr_for``) are cached here.
"""

from __future__ import annotations

import struct
import sys

from arrayport.dtypes import DType, DTypeCode

__all__ = ["ARROW_PRIMITIVES", "arrow_problem", "dtype_from_buffer_format", "dtype_from_typestr",
           "typestr_for"]

_LITTLE = sys.byteorder == "little"
_NATIVE_ORDER = "<" if _LITTLE else ">"
_FOREIGN_ORDER = ">" if _LITTLE else "<"

# Array-interface kinds DLPack shares, with the byte sizes it allows.
_KIND_CODES = {"b": (DTypeCode.BOOL, (1,)), "i": (DTypeCode.INT, (1, 2, 4, 8)),
               "u": (DTypeCode.UINT, (1, 2, 4, 8)), "f": (DTypeCode.FLOAT, (2, 4, 8)),
               "c": (DTypeCode.COMPLEX, (8, 16))}
_KIND_MEANING = {"t": "bit field", "m": "timedelta", "M": "datetime", "O": "Python object",
                 "S": "byte string", "U": "unicode string", "a": "byte string",
                 "V": "raw bytes / structured record", "f": "floating point",
                 "c": "complex", "i": "integer", "u": "unsigned integer", "b": "boolean"}

_export_cache: dict[DType, tuple[str, list] | None] = {}


# ---- type strings (array interface, CUDA Array Interface) ------------------------------------

def dtype_from_typestr(typestr: object, descr: object, protocol: str) -> DType:
    """The DType a ``typestr`` (and, for raw ``V`` bytes, ``descr``) describes.

    TypeError when they are not strings/lists; BufferError when they describe something
    DLPack cannot hold. Messages start with ``protocol``.
    """
    if type(typestr) is not str:
        raise TypeError(f"{protocol}: typestr must be a str, got {type(typestr).__name__}")
    return _parse_typestr(typestr, descr, protocol)


def _parse_typestr(typestr: str, descr: object, protocol: str) -> DType:
    if len(typestr) < 3 or typestr[0] not in "<>|=" or not typestr[2:].isdigit():
        typestr = _spelled_by_numpy(typestr, protocol)
    order, kind, size = typestr[0], typestr[1], int(typestr[2:])
    if size < 1:
        raise BufferError(f"{protocol}: typestr {typestr!r} has an item size of 0")
    if kind == "V":
        return _dtype_from_named_bytes(typestr, size, descr, protocol)
    entry = _KIND_CODES.get(kind)
    if entry is None or size not in entry[1]:
        meaning = _KIND_MEANING.get(kind, "unknown kind")
        raise BufferError(f"{protocol}: typestr {typestr!r} ({meaning}, {size} bytes) has no "
                          f"DLPack equivalent")
    if order == _FOREIGN_ORDER and size > 1:
        raise BufferError(f"{protocol}: typestr {typestr!r} is not in native byte order; "
                          f"DLPack has native byte order only")
    return DType(entry[0], size * 8)


def _spelled_by_numpy(typestr: str, protocol: str) -> str:
    """A type string in another spelling NumPy reads (``"f4"``, ``"B"``, ``"float32"``:
    NumPy's array-interface reader, CuPy's and Numba's CUDA Array Interface readers take
    whatever ``numpy.dtype`` takes, and hip-python exports such strings), respelled in the
    form <byte order><kind><bytes>; BufferError where NumPy reads no such plain type."""
    import warnings

    import numpy
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # a spelling NumPy deprecates is none here
            spelled = numpy.dtype(typestr).str
    except (TypeError, ValueError, Warning):
        spelled = ""
    # (raw bytes only as the producer spells them: a structured or subarray spelling that
    # NumPy reads as "|V<n>" never meets arrayport's named-bytes convention)
    if (len(spelled) < 3 or spelled[0] not in "<>|=" or not spelled[2:].isdigit()
            or spelled[1] == "V"):
        raise BufferError(f"{protocol}: typestr {typestr!r} is not of the form "
                          f"<byte order><kind><bytes>, e.g. '<f4', nor a type NumPy reads")
    return spelled


def _dtype_from_named_bytes(typestr: str, size: int, descr: object, protocol: str) -> DType:
    """Raw ``V`` bytes are only a DLPack type under arrayport's convention:
    descr == [(<DLPack type name>, typestr)] with a matching size."""
    name = None
    if (isinstance(descr, list) and len(descr) == 1 and isinstance(descr[0], tuple)
            and len(descr[0]) == 2 and isinstance(descr[0][0], str)
            and descr[0][1] in (typestr, f"|V{size}")):
        name = descr[0][0]
    if name:
        try:
            dtype = DType(name, padded=True)  # a sub-byte type taking whole bytes is padded
        except ValueError:
            dtype = None
        if dtype is not None and dtype.itemsize == size:
            return dtype
    if isinstance(descr, list) and len(descr) > 1:
        raise BufferError(f"{protocol}: a structured type (descr {descr!r}) has no DLPack "
                          f"equivalent")
    raise BufferError(f"{protocol}: typestr {typestr!r} is raw bytes with no DLPack type name "
                      f"in descr (got {descr!r}); structured and void types have no DLPack "
                      f"equivalent")


def typestr_for(dtype: DType) -> tuple[str, list] | None:
    """(typestr, descr) spelling ``dtype``; None for packed sub-byte types, which have no
    byte-addressed elements."""
    try:
        return _export_cache[dtype]
    except KeyError:
        pass
    size = dtype.itemsize
    if size is None:
        spelled = None
    elif dtype.numpy_native:
        order = "|" if size == 1 else _NATIVE_ORDER
        kind = {DTypeCode.BOOL: "b", DTypeCode.INT: "i", DTypeCode.UINT: "u",
                DTypeCode.FLOAT: "f", DTypeCode.COMPLEX: "c"}[dtype.code]
        typestr = f"{order}{kind}{size}"
        spelled = (typestr, [("", typestr)])
    else:
        typestr = f"|V{size}"
        spelled = (typestr, [(dtype.name, typestr)])
    _export_cache[dtype] = spelled
    return spelled


# ---- PEP 3118 formats (buffer protocol) ------------------------------------------------------

# code -> (DLPack code, bits with native '@' sizes, bits with standard sizes or None)
_FORMAT_CODES = {
    "?": (DTypeCode.BOOL, 8, 8),
    "b": (DTypeCode.INT, 8, 8), "B": (DTypeCode.UINT, 8, 8),
    "h": (DTypeCode.INT, 16, 16), "H": (DTypeCode.UINT, 16, 16),
    "i": (DTypeCode.INT, 32, 32), "I": (DTypeCode.UINT, 32, 32),
    "l": (DTypeCode.INT, struct.calcsize("l") * 8, 32),
    "L": (DTypeCode.UINT, struct.calcsize("L") * 8, 32),
    "q": (DTypeCode.INT, 64, 64), "Q": (DTypeCode.UINT, 64, 64),
    "n": (DTypeCode.INT, struct.calcsize("n") * 8, None),
    "N": (DTypeCode.UINT, struct.calcsize("N") * 8, None),
    "e": (DTypeCode.FLOAT, 16, 16), "f": (DTypeCode.FLOAT, 32, 32),
    "d": (DTypeCode.FLOAT, 64, 64),
    "Zf": (DTypeCode.COMPLEX, 64, 64), "Zd": (DTypeCode.COMPLEX, 128, 128),
}
_FORMAT_MEANING = {"g": "long double", "Zg": "complex long double", "c": "char",
                   "s": "char[]", "p": "Pascal string", "x": "pad byte", "P": "void pointer",
                   "O": "Python object", "u": "UCS-2 char", "w": "UCS-4 char", "T": "struct"}


def dtype_from_buffer_format(fmt: object, itemsize: int, protocol: str = "buffer") -> DType:
    """The DType a PEP 3118 ``fmt`` (None means 'B') describes, checked against the
    exporter's ``itemsize``. BufferError for anything DLPack cannot hold."""
    if fmt is None:
        fmt = "B"
    return _parse_buffer_format(fmt, itemsize, protocol)


def _parse_buffer_format(fmt: str, itemsize: int, protocol: str) -> DType:
    order, code = ("@", fmt) if fmt[:1] not in "@=<>!" or not fmt else (fmt[0], fmt[1:])
    if code[:1].isdigit():
        item = code.lstrip("0123456789")
        meaning = _FORMAT_MEANING.get(item[:2] if item[:1] == "Z" else item[:1], item)
        raise BufferError(f"{protocol}: format {fmt!r} has a repeat count (each element is "
                          f"several {meaning} items), which DLPack cannot describe")
    entry = _FORMAT_CODES.get(code)
    if entry is None:
        meaning = _FORMAT_MEANING.get(code[:1] if code[:1] != "Z" else code, "not a single "
                                      "PEP 3118 item")
        raise BufferError(f"{protocol}: format {fmt!r} ({meaning}) has no DLPack equivalent")
    dl_code, native_bits, standard_bits = entry
    bits = native_bits if order == "@" else standard_bits
    if bits is None:
        raise BufferError(f"{protocol}: format {fmt!r} is invalid: {code!r} exists only with "
                          f"native sizes ('@')")
    foreign = order in ("!", ">") if _LITTLE else order == "<"
    if foreign and bits > 8:
        raise BufferError(f"{protocol}: format {fmt!r} is not in native byte order; DLPack "
                          f"has native byte order only")
    if bits // 8 != itemsize:
        raise BufferError(f"{protocol}: format {fmt!r} is {bits // 8} bytes but the exporter "
                          f"says itemsize {itemsize}")
    return DType(dl_code, bits)


# ---- Arrow C data interface format strings ----------------------------------------------------
# The fixed-width primitive formats whose values buffer is exactly a DLPack type. Booleans
# ("b") are bit-packed, half of the rest are variable-size or need a second buffer: those
# have no strided form (arrow_problem says why).
ARROW_PRIMITIVES: dict[str, DType] = {
    "c": DType("int8"), "C": DType("uint8"), "s": DType("int16"), "S": DType("uint16"),
    "i": DType("int32"), "I": DType("uint32"), "l": DType("int64"), "L": DType("uint64"),
    "e": DType("float16"), "f": DType("float32"), "g": DType("float64"),
}
_ARROW_MEANING = {
    "n": "null", "b": "boolean (bit-packed)", "z": "binary", "Z": "large binary",
    "u": "utf-8 string", "U": "large utf-8 string", "vz": "binary view", "vu": "string view",
    "d": "decimal", "w": "fixed-width binary", "td": "date", "tt": "time", "ts": "timestamp",
    "tD": "duration", "ti": "interval", "+l": "list", "+L": "large list", "+vl": "list view",
    "+s": "struct", "+m": "map", "+u": "union", "+r": "run-end encoded",
}


def arrow_problem(fmt: str) -> str:
    """Why the Arrow format ``fmt`` has no View (it is not a primitive nor "+w:N")."""
    for prefix in sorted(_ARROW_MEANING, key=len, reverse=True):
        if fmt.startswith(prefix):
            return (f"Arrow type {fmt!r} ({_ARROW_MEANING[prefix]}) has no strided form; "
                    f"only fixed-width numbers and fixed-size lists of them do")
    return f"{fmt!r} is not an Arrow format string"
