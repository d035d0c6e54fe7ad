"""Test fixture: attn-tune's own PyTorch decode_v1 with a workspace hook that asks for 2^60 bytes,
more than any host can map. The run is an error that says so in a sentence (the bytes asked
for), not a bare std::bad_alloc."""

from attn_tune_torch import attn_tune_kernels as _torch_kernels


def _workspace(call, config):
    return 1 << 60


def attn_tune_kernels():
    decode = dict(_torch_kernels()["families"]["decode_v1"])
    decode["workspace"] = _workspace
    return {"name": "workspace-huge", "version": "0.1", "families": {"decode_v1": decode}}
