"""Test fixture: attn-tune's own PyTorch decode_v1 declared with writes_lse as the string "False"
(read from a config file). Python takes any non-empty string as true, so attn-tune would check an
lse the author said it does not write; the declaration is refused instead."""

from attn_tune_torch import attn_tune_kernels as _torch_kernels


def attn_tune_kernels():
    decode = dict(_torch_kernels()["families"]["decode_v1"])
    decode["writes_lse"] = "False"
    return {"name": "writes-lse-string", "version": "0.1", "families": {"decode_v1": decode}}
