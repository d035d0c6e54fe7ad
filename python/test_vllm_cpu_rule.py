"""Tests of attn_tune_engines.vllm_cpu_rule: vLLM CPU's fixed rule, the table's answers per
batch, and the patch of vLLM's scheduler-metadata call, on a small table written here.
Standard library only (no torch, no vLLM):

    /usr/bin/python3 -m unittest test_vllm_cpu_rule     # from python/
"""

import copy
import json
import os
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from attn_tune_engines import vllm_cpu_rule as rule  # noqa: E402
from attn_tune_table import ThresholdTable  # noqa: E402

VEC16, VEC, AMX = (rule.ISAS.index(i) for i in ("vec16", "vec", "amx"))


TABLE = os.path.join(HERE, "testdata", "vllm_cpu_synthetic_table.json")


def small_table():
    """The synthetic table (not a measurement), bf16 Llama-3-8B shape, block size 32. Batch 1:
    v1 with vec up to 2048 keys, then v2 with vec16; batch 16: v1 with vec everywhere."""
    return ThresholdTable.load(TABLE)


SHAPE = dict(num_heads=32, num_kv_heads=8, head_dim=128, block_size=32, dtype="bf16")


class VllmRuleTest(unittest.TestCase):
    def test_vllm_isa_is_get_attn_isa(self):
        self.assertEqual(rule.vllm_isa("bf16", 32, 128, amx=True), "amx")
        self.assertEqual(rule.vllm_isa("fp16", 32, 128, amx=True), "vec")
        self.assertEqual(rule.vllm_isa("bf16", 16, 128, amx=True), "vec16")
        self.assertEqual(rule.vllm_isa("bf16", 64, 128, amx=False), "vec")
        self.assertEqual(rule.vllm_isa("bf16", 32, 80, amx=True), "vec16")  # 80 % 32 != 0
        self.assertEqual(rule.vllm_isa("torch.float32", 48, 64, amx=False), "vec16")
        # fp8 caches: the same paths, and no vec16 (vLLM raises NotImplementedError there).
        self.assertEqual(rule.vllm_isa("bf16", 32, 128, amx=True, kv_dtype="fp8"), "amx")
        self.assertEqual(rule.vllm_isa("fp16", 32, 128, amx=True, kv_dtype="fp8_e5m2"), "vec")
        with self.assertRaises(ValueError):
            rule.vllm_isa("bf16", 32, 80, amx=True, kv_dtype="fp8_e4m3")
        self.assertEqual(rule.vllm_isa("bf16", 32, 80, amx=True, kv_dtype="auto"), "vec16")

    def test_vllm_kv_split_from_the_environment(self):
        self.assertTrue(rule.vllm_kv_split({}))
        self.assertFalse(rule.vllm_kv_split({"VLLM_CPU_ATTN_SPLIT_KV": "0"}))
        self.assertTrue(rule.vllm_kv_split({"VLLM_CPU_ATTN_SPLIT_KV": "1"}))
        c = rule.vllm_choice(dtype="bf16", block_size=32, head_dim=128, amx=False, environ={},
                             seq_lens=[100, 200])
        self.assertEqual((c.enable_kv_split, c.isa), (True, "vec"))


class TableRuleTest(unittest.TestCase):
    def setUp(self):
        self.table = small_table()

    def choice(self, seq_lens, **kw):
        return rule.table_choice(self.table, seq_lens, **dict(SHAPE, **kw))

    def test_split_and_isa_per_batch(self):
        c = self.choice([1000])
        self.assertEqual((c.enable_kv_split, c.isa), (False, "vec"))
        c = self.choice([4096])
        self.assertEqual((c.enable_kv_split, c.isa), (True, "vec16"))
        # Batch 2 of lengths up to 5000: the batch-1 point (nearer than 16), the longest length.
        c = self.choice([300, 5000])
        self.assertEqual((c.enable_kv_split, c.isa), (True, "vec16"))
        c = self.choice([5000] * 16)
        self.assertEqual((c.enable_kv_split, c.isa), (False, "vec"))
        self.assertIn("batch=16", c.why)

    def test_fp8_cache_is_looked_up_and_never_gets_vec16(self):
        # The synthetic table has no fp8 point: its bf16 points answer (64 farther away).
        c = self.choice([1000], kv_dtype="fp8_e4m3")
        self.assertEqual((c.enable_kv_split, c.isa), (False, "vec"))
        # Its vec16 at 4096 keys reads no fp8 cache: vLLM's ISA for the shape instead.
        c = self.choice([4096], kv_dtype="fp8", amx=False)
        self.assertEqual((c.enable_kv_split, c.isa), (True, "vec"))
        self.assertIn("does not run", c.why)

    def test_isa_that_does_not_run_on_the_shape_falls_back(self):
        # Block size 16: the table's vec cannot run; vLLM's own choice there is vec16.
        c = self.choice([1000], block_size=16)
        self.assertEqual(c.isa, "vec16")
        self.assertIn("does not run", c.why)

    def test_cache_layout_is_kept(self):
        c = self.choice([4096], cache_isa="vec")
        self.assertEqual(c.isa, "vec16")  # same layout as vec
        c = self.choice([4096], cache_isa="amx")
        self.assertEqual((c.enable_kv_split, c.isa), (True, "amx"))
        self.assertIn("another cache layout", c.why)

    def test_no_decode_request_is_vllm_rule(self):
        c = self.choice([], amx=False)
        self.assertEqual((c.enable_kv_split, c.isa), (rule.vllm_kv_split(), "vec"))


