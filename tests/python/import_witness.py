"""Test fixture: attn-tune's own PyTorch kernels under a module that writes down where it is
imported. At import it appends "PID PARENT-EXECUTABLE" to the file $ATTN_TEST_IMPORT_LOG and, as
engine modules do, touches torch.cuda: the bridge must import it only in processes attn-tune
started (the declaration probe, the workers), never in attn-tune's own, where a CUDA context
would break every worker forked after it (tests/python/import_process.cmake)."""

import os

import torch

from attn_tune_torch import attn_tune_kernels  # noqa: F401 (the kernels this module declares)

torch.cuda.is_available()
_parent = os.path.basename(os.readlink("/proc/%d/exe" % os.getppid()))
with open(os.environ["ATTN_TEST_IMPORT_LOG"], "a") as _log:
    _log.write("%d %s\n" % (os.getpid(), _parent))
