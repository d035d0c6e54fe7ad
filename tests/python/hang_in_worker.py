"""Test fixture: a module whose first import (the declaration probe's) returns at once and whose
every later import (the worker's) hangs for an hour. The first import creates the file named by
$ATTN_TEST_HANG_MARKER; an import that finds it writes its pid to that name + ".hung" and sleeps.
tests/python/hang_in_worker.cmake checks that the worker's import gets the probe's time limit and
that the hung process does not outlive attn-tune."""

import os
import time

_marker = os.environ["ATTN_TEST_HANG_MARKER"]
if os.path.exists(_marker):
    with open(_marker + ".hung", "w") as _f:
        _f.write("%d\n" % os.getpid())
    time.sleep(3600)
with open(_marker, "w") as _f:
    _f.write("%d\n" % os.getpid())


def _decode(call, config):
    raise AssertionError("never called: the worker's import hangs")


def attn_tune_kernels():
    return {"name": "hang-in-worker", "version": "0.1",
            "families": {"decode_v1": {"run": _decode}}}
