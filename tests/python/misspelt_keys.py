"""Test fixture: attn-tune's own PyTorch decode_v1 declared with two misspelt keys, one in the
declaration ("engine_rul") and one in the family ("writes_lze"). Python ignores neither: attn-tune
reads neither key, so each is warned about, with the key it most likely meant, and the kernels
still run as declared without them."""

from attn_tune_torch import attn_tune_kernels as _torch_kernels


def attn_tune_kernels():
    decode = dict(_torch_kernels()["families"]["decode_v1"])
    decode["writes_lze"] = True
    return {"name": "misspelt-keys", "version": "0.1", "engine_rul": "vllm-cpu",
            "families": {"decode_v1": decode}}