def results_line(batch, ctx, family, isa, seconds, held_out=False, status="ok", **extra):
    w = {"phase": "decode", "batch": batch, "context_len": ctx, "num_heads": 32,
         "num_kv_heads": 8, "head_dim": 128, "block_size": 32, "dtype": "bf16", "causal": True,
         "window_left": -1, "window_right": -1, "softcap": 0.0, "held_out": held_out}
    params = dict({"isa": isa}, **extra)
    key = "%s[%s]" % (family, ",".join("%s=%d" % kv for kv in sorted(params.items())))
    return json.dumps({"type": "measurement", "status": status, "workload": w,
                       "workload_key": "decode b=%d ctx=%d" % (batch, ctx),
                       "config": {"family": family, "params": params}, "config_key": key,
                       "timing": {"median_s": seconds}})


class RegretTest(unittest.TestCase):
    def write(self, lines):
        f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
        f.write("\n".join([json.dumps({"type": "header"})] + lines) + "\n")
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_vllm_rule_is_charged_its_own_configuration(self):
        path = self.write([
            # b=1: vLLM (v2, vec) 2.0 against the best 1.0 -> 100 %.
            results_line(1, 512, "decode_v1", VEC, 1.0),
            results_line(1, 512, "decode_v2", VEC, 2.0, partition=512),  # extra params ignored
            results_line(1, 512, "decode_v2", VEC16, 1.5),
            # b=4: vLLM's choice is the best -> 0 %; a failed faster one does not count.
            results_line(4, 512, "decode_v2", VEC, 1.0),
            results_line(4, 512, "decode_v1", VEC, 0.5, status="failed"),
            results_line(4, 512, "decode_v1", VEC16, 1.25),
            # held out: not in the sweep's figures.
            results_line(2, 700, "decode_v1", VEC, 1.0, held_out=True),
            results_line(2, 700, "decode_v2", VEC, 4.0, held_out=True),
        ])
        r = rule.rule_regret(path, rule.vllm_rule({}, amx=False))
        self.assertEqual(r["points"], 2)
        self.assertAlmostEqual(r["mean"], 0.5)
        self.assertAlmostEqual(r["worst"], 1.0)
        self.assertEqual(r["worst_workload"], "decode b=1 ctx=512")
        off = rule.rule_regret(path, rule.vllm_rule({"VLLM_CPU_ATTN_SPLIT_KV": "0"}, amx=False))
        # Split off: b=1's v1 vec is the best; b=4's v1 vec failed the check: a wrong answer,
        # not a slowdown.
        self.assertEqual(off["slowdowns"], {"decode b=1 ctx=512": 0.0})
        self.assertEqual((off["wrong"], off["missing"]), (["decode b=4 ctx=512"], []))
        held = rule.rule_regret(path, rule.vllm_rule({}, amx=False), held_out=True)
        self.assertEqual((held["points"], held["worst"]), (1, 3.0))

    def test_a_choice_without_a_measurement_is_listed(self):
        path = self.write([results_line(1, 512, "decode_v1", VEC16, 1.0)])
        r = rule.rule_regret(path, rule.vllm_rule({}, amx=False))
        self.assertEqual((r["points"], r["wrong"], r["missing"]), (0, [], ["decode b=1 ctx=512"]))


