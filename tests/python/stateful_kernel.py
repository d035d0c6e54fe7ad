"""Test fixture: attn-tune's own PyTorch decode_v1 behind a kernel that keeps state between calls:
every other call scales its output by 1.05 (as a plan cached from an earlier call would leave it
wrong one call in two). verify must fail it and name the state, not the cache or block table its
other questions would blame on a changing answer."""

from attn_tune_torch import attn_tune_kernels as _torch_kernels

_decode_v1 = _torch_kernels()["families"]["decode_v1"]
_calls = [0]


def _run(call, config):
    _decode_v1["run"](call, config)
    _calls[0] += 1
    if _calls[0] % 2 == 1:
        call.out.mul_(1.05)


def attn_tune_kernels():
    decode = dict(_decode_v1)
    decode.update(run=_run)
    return {"name": "stateful-kernel", "version": "0.1", "families": {"decode_v1": decode}}
