"""Tests of the Python table reader on the synthetic fixtures, version 2 and the version-1 one kept
from before (the C++ reader's test reads the same files); with ATTN_TUNE_BIN set, every query is
also put to `attn-tune table lookup` and the two answers must agree."""

import itertools
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attn_tune_table as att  # noqa: E402

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")
FIXTURE = os.path.join(TESTDATA, "synthetic_table.json")
FIXTURE_V1 = os.path.join(TESTDATA, "synthetic_table_v1.json")
SHIPPED = os.path.join(os.path.dirname(TESTDATA), "..", "results", "cpu-amd-epyc-quick.json")


def query(batch, ctx, kvh=8, heads=32, dtype="fp16", window=-1):
    return dict(batch=batch, context_len=ctx, num_heads=heads, num_kv_heads=kvh, head_dim=128,
                block_size=16, dtype=dtype, window_left=window)


class ReaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.t = att.ThresholdTable.load(FIXTURE)

    def test_names_the_kernels_it_timed(self):
        self.assertEqual(self.t.kernels["source"], "built-in")
        self.assertTrue(self.t.timed_kernels_named("attn-tune"))
        self.assertFalse(self.t.timed_kernels_named("vllm-paged-attention"))
        table = dict(self.t.table)
        table["provenance"] = dict(table["provenance"], kernels={
            "source": "plugin", "name": "vllm-paged-attention", "version": "0.6",
            "abi_version": 1, "library_sha256": "ab" * 32})
        t = att.ThresholdTable(table)
        self.assertTrue(t.timed_kernels_named("vllm-paged-attention"))
        self.assertFalse(t.timed_kernels_named("attn-tune"))

    def test_exact_points_follow_the_crossover(self):
        c = self.t.lookup(**query(1, 512))
        self.assertTrue(c.exact_point)
        self.assertEqual((c.family, c.config_key), ("decode_v1", "decode_v1[]"))
        self.assertEqual(c.point["v2_from"], 2048)
        c = self.t.lookup(**query(1, 2048))
        self.assertEqual((c.family, c.config_key), ("decode_v2", "decode_v2[partition=256]"))
        c = self.t.lookup(**query(64, 32768))
        self.assertEqual(c.family, "decode_v1")
        self.assertEqual(c.point["v2_from"], "never")

    def test_v2_intervals_where_no_threshold_holds(self):
        # kvh 8, batch 4: v2 by 28% at ctx 64, within noise at 512, v1 at 4096.
        c = self.t.lookup(**query(4, 64))
        self.assertTrue(c.exact_point)
        self.assertEqual(c.point["v2_intervals"], [[1, 4096]])
        self.assertNotIn("v2_from", c.point)
        self.assertEqual((c.family, c.config_key), ("decode_v2", "decode_v2[partition=256]"))
        self.assertEqual(self.t.lookup(**query(4, 4095)).family, "decode_v2")
        self.assertEqual(self.t.lookup(**query(4, 4096)).family, "decode_v1")
        self.assertEqual(self.t.table["regret"]["sweep"]["table_lookup"]["beyond_noise"], 0)

    def test_nearest_point_fallback(self):
        c = self.t.lookup(**query(6, 3000))
        self.assertFalse(c.exact_point)
        self.assertEqual(c.point["batch"], 8)
        self.assertEqual(c.measured_context, 2048)
        c = self.t.lookup(**query(8, 2048, dtype="bf16"))
        self.assertAlmostEqual(c.distance, att.CATEGORY_PENALTY)
        c = self.t.lookup(**query(8, 8192, window=4096))
        self.assertEqual((c.point["window_left"], c.point["batch"]), (4096, 1))

    def test_rejects_what_is_not_a_table(self):
        with self.assertRaises(att.TableError):
            att.ThresholdTable({})
        with self.assertRaisesRegex(att.TableError, r"unsupported threshold table version 3 "
                                    r"\(this reader reads versions 1 to 2\)"):
            att.ThresholdTable(dict(self.t.table, version=3))
        with self.assertRaises(att.TableError):
            att.ThresholdTable(dict(self.t.table, version=True))
        with self.assertRaises(ValueError):
            self.t.lookup(**query(0, 10))

    @unittest.skipUnless(os.environ.get("ATTN_TUNE_BIN"), "ATTN_TUNE_BIN not set")
    def test_agrees_with_attn_tune_table_lookup(self):
        exe = os.environ["ATTN_TUNE_BIN"]
        queries = [query(b, c, kvh, kvh * g, dt, w) for b, c, kvh, g, dt, w in itertools.product(
            (1, 3, 4, 8, 50, 64), (64, 100, 512, 1500, 2048, 4095, 4096, 5000, 32768, 90000),
            (1, 8), (4, 1), ("fp16",), (-1,))]
        queries += [query(2, c, 8, 32, "bf16", w) for c in (512, 4096, 9000) for w in (-1, 4096)]
        for path in (FIXTURE, FIXTURE_V1):
            table = att.ThresholdTable.load(path)
            for q in queries:
                want = table.lookup(**q)
                args = [exe, "table", "lookup", path, "--device", "cuda:0"]
                for k, v in q.items():
                    args += ["--" + k.replace("_", "-"), str(v)]
                out = subprocess.run(args, capture_output=True, text=True,
                                     check=True).stdout.split()
                self.assertEqual(out, [want.family, want.config_key], (path, q))


class Version1Test(unittest.TestCase):
    """Tables written before version 2 (the kept fixture, the shipped results) still read."""

    def test_version_1_fixture(self):
        t = att.ThresholdTable.load(FIXTURE_V1)
        self.assertEqual(t.version, 1)
        c = t.lookup(**query(1, 512))
        self.assertEqual((c.family, c.config_key), ("decode_v1", "decode_v1[]"))
        self.assertEqual(c.point["v2_from"], 2048)
        self.assertNotIn("v2_intervals", c.point)
        c = t.lookup(**query(1, 2048))
        self.assertEqual((c.family, c.config_key), ("decode_v2", "decode_v2[partition=256]"))
        self.assertEqual(t.lookup(**query(64, 32768)).family, "decode_v1")

    def test_shipped_table(self):
        t = att.ThresholdTable.load(SHIPPED)
        self.assertEqual(t.version, 1)
        for p in t.table["decode"]:
            for m in p["measured"]:
                c = t.lookup(p["batch"], m["context_len"], p["num_heads"], p["num_kv_heads"],
                             p["head_dim"], p["block_size"], p["dtype"])
                self.assertTrue(c.exact_point)
                v2 = att.ThresholdTable.uses_v2(p, 1, m["context_len"])
                self.assertEqual(c.family, "decode_v2" if v2 else "decode_v1")


if __name__ == "__main__":
    unittest.main()