def isa_table(isas_by_cache):
    """The synthetic table's batch-1 point (version 5) once per cache dtype, its measured
    lengths' best configurations on the ISAs given: {"auto": ["amx", "amx", "vec"], ...}."""
    with open(TABLE, encoding="utf-8") as f:
        base = json.load(f)
    template = base["decode"][0]
    points = []
    for kv, isas in isas_by_cache.items():
        p = copy.deepcopy(template)
        if kv != "auto":
            p["kv_dtype"] = kv
        m0 = p["measured"][0]
        p["measured"] = []
        for i, isa in enumerate(isas):
            m = copy.deepcopy(m0)
            m["context_len"] = 256 << i
            m["best"]["config"]["params"]["isa"] = rule.ISAS.index(isa)
            p["measured"].append(m)
        points.append(p)
    return ThresholdTable(dict(base, version=5, decode=points))


class BuildIsaTest(unittest.TestCase):
    def setUp(self):
        self.table = isa_table({"auto": ["amx", "amx", "vec"], "fp8_e4m3": ["vec", "vec", "amx"],
                                "fp8_e5m2": ["vec16", "vec16", "amx"]})

    def test_the_path_the_points_choose_most(self):
        isa = lambda **kw: rule.table_isa(self.table, "bf16", 32, 128, **kw)  # noqa: E731
        self.assertEqual(isa(), "amx")
        self.assertEqual(isa(kv_dtype="fp8_e4m3"), "vec")
        self.assertEqual(isa(kv_dtype="fp8"), "vec")  # vLLM's name for E4M3
        # vec16 reads no fp8 cache: its two wins do not count.
        self.assertEqual(isa(kv_dtype="fp8_e5m2"), "amx")
        self.assertEqual(isa(num_kv_heads=8, num_heads=32), "amx")
        self.assertIsNone(isa(num_kv_heads=4))
        self.assertIsNone(rule.table_isa(self.table, "bf16", 32, 64))
        self.assertIsNone(rule.table_isa(self.table, "fp16", 32, 128))

    def test_patched_get_attn_isa(self):
        module = types.SimpleNamespace(
            _get_attn_isa=lambda dtype, block_size, head_size=None, kv_cache_dtype=None: (
                "neon" if head_size == 96 else "amx"))
        original = rule.patch_attn_isa(module, self.table)
        self.assertEqual(original("torch.bfloat16", 32, 128, "fp8_e4m3"), "amx")
        self.assertEqual(module._get_attn_isa("torch.bfloat16", 32, 128, "fp8_e4m3"), "vec")
        self.assertEqual(module._get_attn_isa("torch.bfloat16", 32, 128, "auto"), "amx")
        self.assertEqual(module._get_attn_isa("torch.bfloat16", 32, 64, "fp8"), "amx")  # no point
        self.assertEqual(module._get_attn_isa("torch.bfloat16", 32, 96), "neon")  # not x86's


class PatchTest(unittest.TestCase):
    def test_patched_call_passes_the_tables_answers(self):
        calls = []
        ops = types.SimpleNamespace(cpu_attn_get_scheduler_metadata=lambda **kw: calls.append(kw))
        rule.patch_scheduler_metadata(ops, small_table(), block_size=32)
        common = dict(num_heads=32, num_kv_heads=8, head_dim=128, dtype="torch.bfloat16",
                      causal=True, sliding_window_size=-1, isa="vec", enable_kv_split=True)
        # Two decode requests (4000 and 1000 keys) and a prefill chunk of 8 rows.
        ops.cpu_attn_get_scheduler_metadata(num_reqs=3, seq_lens=[4000, 1000, 50],
                                            query_start_loc=[0, 1, 2, 10], **common)
        self.assertEqual((calls[-1]["enable_kv_split"], calls[-1]["isa"]), (True, "vec16"))
        ops.cpu_attn_get_scheduler_metadata(num_reqs=1, seq_lens=[700],
                                            query_start_loc=[0, 1], **common)
        self.assertEqual((calls[-1]["enable_kv_split"], calls[-1]["isa"]), (False, "vec"))
        # An fp8 cache is looked up too: split off at 700 keys, as the table says.
        ops.cpu_attn_get_scheduler_metadata(num_reqs=1, seq_lens=[700],
                                            query_start_loc=[0, 1], kv_cache_dtype="fp8",
                                            **common)
        self.assertEqual((calls[-1]["enable_kv_split"], calls[-1]["isa"]), (False, "vec"))
        self.assertEqual(calls[-1]["kv_cache_dtype"], "fp8")

    def test_example_runs(self):
        example = os.path.join(HERE, "examples", "vllm_cpu_rule.py")
        r = subprocess.run([sys.executable, example], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("enable_kv_split", r.stdout)


if __name__ == "__main__":
    unittest.main()
