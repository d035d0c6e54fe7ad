"""Replace the seed engine's hard-coded decode-kernel rule with a threshold table's.

The seed inference engine chooses between the paged decode kernels v1 and v2 in
ex_engine/factors/attn_dispatch.py with a rule that hard-codes 16 SMs. This example builds a
stand-in for that module (the engine is not installed here), patches its `should_use_paged_v2`
with `ThresholdTable.v2_rule(...)`, and prints, for a few decode steps, what the seed's rule, the
table and vLLM's rule choose. In the engine itself the patch is the two lines

    table = ThresholdTable.load(path)
    attn_dispatch.should_use_paged_v2 = table.v2_rule(num_heads=28, head_dim=128, dtype="bf16")

run before any module does `from ...attn_dispatch import should_use_paged_v2`. The call sites
keep working unchanged; adding `batch=num_seqs` to them makes the answer batch-aware.

    /usr/bin/python3 python/examples/seed_engine_rule.py [--table PATH] [--dtype bf16]

Standard library only (no torch).
"""

import argparse
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.dirname(HERE))
from attn_tune_table import ThresholdTable  # noqa: E402

DEFAULT_TABLE = os.path.join(REPO, "results", "cpu-amd-epyc-quick.json")

# The seed's ex_engine/factors/attn_dispatch.py as far as this example needs it, executed as a
# module of its own so that patching it looks as it does in the engine.
SEED_ATTN_DISPATCH = '''
from dataclasses import dataclass
from typing import Optional

_SM_COUNT = 16
_V2_THRESHOLD_FACTOR = 2


@dataclass
class AttnDispatchConfig:
    num_heads: int = 28
    num_kv_heads: int = 4
    head_dim: int = 128
    scale: Optional[float] = None
    is_causal: bool = True
    window_left: int = -1
    window_right: int = -1
    block_size: int = 16
    max_context_len: int = 131072
    softcap: float = 0.0


def should_use_paged_v2(seq_len: int, num_kv_heads: int, block_size: int = 16,
                        partition_size: int = 512) -> bool:
    num_tiles = num_kv_heads * ((seq_len + partition_size - 1) // partition_size)
    return num_tiles > _V2_THRESHOLD_FACTOR * _SM_COUNT
'''


def make_seed_attn_dispatch():
    mod = types.ModuleType("ex_engine.factors.attn_dispatch")
    # dataclasses looks the class's module up in sys.modules while it builds the class.
    sys.modules[mod.__name__] = mod
    try:
        exec(compile(SEED_ATTN_DISPATCH, "<seed attn_dispatch>", "exec"), mod.__dict__)
    finally:
        del sys.modules[mod.__name__]
    return mod


def vllm_use_v2(num_seqs, max_seq_len, num_heads, partition_size=512):
    """vLLM CUDA's rule (its paged_attention v1/v2; vLLM's CPU attention has another): v1 when
    max_seq_len <= 8192 and (one partition or num_seqs * num_heads > 512)."""
    max_num_partitions = (max_seq_len + partition_size - 1) // partition_size
    use_v1 = max_seq_len <= 8192 and (max_num_partitions == 1 or num_seqs * num_heads > 512)
    return not use_v1


def engine_decode_step(attn_dispatch, cfg, num_seqs, max_seq_len, num_kv_heads):
    """The engine's call site: it reads the rule from the module at call time, so the patched
    rule answers. `batch=` is the one addition the table's rule wants."""
    return attn_dispatch.should_use_paged_v2(max_seq_len, num_kv_heads, cfg.block_size,
                                             batch=num_seqs)


def fam(v2):
    return "v2" if v2 else "v1"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", default=DEFAULT_TABLE,
                    help="threshold table (default: the shipped %(default)s)")
    ap.add_argument("--dtype", default="bf16", help="the model's dtype (default %(default)s)")
    a = ap.parse_args(argv)

    attn_dispatch = make_seed_attn_dispatch()
    cfg = attn_dispatch.AttnDispatchConfig()
    seed_rule = attn_dispatch.should_use_paged_v2  # kept to compare against

    table = ThresholdTable.load(a.table)
    attn_dispatch.should_use_paged_v2 = table.v2_rule(
        num_heads=cfg.num_heads, head_dim=cfg.head_dim, dtype=a.dtype, causal=cfg.is_causal,
        window_left=cfg.window_left, window_right=cfg.window_right, softcap=cfg.softcap)
    dtype = attn_dispatch.should_use_paged_v2.bound["dtype"]

    dev = table.provenance.get("device", {})
    print("table: %s (version %d, measured on %s %s)" % (
        os.path.relpath(a.table), table.version, dev.get("backend", "?"), dev.get("name", "?")))
    print("model: num_heads=%d head_dim=%d dtype=%s block_size=%d (AttnDispatchConfig)"
          % (cfg.num_heads, cfg.head_dim, dtype, cfg.block_size))
    if all(p["dtype"] != dtype for p in table.table["decode"]):
        print("note: the table has no %s points; its answers come from the nearest %s point"
              % (dtype, "/".join(sorted({p["dtype"] for p in table.table["decode"]}))))
    print()
    print("%5s %8s %8s  %-4s %-5s %-9s %-9s %s" % ("batch", "seq_len", "kv_heads", "seed",
                                                   "table", "vllm-cuda", "partition",
                                                   "nearest table point"))
    differ = rows = 0
    for num_kv_heads in (cfg.num_kv_heads, 8):
        num_heads = cfg.num_heads * num_kv_heads // cfg.num_kv_heads
        if num_kv_heads != cfg.num_kv_heads:
            # Another model shape: a second rule, as an engine serving it would make.
            rule = table.v2_rule(num_heads=num_heads, head_dim=cfg.head_dim, dtype=dtype)
        else:
            rule = attn_dispatch.should_use_paged_v2
        for batch in (1, 4, 32):
            for seq_len in (512, 4096, 16384):
                seed = seed_rule(seq_len, num_kv_heads, cfg.block_size)
                if rule is attn_dispatch.should_use_paged_v2:
                    ours = engine_decode_step(attn_dispatch, cfg, batch, seq_len, num_kv_heads)
                else:
                    ours = rule(seq_len, num_kv_heads, cfg.block_size, batch=batch)
                c = table.lookup(batch, seq_len, num_heads, num_kv_heads, cfg.head_dim,
                                 cfg.block_size, dtype)
                assert ours == (c.family == "decode_v2")
                p = c.point
                print("%5d %8d %8d  %-4s %-5s %-9s %-9s b=%d kvh=%d gqa=%d %s (distance %.2f)"
                      % (batch, seq_len, num_kv_heads, fam(seed), fam(ours),
                    fam(vllm_use_v2(batch, seq_len, num_heads)),
                    (c.partition or "own-splits") if ours else "-",
                    p["batch"], p["num_kv_heads"], p["gqa_ratio"], p["dtype"], c.distance))
                rows += 1
                differ += seed != ours
    print()
    print("the table and the seed's rule differ on %d of %d decode steps" % (differ, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
