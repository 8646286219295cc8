#!/usr/bin/env bash
# Coverage-guided fuzzing of arrayport's public surface (reliability/fuzz/public_surface.py)
# with atheris and libFuzzer, the core built with clang's coverage instrumentation and
# AddressSanitizer, so that the fuzzer steers by the C and Cython code it reaches and an
# out-of-bounds access is a report, not a silent corruption.
#
#   bash reliability/fuzz.sh [SECONDS] [libFuzzer arguments…]     (default: 60 seconds)
#
# Needs clang (Debian's `clang`) and atheris (`pip install atheris`). Inputs start from the
# seed corpus in reliability/fuzz/corpus (read-only here); what the run learns goes into
# build/fuzz/corpus, and a crashing input into build/fuzz/crash-* — copy a finding into
# the seed corpus once it is fixed, so that the test suite replays it from then on
# (tests/test_fuzz_public_surface.py). The CI runs a short run; docs/reliability.md says how
# long the long run was and what it found.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-60}
shift || true
PYTHON=${PYTHON:-python}
OUT=build/fuzz
rm -rf "$OUT/arrayport" "$OUT/temp" && mkdir -p "$OUT/corpus"
FLAGS="-fsanitize=address,fuzzer-no-link -fno-omit-frame-pointer -g -O1"
# The Python modules first, without any core built in place (pip install -e leaves one in
# src/): copied after the build, that uninstrumented core would replace this one.
mkdir -p "$OUT/arrayport" && cp -r src/arrayport/. "$OUT/arrayport/" && rm -f "$OUT"/arrayport/_core*.so
CC=clang CXX=clang++ LDSHARED="clang -shared" CFLAGS="$FLAGS" LDFLAGS="-fsanitize=address" \
    "$PYTHON" setup.py -q build_ext --build-lib "$OUT" --build-temp "$OUT/temp" --force >/dev/null 2>&1
ATHERIS_DIR=$("$PYTHON" -c 'import atheris, os; print(atheris.path())')
export LD_PRELOAD="$ATHERIS_DIR/asan_with_fuzzer.so"
# Allocations over 4 GiB are refused (MemoryError), as a machine without that memory
# refuses them — arrayport's copies of huge Views and pickle's reads of a corrupted length
# alike — before libFuzzer's own limit (8 GiB) would call them a finding. Leaks are the live
# counters' business (CPython keeps memory until exit by design).
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:max_allocation_size_mb=4096:alloc_dealloc_mismatch=0"
export PYTHONPATH="$PWD/$OUT"
# The CUDA driver simulator (tests/helpers/cudasim.py), when it can be built, as this
# process's libcuda.so.1: the harness then puts Arrow device arrays in its pinned and
# device memory with writes still pending (issue 40). Without it, the rest runs as before.
SIMULATOR=$("$PYTHON" -c 'import sys; sys.path.insert(0, "tests/helpers"); import cudasim
print(cudasim.library("libcuda.so.1") or "")' 2>/dev/null || true)
if [ -n "$SIMULATOR" ]; then
    export CUDASIM_LIBRARY="$SIMULATOR"
    # libFuzzer ends the process without Python's exit handlers, so what the last inputs
    # still held is reported unreleased: kept out of the log, in this file.
    export CUDASIM_REPORT="$OUT/cudasim-at-exit.txt"
    export LD_LIBRARY_PATH="$(dirname "$SIMULATOR")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "fuzz.sh: Arrow device arrays on the CUDA driver simulator ($SIMULATOR)"
else
    echo "fuzz.sh: no CUDA driver simulator (it needs a C compiler and NVIDIA's cuda.h)"
fi
"$PYTHON" -c "import arrayport._core as c; assert '$OUT' in c.__file__, c.__file__; assert b'__sanitizer_cov_8bit_counters_init' in open(c.__file__, 'rb').read(), 'not instrumented'"
exec "$PYTHON" reliability/fuzz/public_surface.py "$OUT/corpus" reliability/fuzz/corpus \
    -max_total_time="$SECONDS_TO_RUN" -rss_limit_mb=8192 -malloc_limit_mb=8192 -timeout=30 \
    -artifact_prefix="$OUT/" -print_final_stats=1 "$@"
