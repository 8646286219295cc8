"""Polars at run time: the converter to a Series (through the View's Arrow export; Series
are immutable Arrow columns). Its cases for the command and the tests:
``arrayport.libraries.cases._polars``."""

from __future__ import annotations

from arrayport import _core
from arrayport.copy_watch import unasked_copy
from arrayport.convert_steps import check_copy, copied, placed, no_type_for
from arrayport.dtypes import DTypeCode


def _to_polars(x, *, copy=None):
    """A ``polars.Series`` over the data: zero-copy for a C-contiguous host View of an Arrow
    number type (n-D: a Series of fixed-size arrays, one per row); bool copied (Polars
    packs it); types Polars has no type for (complex, bfloat16, float8...) refused rather
    than held as Python objects."""
    import polars as pl

    check_copy(copy, "to(polars)")
    view = placed(_core.view_or_copy(x, copy=copy), None, copy)
    if view.ndim == 0:
        raise ValueError("to(polars): a Series has at least one dimension, the data has 0; "
                         "reshape to (1,)")
    if not view.is_c_contiguous:
        view = copied(view, copy, "to(polars)", "Arrow columns are C-contiguous")
    try:
        view.__arrow_c_schema__()          # an Arrow number type: the Series shares it
        arrow_number = True
    except BufferError:
        arrow_number = False
    if not arrow_number:
        if view.dtype.code is not DTypeCode.BOOL:
            # complex, bfloat16, float8...: Polars would hold them as Python objects
            raise no_type_for("to(polars)", "Polars", view.dtype)
        # bit-packed in Arrow: Polars copies
        unasked_copy(copy, "to(polars)", "Polars holds bool bit-packed",
                     "to(polars): Polars holds bool bit-packed, so it copies, but copy=False")
        return pl.Series(_core.to_numpy(view))
    return pl.Series(view)


TARGETS = {"polars": _to_polars}
