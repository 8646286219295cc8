"""Polars: Series as Arrow columns (immutable) — the converter to a Series (through the View's
Arrow export), its Series in the matrix (an Arrow stream), its consumer, reading a Series."""

from __future__ import annotations

import numpy as np

from arrayport import _core
from arrayport.libraries.toolkit import arrow_rows, call
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
    except BufferError:
        if view.dtype.code is not DTypeCode.BOOL:
            # complex, bfloat16, float8...: Polars would hold them as Python objects
            raise no_type_for("to(polars)", "Polars", view.dtype) from None
        if copy is False:                  # bit-packed in Arrow: Polars copies
            raise BufferError("to(polars): Polars holds bool bit-packed, so it copies, but "
                              "copy=False") from None
        return pl.Series(_core.to_numpy(view))
    return pl.Series(view)


def _make_polars(base, layout):
    import polars as pl
    return pl.Series(arrow_rows(base, layout, "polars"))


# ---- what arrayport.libraries reads -----------------------------------------------------------

TARGETS = {"polars": _to_polars}
make = _make_polars


def routes():
    return {"arrow": call("polars", "Series")}


def _column(series):
    """The column a Series holds: a Series made from a one-column table (a DuckDB relation,
    any table-shaped Arrow stream) is a Series of one-field structs, Polars' reading of a
    table; the field is the column (no copy)."""
    import polars as pl
    if isinstance(series.dtype, pl.Struct) and len(series.dtype.fields) == 1:
        return series.struct.field(series.dtype.fields[0].name)
    return series


def address_of(x):
    return _column(x).to_numpy(allow_copy=False).__array_interface__["data"][0]


def writable(x):
    return False


def host_values(x):
    return np.array(_column(x).to_numpy())
