"""Contracts for library authors: accept any array, answer in the caller's library.

- ``Spec`` and ``require`` live in the compiled core (``_core_contract.pxi``): the checks
  run in C on every call and a View that meets its Spec comes back untouched.
- ``require_fix`` (here) is what ``require`` calls when a View does not meet its Spec, or
  when a copy is asked for: it copies where a copy can meet the contract (another device,
  another order, writable, aligned), casts when allowed, and otherwise raises
  ``RequirementError`` saying which constraint failed and what the array has. An output
  argument (``writable=True``) is never copied: whatever only a copy could meet is refused.
- ``accepts`` is the decorator: ``require`` on the named arguments, the caller's ``stream``
  passed through, and ``returns="like:x"`` converting the result into ``x``'s library.

Decisions (docs/library-authors.md): ``None`` passed for a constrained argument stays None
(optional arrays); a device type without an id (``"cuda"``) matches every device of that
type, and a copy to it goes to the current device; ``align`` is about the data address only
(arrayport's copies are 64-byte aligned on the host, 256 on GPUs); ``cast=True`` converts
on the host through NumPy (ml_dtypes for bfloat16 and the minifloats), never on a GPU.
"""

from __future__ import annotations

import functools
import sys

from arrayport import _core, gpu
from arrayport._core import Spec, require, require_with
from arrayport.devices import Device
from arrayport.copy_watch import unasked_copy
from arrayport.errors import RequirementError

__all__ = ["Spec", "accepts", "require", "RequirementError"]

# The constraints a copy can meet, and those no copy changes.
_MET_BY_A_COPY = frozenset({"device", "order", "writable", "align"})
_ORDER_WORDS = {"C": "C-contiguous", "F": "F-contiguous", "A": "C- or F-contiguous",
                "contiguous-last-axis": "a contiguous last axis"}


# ---- require's policy (the core's require_fix hook) ------------------------------------------

def require_fix(view, spec, failure, copy, stream, name, why=None):
    """A View meeting ``spec`` made from ``view``, which fails ``failure`` (a constraint
    name, or None when only ``copy=True`` asked for a copy). For an output argument
    (``writable=True``) the refusal of every failure: ``view`` None when no View of the
    caller's memory could be made without a copy (``why``)."""
    if spec.writable is True:
        _refuse_output(view, spec, failure, name, why)
    if failure is not None:
        if copy is False:
            _refuse(view, spec, failure, name,
                    "copy=False forbids the copy that would meet it"
                    if failure in _MET_BY_A_COPY else _why_no_copy_helps(failure))
        if failure not in _MET_BY_A_COPY and not (failure == "dtype" and spec.cast):
            _refuse(view, spec, failure, name, _why_no_copy_helps(failure))
    if failure is not None and not copy:   # a copy nobody asked for: copy_watch's rule
        unasked_copy(copy, f"require (argument {name!r})" if name else "require",
                     f"{_explain(view, spec, failure)}, which a copy meets")
    result, copied = view, False
    if failure == "device":
        result, copied = view.copy(device=_copy_target(spec), stream=stream), True
        failure = spec.first_failure(result)
    if failure == "dtype":
        if not spec.cast:
            _refuse(result, spec, failure, name, _why_no_copy_helps(failure))
        result, copied = _cast(result, spec, name), True
        failure = spec.first_failure(result)
    if failure in ("ndim", "shape"):
        _refuse(result, spec, failure, name, _why_no_copy_helps(failure))
    if failure is not None or not copied:   # order, writable, align — or copy=True
        result = _copy_in_order(result, spec, stream)
        failure = spec.first_failure(result)
    if failure is not None:
        _refuse(result, spec, failure, name, "even a copy does not meet it" + (
            " (arrayport's copies are aligned to 64 bytes on the host, 256 on GPUs)"
            if failure == "align" else ""))
    return result.as_readonly() if spec.writable is False else result


def _refuse_output(view, spec, constraint, name, why):
    """An output argument (``writable=True``) that only a copy could meet: refused, since
    the function's writes would go into the copy and never reach the caller."""
    lost = ("an output argument is written in place, and writes into a copy would be lost "
            "to the caller; pass writable='copy' for a private writable copy")
    if view is None:
        where = f"argument {name!r}: " if name else ""
        raise RequirementError(f"require: {where}expected the caller's own writable memory, "
                               f"but {why}; {lost}", "writable", name)
    if constraint == "writable":
        _refuse(view, spec, constraint, name, f"read-only memory is refused, not copied: {lost}")
    if constraint == "dtype" and spec.cast:
        _refuse(view, spec, constraint, name, f"writable=True: a cast is a copy, and {lost}")
    _refuse(view, spec, constraint, name,
            _why_no_copy_helps(constraint) if constraint not in _MET_BY_A_COPY
            else f"writable=True: only a copy would meet it, and {lost}")


