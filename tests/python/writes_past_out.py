"""Test fixture: attn-tune's own PyTorch decode_v1, right in every value, that then writes 8 bytes
past the end of `out` (an off-by-one store of a vector kernel's tail). The heap's slack hid such a
write; verify must fail it, naming the write, and say the values are right."""

import ctypes

from attn_tune_torch import attn_tune_kernels as _torch_kernels

_decode_v1 = _torch_kernels()["families"]["decode_v1"]


def _run(call, config):
    _decode_v1["run"](call, config)
    out = call.out
    ctypes.memset(out.data_ptr() + out.numel() * out.element_size(), 0, 8)


def attn_tune_kernels():
    decode = dict(_decode_v1)
    decode.update(run=_run)
    return {"name": "writes-past-out", "version": "0.1", "families": {"decode_v1": decode}}
