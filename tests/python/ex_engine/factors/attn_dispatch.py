"""Test fixture: a dispatch module shaped like the seed engine's ex_engine/factors/attn_dispatch.py
(the same config class, function names and signatures) whose PyTorch fallbacks keep the seed's
two defects:

1. prefill attends the query to itself: the paged KV cache and its block tables are never read,
   and the whole batch is treated as one sequence;
2. decode reads the cache through the block table but ignores the sliding window and the softcap.

The vendor kernels it tries first are not installed here, so the fallbacks run. attn-tune's
verify must fail this module and say what is wrong; tests/python/ex_engine_fixed is the same
module with both defects fixed. Written for torch 1.13 (no scaled_dot_product_attention).
"""

import logging

import torch

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


def dispatch_prefill(config, query, key_cache, value_cache, block_tables, cu_seq_q, cu_seq_k,
                     max_seq_q, max_seq_k):
    try:
        from ex_engine.python import ix_ops_dispatch  # the vendor path; absent here
        return ix_ops_dispatch.flash_attn_with_block_tables(
            query, key_cache, value_cache, block_tables, cu_seq_q, cu_seq_k, max_seq_q,
            max_seq_k, config.scale, is_causal=config.is_causal)
    except (ImportError, RuntimeError, AttributeError) as e:
        logger.debug("flash_attn dispatch failed, using fallback: %s", e)
    logger.warning("prefill: using the PyTorch fallback (no block tables)")
    # Defect 1: the query is its own keys and values, over the whole batch.
    q = query.float().transpose(0, 1)  # [heads, tokens, head_dim]
    scores = torch.matmul(q, q.transpose(1, 2)) * config.scale
    if config.is_causal:
        n = q.shape[1]
        scores.masked_fill_(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), q)
    return out.transpose(0, 1).to(query.dtype)


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
    logger.warning("decode: using the PyTorch fallback (slow)")
    group = config.num_heads // config.num_kv_heads
    for b in range(query.shape[0]):
        n = int(context_lens[b])
        used = (n + config.block_size - 1) // config.block_size
        keys, values = [], []
        for i in range(used):
            block = int(block_tables[b, i])
            take = min(config.block_size, n - i * config.block_size)
            keys.append(key_cache[block, :, :take])
            values.append(value_cache[block, :, :take])
        k = torch.cat(keys, dim=1).repeat_interleave(group, dim=0).float()
        v = torch.cat(values, dim=1).repeat_interleave(group, dim=0).float()
        # Defect 2: no window, no softcap.
        scores = torch.einsum("hd,hsd->hs", query[b].float(), k) * config.scale
        output[b] = torch.einsum("hs,hsd->hd", torch.softmax(scores, dim=-1), v).to(output.dtype)
