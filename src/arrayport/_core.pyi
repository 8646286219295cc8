"""Type stubs for arrayport._core, the compiled core (see _core.pyx)."""

from collections.abc import Iterable
from typing import Any, Generic, Literal, SupportsIndex, final, overload

from typing_extensions import TypeVar

from arrayport.devices import Device, DeviceType
from arrayport.dtypes import DType
from arrayport.typing import (
    ArrayLike, BFloat16, Bool, Complex64, Complex128, Float16, Float32, Float64, Int8, Int16,
    Int32, Int64, UInt8, UInt16, UInt32, UInt64,
)

# The element type of a View or Spec, for type checkers: an arrayport.typing marker, or Any.
_D = TypeVar("_D", default=Any)
_Index = SupportsIndex | slice | None | ellipsis
_Order = Literal["C", "F", "A", "contiguous-last-axis"]
_DeviceLike = str | Device | tuple[int, int]

MAX_NDIM: int
DLPACK_VERSION: tuple[int, int]
FLAG_READ_ONLY: int
FLAG_IS_COPIED: int
FLAG_IS_SUBBYTE_TYPE_PADDED: int

def live_counts() -> dict[str, int]: ...
def check_stream(stream: Any, device_type: int) -> int | None: ...
def host_wait_for_pending(v: View) -> None: ...
def copy_work_stream(stream: int | None, device_type: int) -> int: ...
def order_copy_after_source(driver: Any, source: View, ordinal: int, stream: int) -> None: ...
def order_writers_after_copy(driver: Any, source: View, ordinal: int, stream: int) -> None: ...
def order_transfer_after_packing(driver: Any, ordinal: int, stream: int,
                                 packing_ordinal: int) -> None: ...
def finish_copy(driver: Any, ordinal: int, stream: int, lands_on_host: bool) -> int | None: ...
def set_implicit_sync(enabled: bool) -> bool: ...
def implicit_sync_enabled() -> bool: ...
def set_copies_watched(watched: bool) -> None: ...
def copies_watched() -> bool: ...
def pending_stream(v: View) -> int | None: ...
def set_pending_stream(v: View, stream: int | None) -> None: ...
def producer_stream(v: View) -> int | None: ...
def mark_copied(v: View, stream: int | None) -> View: ...
def rejects_keywords(error: TypeError, names: tuple[str, ...]) -> bool: ...
def import_capsule(capsule: Any, owner: Any = ...) -> View: ...
def from_dlpack(x: Any, /, *, device: Any = ..., copy: bool | None = ...,
                stream: int | None = ...) -> View: ...
def view(obj: Any, /, *, stream: int | None = ...) -> View[Any]: ...
def view_or_copy(obj: Any, /, *, stream: int | None = ..., copy: bool | None = ...) -> View: ...
def dlpack_view(x: Any, /, *, stream: int | None = ..., copy: bool | None = ...,
                exchange_api: bool = ...) -> View: ...

class NeedsCopy(BufferError):
    """The producer's memory does not hold the array's values as they are; ``resolve()``
    gives an object whose memory does (a copy)."""
    resolve: Any
    copied: bool
    explicit: bool
    def __init__(self, message: str, resolve: Any, copied: bool = ...,
                 explicit: bool = ...) -> None: ...
def protocol_plan(tp: type) -> tuple[str, ...] | None: ...
def exchange_api_version(tp: type) -> tuple[int, int] | None: ...
def object_via_exchange_api(v: View, tp: type) -> Any: ...
def view_from_arrow(*capsules: Any, stream: Any = ...) -> View[Any]: ...
def live_arrow_arrays() -> int: ...
def torch_bits_read_from_fields() -> dict[str, int | None] | None: ...
def torch_bits_by_functions(x: Any) -> tuple[bool, bool, bool]: ...
def torch_bits(x: Any) -> tuple[bool, bool, bool]: ...
def to_torch(
    x: Any, *, device: Any = ..., copy: bool | None = ..., stream: int | None = ...,
    readonly: Literal["copy", "share"] = ...,
) -> Any: ...
def to_numpy(x: Any, *, copy: bool | None = ...) -> Any: ...
def torch_tensor_of(v: View) -> Any: ...
def numpy_array_of(v: View) -> Any: ...
def has_negative_stride(v: View) -> bool: ...
def compute_operand(v: View) -> Any: ...
def wrap_result(result: Any) -> Any: ...
def legacy_capsule_for_immutable_consumer(v: View, stream: int | None = ...) -> Any: ...

