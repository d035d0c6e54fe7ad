"""Test fixture: attn-tune's own PyTorch decode_v1 behind a can_run that raises for head_dim 128
only (and accepts every other call). A can_run that raises is not a refusal: verify must end with
exit 1 and name the exception, not let the head_dim-128 cases vanish and pass the rest (which is
what a can_run that returns a reason for them gives: every case left passes, exit 0)."""

from attn_tune_torch import attn_tune_kernels as _torch_kernels


def _can_run(call, config):
    if call.head_dim == 128:
        raise ValueError("no tile for head_dim 128")
    return None


def attn_tune_kernels():
    decode = dict(_torch_kernels()["families"]["decode_v1"])
    decode["can_run"] = _can_run
    return {"name": "can-run-raising", "version": "0.1", "families": {"decode_v1": decode}}


def _always_raises(call, config):
    raise KeyError("oops")


def attn_tune_kernels_v2():
    """attn-tune's PyTorch decode_v2 behind a can_run that always raises: plugin check asks it
    which block sizes it accepts before any case, and must end with exit 1 naming the exception
    (not an internal error after two workers die)."""
    v2 = dict(_torch_kernels()["families"]["decode_v2"])
    v2["can_run"] = _always_raises
    return {"name": "can-run-raising-v2", "version": "0.1", "families": {"decode_v2": v2}}
