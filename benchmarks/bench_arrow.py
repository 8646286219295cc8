"""The Arrow C data and device interfaces: arrayport beside pyarrow's and Polars' own routes, in one run.

    python benchmarks/bench_arrow.py [--repeat 15] [--number 20000]

Import: a View of a pyarrow array through the Arrow PyCapsule protocol
(``View.from_arrow``), beside NumPy reading the same array through pyarrow's own
``__dlpack__`` (``np.from_dlpack``) and ``ap.view`` (which takes DLPack first). Export:
pyarrow reading a View (``pa.array(view)``, through ``View.__arrow_c_array__``) beside
``pa.array(ndarray)`` (pyarrow reading NumPy). Streams: a one-chunk ChunkedArray and a
Polars Series viewed (``__arrow_c_stream__``), a two-chunk one joined by ``ap.to_numpy``
beside pyarrow's ``to_numpy``. ``View.from_arrow(pa)`` asks ``__arrow_c_array__``; the
``(schema, array)`` row gives the capsules directly (pyarrow's export outside the count
of the protocol call). Small arrays (1,000 float32), where the protocol's cost is the whole cost.
Medians in nanoseconds per call, including freeing what the call returns.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from _timing import arguments, namespace_with_libraries, print_table

ROWS = [
    ("View.from_arrow(pa) vs np.from_dlpack", "ap.View.from_arrow(pa_array)",
     "np.from_dlpack(pa_array)", "pa"),
    ("View.from_arrow(pa) vs ap.view (DLPack)", "ap.View.from_arrow(pa_array)",
     "ap.view(pa_array)", "pa"),
    ("from_arrow((schema, array)) vs dlpack",
     "ap.View.from_arrow(pa_array.__arrow_c_array__())", "np.from_dlpack(pa_array)", "pa"),
    ("view(1-chunk ChunkedArray) vs dlpack", "ap.view(pa_chunked)",
     "np.from_dlpack(pa_chunked.chunk(0))", "pa"),
    ("to_numpy(2-chunk Chunked) vs to_numpy", "ap.to_numpy(pa_two_chunks)",
     "pa_two_chunks.to_numpy()", "pa"),
    ("view(pl.Series) vs Series.to_numpy", "ap.view(pl_series)",
     "pl_series.to_numpy(allow_copy=False)", "pl"),
    ("pa.array(View) vs pa.array(ndarray)", "pa.array(flat_view)", "pa.array(flat)", "pa"),
    ("pa.chunked_array(View) vs ([ndarray])", "pa.chunked_array(flat_view)",
     "pa.chunked_array([flat])", "pa"),
    ("pa.array(2-D View) vs FixedSizeList", "pa.array(rows_view)",
     "pa.FixedSizeListArray.from_arrays(pa.array(flat), 4)", "pa"),
]


def main():
    args = arguments(__doc__.splitlines()[0])
    namespace = namespace_with_libraries()
    flat = np.arange(1000, dtype=np.float32)
    namespace.update(flat=flat, flat_view=namespace["ap"].view(flat),
                     rows_view=namespace["ap"].view(flat.reshape(250, 4)))
    if importlib.util.find_spec("pyarrow") is not None:
        import pyarrow as pa
        namespace.update(pa=pa, pa_array=pa.array(flat), pa_chunked=pa.chunked_array([flat]),
                         pa_two_chunks=pa.chunked_array([flat[:500], flat[500:]]))
    if importlib.util.find_spec("polars") is not None:
        import polars as pl
        namespace.update(pl=pl, pl_series=pl.Series(flat))
    print("# " + ", ".join(f"{name} {namespace[short].__version__}"
                           for short, name in (("pa", "pyarrow"), ("pl", "polars"))
                           if short in namespace))
    print_table(ROWS, namespace, args)
    if "pa" not in namespace:
        print("# pyarrow not installed: every row skipped")


if __name__ == "__main__":
    main()