# arrayport's own C API table (arrayport/capi.h), a PyCapsule named "arrayport._C_API".
_C_API: Any

def view_from_pointer(
    ptr: int, shape: tuple[int, ...], strides: tuple[int, ...] | None, dtype: Any, *,
    readonly: bool, owner: Any, device: tuple[int, int] = ..., protocol: str,
) -> View: ...

@final
class HostBuffer:
    nbytes: int
    def __new__(cls, nbytes: int) -> HostBuffer: ...
    @property
    def address(self) -> int: ...

_Protocol = Literal["dlpack", "cuda_array_interface", "buffer", "array_interface", "array",
                    "copy"]

@final
class View(Generic[_D]):
    # The DLPack 1.3 C exchange API: a PyCapsule named "dlpack_exchange_api".
    __dlpack_c_exchange_api__: Any
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...  # always TypeError
    def __class_getitem__(cls, item: Any) -> Any: ...
    @staticmethod
    def from_dlpack(obj: Any, /, *, device: Any = ..., copy: bool | None = ...,
                    stream: int | None = ...) -> View: ...
    @staticmethod
    def from_cuda_array_interface(obj: Any, /) -> View: ...
    @staticmethod
    def from_array_interface(obj: Any, /) -> View: ...
    def __arrow_c_schema__(self) -> Any: ...
    def __arrow_c_array__(self, requested_schema: Any = ...) -> tuple[Any, Any]: ...
    def __arrow_c_device_array__(self, requested_schema: Any = ...,
                                 **kwargs: Any) -> tuple[Any, Any]: ...
    def __arrow_c_stream__(self, requested_schema: Any = ...) -> Any: ...
    @staticmethod
    def from_arrow(obj: Any, /, *, stream: Any = ...) -> View[Any]: ...
    @staticmethod
    def from_buffer(obj: Any, /) -> View: ...
    @staticmethod
    def from_array(obj: Any, /) -> View: ...
    @property
    def ndim(self) -> int: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...] | None: ...
    @property
    def element_strides(self) -> tuple[int, ...]: ...
    @property
    def size(self) -> int: ...
    @property
    def itemsize(self) -> int | None: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def dtype(self) -> DType: ...
    @property
    def device(self) -> Device: ...
    @property
    def ptr(self) -> int: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def is_copy(self) -> bool: ...
    @property
    def is_c_contiguous(self) -> bool: ...
    @property
    def is_f_contiguous(self) -> bool: ...
    @property
    def owner(self) -> Any: ...
    @property
    def protocol(self) -> _Protocol: ...
    @property
    def __array_interface__(self) -> dict[str, Any]: ...
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...
    def __array__(self, dtype: Any = ..., copy: bool | None = ...) -> Any: ...
    __array_priority__: float
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any: ...
    def __array_function__(
        self, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
    ) -> Any: ...
    def __array_wrap__(
        self, array: Any, context: Any = ..., return_scalar: bool = ...,
    ) -> Any: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __dlpack_device__(self) -> tuple[DeviceType, int]: ...
    def __dlpack__(
        self, *, stream: int | None = ..., max_version: tuple[int, int] | None = ...,
        dl_device: tuple[int, int] | None = ..., copy: bool | None = ...,
    ) -> Any: ...
    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]: ...
    def __copy__(self) -> View[_D]: ...
    def __deepcopy__(self, memo: Any) -> View[_D]: ...
    def share(self, readonly: bool | None = ...) -> Any: ...  # arrayport.shared.SharedHandle
    @staticmethod
    def from_shared(handle: Any) -> View[Any]: ...
    def __getitem__(self, key: _Index | tuple[_Index, ...]) -> View[_D]: ...
    def __bool__(self) -> bool: ...
    def __float__(self) -> float: ...
    def __int__(self) -> int: ...
    def __complex__(self) -> complex: ...
    def __index__(self) -> int: ...
    @property
    def T(self) -> View[_D]: ...
    @property
    def mT(self) -> View[_D]: ...
    def permute(self, *axes: SupportsIndex | Iterable[SupportsIndex]) -> View[_D]: ...
    def reshape(self, *shape: SupportsIndex | Iterable[SupportsIndex]) -> View[_D]: ...
    def view_as(self, dtype: Any) -> View[Any]: ...
    def as_readonly(self) -> View[_D]: ...
    def copy(self, device: Any = ..., stream: int | None = ...) -> View[_D]: ...
    def host_copy(self) -> View[_D]: ...

