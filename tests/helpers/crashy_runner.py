"""An isolation runner whose cases misbehave on request (tests of arrayport.cli.isolation)."""

import os
import sys
import time


def run_case(case, modules):
    action = case["action"]
    if action == "abort":
        sys.stderr.write("about to die: deliberate abort\n")
        sys.stderr.flush()
        os.abort()
    if action == "hang":
        time.sleep(3600)
    if action == "raise":
        raise RuntimeError("a bug in the runner")
    if action == "print":
        print("noise on stdout")  # must not corrupt the result stream
    return {"status": "ok", "pid": os.getpid(), "modules": sorted(modules)}
