"""Test fixture: a seed-shaped dispatch module whose dispatch_prefill returns its output in
float64 whatever the query's dtype; the bridge must fail the call (an engine's caller gets the
dtype returned), not convert it in silence. Decode is correct.
"""

from attn_tune_torch import paged_decode, paged_prefill


def _masks(config):
    return dict(scale=config.scale, causal=config.is_causal, window_left=config.window_left,
                window_right=config.window_right, softcap=config.softcap, kv_layout="HND")


def dispatch_prefill(config, query, key_cache, value_cache, block_tables, cu_seq_q, cu_seq_k,
                     max_seq_q, max_seq_k):
    out, _ = paged_prefill(query, key_cache, value_cache, block_tables, cu_seq_q, cu_seq_k,
                           **_masks(config))
    return out.double()


def dispatch_decode(config, output, query, key_cache, value_cache, block_tables, context_lens,
                    max_context_len):
    paged_decode(query, key_cache, value_cache, block_tables, context_lens, out=output,
                 **_masks(config))
