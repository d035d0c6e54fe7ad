"""attn_tune_torch: SPEC.md attention (paged prefill, decode v1/v2, every mask and KV layout) in
plain PyTorch, usable by engines directly and by attn-tune as `python:attn_tune_torch`."""

__version__ = "1.0"  # before the imports: kernels.py reports it

from .attention import (  # noqa: E402
    KV_LAYOUTS,
    combine_partitions,
    gather_kv,
    paged_decode,
    paged_prefill,
    visible_keys,
)
from .kernels import attn_tune_kernels, attn_tune_kernels_nhd, attn_tune_kernels_vllm  # noqa: E402

__all__ = [
    "KV_LAYOUTS",
    "attn_tune_kernels",
    "attn_tune_kernels_nhd",
    "attn_tune_kernels_vllm",
    "combine_partitions",
    "gather_kv",
    "paged_decode",
    "paged_prefill",
    "visible_keys",
]
