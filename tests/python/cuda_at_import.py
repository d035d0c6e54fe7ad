"""A module that starts CUDA the moment it is imported, as engine modules that query the GPU at
import time do, then declares attn_tune_torch's kernels on the GPU. attn-tune must import it only
in its workers: a CUDA context made in the supervisor does not survive the fork, and every worker
would fail to initialise the driver (scripts/device-check.sh, step python-cuda). Without a GPU it
imports quietly and its kernels are refused with the reason the device gives."""

import torch

if torch.cuda.is_available():
    torch.zeros(1, device="cuda")  # a CUDA context in whichever process imports this module

from attn_tune_torch.kernels import attn_tune_kernels_cuda as attn_tune_kernels  # noqa: E402,F401