# ---- contracts (_core_contract.pxi) ----

CONSTRAINTS: tuple[str | None, ...]
ORDERS: tuple[str, ...]
_Ndim = int | Iterable[int] | None
_Shape = tuple[int | None, ...] | None
_Devices = _DeviceLike | Iterable[_DeviceLike] | None

@final
class Spec(Generic[_D]):
    dtypes: tuple[DType, ...]
    ndims: tuple[int, ...]
    shape: tuple[int | None, ...] | None
    order: str | None
    devices: tuple[Device, ...]
    writable: bool | Literal["copy"] | None
    align: int | None
    cast: bool
    copy: bool | None
    def __class_getitem__(cls, item: Any) -> Any: ...
    @property
    def device_labels(self) -> tuple[str, ...]: ...
    @overload
    def __init__(
        self: Spec[Bool], *, dtype: Literal["bool"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[Int8], *, dtype: Literal["int8"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[Int16], *, dtype: Literal["int16"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[Int32], *, dtype: Literal["int32"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[Int64], *, dtype: Literal["int64"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[UInt8], *, dtype: Literal["uint8"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[UInt16], *, dtype: Literal["uint16"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[UInt32], *, dtype: Literal["uint32"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[UInt64], *, dtype: Literal["uint64"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[Float16], *, dtype: Literal["float16"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[BFloat16], *, dtype: Literal["bfloat16"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[Float32], *, dtype: Literal["float32"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[Float64], *, dtype: Literal["float64"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[Complex64], *, dtype: Literal["complex64"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[Complex128], *, dtype: Literal["complex128"],
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    @overload
    def __init__(
        self: Spec[Any], *, dtype: Any = ...,
        ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
        device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
        cast: bool = ..., copy: bool | None = ...,
    ) -> None: ...
    def first_failure(self, v: View[Any]) -> str | None: ...

@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["bool"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[Bool]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["int8"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[Int8]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["int16"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[Int16]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["int32"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[Int32]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["int64"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[Int64]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["uint8"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[UInt8]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["uint16"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[UInt16]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["uint32"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[UInt32]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["uint64"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[UInt64]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["float16"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[Float16]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["bfloat16"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[BFloat16]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["float32"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[Float32]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["float64"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[Float64]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["complex64"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[Complex64]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Literal["complex128"],
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[Complex128]: ...
@overload
def require(
    x: ArrayLike, /, *, spec: Spec[_D], copy: bool | None = ...,
    stream: int | None = ...,
) -> View[_D]: ...
@overload
def require(
    x: ArrayLike, /, *, dtype: Any = ...,
    ndim: _Ndim = ..., shape: _Shape = ..., order: _Order | None = ...,
    device: _Devices = ..., writable: bool | Literal["copy"] | None = ..., align: int | None = ...,
    cast: bool = ..., copy: bool | None = ...,
    stream: int | None = ..., spec: None = ...,
) -> View[Any]: ...
def require_with(spec: Spec[_D], x: Any, copy: bool | None, stream: int | None,
                 name: str | None) -> View[_D]: ...

# ---- internals the Python layers use ----

def dtype_is_valid(code: int, bits: int, lanes: int) -> bool: ...
def device_type_is_known(device_type: int) -> bool: ...
def device_type_facts(device_type: int) -> tuple[bool, bool, bool]: ...
def none_stream_of(device_type: int) -> int | None: ...
def install_producer_quirks(quirks: dict[str, str]) -> None: ...
def install_hooks(*, copy_view: Any, driver_for: Any, from_dlpack_with_options: Any,
                  ndarray_dlpack_fallback: Any, to_numpy_general: Any, to_torch_general: Any,
                  array_ufunc: Any, array_function: Any, require_fix: Any,
                  reduce_view: Any, share: Any, from_shared: Any,
                  unasked_copy: Any) -> None: ...
def numpy_reads(dtype: DType) -> bool: ...
def view_over_buffer(buffer: Any, item: tuple[int, int, int, bool], shape: tuple[int, ...],
                     strides: tuple[int, ...] | None, readonly: bool,
                     protocol: str) -> View[Any]: ...
def copy_into_buffer(v: View[Any], buffer: Any) -> None: ...
def unpacked_copy(v: View[Any]) -> View[Any]: ...
def torch_holds(dtype: DType) -> bool: ...
def copy_kernel() -> dict[str, Any]: ...
def force_copy_path(name: str) -> str: ...
def set_copy_threads(threads: int, thread_bytes: int) -> tuple[int, int]: ...