def _why_no_copy_helps(constraint):
    if constraint == "dtype":
        return "a copy does not change the dtype: pass cast=True to convert (on the host)"
    return f"a copy does not change the {'shape' if constraint == 'shape' else 'dimensions'}"


def _refuse(view, spec, constraint, name, consequence):
    where = f"argument {name!r}: " if name else ""
    raise RequirementError(f"require: {where}{_explain(view, spec, constraint)}; "
                           f"{consequence}", constraint, name)


def _explain(view, spec, constraint):
    """'expected …, got …' for the constraint ``view`` fails."""
    if constraint == "device":
        return f"expected device {_one_of(spec.device_labels)}, got {view.device}"
    if constraint == "dtype":
        return (f"expected dtype {_one_of([d.name for d in spec.dtypes])}, got "
                f"{view.dtype.name}")
    if constraint == "ndim" and spec.shape is None:
        wanted = " or ".join(str(n) for n in spec.ndims)
        return f"expected {wanted} dimensions, got {view.ndim}"
    if constraint in ("ndim", "shape"):
        wanted = "(" + ", ".join(str(n) for n in spec.shape) + ("," if len(spec.shape) == 1
                                                                  else "") + ")"
        return f"expected shape {wanted}, got {view.shape}"
    if constraint == "order":
        return f"expected {_ORDER_WORDS[spec.order]}, got strides {view.strides}"
    if constraint == "writable":
        return "expected writable memory, got a read-only View"
    if constraint == "align":
        return (f"expected data aligned to {spec.align} bytes, got address {view.ptr:#x} "
                f"({view.ptr % spec.align} bytes past)")
    raise AssertionError(constraint)


def _one_of(names):
    return names[0] if len(names) == 1 else f"one of ({', '.join(names)})"


def _copy_target(spec):
    """Where a copy for a device constraint goes: the first device named; for a GPU device
    type named without an id, the calling thread's current device of that type."""
    device, label = spec.devices[0], spec.device_labels[0]
    if ":" not in label and gpu.is_device_memory(device.type):
        return Device(device.type, gpu.driver_for(device.type).current_device())
    return device


def _copy_in_order(view, spec, stream):
    """One copy on the View's device: Fortran order when the Spec asks for it, else C."""
    if spec.order == "F":
        return view.T.copy(stream=stream).T
    return view.copy(stream=stream)


def _cast(view, spec, name):
    """``view`` converted to the Spec's first dtype, on the host through NumPy."""
    if not view.device.type.is_host_accessible:
        _refuse(view, spec, "dtype", name, f"cast=True converts on the host, and the data is "
                                           f"on {view.device}: copy it to the host first")
    import numpy as np
    from arrayport.convert import to_numpy
    target = spec.dtypes[0]
    try:
        converted = np.ascontiguousarray(to_numpy(view).astype(target.to_numpy()))
    except TypeError as error:
        _refuse(view, spec, "dtype", name, f"cast=True cannot convert it: {error}")
    return _core.mark_copied(_core.view(converted), None)


# ---- @accepts ---------------------------------------------------------------------------------

def accepts(*, returns=None, cast=False, **specs):
    """Decorate a function so that each named argument arrives as a View meeting its Spec.

    Each named argument goes through ``require``, with the argument's name in every error
    (``None`` passes as it is), and the function's own ``stream`` argument, when it has
    one, is passed through. The signature and docstring stay the function's own.

    Parameters
    ----------
    returns : str, optional
        ``"like:x"`` converts the result (or each array of a returned tuple or list) into the
        library of the caller's argument ``x`` — NumPy in, NumPy out; torch in, torch out —
        zero-copy where that library allows. ``None``: the result as it is.
    cast : bool, optional
        ``True``: every argument's dtype is converted where it differs (``Spec(cast=True)``
        for each spec, on the host). A function whose own parameter is named ``cast`` gives
        that parameter's contract here instead (a Spec, dict or dtype name, not a bool).
    **specs : Spec, dict or str
        Per argument name: a ``Spec``, a dict of ``Spec`` keywords, or a dtype name.

    Returns
    -------
    callable
        The decorator.

    Raises
    ------
    TypeError
        A name is not a parameter of the function, or a spec is not a Spec, dict or str.
    RequirementError
        At call time, for an argument that does not meet its spec.

    Examples
    --------
    >>> import numpy as np, arrayport as ap
    >>> @ap.accepts(x=ap.Spec(dtype="float32", ndim=1), returns="like:x")
    ... def doubled(x):
    ...     return np.asarray(x) * 2
    >>> doubled(np.ones(3, np.float32))
    array([2., 2., 2.], dtype=float32)
    """
    if returns is not None and not isinstance(returns, str):
        raise TypeError(f"accepts: returns must be 'like:<argument>' or None, got {returns!r}")
    if not isinstance(cast, bool):   # the contract of a parameter named "cast"
        specs, cast = {**specs, "cast": cast}, False
    normalised = {name: _as_spec(name, value, cast) for name, value in specs.items()}

    def decorate(function):
        import inspect
        signature = inspect.signature(function)
        parameters = list(signature.parameters.values())
        for name in normalised:
            if name not in signature.parameters:
                raise TypeError(f"accepts: {function.__qualname__} has no parameter {name!r}")
        positional = {p.name: i for i, p in enumerate(parameters)
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)}
        checks = tuple((name, positional.get(name), spec) for name, spec in normalised.items())
        like = _like_argument(returns, signature, function)
        like_position = positional.get(like)
        stream_position = positional.get("stream")
        has_stream = "stream" in signature.parameters

        @functools.wraps(function)
        def checked(*args, **kwargs):
            stream = None
            if has_stream:
                stream = (args[stream_position] if stream_position is not None
                          and stream_position < len(args) else kwargs.get("stream"))
            original = None
            if like is not None:
                original = (args[like_position] if like_position is not None
                            and like_position < len(args) else kwargs.get(like))
            if args:
                args = list(args)
            for name, position, spec in checks:
                if position is not None and position < len(args):
                    if args[position] is not None:
                        args[position] = require_with(spec, args[position], spec.copy, stream,
                                                      name)
                elif kwargs.get(name) is not None:
                    kwargs[name] = require_with(spec, kwargs[name], spec.copy, stream, name)
            result = function(*args, **kwargs)
            return result if like is None else convert_like(result, original)

        checked.__arrayport_specs__ = dict(normalised)
        return checked
    return decorate


