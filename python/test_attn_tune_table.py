"""Tests of the Python table reader on the synthetic fixtures, version 3 and the version-2 and
version-1 ones kept from before (the C++ reader's test reads the same files), and the version-4
one with batch rules; with ATTN_TUNE_BIN set, every query is also put to `attn-tune table
lookup` and the two answers must agree."""

import contextlib
import copy
import inspect
import io
import itertools
import json
import logging
import os
import pickle
import random
import re
import subprocess
import tempfile
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attn_tune_table as att  # noqa: E402

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")
FIXTURE = os.path.join(TESTDATA, "synthetic_table.json")
FIXTURE_V2 = os.path.join(TESTDATA, "synthetic_table_v2.json")
FIXTURE_V3 = os.path.join(TESTDATA, "synthetic_table_v3.json")
FIXTURE_V1 = os.path.join(TESTDATA, "synthetic_table_v1.json")
FIXTURE_V4 = os.path.join(TESTDATA, "table_v4_batch_rules.json")
SHIPPED = os.path.join(os.path.dirname(TESTDATA), "..", "results", "cpu-amd-epyc-quick.json")
EXAMPLE = os.path.join(os.path.dirname(TESTDATA), "examples", "seed_engine_rule.py")


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

    def test_names_the_engine_rule_its_kernels_replace(self):
        self.assertEqual(self.t.engine_rule, "vllm-cuda")
        self.assertEqual(att.ThresholdTable.load(FIXTURE_V2).engine_rule, "")
        self.assertEqual(att.ThresholdTable.load(FIXTURE_V1).engine_rule, "")

    def test_a_kernel_that_chooses_its_splits_has_no_partition(self):
        c = self.t.lookup(**query(1, 2048))
        self.assertEqual((c.partition, c.kernel_chooses_splits), (256, False))
        c = self.t.lookup(**query(1, 512))
        self.assertEqual((c.partition, c.kernel_chooses_splits), (None, False))
        # The same table with its v2 configurations stripped of their partition, as a kernel
        # that chooses its splits declares them.
        table = copy.deepcopy(self.t.table)
        for p in table["decode"]:
            for m in p["measured"]:
                for slot in ("best", "v2"):
                    cfg = (m.get(slot) or {}).get("config")
                    if cfg and cfg["family"] == "decode_v2":
                        cfg["params"].pop("partition", None)
                        cfg["key"] = "decode_v2[]"
        c = att.ThresholdTable(table).lookup(**query(1, 2048))
        self.assertEqual((c.family, c.config_key), ("decode_v2", "decode_v2[]"))
        self.assertEqual((c.partition, c.kernel_chooses_splits), (None, True))

    def test_exact_points_follow_the_crossover(self):
        c = self.t.lookup(**query(1, 512))
        self.assertTrue(c.exact_point)
        self.assertEqual((c.family, c.config_key), ("decode_v1", "decode_v1[]"))
        # Where log(v2 / v1) between the measured 512 and 2048 crosses zero.
        self.assertEqual(c.point["v2_from"], 1821)
        c = self.t.lookup(**query(1, 2048))
        self.assertEqual((c.family, c.config_key), ("decode_v2", "decode_v2[partition=256]"))
        c = self.t.lookup(**query(64, 32768))
        self.assertEqual(c.family, "decode_v1")
        self.assertEqual(c.point["v2_from"], "never")

    def test_v2_intervals_where_no_threshold_holds(self):
        # kvh 8, batch 4: v2 by 28% at ctx 64, within noise at 512, v1 at 4096. v2's median is
        # the lower one at 512, so v2 ends right after it, at 558.
        c = self.t.lookup(**query(4, 64))
        self.assertTrue(c.exact_point)
        self.assertEqual(c.point["v2_intervals"], [[1, 558]])
        self.assertNotIn("v2_from", c.point)
        self.assertEqual((c.family, c.config_key), ("decode_v2", "decode_v2[partition=256]"))
        self.assertEqual(self.t.lookup(**query(4, 557)).family, "decode_v2")
        self.assertEqual(self.t.lookup(**query(4, 558)).family, "decode_v1")
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

    def test_a_tie_between_measured_lengths_goes_to_the_shorter(self):
        # 1024 is one doubling from 512 and from 2048: the shorter answers, whatever order a
        # point lists its lengths in (the C++ reader's test does the same).
        doc = copy.deepcopy(self.t.table)
        for p in doc["decode"]:
            p["measured"].reverse()
        t = att.ThresholdTable(doc)
        self.assertEqual(t.lookup(**query(8, 1024)).measured_context, 512)
        self.assertEqual(t.lookup(**query(8, 4096)).measured_context, 2048)

    def test_rejects_what_is_not_a_table(self):
        with self.assertRaises(att.TableError):
            att.ThresholdTable({})
        with self.assertRaisesRegex(att.TableError, r"unsupported threshold table version 6 "
                                    r"\(this reader reads versions 1 to 5\)"):
            att.ThresholdTable(dict(self.t.table, version=6))
        with self.assertRaisesRegex(att.TableError, r"version 0 \(this reader reads versions 1 "):
            att.ThresholdTable(dict(self.t.table, version=0))
        with self.assertRaises(att.TableError):
            att.ThresholdTable(dict(self.t.table, version=True))
        with self.assertRaises(ValueError):
            self.t.lookup(**query(0, 10))

    def test_refuses_damaged_points_as_attn_tune_does(self):
        # A damaged decode point is refused naming it, not answered from.
        for field, value in (("batch", -4), ("gqa_ratio", 0), ("dtype", "fp12"),
                             ("v2_intervals", [[2048, 1024]]), ("measured", [])):
            table = json.loads(json.dumps(self.t.table))
            table["decode"][0][field] = value
            with self.assertRaisesRegex(att.TableError, r"threshold table: decode\[0\]\." + field):
                att.ThresholdTable(table)
        # A 16-bit cache of another dtype than the query's is no query attn-tune answers either.
        with self.assertRaises(ValueError):
            self.t.lookup(**dict(query(4, 3000), kv_dtype="bf16"))

    def test_refuses_damaged_configurations_and_wide_integers_as_the_cpp_reader_does(self):
        # A second audit (2026-12-06, evening): a partition past 32 bits or no integer, a
        # configuration of another family than its slot's, and integers past 2^31 - 1 in a point
        # were taken here and refused (or narrowed) by the C++ reader and attn-tune.
        where = None
        for i, p in enumerate(self.t.table["decode"]):
            for k, m in enumerate(p["measured"]):
                if m.get("v2") and "partition" in m["v2"]["config"]["params"]:
                    where = (i, k)
                    break
            if where:
                break
        self.assertIsNotNone(where)
        i, k = where
        at = r"decode\[%d\]\.measured\[%d\]\.v2\.config\." % (i, k)
        for value, words in ((0, "positive"), (2 ** 32 + 512, "32-bit"), (512.5, "32-bit"),
                             ("512", "32-bit")):
            table = json.loads(json.dumps(self.t.table))
            table["decode"][i]["measured"][k]["v2"]["config"]["params"]["partition"] = value
            with self.assertRaisesRegex(att.TableError, at + r"params\.partition: expected a " +
                                        words):
                att.ThresholdTable(table)
        table = json.loads(json.dumps(self.t.table))
        table["decode"][i]["measured"][k]["v2"]["config"]["family"] = "decode_v1"
        with self.assertRaisesRegex(att.TableError, at + r'family: expected "decode_v2"'):
            att.ThresholdTable(table)
        for field, value in (("batch", 2 ** 31), ("context_len", 2 ** 32 + 512),
                             ("window_left", 2 ** 32 - 1)):
            table = json.loads(json.dumps(self.t.table))
            if field == "context_len":
                table["decode"][0]["measured"][0][field] = value
            else:
                table["decode"][0][field] = value
            with self.assertRaisesRegex(att.TableError, r"threshold table: decode\[0\]\."):
                att.ThresholdTable(table)

    @unittest.skipUnless(os.environ.get("ATTN_TUNE_BIN"), "ATTN_TUNE_BIN not set")
    def test_agrees_with_attn_tune_table_lookup(self):
        exe = os.environ["ATTN_TUNE_BIN"]
        queries = [query(b, c, kvh, kvh * g, dt, w) for b, c, kvh, g, dt, w in itertools.product(
            (1, 3, 4, 8, 50, 64), (64, 100, 512, 1500, 2048, 4095, 4096, 5000, 32768, 90000),
            (1, 8), (4, 1), ("fp16",), (-1,))]
        queries += [query(2, c, 8, 32, "bf16", w) for c in (512, 4096, 9000) for w in (-1, 4096)]
        for path in (FIXTURE, FIXTURE_V2, FIXTURE_V1):
            table = att.ThresholdTable.load(path)
            for q in queries:
                want = table.lookup(**q)
                args = [exe, "table", "lookup", path, "--device", "cuda:0"]
                for k, v in q.items():
                    args += ["--" + k.replace("_", "-"), str(v)]
                out = subprocess.run(args, capture_output=True, text=True,
                                     check=True).stdout.split()
                self.assertEqual(out, [want.family, want.config_key], (path, q))


