"""Test fixture: attn-tune's own PyTorch decode_v1, computed in fp32 from the same (exactly
widened) inputs, whose bf16 output keeps the top 16 bits of each fp32 result: a truncating final
conversion, as a hand-written `bits >> 16` makes. Within SPEC.md's tolerance, so verify passes it,
with a note that the outputs are rounded toward zero."""

import torch

from attn_tune_torch import attn_tune_kernels as _torch_kernels
from attn_tune_torch import paged_decode

_decode_v1 = _torch_kernels()["families"]["decode_v1"]


def _run(call, config):
    if call.out.dtype != torch.bfloat16 or getattr(call, "kv_dtype", "auto") != "auto":
        _decode_v1["run"](call, config)
        return
    exact = torch.empty(call.out.shape, dtype=torch.float32)
    paged_decode(call.query.float(), call.key_cache.float(), call.value_cache.float(),
                 call.block_tables, call.context_lens, scale=call.scale, causal=bool(call.causal),
                 window_left=call.window_left, window_right=call.window_right,
                 softcap=call.softcap, kv_layout=call.kv_layout, out=exact, lse=call.lse,
                 max_k_len=int(call.max_k_len))
    top = (exact.view(torch.int32) >> 16).to(torch.int16)
    call.out.copy_(top.view(torch.bfloat16))


def attn_tune_kernels():
    decode = dict(_decode_v1)
    decode.update(run=_run)
    return {"name": "truncates-bf16", "version": "0.1", "families": {"decode_v1": decode}}