def _as_spec(name, value, cast=False):
    """The Spec an ``accepts`` keyword gives; ``cast=True`` (the decorator's) makes it cast."""
    if isinstance(value, Spec):
        if cast and not value.cast:
            rebuild, fields = value.__reduce__()
            return rebuild(*fields[:7], True, fields[8])   # (…, align, cast, copy)
        return value
    if isinstance(value, dict):
        return Spec(**{"cast": cast, **value} if cast else value)
    if isinstance(value, str) or value is None:
        return Spec(dtype=value, cast=cast)
    raise TypeError(f"accepts: the contract for {name!r} must be an arrayport.Spec, a dict of "
                    f"Spec keywords or a dtype name, got {type(value).__name__}")


def _like_argument(returns, signature, function):
    if returns is None:
        return None
    kind, _, name = returns.partition(":")
    if kind != "like" or not name:
        raise ValueError(f"accepts: returns must be 'like:<argument>', got {returns!r}")
    if name not in signature.parameters:
        raise TypeError(f"accepts: returns={returns!r}, but {function.__qualname__} has no "
                        f"parameter {name!r}")
    return name


# ---- answering in the caller's library ------------------------------------------------------

_SCALARS = (bool, int, float, complex, str, bytes)
_IS_SCALAR = {}   # {result type: whether it is a scalar type}, filled on first sight


def _is_scalar_type(result_type):
    """Python numbers and strings, and NumPy's scalar types: results passed through."""
    if issubclass(result_type, _SCALARS):
        return True
    numpy = sys.modules.get("numpy")
    return numpy is not None and issubclass(result_type, numpy.generic)


def convert_like(result, original):
    """``result`` as an array of ``original``'s library (each array of a tuple/list; None,
    scalars and non-arrays as they are). ``original`` of a library arrayport has no
    converter for, but with the array API's ``__array_namespace__``, goes through that
    namespace's ``from_dlpack``."""
    result_type = type(result)
    if result_type is type(original) or result is None or original is None:
        return result
    if result_type is tuple or result_type is list:
        return result_type(convert_like(item, original) for item in result)
    is_scalar = _IS_SCALAR.get(result_type)
    if is_scalar is None:
        is_scalar = _IS_SCALAR[result_type] = _is_scalar_type(result_type)
    if is_scalar:
        return result
    convert = _CONVERTERS.get(type(original))
    if convert is None:
        convert = _CONVERTERS[type(original)] = _converter_for(type(original))
    return convert(result, original)


# {type of the caller's argument: converter(result, original)}, filled on first use.
_CONVERTERS = {}


def _converter_for(original_type):
    """The converter into ``original_type``'s library (its record in arrayport.libraries
    says which ``arrayport.to`` target answers in it)."""
    if original_type is _core.View:
        return lambda result, original: _core.view(result)
    from arrayport import convert, libraries
    library = libraries.for_type(original_type)
    if library is None or not library.targets:
        return _through_array_namespace
    like = library.get("like")
    target = like(original_type) if like is not None else library.targets[0]
    return lambda result, original: convert.to(result, target)


def _through_array_namespace(result, original):
    """An array API library arrayport has no converter for: its namespace's from_dlpack;
    without a namespace, the result as it is."""
    namespace = getattr(original, "__array_namespace__", None)
    if namespace is None:
        return result
    return namespace().from_dlpack(_core.view(result))
