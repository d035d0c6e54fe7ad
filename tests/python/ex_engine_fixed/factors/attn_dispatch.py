"""Test fixture: tests/python/ex_engine/factors/attn_dispatch.py with its two fallback defects
fixed, the way the seed engine can fix its own: the fallbacks call attn-tune's PyTorch
implementation of SPEC.md (python/attn_tune_torch), which reads the paged cache through the block
tables per sequence and applies every mask. attn-tune's verify must pass it.
"""

import logging

from attn_tune_torch import paged_decode, paged_prefill

logger = logging.getLogger("ex_engine.attn_dispatch")

_SM_COUNT = 16
_V2_THRESHOLD_FACTOR = 2


class AttnDispatchConfig:
    __slots__ = ("num_heads", "num_kv_heads", "head_dim", "scale", "is_causal", "window_left",
                 "window_right", "block_size", "max_context_len", "softcap")

    def __init__(self, num_heads=28, num_kv_heads=4, head_dim=128, scale=None, is_causal=True,
                 window_left=-1, window_right=-1, block_size=16, max_context_len=131072,
                 softcap=0.0):
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale or head_dim ** -0.5
        self.is_causal = is_causal
        self.window_left = window_left
        self.window_right = window_right
        self.block_size = block_size
        self.max_context_len = max_context_len
        self.softcap = softcap


def should_use_paged_v2(seq_len, num_kv_heads, block_size=16, partition_size=512):
    tiles = num_kv_heads * ((seq_len + partition_size - 1) // partition_size)
    return tiles > _V2_THRESHOLD_FACTOR * _SM_COUNT


def _masks(config):
    return dict(scale=config.scale, causal=config.is_causal, window_left=config.window_left,
                window_right=config.window_right, softcap=config.softcap, kv_layout="HND")


def dispatch_prefill(config, query, key_cache, value_cache, block_tables, cu_seq_q, cu_seq_k,
                     max_seq_q, max_seq_k):
    try:
        from ex_engine.python import ix_ops_dispatch  # the vendor path; absent here
        return ix_ops_dispatch.flash_attn_with_block_tables(
            query, key_cache, value_cache, block_tables, cu_seq_q, cu_seq_k, max_seq_q,
            max_seq_k, config.scale, is_causal=config.is_causal)
    except (ImportError, RuntimeError, AttributeError) as e:
        logger.debug("flash_attn dispatch failed, using fallback: %s", e)
    out, _ = paged_prefill(query, key_cache, value_cache, block_tables, cu_seq_q, cu_seq_k,
                           **_masks(config))
    return out


def dispatch_decode(config, output, query, key_cache, value_cache, block_tables, context_lens,
                    max_context_len):
    try:
        from ex_engine.python import ix_ops_dispatch  # the vendor path; absent here
        ix_ops_dispatch.paged_attention_v1(output, query, key_cache, value_cache,
                                           config.num_kv_heads, config.scale, block_tables,
                                           context_lens, config.block_size, max_context_len)
        return
    except (ImportError, RuntimeError, AttributeError) as e:
        logger.debug("paged_attention dispatch failed: %s", e)
    paged_decode(query, key_cache, value_cache, block_tables, context_lens, out=output,
                 **_masks(config))
