"""Tests of the Python table reader on the synthetic fixture (the C++ reader's test reads the same
file); with ATTN_TUNE_BIN set, every query is also put to `attn-tune table lookup` and the two
answers must agree."""

import itertools
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attn_tune_table as att  # noqa: E402

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata",
                       "synthetic_table.json")


def query(batch, ctx, kvh=8, heads=32, dtype="fp16", window=-1):
    return dict(batch=batch, context_len=ctx, num_heads=heads, num_kv_heads=kvh, head_dim=128,
                block_size=16, dtype=dtype, window_left=window)


class ReaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.t = att.ThresholdTable.load(FIXTURE)

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
        with self.assertRaises(att.TableError):
            att.ThresholdTable(dict(self.t.table, version=99))
        with self.assertRaises(ValueError):
            self.t.lookup(**query(0, 10))

    @unittest.skipUnless(os.environ.get("ATTN_TUNE_BIN"), "ATTN_TUNE_BIN not set")
    def test_agrees_with_attn_tune_table_lookup(self):
        exe = os.environ["ATTN_TUNE_BIN"]
        queries = [query(b, c, kvh, kvh * g, dt, w) for b, c, kvh, g, dt, w in itertools.product(
            (1, 3, 8, 50, 64), (100, 512, 1500, 2048, 5000, 32768, 90000), (1, 8), (4, 1),
            ("fp16",), (-1,))]
        queries += [query(2, c, 8, 32, "bf16", w) for c in (512, 4096, 9000) for w in (-1, 4096)]
        for q in queries:
            want = self.t.lookup(**q)
            args = [exe, "table", "lookup", FIXTURE, "--device", "cuda:0"]
            for k, v in q.items():
                args += ["--" + k.replace("_", "-"), str(v)]
            out = subprocess.run(args, capture_output=True, text=True, check=True).stdout.split()
            self.assertEqual(out, [want.family, want.config_key], q)


if __name__ == "__main__":
    unittest.main()
