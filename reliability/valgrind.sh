#!/usr/bin/env bash
# Valgrind memcheck over arrayport's core tests (import/export, validation, lifetimes,
# buffers, array interface, copies, NumPy fast paths, threads, a short fuzz pass):
#
#   bash reliability/valgrind.sh [pytest arguments…]
#
# Fails when memcheck reports any error whose stack passes through arrayport's code
# (arrayport/_core, the test producers are not arrayport). CPython itself reports a few
# false positives under memcheck (uninitialised bytes from getrandom seeding `random`);
# those are counted and listed, not failed on. The full log is build/valgrind.log.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
mkdir -p build
LOG=build/valgrind.log
CORE_TESTS="tests/test_view.py tests/test_dlpack_import_validation.py tests/test_dlpack_export.py
tests/test_dlpack_roundtrip.py tests/test_lifetimes.py tests/test_buffer_protocol.py
tests/test_array_interface.py tests/test_host_copy.py tests/test_numpy_fast_paths.py
tests/test_threads.py tests/test_fuzz_importers.py"
export PYTHONMALLOC=malloc ARRAYPORT_FUZZ_EXAMPLES=${ARRAYPORT_FUZZ_EXAMPLES:-60}
status=0
valgrind --tool=memcheck --num-callers=40 --log-file="$LOG" \
    "$PYTHON" -m pytest -p no:cacheprovider -q -x ${@:-$CORE_TESTS} || status=$?
"$PYTHON" - "$LOG" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
records = [r for r in re.split(r"==\d+== \n", text)
           if re.search(r"Invalid|uninitialised|Mismatched|double free|Syscall param", r)]
ours = [r for r in records if re.search(r"arrayport|_core\.(c|pyx|cpython)|core_support|numpy_arrays", r)]
print(f"memcheck: {len(records)} error records, {len(ours)} in arrayport's code")
for record in ours:
    print(record)
sys.exit(1 if ours else 0)
PY
exit $status
