"""``arrayport matrix``: every producer x consumer x route x dtype x layout class, tried.

A *route* is one way a consumer takes an array in: a protocol it reads directly
("dlpack", "array_interface", "buffer", "__array__", "cuda_array_interface", "arrow": the
Arrow PyCapsule methods) or "arrayport" (the same target reached through arrayport:
``ap.to``/``ap.view``). Each cell ends as one of
``zero-copy``, ``copy``, ``refused`` (a clean exception), ``crashed`` (the process died or
hung: every cell runs in an isolated worker), ``wrong`` (shape, dtype or values differ, or a
writable alias of read-only memory) or ``not-offered`` (the producer has no such array or
protocol: not a cell at all). Working cells carry the median time per exchange.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np

from arrayport.libraries.results import element0_address, is_writable, to_host_numpy
from arrayport.libraries.samples import base_array, numpy_layout
from arrayport.libraries.toolkit import ARROW_METHODS, arrow_only

from . import isolation
from arrayport.libraries import for_module

from .libraries import BY_NAME, NotOffered

STATUSES = ["zero-copy", "copy", "refused", "crashed", "wrong"]
WORKS = ("zero-copy", "copy")
ARRAYPORT_ROUTE = "arrayport"
RUNNER = "arrayport.cli.matrix"


# --- planning (parent side: imports no array library) -----------------------------------------

def plan(libraries: list[str], dtypes: list[str], layouts: list[str],
         unusual: bool = True) -> list[dict]:
    cases = []
    if unusual:
        cases += plan_unusual(libraries)
    for producer in libraries:
        if BY_NAME[producer].make is None:
            continue
        for consumer in libraries:
            target = BY_NAME[consumer]
            if target.via_arrayport is None or target.memory != BY_NAME[producer].memory:
                continue
            for route in [*target.routes, ARRAYPORT_ROUTE]:
                for dtype in dtypes:
                    for layout in layouts:
                        cases.append({"producer": producer, "consumer": consumer,
                                      "route": route, "dtype": dtype, "layout": layout})
    return cases


def plan_unusual(libraries: list[str]) -> list[dict]:
    """Each producer's unusual arrays (arrayport.cli.unusual) into every consumer route:
    the kinds a fast path is most likely to get wrong."""
    from .unusual import kinds_of
    cases = []
    for producer in libraries:
        if for_module(BY_NAME[producer].module) is not BY_NAME[producer]:
            continue   # a module's unusual arrays are its first record's (torch, not torch-cuda)
        for kind in kinds_of(BY_NAME[producer].module):
            for consumer in libraries:
                target = BY_NAME[consumer]
                if target.via_arrayport is None or target.memory != BY_NAME[producer].memory:
                    continue
                for route in [*target.routes, ARRAYPORT_ROUTE]:
                    cases.append({"producer": producer, "consumer": consumer, "route": route,
                                  "kind": kind.label})
    return cases


def run(libraries: list[str], dtypes: list[str], layouts: list[str], *,
        progress: Callable[[int, int, dict], None] = lambda done, total, case: None,
        case_timeout: float = isolation.CASE_TIMEOUT_S, unusual: bool = True) -> dict:
    """Run the matrix; returns the JSON-able report (libraries, cells, summaries)."""
    modules = [BY_NAME[name].module for name in libraries]
    cases = plan(libraries, dtypes, layouts, unusual)
    results: list[dict | None] = [None] * len(cases)
    done = 0

    def on_result(index, result):
        nonlocal done
        results[index] = result
        done += 1
        progress(done, len(cases), cases[index])

    started = time.perf_counter()
    reordered_modules: dict[str, str] = {}
    broken_modules = isolation.run_isolated(RUNNER, modules, cases, on_result=on_result,
                                            case_timeout=case_timeout,
                                            reordered=reordered_modules)
    broken = {name: broken_modules[BY_NAME[name].module] for name in libraries
              if BY_NAME[name].module in broken_modules}
    reordered = {name: reordered_modules[BY_NAME[name].module] for name in libraries
                 if BY_NAME[name].module in reordered_modules}
    cells, unusual_cells, unavailable = [], [], {}
    for case, result in zip(cases, results):
        result = result or {"status": "tool-error", "detail": "no result"}
        if "unavailable" in result:
            name, why = result["unavailable"]
            unavailable[name] = why
            continue
        if case["producer"] in broken or case["consumer"] in broken:
            continue
        if result["status"] != "not-offered":
            (unusual_cells if "kind" in case else cells).append({**case, **result})
    return {"libraries_broken": broken, "libraries_reordered": reordered,
            "libraries_unavailable": unavailable, "cells": cells,
            "seconds": round(time.perf_counter() - started, 1),
            "pairs": summarize_pairs(cells), "routes": summarize_routes(cells),
            "findings": findings(cells), "unusual": summarize_unusual(unusual_cells),
            "unusual_cells": unusual_cells}


# --- summaries --------------------------------------------------------------------------------

def summarize_unusual(cells: list[dict]) -> list[dict]:
    """Per unusual kind: its outcomes over every consumer's direct routes and over the
    arrayport routes, and the consumers whose direct route crashed or gave wrong data."""
    by_kind: dict[str, dict] = {}
    for cell in cells:
        entry = by_kind.setdefault(cell["kind"], {
            "kind": cell["kind"], "direct": dict.fromkeys(STATUSES, 0),
            "arrayport": dict.fromkeys(STATUSES, 0), "bad_direct": [], "bad_arrayport": []})
        side = "arrayport" if cell["route"] == ARRAYPORT_ROUTE else "direct"
        if cell["status"] in entry[side]:
            entry[side][cell["status"]] += 1
        if cell["status"] in ("crashed", "wrong"):
            entry[f"bad_{side}"].append(f"{cell['consumer']} via {cell['route']}: "
                                        f"{cell['status']} ({cell.get('detail', '')})")
    return list(by_kind.values())


def summarize_routes(cells: list[dict]) -> list[dict]:
    """One row per producer, consumer and route: counts per status and the median time."""
    rows: dict[tuple, dict] = {}
    for cell in cells:
        key = (cell["producer"], cell["consumer"], cell["route"])
        row = rows.setdefault(key, {"producer": key[0], "consumer": key[1], "route": key[2],
                                    **{status: 0 for status in STATUSES}, "_times": []})
        row[cell["status"]] = row.get(cell["status"], 0) + 1
        if cell.get("median_ns") is not None:
            row["_times"].append(cell["median_ns"])
    for row in rows.values():
        times = row.pop("_times")
        row["median_ns"] = int(statistics.median(times)) if times else None
    return list(rows.values())


def summarize_pairs(cells: list[dict]) -> list[dict]:
    """One row per producer and consumer: of the cases (dtype x layout) the producer can make,
    how many work directly (by the consumer's best route for each case) and through arrayport,
    how many every route refused cleanly (and why), and how many crash or come out wrong on
    some route."""
    by_case: dict[tuple, dict[str, list[tuple[str, str]]]] = {}
    for cell in cells:
        pair = (cell["producer"], cell["consumer"])
        side = ARRAYPORT_ROUTE if cell["route"] == ARRAYPORT_ROUTE else "direct"
        by_case.setdefault(pair + (cell["dtype"], cell["layout"]), {}).setdefault(
            side, []).append((cell["status"], cell.get("detail", "")))
    pairs: dict[tuple, dict] = {}
    for (producer, consumer, _dtype, _layout), sides in by_case.items():
        row = pairs.setdefault((producer, consumer), {
            "producer": producer, "consumer": consumer,
            "direct": _empty_side(), ARRAYPORT_ROUTE: _empty_side()})
        for side in ("direct", ARRAYPORT_ROUTE):
            outcomes = sides.get(side)
            if outcomes:
                _count_case(row[side], outcomes)
    return list(pairs.values())


def _empty_side() -> dict:
    # "refused": cases no route took and every route refused cleanly (an exception, no
    # crash, no wrong data): a deliberate no, which reports must not paint as a failure;
    # "reasons": how often each refusal message was the answer to such a case.
    return {"cases": 0, "works": 0, "zero-copy": 0, "crashed": 0, "wrong": 0, "refused": 0,
            "reasons": {}}


def _count_case(side: dict, outcomes: list[tuple[str, str]]) -> None:
    statuses = [status for status, _detail in outcomes]
    side["cases"] += 1
    if "zero-copy" in statuses:
        side["zero-copy"] += 1
    if any(status in WORKS for status in statuses):
        side["works"] += 1
    elif all(status == "refused" for status in statuses):
        side["refused"] += 1
        for detail in dict.fromkeys(detail for _status, detail in outcomes):
            side["reasons"][detail] = side["reasons"].get(detail, 0) + 1
    for hazard in ("crashed", "wrong"):
        if hazard in statuses:
            side[hazard] += 1


def findings(cells: list[dict]) -> list[dict]:
    """Crashes and wrong data, grouped by what happened: the cells worth a person's time."""
    groups: dict[tuple, dict] = {}
    for cell in cells:
        if cell["status"] not in ("crashed", "wrong", "tool-error"):
            continue
        key = (cell["producer"], cell["consumer"], cell["route"], cell["status"],
               cell.get("detail", ""))
        group = groups.setdefault(key, {
            "producer": key[0], "consumer": key[1], "route": key[2], "status": key[3],
            "detail": key[4], "dtypes": [], "layouts": []})
        for field, value in (("dtypes", cell["dtype"]), ("layouts", cell["layout"])):
            if value not in group[field]:
                group[field].append(value)
    return list(groups.values())


# --- one cell (worker side) -------------------------------------------------------------------

class _ArrayInterfaceOnly:
    """Hands a consumer nothing but the producer's ``__array_interface__`` (and keeps the
    producer alive as long as the consumer keeps this object)."""

    def __init__(self, producer):
        self.__array_interface__ = producer.__array_interface__
        self._producer = producer


class _CudaArrayInterfaceOnly:
    """Hands a consumer nothing but the producer's ``__cuda_array_interface__``."""

    def __init__(self, producer):
        self.__cuda_array_interface__ = producer.__cuda_array_interface__
        self._producer = producer


class _ArrayMethodOnly:
    """Hands a consumer nothing but the producer's ``__array__``."""

    def __init__(self, producer):
        self._producer = producer

    def __array__(self, dtype=None, copy=None):
        if copy is None:
            return self._producer.__array__(dtype)
        return self._producer.__array__(dtype, copy=copy)


def _offers_arrow(x) -> bool:
    """A producer offers the arrow route with an Arrow array, stream or device array."""
    return any(hasattr(type(x), name) for name in ARROW_METHODS[:3])


def _offers_buffer(x) -> bool:
    try:
        memoryview(x).release()
    except TypeError:
        return False
    except Exception:  # offered, but refused for this array: the cell says so
        return True
    return True


# protocol -> (does the producer's type offer it, what the consumer is handed)
PROTOCOLS = {
    "dlpack": (lambda x: hasattr(type(x), "__dlpack__"), lambda x: x),
    "array_interface": (lambda x: hasattr(type(x), "__array_interface__"), _ArrayInterfaceOnly),
    "buffer": (_offers_buffer, memoryview),
    "__array__": (lambda x: hasattr(type(x), "__array__"), _ArrayMethodOnly),
    "cuda_array_interface": (lambda x: hasattr(type(x), "__cuda_array_interface__"),
                             _CudaArrayInterfaceOnly),
    "arrow": (_offers_arrow, arrow_only),
}


def _error_text(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    if len(text) > 1000:   # a pathological message; refusals are whole sentences, kept whole
        text = text[:1000].rsplit(" ", 1)[0] + " …"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def median_ns(exchange: Callable[[], object], samples: int = 5,
              batch_budget_ns: int = 100_000) -> int:
    """Median time per call over ``samples`` batches, each about ``batch_budget_ns`` long;
    an exchange slower than a millisecond (a database scan) over 3 single calls, where the
    protocol's cost is lost in the consumer's anyway."""
    start = time.perf_counter_ns()
    exchange()
    first = max(time.perf_counter_ns() - start, 1)
    if first > 1_000_000:
        samples = min(samples, 3)
    per_batch = max(1, min(1000, batch_budget_ns // first))
    times = []
    for _ in range(samples):
        start = time.perf_counter_ns()
        for _ in range(per_batch):
            exchange()
        times.append((time.perf_counter_ns() - start) / per_batch)
    return int(statistics.median(times))


def _run_unusual_case(case: dict) -> dict:
    from .unusual import kind as find_kind
    kind = find_kind(case["kind"])
    consumer, route = BY_NAME[case["consumer"]], case["route"]
    try:
        made = kind.make()
    except Exception as exc:
        return {"status": "not-offered", "detail": f"cannot make it here: {_error_text(exc)}"}
    if route == ARRAYPORT_ROUTE:
        hand_over, take = (lambda x: x), consumer.via_arrayport
    else:
        (offered, hand_over), take = PROTOCOLS[route], consumer.routes[route]
        if not offered(made):
            return {"status": "not-offered", "detail": f"{case['producer']} has no {route}"}
    try:
        result = take(hand_over(made))
    except Exception as exc:
        return {"status": "refused", "detail": _error_text(exc)}
    if result is made:  # a library handed its own array back: no exchange happened
        return {"status": "zero-copy", "detail": "the same object"}
    if kind.reference is None:
        try:
            shared = element0_address(result) == element0_address(made)
        except Exception:
            shared = False
        if not shared:  # the library's own conversion (pyarrow: nulls as NaN): a copy
            return {"status": "copy"}
        return {"status": "wrong", "detail": "shared the memory of an array with no "
                                             "faithful strided form (it is not its values)"}
    try:
        expected = kind.reference(made)
    except Exception as exc:
        return {"status": "not-offered", "detail": f"no reference: {_error_text(exc)}"}
    return _verdict(made, result, expected, not kind.writable)


def _unavailable(case: dict) -> tuple[str, str] | None:
    """(library, why) where the case's producer or consumer cannot run in this process
    (PyTorch built without CUDA, JAX without a GPU backend: its cases' ``unavailable``)."""
    for name in (case["producer"], case["consumer"]):
        reason = BY_NAME[name].unavailable()
        if reason:
            return name, reason
    return None


def run_case(case: dict, modules: dict) -> dict:
    missing = _unavailable(case)
    if missing:
        return {"status": "not-offered", "detail": f"{missing[0]}: {missing[1]}",
                "unavailable": missing}
    if "kind" in case:
        return _run_unusual_case(case)
    producer, consumer = BY_NAME[case["producer"]], BY_NAME[case["consumer"]]
    dtype, layout, route = case["dtype"], case["layout"], case["route"]
    base = base_array(dtype)
    try:
        made = producer.make(base, layout)
    except NotOffered as exc:
        return {"status": "not-offered", "detail": str(exc)}
    except Exception as exc:
        return {"status": "not-offered", "detail": f"producer cannot make it: {_error_text(exc)}"}
    if route == ARRAYPORT_ROUTE:
        offered, hand_over, take = (lambda x: True), (lambda x: x), consumer.via_arrayport
    else:
        (offered, hand_over), take = PROTOCOLS[route], consumer.routes[route]
        if not offered(made):
            return {"status": "not-offered", "detail": f"{case['producer']} has no {route}"}

    def exchange():
        return take(hand_over(made))

    try:
        result = exchange()
    except Exception as exc:
        return {"status": "refused", "detail": _error_text(exc)}
    verdict = _verdict(made, result, numpy_layout(base, layout), layout == "read-only")
    if verdict["status"] in WORKS:
        del result
        verdict["median_ns"] = median_ns(exchange)
    return verdict


def _verdict(made, result, expected: np.ndarray, read_only: bool) -> dict:
    try:
        got = to_host_numpy(result)
    except Exception as exc:
        return {"status": "wrong", "detail": f"result unreadable: {_error_text(exc)}"}
    if got.shape != expected.shape:
        return {"status": "wrong", "detail": f"shape {got.shape} instead of {expected.shape}"}
    if got.dtype != expected.dtype:
        return {"status": "wrong", "detail": f"dtype {got.dtype} instead of {expected.dtype}"}
    if got.tobytes() != np.ascontiguousarray(expected).tobytes():
        return {"status": "wrong", "detail": "different values"}
    try:
        shared = element0_address(result) == element0_address(made)
    except Exception:
        shared = False
    if read_only and shared and is_writable(result):
        return {"status": "wrong", "detail": "writable alias of read-only memory"}
    return {"status": "zero-copy" if shared else "copy"}

