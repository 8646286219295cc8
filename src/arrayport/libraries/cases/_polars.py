"""Polars: Series as Arrow columns (immutable) — the converter to a Series (through the
View's Arrow export), its Series in the matrix (an Arrow stream), its consumer, reading a
Series.

The cases half (the command's and the tests'); the converters are
``arrayport.libraries._polars``."""

from __future__ import annotations

import numpy as np

from arrayport.libraries.toolkit import arrow_rows, call


def _make_polars(base, layout):
    import polars as pl
    return pl.Series(arrow_rows(base, layout, "polars"))


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
