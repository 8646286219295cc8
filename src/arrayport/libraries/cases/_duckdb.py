"""DuckDB: a database that scans Arrow data (copying it into its own vectors) — a relation
over a table of the sample in the matrix (an Arrow stream), and its scan of an Arrow object
as a consumer, read back through NumPy.

The cases half (the command's and the tests'); the library has no converter."""

from __future__ import annotations

import re

import numpy as np

from arrayport.libraries.toolkit import arrow_rows


def _make_duckdb(base, layout):
    import duckdb

    import arrayport
    rows = arrayport.view(arrow_rows(base, layout, "duckdb"))  # noqa: F841 (scanned by name)
    connection = duckdb.connect()
    connection.sql("create table sample as select * from rows")
    return connection.table("sample")


def _scan(x):
    """DuckDB's answer to ``select * from x``: its first column, fetched as NumPy (a column
    of fixed-size arrays stacked into one array)."""
    import duckdb
    relation = duckdb.sql("select * from x")
    column = next(iter(relation.fetchnumpy().values()))
    if column.dtype != object:
        return column
    if len(column):
        return np.stack(column)
    # No rows to stack: the shape and number type from DuckDB's ARRAY type ("FLOAT[4]").
    spelled = str(relation.types[0])
    element = duckdb.sql(f"select 0::{spelled.partition('[')[0]} as v").fetchnumpy()["v"]
    return np.empty((0, *map(int, re.findall(r"\[(\d+)\]", spelled))), element.dtype)


def _view(x):
    import arrayport
    return _scan(arrayport.view(x))


# ---- what arrayport.libraries reads -----------------------------------------------------------

# How a user reaches it through arrayport, as the matrix's arrayport route does.
ARRAYPORT_CALL = 'v = ap.view(x); duckdb.sql("select * from v")'

make = _make_duckdb
via_arrayport = _view


def routes():
    return {"arrow": _scan}
