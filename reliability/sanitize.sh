#!/usr/bin/env bash
# Build arrayport._core with AddressSanitizer + UndefinedBehaviorSanitizer and run the test
# suite against that build (GCC or Clang; Linux).
#
#   bash reliability/sanitize.sh [pytest arguments…]
#
# Default: the whole suite except tests/test_html_report.py, which drives Chromium — a
# browser with the sanitizer runtimes preloaded spins instead of rendering, and it runs no
# arrayport code anyway.
# The instrumented extension is built into build/sanitize/ and put first on PYTHONPATH, so
# the normal install is left alone. Any ASan report or UB aborts the run (exit != 0).
# Leak detection is off: CPython and the libraries it loads keep memory until exit by
# design; arrayport's own leaks are caught by its live counters (tests, reliability/soak.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
OUT=build/sanitize
rm -rf "$OUT" && mkdir -p "$OUT"
FLAGS="-fsanitize=address,undefined,signed-integer-overflow -fno-sanitize-recover=undefined,signed-integer-overflow -fno-wrapv -fno-omit-frame-pointer -g -O1"
# The Python modules first, without any core built in place (pip install -e leaves one in
# src/): copied after the build, that uninstrumented core would replace the sanitized one.
mkdir -p "$OUT/arrayport" && cp -r src/arrayport/. "$OUT/arrayport/" && rm -f "$OUT"/arrayport/_core*.so
CFLAGS="$FLAGS" LDFLAGS="-fsanitize=address,undefined" \
    "$PYTHON" setup.py -q build_ext --build-lib "$OUT" --build-temp "$OUT/temp" --force
ASAN_LIB=$("${CC:-gcc}" -print-file-name=libasan.so)
UBSAN_LIB=$("${CC:-gcc}" -print-file-name=libubsan.so)
echo "sanitized core: $(ls "$OUT"/arrayport/_core*.so)"
export LD_PRELOAD="$ASAN_LIB $UBSAN_LIB"
# A huge allocation fails as it does without ASan (NULL, then MemoryError): the tests ask
# for copies of 2**61-byte broadcasts on purpose, and the fuzzer's corpus makes pickle ask
# for 22 GB; over 8 GiB counts as huge.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:alloc_dealloc_mismatch=0:strict_string_checks=1:allocator_may_return_null=1:max_allocation_size_mb=8192"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONPATH="$PWD/$OUT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONMALLOC=malloc   # let ASan see every Python allocation too
"$PYTHON" -c "import arrayport._core as c; assert '$OUT' in c.__file__, c.__file__; assert b'__asan_init' in open(c.__file__, 'rb').read(), 'not instrumented'; print('running against', c.__file__)"
if [ $# -eq 0 ]; then set -- tests --ignore=tests/test_html_report.py; fi
exec "$PYTHON" -m pytest -p no:cacheprovider -q "$@"