def with_fp8_points(table):
    """`table` (the version-5 fixture) plus, for each decode point, a copy measured with an
    fp8_e4m3 cache whose decision is the opposite: v2 where the original chooses v1 and v1 where
    it chooses v2 (the configurations stay the point's own)."""
    t = copy.deepcopy(table)
    extra = []
    for p in t["decode"]:
        q = copy.deepcopy(p)
        q["kv_dtype"] = "fp8_e4m3"
        flipped, at = [], 1
        for lo, hi in p["v2_intervals"]:
            if lo > at:
                flipped.append([at, lo])
            at = hi if hi is not None else None
            if at is None:
                break
        if at is not None:
            flipped.append([at, None])
        q["v2_intervals"] = flipped
        q.pop("v2_from", None)  # optional from version 2 on; the intervals decide
        extra.append(q)
    t["decode"] += extra
    return t


class LoadTest(unittest.TestCase):
    """What load() says of a path that is not a table, and a sweep's folder standing for its
    table, as `attn-tune table show` takes it."""

    def test_a_folder_and_files_that_are_not_tables(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(att.TableError, "a folder without a threshold_table.json"):
                att.ThresholdTable.load(d)
            empty = os.path.join(d, "empty.json")
            open(empty, "w").close()
            with self.assertRaisesRegex(att.TableError, "empty.json is not valid JSON"):
                att.ThresholdTable.load(empty)
            with self.assertRaisesRegex(att.TableError, "cannot read threshold table .*nope"):
                att.ThresholdTable.load(os.path.join(d, "nope.json"))
            nan = os.path.join(d, "nan.json")
            with open(FIXTURE) as f, open(nan, "w") as g:
                g.write(f.read().replace('"softcap": 0.0', '"softcap": NaN', 1))
            with self.assertRaisesRegex(att.TableError, "nan.json is not valid JSON .*NaN"):
                att.ThresholdTable.load(nan)
            with open(FIXTURE) as f, open(os.path.join(d, "threshold_table.json"), "w") as g:
                g.write(f.read())
            self.assertEqual(att.ThresholdTable.load(d).table,
                             att.ThresholdTable.load(FIXTURE).table)


def fixture_doc(path=FIXTURE):
    """The parsed JSON of a fixture (a fresh copy each call)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def run_main(args):
    """The module's command line run in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = att.main(args)
        except SystemExit as e:  # argparse's usage errors
            code = e.code
    return code, out.getvalue(), err.getvalue()


class DamagedFileTest(unittest.TestCase):
    """Files and tables the reader refuses with one TableError line naming the file, the point or
    the fleet entry, never with an AttributeError, KeyError or RecursionError; and the byte order
    mark it reads past, as the C++ readers do."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        # Quiet: tables read for a device they were not measured on say so as a warning.
        quiet = logging.NullHandler()
        logging.getLogger("attn_tune_table").addHandler(quiet)
        self.addCleanup(logging.getLogger("attn_tune_table").removeHandler, quiet)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def refused(self, path, pattern, **kw):
        with self.assertRaises(att.TableError, msg=pattern) as cm:
            att.ThresholdTable.load(path, **kw)
        self.assertRegex(str(cm.exception), pattern)
        self.assertNotIn("\n", str(cm.exception))

    def test_a_top_level_that_is_no_object_names_the_file(self):
        for name, text, kind in (("array.json", "[1, 2]", "an array"),
                                 ("string.json", '"a table"', "a string"),
                                 ("number.json", "5", "a number"), ("null.json", "null", "null")):
            path = self.write(name, text)
            for kw in ({}, {"device_name": "H100-SXM"}, {"nearest": True}):
                self.refused(path, "^%s is not a threshold table: the top level is %s, not an "
                                   "object$" % (re.escape(path), kind), **kw)
        # The command line says so in one line (exit 2), as attn-tune does, with no traceback.
        code, out, err = run_main([os.path.join(self.dir, "array.json"), "--batch", "1",
                                   "--context-len", "64", "--num-heads", "32", "--num-kv-heads",
                                   "8", "--head-dim", "128", "--block-size", "16", "--dtype",
                                   "fp16"])
        self.assertEqual((code, out), (2, ""))
        self.assertRegex(err, r"^attn_tune_table: error: .*array\.json is not a threshold table: "
                              r"the top level is an array, not an object\n$")

    def test_damaged_fleet_entries_name_the_entry(self):
        # devices[0] is h100-sxm, devices[1] a100-sxm4-40gb.
        base = fixture_doc(fleet_fixture(self.dir))
        h100, a100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"
        cases = [
            (lambda f: f["devices"][1].update(device=7), a100,
             r"^fleet table: devices\[1\]\.device: expected a canonical device name \(a string\), "
             r"not 7$"),
            (lambda f: f["devices"][1].update(device=None), h100,
             r"devices\[1\]\.device: expected"),
            (lambda f: f["devices"][1].pop("device"), a100, r"^fleet table: devices\[1\]\.device: "
                                                            r"missing$"),
            (lambda f: f["devices"][0].pop("table"), h100,
             r"^fleet table: devices\[0\]\.table: missing$"),
            (lambda f: f["devices"][0].update(table=[]), h100,
             r"^fleet table: devices\[0\]\.table: expected an object$"),
            (lambda f: f["devices"].append("h200"), h100,
             r"^fleet table: devices\[2\]: expected an object$"),
            (lambda f: f["devices"][1].update(raw_name=["A100"]), a100,
             r"^fleet table: devices\[1\]\.raw_name: expected a string$"),
            (lambda f: f["devices"][1].update(sm_count="108"), "NVIDIA H200",
             r"^fleet table: devices\[1\]\.sm_count: expected a number of SMs$"),
            (lambda f: f["devices"][0].update(bandwidth_gbps=-1), "NVIDIA H200",
             r"^fleet table: devices\[0\]\.bandwidth_gbps: expected a number > 0$"),
            (lambda f: f["devices"][0]["table"]["decode"][2].pop("causal"), h100,
             r"^fleet table: devices\[0\] \(h100-sxm\): threshold table: decode\[2\]\.causal: "
             r"missing$"),
            # Two entries for one device: which answered depended on their order.
            (lambda f: f["devices"].append(copy.deepcopy(f["devices"][0])), h100,
             r"^fleet table: devices\[2\]\.device: h100-sxm again \(devices\[0\] is h100-sxm "
             r"too\); a fleet table holds one table per device model$"),
            (lambda f: f["devices"].insert(0, copy.deepcopy(f["devices"][1])), h100,
             r"devices\[2\]\.device: a100-sxm4-40gb again \(devices\[0\] is"),
        ]
        for change, name, pattern in cases:
            fleet = copy.deepcopy(base)
            change(fleet)
            path = self.write("damaged_fleet.json", json.dumps(fleet))
            self.refused(path, pattern, device_name=name, nearest=True)
        # The fleet as it was still reads for both devices.
        path = self.write("fleet.json", json.dumps(base))
        for name, entry in ((h100, "h100-sxm"), (a100, "a100-sxm4-40gb")):
            self.assertEqual(att.ThresholdTable.load(path, device_name=name).selection.device,
                             entry)

    def test_deep_nesting_is_refused(self):
        self.refused(self.write("deep.json", "[" * 100000 + "]" * 100000),
                     r"^.*deep\.json is not a threshold table: it nests deeper than 200 levels$")
        text = json.dumps(fixture_doc())
        # In a field no reader knows, of an otherwise valid table: as deep as Python's parser
        # goes, and deeper.
        for depth in (100000, 300, 201):
            path = self.write("deep_field.json", "%s, \"notes\": %s%s}"
                              % (text[:-1], "[" * depth, "]" * depth))
            self.refused(path, r"deep_field\.json is not a threshold table: it nests deeper "
                               r"than 200 levels$")
            self.refused(path, r"nests deeper than 200 levels", device_name="H100-SXM")
        # A fleet file too.
        fleet = fixture_doc(fleet_fixture(self.dir))
        fleet["devices"][0]["table"]["notes"] = json.loads("[" * 250 + "]" * 250)
        self.refused(self.write("deep_fleet.json", json.dumps(fleet)),
                     r"deep_fleet\.json is not a threshold table: it nests deeper than 200",
                     device_name="H100-SXM")
        # Nesting of an ordinary depth in an unknown field reads as before.
        path = self.write("shallow.json", '%s, "notes": %s%s}' % (text[:-1], "[" * 150, "]" * 150))
        self.assertEqual(att.ThresholdTable.load(path).lookup(**query(1, 4096)).family,
                         "decode_v2")

    def test_every_damaged_point_names_itself_and_its_field(self):
        def pop(*keys):
            def change(t):
                node = t
                for k in keys[:-1]:
                    node = node[k]
                node.pop(keys[-1])
            return change

        def put(value, *keys):
            def change(t):
                node = t
                for k in keys[:-1]:
                    node = node[k]
                node[keys[-1]] = value
            return change

        point = ("decode", 3)
        m0 = point + ("measured", 0)
        cases = [(pop(*point, key), r"decode\[3\]\.%s: missing" % key)
                 for key in ("causal", "window_left", "window_right", "softcap", "batch",
                             "num_heads", "gqa_ratio", "dtype", "v2_intervals", "measured")]
        cases += [
            (put("yes", *point, "causal"), r"decode\[3\]\.causal: expected true or false"),
            (put(-2, *point, "window_left"), r"decode\[3\]\.window_left: expected -1 or a length"),
            (put(None, *point, "window_right"),
             r"decode\[3\]\.window_right: expected -1 or a length"),
            (put("0", *point, "softcap"), r"decode\[3\]\.softcap: expected a number >= 0"),
            (put([], *point), r"decode\[3\]: expected an object"),
            (put(5, *point, "measured", 1), r"decode\[3\]\.measured\[1\]: expected an object"),
            (pop(*m0, "context_len"), r"decode\[3\]\.measured\[0\]\.context_len: missing"),
            (put([], *m0, "v2"), r"decode\[3\]\.measured\[0\]\.v2: expected an object or null"),
            (pop(*m0, "v1", "config"), r"decode\[3\]\.measured\[0\]\.v1\.config: missing"),
            (put("decode_v2[]", *m0, "v2", "config"),
             r"decode\[3\]\.measured\[0\]\.v2\.config: expected an object"),
            (pop(*m0, "v2", "config", "key"),
             r"decode\[3\]\.measured\[0\]\.v2\.config\.key: missing"),
            (pop(*m0, "v2", "config", "params"),
             r"decode\[3\]\.measured\[0\]\.v2\.config\.params: missing"),
            (put([256], *m0, "v2", "config", "params"),
             r"decode\[3\]\.measured\[0\]\.v2\.config\.params: expected an object"),
            (put("256", *m0, "v2", "config", "params", "partition"),
             r"decode\[3\]\.measured\[0\]\.v2\.config\.params\.partition: expected a 32-bit "
             r"integer"),
            (put([[1, "4096"]], *point, "v2_intervals"),
             r"decode\[3\]\.v2_intervals\[0\]: expected an end after its start, or null"),
            # Touching runs are one run: attn-tune and the C++ reader refuse them too.
            (put([[1, 500], [500, 900]], *point, "v2_intervals"),
             r"decode\[3\]\.v2_intervals\[1\]: expected a start of at least 1, after the "
             r"interval before"),
            (put([], "provenance"), r"provenance: expected an object"),
            (put("built-in", "provenance", "kernels"), r"provenance\.kernels: expected an object"),
            (put(7, "provenance", "kernels", "name"),
             r"provenance\.kernels\.name: expected a string"),
            (put(None, "provenance", "device"), r"provenance\.device: expected an object"),
            (put(["H100"], "provenance", "device", "name"),
             r"provenance\.device\.name: expected a string"),
            (put("80GB", "provenance", "device", "memory_bytes"),
             r"provenance\.device\.memory_bytes: expected a number of bytes"),
        ]
        base = fixture_doc()
        for change, pattern in cases:
            table = copy.deepcopy(base)
            table["decode"][3].pop("v2_from", None)  # optional; the intervals decide
            change(table)
            with self.assertRaises(att.TableError, msg=pattern) as cm:
                att.ThresholdTable(table)
            self.assertRegex(str(cm.exception), "^threshold table: %s$" % pattern)
            # Read from a file, the same (also for a device's name: the device's name is read).
            self.refused(self.write("damaged.json", json.dumps(table)), pattern,
                         device_name="H100-SXM")
        # A table without provenance still answers; asked for it, it says it has none.
        table = copy.deepcopy(base)
        del table["provenance"]
        t = att.ThresholdTable(table)
        self.assertEqual(t.lookup(**query(1, 4096)).family, "decode_v2")
        for name in ("provenance", "kernels", "engine_rule"):
            with self.assertRaisesRegex(att.TableError, r"^threshold table: provenance: missing$"):
                getattr(t, name)

    def test_a_key_given_twice_is_refused(self):
        text = json.dumps(fixture_doc())
        at = text.index('"batch": ')  # the first decode point's
        self.refused(self.write("twice.json", text[:at] + '"batch": 4, ' + text[at:]),
                     r"^.*twice\.json: decode\[0\]\.batch: the key appears twice in its object "
                     r"\(JSON keeps only the last; give it once\)$")
        self.refused(self.write("twice_top.json", '{"version": 4, ' + text[1:]),
                     r"twice_top\.json: version: the key appears twice")
        self.refused(self.write("twice_top.json", '{"version": 4, ' + text[1:]),
                     r"twice_top\.json: version: the key appears twice", device_name="H100-SXM")
        deep = fixture_doc()
        deep["decode"][5]["measured"][2]["v2"]["config"]["params"]["partition"] = 1
        text2 = json.dumps(deep).replace('"partition": 1', '"partition": 1, "partition": 256')
        self.refused(self.write("twice_deep.json", text2),
                     r"twice_deep\.json: decode\[5\]\.measured\[2\]\.v2\.config\.params\."
                     r"partition: the key appears twice")
        # NaN stays refused, and the same key in two objects is no repetition.
        self.refused(self.write("nan.json", text.replace('"softcap": 0.0', '"softcap": NaN', 1)),
                     r"nan\.json is not valid JSON .*NaN")
        self.assertEqual(att.ThresholdTable.load(self.write("ok.json", text)).table,
                         fixture_doc())

    def test_two_points_for_one_shape_are_refused(self):
        base = fixture_doc()

        def with_twin(**change):
            t = copy.deepcopy(base)
            twin = copy.deepcopy(t["decode"][2])  # batch 64, kvh 1: v1 always
            twin.update(v2_intervals=[[1, None]], v2_from="always")  # the opposite answer
            twin.update(change)
            t["decode"].append(twin)
            return t

        for change in ({}, {"softcap": 0}, {"measured": base["decode"][3]["measured"]}):
            with self.assertRaisesRegex(att.TableError, r"^threshold table: decode\[8\]: the shape "
                                        r"and mask of decode\[2\] again \(one point per shape; "
                                        r"which one is meant\?\)$"):
                att.ThresholdTable(with_twin(**change))
            self.refused(self.write("twins.json", json.dumps(with_twin(**change))),
                         r"decode\[8\]: the shape and mask of decode\[2\] again")
        # A point that differs from another in one field of the shape or mask is its own.
        for change in ({"batch": 32}, {"num_kv_heads": 2, "num_heads": 8}, {"gqa_ratio": 8,
                                                                            "num_heads": 8},
                       {"head_dim": 64}, {"block_size": 32}, {"dtype": "bf16"},
                       {"kv_dtype": "fp8_e4m3"}, {"causal": False}, {"window_left": 4096},
                       {"window_right": 0}, {"softcap": 30.0}):
            t = att.ThresholdTable(with_twin(**change))
            q = dict(query(64, 4096, kvh=1, heads=4), causal=True, window_left=-1)
            self.assertEqual(t.lookup(**q).family, "decode_v1", change)

    def test_a_byte_order_mark_is_read_past(self):
        with open(FIXTURE, encoding="utf-8") as f:
            text = f.read()
        path = self.write("bom.json", "\ufeff" + text)
        self.assertEqual(att.ThresholdTable.load(path).table,
                         att.ThresholdTable.load(FIXTURE).table)
        self.assertEqual(att.ThresholdTable.load(path, device_name="H100-SXM").version, 5)
        # Anywhere else it is no JSON.
        self.refused(self.write("bom_inside.json", text.replace("{", "{\ufeff", 1)),
                     r"bom_inside\.json is not valid JSON")


class MaskQueryTest(unittest.TestCase):
    """A query's mask that no point can have (causal not a bool, a window below -1, a softcap of
    NaN, Infinity or below 0) is refused naming the argument, not answered from a point with
    another mask; lookup, use_v2 and v2_rule alike."""

    BAD = (("causal", "yes"), ("causal", 1), ("causal", None), ("softcap", float("nan")),
           ("softcap", -1.0), ("softcap", float("inf")), ("softcap", "0"), ("softcap", True),
           ("window_left", -2), ("window_left", 2.5), ("window_left", True),
           ("window_left", "4096"), ("window_right", -5), ("window_right", None))

    @classmethod
    def setUpClass(cls):
        cls.t = att.ThresholdTable.load(FIXTURE)
        cls.t4 = att.ThresholdTable.load(FIXTURE_V4)

    def test_lookup_refuses_a_mask_no_point_has(self):
        for name, value in self.BAD:
            bad = {name: value}
            with self.assertRaisesRegex(ValueError, r"^lookup: %s must be " % name, msg=bad):
                self.t.lookup(**dict(query(1, 4096), **bad))
            # A batch's lengths, on a table whose batch rules answer.
            with self.assertRaisesRegex(ValueError, r"^lookup: %s must be " % name, msg=bad):
                self.t4.lookup(**batch_query([30, 20000], **bad))
            model = dict(num_heads=32, head_dim=128, dtype="fp16")
            with self.assertRaisesRegex(ValueError, r"^use_v2: %s must be " % name, msg=bad):
                self.t.use_v2(4096, 8, batch=1, **model, **bad)
            with self.assertRaisesRegex(ValueError, r"^use_v2: %s must be " % name, msg=bad):
                self.t4.use_v2(None, 8, seq_lens=[30, 20000], **model, **bad)
            with self.assertRaisesRegex(ValueError, r"^v2_rule: %s must be " % name, msg=bad):
                self.t.v2_rule(32, 128, "fp16", **bad)
        # What a call can have still answers.
        for good in ({"causal": False}, {"window_left": 0}, {"window_right": 4096},
                     {"softcap": 30}, {"softcap": 50.0}):
            c = self.t.lookup(**dict(query(1, 4096), **good))
            self.assertEqual(c.distance, att.CATEGORY_PENALTY, good)
            self.assertIs(self.t.use_v2(4096, 8, num_heads=32, head_dim=128, dtype="fp16",
                                        **good), c.family == "decode_v2")


def mask_table():
    """The synthetic fixture plus two copies of its batch 1, kvh 8 point (v2 from 1821), one not
    causal and one with window_right 0, that never choose v2."""
    doc = fixture_doc()
    for change in ({"causal": False}, {"window_right": 0}):
        p = copy.deepcopy(doc["decode"][3])
        p.update(change, v2_intervals=[], v2_from="never")
        doc["decode"].append(p)
    return doc


class CommandLineMaskTest(unittest.TestCase):
    """The module's command line takes `attn-tune table lookup`'s mask options: --causal
    (true or false, default true), --window-left, --window-right and --softcap, with its ranges."""

    @classmethod
    def setUpClass(cls):
        tmp = tempfile.TemporaryDirectory()
        cls.addClassCleanup(tmp.cleanup)
        cls.path = os.path.join(tmp.name, "masks.json")
        with open(cls.path, "w", encoding="utf-8") as f:
            json.dump(mask_table(), f)
        cls.t = att.ThresholdTable.load(cls.path)
        cls.base = [cls.path, "--batch", "1", "--context-len", "4096", "--num-heads", "32",
                    "--num-kv-heads", "8", "--head-dim", "128", "--block-size", "16", "--dtype",
                    "fp16"]

    CASES = (([], {}), (["--causal", "true"], {}), (["--causal", "1"], {}),
             (["--causal", "yes"], {}), (["--causal", "TRUE"], {}),
             (["--causal", "false"], {"causal": False}), (["--causal", "0"], {"causal": False}),
             (["--causal", "off"], {"causal": False}), (["--causal", "No"], {"causal": False}),
             (["--window-right", "0"], {"window_right": 0}),
             (["--causal", "false", "--window-right", "0"], {"causal": False, "window_right": 0}),
             (["--window-left", "4096"], {"window_left": 4096}),
             (["--window-right", "-1"], {}), (["--softcap", "30"], {"softcap": 30.0}))

    def test_mask_options(self):
        for extra, mask in self.CASES:
            code, out, err = run_main(self.base + extra)
            c = self.t.lookup(**dict(query(1, 4096), **mask))
            self.assertEqual((code, out.split()), (0, [c.family, c.config_key]), (extra, err))
        # Each option reaches the lookup: the point of its own mask answers.
        family = {tuple(extra): run_main(self.base + extra)[1].split()[0]
                  for extra in ([], ["--causal", "false"], ["--window-right", "0"])}
        self.assertEqual(family, {(): "decode_v2", ("--causal", "false"): "decode_v1",
                                  ("--window-right", "0"): "decode_v1"})
        for extra, option in ((["--causal", "maybe"], "--causal"),
                              (["--window-right", "-2"], "--window-right"),
                              (["--window-left", str((1 << 30) + 1)], "--window-left"),
                              (["--softcap", "nan"], "--softcap"),
                              (["--softcap", "1e31"], "--softcap"),
                              (["--softcap", "-1"], "--softcap"),
                              (["--sm-count", "0"], "--sm-count"),
                              (["--bandwidth-gbps", "inf"], "--bandwidth-gbps")):
            code, out, err = run_main(self.base + extra)
            self.assertEqual((code, out), (2, ""), extra)
            self.assertIn(option, err)
        _, out, _ = run_main(["--help"])
        for option in ("--causal BOOLEAN", "--window-right", "--sm-count", "--bandwidth-gbps"):
            self.assertIn(option, out)

    @unittest.skipUnless(os.environ.get("ATTN_TUNE_BIN"), "ATTN_TUNE_BIN not set")
    def test_agrees_with_attn_tune_table_lookup(self):
        exe = os.environ["ATTN_TUNE_BIN"]
        for extra, _ in self.CASES:
            want = run_main(self.base + extra)[1]
            got = subprocess.run([exe, "table", "lookup", "--device", "cuda:0"] + self.base
                                 + extra, capture_output=True, text=True, check=True).stdout
            self.assertEqual(got.split(), want.split(), extra)


class Fp8CacheTest(unittest.TestCase):
    """kv_dtype (table version 5): a query with an fp8 cache answers from the points measured
    with one, in lookup, use_v2, v2_rule and the command line, as the C++ reader does."""

    @classmethod
    def setUpClass(cls):
        cls.table = with_fp8_points(att.ThresholdTable.load(FIXTURE).table)
        cls.t = att.ThresholdTable(cls.table)

    def test_lookup_picks_the_points_of_the_cache_dtype(self):
        for b, c in itertools.product((1, 8, 64), (512, 2048, 8192, 32768)):
            plain = self.t.lookup(**query(b, c))
            for name in ("fp8_e4m3", "fp8", "torch.float8_e4m3fn"):
                fp8 = self.t.lookup(**query(b, c), kv_dtype=name)
                self.assertTrue(fp8.exact_point, (b, c, name))
                self.assertEqual(fp8.point.get("kv_dtype"), "fp8_e4m3")
                self.assertNotEqual(fp8.family, plain.family, (b, c))
            for same in ("auto", "fp16", None):
                self.assertEqual(self.t.lookup(**query(b, c), kv_dtype=same), plain)
        c = self.t.lookup(**query(8, 2048), kv_dtype="fp8_e5m2")
        self.assertAlmostEqual(c.distance, att.CATEGORY_PENALTY)
        with self.assertRaisesRegex(ValueError, r"unknown KV-cache dtype 'int4'"):
            self.t.lookup(**query(8, 2048), kv_dtype="int4")

    def test_use_v2_and_v2_rule_agree_with_lookup(self):
        t = att.ThresholdTable(self.table)
        rule = t.v2_rule(num_heads=32, head_dim=128, dtype="fp16", kv_dtype="fp8")
        for b, c, kvh in itertools.product((1, 4, 8, 64), GRID_SEQ, (1, 8)):
            want = t.lookup(**query(b, c, kvh, kvh * 4), kv_dtype="fp8_e4m3").family
            self.assertIs(t.use_v2(c, kvh, batch=b, num_heads=kvh * 4, head_dim=128,
                                   dtype="fp16", kv_dtype="fp8_e4m3"), want == "decode_v2")
            plain = t.lookup(**query(b, c, kvh, 32)).family
            self.assertIs(t.use_v2(c, kvh, batch=b, num_heads=32, head_dim=128, dtype="fp16",
                                   kv_dtype="auto"), plain == "decode_v2")
            fp8_32 = t.lookup(**query(b, c, kvh, 32), kv_dtype="fp8").family
            self.assertIs(rule(c, kvh, batch=b), fp8_32 == "decode_v2")
            # v2_rule bound the cache dtype too.
            self.assertIs(t.use_v2(c, kvh, batch=b), fp8_32 == "decode_v2")

    @unittest.skipUnless(os.environ.get("ATTN_TUNE_BIN"), "ATTN_TUNE_BIN not set")
    def test_agrees_with_attn_tune_table_lookup(self):
        exe = os.environ["ATTN_TUNE_BIN"]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "fp8.json")
            with open(path, "w") as f:
                json.dump(self.table, f)
            for (b, c), kv in itertools.product(((1, 512), (8, 4096), (64, 32768), (3, 5000)),
                                                ("auto", "fp8_e4m3", "fp8_e5m2")):
                want = self.t.lookup(**query(b, c), kv_dtype=kv)
                args = [exe, "table", "lookup", path, "--device", "cuda:0", "--kv-dtype", kv]
                for k, v in query(b, c).items():
                    args += ["--" + k.replace("_", "-"), str(v)]
                r = subprocess.run(args, capture_output=True, text=True, check=True)
                self.assertEqual(r.stdout.split(), [want.family, want.config_key], (b, c, kv))


class Version1Test(unittest.TestCase):
    """Tables written before version 3 (the kept fixtures, the shipped results) still read."""

    def test_version_2_fixture_answers_as_version_3(self):
        t2, t3 = att.ThresholdTable.load(FIXTURE_V2), att.ThresholdTable.load(FIXTURE_V3)
        self.assertEqual((t2.version, t3.version), (2, 3))
        for b, ctx in itertools.product((1, 4, 8, 64), (64, 512, 2048, 4095, 4096, 32768)):
            a, c = t2.lookup(**query(b, ctx)), t3.lookup(**query(b, ctx))
            self.assertEqual((a.family, a.config_key, a.partition),
                             (c.family, c.config_key, c.partition), (b, ctx))

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


def batch_query(seq_lens, kvh=8, heads=32, dtype="fp16", **kw):
    return dict(seq_lens=seq_lens, num_heads=heads, num_kv_heads=kvh, head_dim=128,
                block_size=16, dtype=dtype, **kw)


class BatchRulesTest(unittest.TestCase):
    """Version 4: a lookup with a batch's lengths reads `batch_rules` (the fixture is the version 3
    one plus two rules: kvh 8 with a depth-2 tree, kvh 1 with one split)."""

    @classmethod
    def setUpClass(cls):
        cls.t = att.ThresholdTable.load(FIXTURE_V4)
        cls.t3 = att.ThresholdTable.load(FIXTURE)

    def answer(self, seq_lens, **kw):
        c = self.t.lookup(**batch_query(seq_lens, **kw))
        return c.family, c.config_key, c.partition

    def test_a_batch_of_a_shape_without_a_rule_reads_its_own_points(self):
        # Block size 48 (whose batches all ran v1, so no rule was fitted) has decode points: they
        # answer, not the nearest rule of block size 16, whose leaf could name a partition that is
        # no multiple of 48. The C++ reader's test is the same.
        with open(FIXTURE_V4, encoding="utf-8") as f:
            doc = json.load(f)
        bs48 = copy.deepcopy(doc["decode"][0])  # batch 1, kvh 1, block 16
        self.assertEqual(bs48["num_kv_heads"], 1)
        bs48.update(block_size=48, v2_intervals=[])
        bs48.pop("v2_from", None)
        doc["decode"].append(bs48)
        t = att.ThresholdTable(doc)
        own = t.lookup(**batch_query([30, 20000], kvh=1, heads=4))
        self.assertTrue(own.batch_rule)
        self.assertEqual(own.rule_distance, 0.0)
        q = batch_query([30, 20000], kvh=1, heads=4)
        q["block_size"] = 48
        c = t.lookup(**q)
        self.assertFalse(c.batch_rule)
        self.assertEqual(c.family, "decode_v1")
        self.assertEqual(c.point["block_size"], 48)
        # use_v2, an engine's hot path, answers as lookup does.
        self.assertFalse(t.use_v2(None, 1, 48, num_heads=4, head_dim=128, dtype="fp16",
                                  seq_lens=[30, 20000]))
        self.assertTrue(t.use_v2(None, 1, 16, num_heads=4, head_dim=128, dtype="fp16",
                                 seq_lens=[30, 20000]) == (own.family == "decode_v2"))

    def test_both_sides_of_each_threshold(self):
        v1 = ("decode_v1", "decode_v1[]", None)
        v2_256 = ("decode_v2", "decode_v2[partition=256]", 256)
        v2_512 = ("decode_v2", "decode_v2[partition=512]", 512)
        v2_own = ("decode_v2", "decode_v2[]", None)
        cases = [
            # max_len < 4096, then batch < 8 | >= 8
            ([30, 2000, 512], v2_256, "max_len < 4096, batch < 8"),
            ([4095] * 7, v2_256, "max_len < 4096, batch < 8"),
            ([4095] * 8, v1, "max_len < 4096, batch >= 8"),
            ([100] * 64, v1, "max_len < 4096, batch >= 8"),
            # max_len >= 4096 (4096 itself is at or above), then mean_len < 2048.5 | >= 2048.5
            ([30, 20000, 512], v2_512, "max_len >= 4096, mean_len >= 2048.5"),
            ([4096, 1], v2_512, "max_len >= 4096, mean_len >= 2048.5"),  # mean exactly 2048.5
            ([4096, 1, 1], v2_own, "max_len >= 4096, mean_len < 2048.5"),
            ([30] * 9 + [4096], v2_own, "max_len >= 4096, mean_len < 2048.5"),
        ]
        for lens, want, path in cases:
            c = self.t.lookup(**batch_query(lens))
            self.assertEqual((c.family, c.config_key, c.partition), want, lens)
            self.assertEqual((c.batch_rule, c.batch_path), (True, path), lens)
            self.assertTrue(c.exact_point)
            self.assertEqual((c.distance, c.measured_context), (0.0, 0))
            self.assertEqual(c.point["num_kv_heads"], 8)
            self.assertNotIn("tree", c.point)
        c = self.t.lookup(**batch_query([30, 30, 30, 4096]))
        self.assertTrue(c.kernel_chooses_splits)
        # The kvh-1 rule splits on the total length: 16384 is at or above.
        self.assertEqual(self.answer([8192, 8191], kvh=1, heads=4), v1)
        self.assertEqual(self.answer([8192, 8192], kvh=1, heads=4), v2_256)
        self.assertEqual(self.t.lookup(**batch_query([8192, 8192], kvh=1, heads=4)).batch_path,
                         "sum_len >= 16384")

    def test_nearest_rule_without_the_batch_term(self):
        # kvh 2 is one octave from the kvh-1 rule and two from the kvh-8 one.
        c = self.t.lookup(**batch_query([100], kvh=2, heads=8))
        self.assertEqual((c.point["num_kv_heads"], c.distance, c.exact_point), (1, 1.0, False))
        # Another dtype: the same shape's rule, 64 away.
        c = self.t.lookup(**batch_query([30, 20000, 512], dtype="bf16"))
        self.assertEqual((c.point["num_kv_heads"], c.distance), (8, att.CATEGORY_PENALTY))
        self.assertEqual(c.config_key, "decode_v2[partition=512]")
        # A mask the rules lack costs 64 too, and the batch's size never enters the distance;
        # but where the decode points have that mask (window 4096 here), they answer.
        for lens in ([5], [5] * 1000):
            c = self.t.lookup(**batch_query(lens, window_left=1000))
            self.assertEqual((c.point["num_kv_heads"], c.distance), (8, att.CATEGORY_PENALTY))
            c = self.t.lookup(**batch_query(lens, window_left=4096))
            self.assertEqual((c.batch_rule, c.point["window_left"]), (False, 4096))
        # Ties go to the first rule.
        table = copy.deepcopy(self.t.table)
        twin = copy.deepcopy(table["batch_rules"][0])
        twin["tree"] = {"family": "decode_v1", "config": {"family": "decode_v1", "params": {},
                                                          "key": "decode_v1[]"}}
        table["batch_rules"].append(twin)
        self.assertEqual(att.ThresholdTable(table).lookup(**batch_query([30, 20000])).config_key,
                         "decode_v2[partition=512]")
        table["batch_rules"].insert(0, table["batch_rules"].pop())
        c = att.ThresholdTable(table).lookup(**batch_query([30, 20000]))
        self.assertEqual((c.config_key, c.batch_path), ("decode_v1[]", ""))

    def test_tables_without_batch_rules_use_size_and_longest(self):
        no_rules = copy.deepcopy(self.t.table)
        no_rules["batch_rules"] = []
        absent = copy.deepcopy(self.t.table)
        del absent["batch_rules"]
        # A version 3 table's batch_rules (not a field of version 3) are not read.
        v3_with_rules = dict(copy.deepcopy(self.t.table), version=3)
        tables = [self.t3, att.ThresholdTable.load(FIXTURE_V2), att.ThresholdTable.load(FIXTURE_V1),
                  att.ThresholdTable(no_rules), att.ThresholdTable(absent),
                  att.ThresholdTable(v3_with_rules)]
        for t in tables:
            self.assertFalse(t.has_batch_rules)
            for lens in ([30, 2000, 512], [30, 20000, 512], [4096] * 8, [64], [5000] * 64):
                for kvh in (8, 1):
                    c = t.lookup(**batch_query(lens, kvh=kvh, heads=4 * kvh))
                    want = t.lookup(**query(len(lens), max(lens), kvh=kvh, heads=4 * kvh))
                    self.assertEqual((c.family, c.config_key, c.point, c.batch_rule),
                                     (want.family, want.config_key, want.point, False), lens)
        self.assertTrue(self.t.has_batch_rules)

    def test_version_4_without_seq_lens_reads_the_decode_points(self):
        for b, ctx in ((1, 512), (4, 64), (4, 4096), (8, 2048), (64, 32768)):
            a, c = self.t.lookup(**query(b, ctx)), self.t3.lookup(**query(b, ctx))
            self.assertEqual((a.family, a.config_key, a.batch_rule),
                             (c.family, c.config_key, False))
            # batch and context_len may come along when they agree with seq_lens.
            self.assertEqual(self.t.lookup(batch=2, context_len=ctx,
                                           **batch_query([1, ctx])).batch_rule, True)

    def test_lookup_arguments(self):
        with self.assertRaisesRegex(ValueError, r"batch=3 disagrees"):
            self.t.lookup(batch=3, **batch_query([1, 2]))
        with self.assertRaisesRegex(ValueError, r"context_len=9 disagrees"):
            self.t.lookup(context_len=9, **batch_query([1, 2]))
        for bad in ([], [0, 5], [5, 2.5], [True]):
            with self.assertRaises(ValueError, msg=repr(bad)):
                self.t.lookup(**batch_query(bad))
        with self.assertRaisesRegex(TypeError, r"'context_len'"):
            self.t.lookup(batch=1, num_heads=32, num_kv_heads=8, head_dim=128, block_size=16,
                          dtype="fp16")
        with self.assertRaisesRegex(TypeError, r"'dtype'"):
            self.t.lookup(seq_lens=[1], num_heads=32, num_kv_heads=8, head_dim=128,
                          block_size=16)
        with self.assertRaises(ValueError):
            self.t.lookup(**batch_query([1], kvh=0))
        # A fractional gqa ratio is refused, as `attn-tune table lookup` refuses it.
        with self.assertRaisesRegex(ValueError, r"num_heads=12 is not a multiple of num_kv_heads=8"):
            self.t.lookup(**batch_query([1], heads=12))
        with self.assertRaisesRegex(ValueError, r"num_heads=5 is not a multiple"):
            self.t3.lookup(batch=1, context_len=64, num_heads=5, num_kv_heads=2, head_dim=128,
                           block_size=16, dtype="fp16")

        class Tensor:  # what an engine holds: anything with tolist()
            def tolist(self):
                return [30, 20000, 512]
        self.assertEqual(self.t.lookup(**batch_query(Tensor())).config_key,
                         "decode_v2[partition=512]")

    def with_points_leaf(self):
        """The fixture with its kvh 8 tree's `max_len < 4096` side deferring to the decode
        points, as a fit does where no configuration beats them out of sample."""
        t = copy.deepcopy(self.t.table)
        t["batch_rules"][0]["tree"]["below"] = {"lookup": "points", "batches": 9, "weight": 9,
                                                "mean_slowdown": 0.01}
        return att.ThresholdTable(t)

    def test_a_points_leaf_answers_as_the_decode_points(self):
        t = self.with_points_leaf()
        for lens in ([30, 2000, 512], [4095] * 8, [100] * 3, [4000, 12, 13, 14, 15, 16, 17, 18]):
            c = t.lookup(**batch_query(lens))
            plain = t.lookup(len(lens), max(lens), 32, 8, 128, 16, "fp16")
            self.assertTrue(c.batch_rule)
            self.assertEqual(c.batch_path, "max_len < 4096, decode points")
            self.assertEqual((c.rule["num_kv_heads"], c.rule_distance), (8, 0.0))
            self.assertEqual((c.family, c.config_key, c.measured_context),
                             (plain.family, plain.config_key, plain.measured_context))
        # A shape no rule has: the nearest rule's distance says so, though the decode points
        # then answer from a point of the query's own shape.
        c = t.lookup(**batch_query([30, 2000, 512], kvh=4, heads=16))
        plain = t.lookup(3, 2000, 16, 4, 128, 16, "fp16")
        self.assertEqual(c.batch_path, "max_len < 4096, decode points")
        self.assertEqual((c.distance, c.exact_point), (plain.distance, plain.exact_point))
        self.assertGreater(c.rule_distance, 0.0)
        self.assertNotIn("tree", c.rule)
        # The other side keeps its leaves.
        self.assertEqual(t.lookup(**batch_query([30, 20000, 512])).config_key,
                         self.t.lookup(**batch_query([30, 20000, 512])).config_key)

    def test_use_v2_with_seq_lens_agrees_with_lookup(self):
        rng = random.Random(7)
        tables = {"batch rules": self.t, "points leaf": self.with_points_leaf(),
                  "version 3": self.t3}
        for name, t in tables.items():
            rule = t.v2_rule(num_heads=32, head_dim=128, dtype="fp16")
            for _ in range(300):
                kvh = rng.choice([1, 8])
                lens = [int(rng.lognormvariate(6, 1.8)) + 1 for _ in range(rng.randint(1, 24))]
                want = t.lookup(**batch_query(lens, kvh=kvh, heads=4 * kvh)).family == "decode_v2"
                got = t.use_v2(None, kvh, 16, num_heads=4 * kvh, head_dim=128, dtype="fp16",
                               seq_lens=lens)
                self.assertIs(got, want, (name, kvh, lens))
                if kvh == 8:
                    self.assertIs(rule(max(lens), kvh, seq_lens=lens), want, (name, lens))
            # The same batch again (any order) is a cache hit.
            hits = t.cache_info()["batch_answers"].hits
            t.use_v2(None, 8, num_heads=32, head_dim=128, dtype="fp16", seq_lens=[3, 1, 2])
            t.use_v2(None, 8, num_heads=32, head_dim=128, dtype="fp16", seq_lens=[1, 2, 3])
            self.assertEqual(t.cache_info()["batch_answers"].hits - hits, 1)
        with self.assertRaisesRegex(ValueError, "each >= 1"):
            self.t.use_v2(None, 8, num_heads=32, head_dim=128, dtype="fp16", seq_lens=[5, 0])

    def test_malformed_batch_rules_name_the_field(self):
        def broken(change):
            t = copy.deepcopy(self.t.table)
            change(t)
            return t

        def tree(t):
            return t["batch_rules"][0]["tree"]

        def deep(t):
            node = tree(t)
            for _ in range(70):
                node["below"] = {"feature": "batch", "threshold": 1, "below": node["below"],
                                 "at_or_above": node["at_or_above"]}
                node = node["below"]

        cases = [
            (lambda t: tree(t)["below"].pop("threshold"),
             r"batch_rules\[0\]\.tree\.below\.threshold: missing"),
            (lambda t: tree(t)["below"].update(threshold="8"),
             r"batch_rules\[0\]\.tree\.below\.threshold: expected a number"),
            (lambda t: tree(t)["below"].update(threshold=float("nan")),
             r"batch_rules\[0\]\.tree\.below\.threshold: expected a number"),
            (lambda t: tree(t).update(feature="min_len"),
             r'batch_rules\[0\]\.tree\.feature: expected "batch", "max_len", "sum_len" or '
             r'"mean_len"'),
            (lambda t: tree(t)["at_or_above"].pop("at_or_above"),
             r"batch_rules\[0\]\.tree\.at_or_above\.at_or_above: missing"),
            (lambda t: tree(t).update(below=[]),
             r"batch_rules\[0\]\.tree\.below: expected a split or a leaf object"),
            (lambda t: tree(t)["at_or_above"]["below"].update(family="prefill"),
             r'batch_rules\[0\]\.tree\.at_or_above\.below\.family: expected "decode_v1" or '
             r'"decode_v2"'),
            (lambda t: tree(t)["below"]["at_or_above"].pop("family"),
             r"batch_rules\[0\]\.tree\.below\.at_or_above\.family: missing"),
            (lambda t: tree(t)["below"]["below"].pop("config"),
             r"batch_rules\[0\]\.tree\.below\.below\.config: missing"),
            (lambda t: tree(t)["below"]["below"]["config"].pop("key"),
             r"batch_rules\[0\]\.tree\.below\.below\.config\.key: missing"),
            (lambda t: tree(t)["below"]["below"]["config"].update(params=None),
             r"batch_rules\[0\]\.tree\.below\.below\.config\.params: expected an object"),
            (lambda t: tree(t)["below"]["below"]["config"]["params"].update(partition=0),
             r"batch_rules\[0\]\.tree\.below\.below\.config\.params\.partition: expected a "
             r"positive integer"),
            (deep, r"batch_rules\[0\]\.tree(\.below){65}: deeper than 64"),
            (lambda t: t["batch_rules"][1].pop("tree"), r"batch_rules\[1\]\.tree: missing"),
            (lambda t: t["batch_rules"][1].pop("gqa_ratio"),
             r"batch_rules\[1\]\.gqa_ratio: missing"),
            (lambda t: t["batch_rules"][0].update(batches=2.5),
             r"batch_rules\[0\]\.batches: expected an integer"),
            (lambda t: t["batch_rules"][0].update(causal=1),
             r"batch_rules\[0\]\.causal: expected true or false"),
            (lambda t: t["batch_rules"][0].update(dtype=16),
             r"batch_rules\[0\]\.dtype: expected a string"),
            (lambda t: t["batch_rules"].append(7), r"batch_rules\[2\]: expected an object"),
            (lambda t: t.update(batch_rules={}), r"batch_rules: expected a list"),
            (lambda t: tree(t).update(below={"lookup": "grid"}),
             r'batch_rules\[0\]\.tree\.below\.lookup: expected "points"'),
            (lambda t: (tree(t).update(below={"lookup": "points"}), t.update(decode=[])),
             r"batch_rules\[0\]\.tree\.below\.lookup: the table has no decode points to read"),
        ]
        for change, pattern in cases:
            with self.assertRaises(att.TableError, msg=pattern) as cm:
                att.ThresholdTable(broken(change))
            self.assertRegex(str(cm.exception), "^threshold table: " + pattern)
            self.assertNotIn("\n", str(cm.exception))
        # Version 3 tables are not checked for a field of version 4.
        att.ThresholdTable(dict(broken(cases[0][0]), version=3))

    def test_command_line(self):
        base = [FIXTURE_V4, "--num-heads", "32", "--num-kv-heads", "8", "--head-dim", "128",
                "--block-size", "16", "--dtype", "fp16"]
        for lens, want in (("30,20000,512", "decode_v2 decode_v2[partition=512] (batch rule: "
                                            "max_len >= 4096, mean_len >= 2048.5)"),
                           ("30, 30,30,4096", "decode_v2 decode_v2[] (the kernel chooses its "
                                              "splits) (batch rule: max_len >= 4096, mean_len "
                                              "< 2048.5)")):
            r = subprocess.run([sys.executable, os.path.abspath(att.__file__)] + base
                               + ["--seq-lens", lens], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual((r.returncode, r.stdout.strip()), (0, want), r.stderr)
        r = subprocess.run([sys.executable, os.path.abspath(att.__file__)] + base,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--seq-lens", r.stderr)

    @unittest.skipUnless(os.environ.get("ATTN_TUNE_BIN"), "ATTN_TUNE_BIN not set")
    def test_agrees_with_attn_tune_table_lookup(self):
        exe = os.environ["ATTN_TUNE_BIN"]
        batches = ([30, 2000, 512], [4095] * 8, [30, 20000, 512], [4096, 1], [4096, 1, 1],
                   [8192, 8191], [8192, 8192], [64])
        for path in (FIXTURE_V4, FIXTURE):
            t = att.ThresholdTable.load(path)
            for lens in batches:
                for kvh, dt in ((8, "fp16"), (1, "fp16"), (2, "bf16")):
                    c = t.lookup(**batch_query(lens, kvh=kvh, heads=4 * kvh, dtype=dt))
                    want = [c.family, c.config_key]
                    out = subprocess.run(
                        [exe, "table", "lookup", path, "--device", "cuda:0", "--seq-lens",
                         ",".join(map(str, lens)), "--num-heads", str(4 * kvh), "--num-kv-heads",
                         str(kvh), "--head-dim", "128", "--block-size", "16", "--dtype", dt],
                        capture_output=True, text=True, check=True).stdout
                    self.assertEqual(out.split()[:2], want, (path, lens, kvh, dt))
                    if c.batch_rule:
                        self.assertIn("(batch rule: %s)" % (c.batch_path or "one leaf"), out)


def seed_should_use_paged_v2(seq_len: int, num_kv_heads: int, block_size: int = 16,
                             partition_size: int = 512) -> bool:
    """The seed engine's rule (ex_engine/factors/attn_dispatch.py), for its signature."""
    num_tiles = num_kv_heads * ((seq_len + partition_size - 1) // partition_size)
    return num_tiles > 2 * 16


def with_one_family_unmeasured(table):
    """A copy of `table` whose first point never measured v2 and whose second never v1, so that
    lookup falls back to the other family there."""
    t = copy.deepcopy(table)
    for m in t["decode"][0]["measured"]:
        m["v2"] = None
    for m in t["decode"][1]["measured"]:
        m.pop("v1", None)
    return t


GRID_SEQ = (1, 64, 100, 512, 1500, 2047, 2048, 4095, 4096, 5000, 32768, 131072)
# (batch, num_kv_heads, num_heads, head_dim, dtype, window_left)
GRID_SHAPES = list(itertools.product((1, 3, 4, 8, 50, 64), (1, 4, 8), (1, 4, 7), (128, 64),
                                     ("fp16", "bf16"), (-1, 4096)))


class UseV2Test(unittest.TestCase):
    """use_v2 and v2_rule: the seed engine's rule answered from a table."""

    @classmethod
    def setUpClass(cls):
        cls.tables = {path: att.ThresholdTable.load(path) for path in (FIXTURE, FIXTURE_V1,
                                                                         SHIPPED)}
        for path in (FIXTURE, FIXTURE_V1):
            cls.tables[path + " (one family unmeasured)"] = att.ThresholdTable(
                with_one_family_unmeasured(cls.tables[path].table))

    def test_use_v2_agrees_with_lookup(self):
        for name, t in self.tables.items():
            for (b, kvh, g, hd, dt, w), seq in itertools.product(GRID_SHAPES, GRID_SEQ):
                want = t.lookup(b, seq, kvh * g, kvh, hd, 16, dt, window_left=w).family
                got = t.use_v2(seq, kvh, 16, batch=b, num_heads=kvh * g, head_dim=hd, dtype=dt,
                               window_left=w)
                self.assertIs(got, want == "decode_v2", (name, b, seq, kvh, g, hd, dt, w))
            # Asked again, every answer comes from the cache.
            hits = t.cache_info()["answers"].hits
            for (b, kvh, g, hd, dt, w), seq in itertools.product(GRID_SHAPES[:20], GRID_SEQ):
                t.use_v2(seq, kvh, 16, batch=b, num_heads=kvh * g, head_dim=hd, dtype=dt,
                         window_left=w)
            self.assertEqual(t.cache_info()["answers"].hits - hits, 20 * len(GRID_SEQ))

    def test_fallback_where_a_family_was_never_measured(self):
        t = self.tables[FIXTURE + " (one family unmeasured)"]
        # Point 0 (batch 1, kvh 1) chooses v2 from 2048 but never measured it; point 1 (batch 8,
        # kvh 1) measured only v2.
        self.assertFalse(t.use_v2(32768, 1, batch=1, num_heads=4, head_dim=128, dtype="fp16"))
        self.assertTrue(t.use_v2(512, 1, batch=8, num_heads=4, head_dim=128, dtype="fp16"))

    def test_v2_rule_has_the_seed_signature_and_agrees_with_use_v2(self):
        seed = inspect.signature(seed_should_use_paged_v2)
        for name, t in self.tables.items():
            for hd, dt, masks in ((128, "fp16", {}), (64, "bf16", {"window_left": 4096}),
                                  (128, "fp16", {"causal": False, "softcap": 30.0})):
                rule = t.v2_rule(num_heads=28, head_dim=hd, dtype=dt, **masks)
                sig = inspect.signature(rule)
                params = list(sig.parameters.values())
                self.assertEqual(params[:4], list(seed.parameters.values()))
                self.assertEqual([(p.name, p.kind, p.default) for p in params[4:]],
                                 [("batch", inspect.Parameter.KEYWORD_ONLY, 1),
                                  ("seq_lens", inspect.Parameter.KEYWORD_ONLY, None)])
                self.assertEqual(sig.return_annotation, bool)
                for seq, kvh, b in itertools.product(GRID_SEQ, (1, 4, 7), (1, 4, 64)):
                    want = t.use_v2(seq, kvh, batch=b, num_heads=28, head_dim=hd, dtype=dt,
                                    **masks)
                    self.assertIs(rule(seq, kvh, batch=b), want, (name, seq, kvh, b))
                    self.assertIs(rule(seq, kvh, 16, 512, batch=b), want)
                    self.assertIs(att.use_v2(t, seq, kvh, batch=b, num_heads=28, head_dim=hd,
                                             dtype=dt, **masks), want)
                    # v2_rule bound the model: use_v2 needs only the seed's arguments now.
                    if not masks:
                        self.assertIs(t.use_v2(seq, kvh, batch=b), want)
                # Without batch, the bound one (default 1).
                self.assertIs(rule(4096, 4), t.use_v2(4096, 4, batch=1))
                rule8 = t.v2_rule(28, hd, dt, batch=8, **masks)
                self.assertIs(rule8(4096, 4), rule(4096, 4, batch=8))

    def test_missing_model_arguments_raise(self):
        t = att.ThresholdTable.load(FIXTURE)
        with self.assertRaisesRegex(ValueError, r"use_v2 needs num_heads"):
            t.use_v2(4096, 8, head_dim=128, dtype="fp16")
        with self.assertRaisesRegex(ValueError, r"use_v2 needs head_dim"):
            t.use_v2(4096, 8, num_heads=32, dtype="fp16")
        with self.assertRaisesRegex(ValueError, r"use_v2 needs dtype"):
            t.use_v2(4096, 8, num_heads=32, head_dim=128)
        with self.assertRaisesRegex(ValueError, r"num_heads"):
            att.use_v2(t, 4096, 8)
        t.bind(num_heads=32)
        with self.assertRaisesRegex(ValueError, r"use_v2 needs head_dim"):
            t.use_v2(4096, 8)
        t.bind(head_dim=128, dtype="float16")
        self.assertEqual(t.bound, {"num_heads": 32, "head_dim": 128, "dtype": "fp16"})
        self.assertTrue(t.use_v2(557, 8, batch=4))
        self.assertFalse(t.use_v2(558, 8, batch=4))

    def test_arguments(self):
        t = self.tables[FIXTURE]
        model = dict(num_heads=32, head_dim=128)
        # partition_size is ignored: the answer is v1 against v2 only.
        for seq in GRID_SEQ:
            self.assertIs(t.use_v2(seq, 8, 16, 256, batch=4, dtype="fp16", **model),
                          t.use_v2(seq, 8, 16, 512, batch=4, dtype="fp16", **model))
        # dtype names as `attn-tune table lookup` takes them, and torch's.
        for alias in ("bf16", "bfloat16", "torch.bfloat16"):
            self.assertIs(t.use_v2(2048, 8, batch=8, dtype=alias, **model),
                          t.lookup(8, 2048, 32, 8, 128, 16, "bf16").family == "decode_v2")
        for bad in ("int8", "fp8"):
            with self.assertRaisesRegex(ValueError, r"unknown dtype"):
                t.use_v2(2048, 8, dtype=bad, **model)
            with self.assertRaisesRegex(ValueError, r"unknown dtype"):
                t.v2_rule(32, 128, bad)
        for bad in ({"seq_len": 0}, {"num_kv_heads": 0}, {"batch": 0}):
            q = dict(seq_len=100, num_kv_heads=8, batch=1)
            q.update(bad)
            with self.assertRaises(ValueError):
                t.use_v2(q.pop("seq_len"), q.pop("num_kv_heads"), dtype="fp16", **q, **model)
        with self.assertRaisesRegex(TypeError, r"window"):
            t.v2_rule(32, 128, "fp16", window=4096)
        with self.assertRaises(ValueError):
            t.v2_rule(0, 128, "fp16")

    def test_module_function_reads_each_path_once(self):
        self.assertIs(att.load_cached(FIXTURE), att.load_cached(FIXTURE))
        t = self.tables[FIXTURE]
        self.assertIs(att.load_cached(t), t)
        for seq in (512, 2048, 4095, 4096):
            self.assertIs(att.use_v2(FIXTURE, seq, 8, batch=4, num_heads=32, head_dim=128,
                                     dtype="fp16"),
                          t.use_v2(seq, 8, batch=4, num_heads=32, head_dim=128, dtype="fp16"))
        with self.assertRaises(TypeError):
            att.use_v2({"schema": att.SCHEMA}, 512, 8)

    def test_clear_cache_and_pickle(self):
        t = att.ThresholdTable.load(FIXTURE)
        rule = t.v2_rule(32, 128, "fp16")
        self.assertTrue(rule(2048, 8))
        t.table["decode"][3]["v2_intervals"] = []  # batch 1, kvh 8 now never chooses v2
        self.assertTrue(rule(2048, 8))  # cached
        t.clear_cache()
        self.assertFalse(rule(2048, 8))
        u = pickle.loads(pickle.dumps(t))
        self.assertEqual(u.bound, t.bound)
        self.assertFalse(u.use_v2(2048, 8))

    def test_example_runs(self):
        for args in ([], ["--table", FIXTURE, "--dtype", "fp16"]):
            r = subprocess.run([sys.executable, EXAMPLE] + args, capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = r.stdout.splitlines()
            header = next(i for i, l in enumerate(lines) if l.split()[:1] == ["batch"])
            self.assertEqual(lines[header].split()[3:5], ["seed", "table"])
            rows = [l.split() for l in lines[header + 1:] if l.strip()][:-1]
            self.assertEqual(len(rows), 18)
            for row in rows:
                self.assertIn(row[3], ("v1", "v2"))
                self.assertIn(row[4], ("v1", "v2"))
            # The seed's column is the seed's rule.
            for row in rows:
                self.assertEqual(row[3] == "v2",
                                 seed_should_use_paged_v2(int(row[1]), int(row[2])), row)
            if args:
                t = self.tables[FIXTURE]
                for row in rows:
                    b, seq, kvh = int(row[0]), int(row[1]), int(row[2])
                    want = t.lookup(b, seq, 7 * kvh, kvh, 128, 16, "fp16").family
                    self.assertEqual(row[4] == "v2", want == "decode_v2", row)


def fleet_fixture(tmpdir):
    """The synthetic fixture as an H100's table and its version-1 sibling as an A100's (at batch
    4, ctx 64, kvh 8 the first picks v2 and the second v1), and the fleet file of the two as
    `attn-tune table combine` would write it (by the CLI where ATTN_TUNE_BIN is set)."""
    paths = []
    for src, name, sm, mem in ((FIXTURE, "NVIDIA H100 80GB HBM3", 132, 80 << 30),
                               (FIXTURE_V1, "NVIDIA A100-SXM4-40GB", 108, 40 << 30)):
        with open(src, encoding="utf-8") as f:
            t = json.load(f)
        t["provenance"]["device"].update(name=name, sm_count=sm, memory_bytes=mem)
        path = os.path.join(tmpdir, name.replace(" ", "_") + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(t, f)
        paths.append(path)
    out = os.path.join(tmpdir, "fleet.json")
    exe = os.environ.get("ATTN_TUNE_BIN")
    if exe:
        subprocess.run([exe, "table", "combine", out] + paths, check=True,
                       stdout=subprocess.DEVNULL)
    else:
        devices = []
        for path in paths:
            with open(path, encoding="utf-8") as f:
                t = json.load(f)
            dev = t["provenance"]["device"]
            canon = att.canonical_device_name(dev["name"], dev["memory_bytes"])
            devices.append({"device": canon, "raw_name": dev["name"], "sm_count": dev["sm_count"],
                            "bandwidth_gbps": att.KNOWN_DEVICES[canon][1], "table": t})
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"schema": att.FLEET_SCHEMA, "version": 1, "devices": devices}, f)
    return out


class FleetTest(unittest.TestCase):
    """Fleet tables: each device and its aliases get their own entry, in this reader and (with
    ATTN_TUNE_BIN) in `attn-tune table lookup --device-name`; the nearest only when asked."""

    H100 = ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB", "H100-SXM", "h100-sxm")
    A100 = ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB", "a100-sxm4-40gb", "A100-SXM4")

    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.tmp = tempfile.mkdtemp(prefix="attn_fleet_")
        cls.fleet = fleet_fixture(cls.tmp)

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_canonical_names_match_the_cpp_reader(self):
        for raw, canon in (("NVIDIA H100 80GB HBM3", "h100-sxm"), ("H100-SXM", "h100-sxm"),
                           ("NVIDIA H100 SXM5 80GB", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"),
                           ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
                           ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"), ("NVIDIA H200", "h200"),
                           ("NVIDIA L40S", "l40s"), ("NVIDIA GeForce RTX 4090", "rtx-4090"),
                           ("AMD Instinct MI300X", "mi300x")):
            self.assertEqual(att.canonical_device_name(raw), canon, raw)
        self.assertEqual(att.canonical_device_name("A100-SXM4", 80 << 30), "a100-sxm4-80gb")
        for name in att.KNOWN_DEVICES:
            self.assertEqual(att.canonical_device_name(name), name)

    def test_each_device_and_alias_gets_its_entry(self):
        q = query(4, 64)
        for names, entry, key in ((self.H100, "h100-sxm", "decode_v2[partition=256]"),
                                  (self.A100, "a100-sxm4-40gb", "decode_v1[]")):
            for name in names:
                t = att.ThresholdTable.load(self.fleet, device_name=name)
                self.assertEqual(t.selection.device, entry, name)
                self.assertTrue(t.selection.exact)
                self.assertIn("fleet entry %s" % entry, t.selection.said)
                self.assertEqual(t.lookup(**q).config_key, key, name)

    def test_nearest_only_when_asked(self):
        with self.assertRaisesRegex(LookupError, r"no entry for 'NVIDIA H200' \(h200\); it has "
                                                 r"h100-sxm, a100-sxm4-40gb"):
            att.ThresholdTable.load(self.fleet, device_name="NVIDIA H200")
        t = att.ThresholdTable.load(self.fleet, device_name="NVIDIA H200", nearest=True)
        self.assertEqual(t.selection.device, "h100-sxm")
        self.assertFalse(t.selection.exact)
        self.assertIn("using the nearest, h100-sxm", t.selection.said)
        with self.assertRaises(LookupError):
            att.ThresholdTable.load(self.fleet, device_name="Mystery GPU", nearest=True)
        t = att.ThresholdTable.load(self.fleet, device_name="Mystery GPU", nearest=True,
                                    sm_count=100, bandwidth_gbps=1500)
        self.assertEqual(t.selection.device, "a100-sxm4-40gb")

    def test_single_tables_load_as_before(self):
        plain = att.ThresholdTable.load(FIXTURE)
        self.assertIsNone(plain.selection)
        named = att.ThresholdTable.load(FIXTURE, device_name="NVIDIA H100 80GB HBM3")
        self.assertFalse(named.selection.exact)  # the fixture was measured on another device
        self.assertEqual(named.lookup(**query(4, 64)).config_key,
                         plain.lookup(**query(4, 64)).config_key)

    @unittest.skipUnless(os.environ.get("ATTN_TUNE_BIN"), "ATTN_TUNE_BIN not set")
    def test_cli_agrees_for_every_alias(self):
        exe = os.environ["ATTN_TUNE_BIN"]
        args = ["--batch", "4", "--context-len", "64", "--num-heads", "32", "--num-kv-heads", "8",
                "--head-dim", "128", "--block-size", "16", "--dtype", "fp16"]
        for name in self.H100 + self.A100:
            r = subprocess.run([exe, "table", "lookup", self.fleet, "--device-name", name] + args,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               check=True)
            t = att.ThresholdTable.load(self.fleet, device_name=name)
            c = t.lookup(**query(4, 64))
            self.assertEqual(r.stdout.split(), [c.family, c.config_key], name)
            self.assertIn("fleet entry %s" % t.selection.device, r.stderr)


if __name__ == "__main__":
    unittest.main()
