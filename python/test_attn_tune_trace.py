"""Tests of the traffic-trace module (python/attn_tune_trace.py, docs/traffic.md): writing and
reading traces, the one-line errors of malformed ones, the engine hooks, the synthetic mixes
and the command line."""

import io
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import attn_tune_trace as att  # noqa: E402

SCRIPT = os.path.join(HERE, "attn_tune_trace.py")
EXAMPLE = os.path.join(HERE, "examples", "vllm_trace_hook.py")
SHAPE = {"num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "block_size": 16, "dtype": "bf16"}


class TempDir(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="attn_trace_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def write(self, name, text):
        path = self.path(name)
        with open(path, "wb") as f:
            f.write(text.encode("utf-8") if isinstance(text, str) else text)
        return path


class RoundTripTest(TempDir):
    def test_writer_and_reader_agree(self):
        path = self.path("t.jsonl")
        batches = [([30, 20000, 512], 1), ([1], 3), (list(range(1, 1001)), 1),
                   ([att.MAX_LEN] * 4, 2)]
        with att.TraceWriter(path, source="unit test", shape=SHAPE) as w:
            for lens, count in batches:
                w.record(lens, count)
        header, got = att.read_trace(path)
        self.assertEqual(header, {"attn_tune_trace": 1, "source": "unit test", "shape": SHAPE})
        self.assertEqual(got, batches)
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        self.assertEqual(len(lines), 1 + len(batches))
        self.assertEqual(json.loads(lines[1]), {"seq_lens": [30, 20000, 512]})  # count 1: omitted
        self.assertEqual(json.loads(lines[2]), {"seq_lens": [1], "count": 3})

    def test_each_batch_is_on_disk_at_once(self):
        path = self.path("t.jsonl")
        w = att.TraceWriter(path)
        w.record([5, 6])
        # Not closed: a killed engine would have left exactly this.
        self.assertEqual(att.read_trace(path), ({"attn_tune_trace": 1}, [([5, 6], 1)]))
        w.close()

    def test_appending_to_an_existing_trace_writes_no_second_header(self):
        path = self.path("t.jsonl")
        with att.TraceWriter(path, source="first") as w:
            w.record([1, 2])
        with att.TraceWriter(path, source="second") as w:
            w.record([3])
        header, batches = att.read_trace(path)
        self.assertEqual(header["source"], "first")
        self.assertEqual(batches, [([1, 2], 1), ([3], 1)])

    def test_processes_sharing_a_new_file(self):
        path = self.path("shared.jsonl")
        code = ("import sys; sys.path.insert(0, %r); import attn_tune_trace as t\n"
                "w = t.TraceWriter(sys.argv[1], source='p' + sys.argv[2])\n"
                "for i in range(200): w.record([int(sys.argv[2]) + 1] * 50 + [i + 1])\n" % HERE)
        procs = [subprocess.Popen([sys.executable, "-c", code, path, str(k)]) for k in range(6)]
        self.assertEqual([p.wait(timeout=120) for p in procs], [0] * 6)
        header, batches = att.read_trace(path)  # one header, on line 1; no line mixed
        self.assertRegex(header["source"], r"^p[0-5]$")
        self.assertEqual(len(batches), 6 * 200)
        for k in range(6):
            mine = [b for b, _ in batches if b[0] == k + 1]
            self.assertEqual([b[-1] for b in mine], list(range(1, 201)))
        self.assertEqual([f for f in os.listdir(self.tmp)], ["shared.jsonl"])

    def test_a_line_cut_short_loses_only_its_batch(self):
        # A writer killed mid-line left the start of a batch; the next writer starts a new line,
        # and readers skip the fragment (naming it) and read the rest.
        path = self.write("t.jsonl", '{"seq_lens": [1]}\n{"seq_lens": [2, 3')
        with att.TraceWriter(path) as w:
            w.record([4])
        with open(path, encoding="utf-8") as f:
            self.assertEqual(f.read().splitlines()[-1], '{"seq_lens":[4]}')
        torn = []
        self.assertEqual(att.read_trace(path, torn), ({}, [([1], 1), ([4], 1)]))
        self.assertEqual(torn, [2])

    def test_a_writer_open_during_another_ones_kill_is_not_glued(self):
        # Another process dies mid-line while this writer is open: its next line still starts
        # on a line of its own.
        path = self.path("t.jsonl")
        with att.TraceWriter(path) as w:
            w.record([1])
            with open(path, "ab") as other:
                other.write(b'{"seq_lens":[7,8888')
            w.record([2])
        self.assertEqual(att.read_trace(path), ({"attn_tune_trace": 1}, [([1], 1), ([2], 1)]))
        # A line glued on before a writer checked (an older writer): the whole line after the
        # fragment is read, the fragment skipped.
        glued = self.write("g.jsonl", '{"seq_lens":[1,88882{"seq_lens":[5,6]}\n')
        torn = []
        self.assertEqual(att.read_trace(glued, torn), ({}, [([5, 6], 1)]))
        self.assertEqual(torn, [1])

    def test_an_existing_trace_of_another_version_or_shape_is_refused(self):
        other = self.write("v2.jsonl", '{"attn_tune_trace": 2}\n{"seq_lens": [1]}\n')
        with self.assertRaisesRegex(att.TraceError, r"v2\.jsonl: its header says version 2"):
            att.TraceWriter(other)
        shaped = self.write("s.jsonl", '{"attn_tune_trace": 1, "shape": {"num_heads": 64}}\n')
        with self.assertRaisesRegex(att.TraceError, r"begun with shape \{\"num_heads\": 64\}"):
            att.TraceWriter(shaped, shape={"num_heads": 8})
        with att.TraceWriter(shaped) as w:  # a writer that names no shape appends
            w.record([3])
        # An existing empty file (made by `touch`) gets the header once.
        empty = self.write("e.jsonl", "")
        with att.TraceWriter(empty, shape={"num_heads": 8}) as w:
            w.record([2])
        self.assertEqual(att.read_trace(empty)[0]["shape"], {"num_heads": 8})
        # An open file positioned at its start but not empty keeps its first line.
        path = self.write("r.jsonl", '{"seq_lens":[11,12]}\n')
        with open(path, "r+b") as f:
            att.TraceWriter(f, shape={"num_heads": 8}).record([5])
        self.assertEqual(att.read_trace(path)[1][0], ([11, 12], 1))

    def test_a_short_write_is_not_glued_to_the_next_line(self):
        path = self.path("t.jsonl")
        # A file size limit stands in for a full disk: the line that does not fit is cut short,
        # the writer says so, and its next line starts a line of its own.
        code = ("import resource, signal, sys; sys.path.insert(0, %r); "
                "import attn_tune_trace as t; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                "w = t.TraceWriter(%r); hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]; "
                "resource.setrlimit(resource.RLIMIT_FSIZE, (200, hard))\n"
                "try:\n    w.record(list(range(1, 200)))\nexcept t.TraceError as e:\n"
                "    print('refused:', e)\n"
                "resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard)); w.record([9])"
                % (os.path.dirname(os.path.abspath(att.__file__)), path))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("refused: traffic trace", out.stdout)
        torn = []
        self.assertEqual(att.read_trace(path, torn)[1], [([9], 1)])
        self.assertEqual(len(torn), 1)

    def test_open_files_tensors_and_numpy_like_values(self):
        class FakeTensor:
            def __init__(self, values):
                self.values = values

            def tolist(self):
                return list(self.values)

        for f in (io.StringIO(), io.BytesIO()):
            w = att.TraceWriter(f, shape={"dtype": "fp16"})
            w.record(FakeTensor([7, 8]))
            w.record((9,), count=2)
            w.close()  # leaves the caller's file open
            text = f.getvalue() if isinstance(f, io.StringIO) else f.getvalue().decode()
            self.assertEqual(text.splitlines()[1:], ['{"seq_lens":[7,8]}',
                                                     '{"seq_lens":[9],"count":2}'])
            self.assertIn('"dtype":"fp16"', text.splitlines()[0])

    def test_writer_refuses_what_readers_refuse(self):
        w = att.TraceWriter(io.StringIO())
        for bad, msg in (([], r"seq_lens: empty"), ([0], r"seq_lens\[0\]: 0 is not"),
                         ([1, 2.5], r"seq_lens\[1\]: expected an integer, not 2.5"),
                         ([True], r"seq_lens\[0\]: expected an integer"),
                         ("12", r"seq_lens: expected a list")):
            with self.assertRaisesRegex(att.TraceError, msg):
                w.record(bad)
        with self.assertRaisesRegex(att.TraceError, r"count: expected an integer from 1 to 2\^53"):
            w.record([1], count=0)

        class Scalar:  # an integer as numpy and torch hold one: it has __index__ and a dtype
            def __init__(self, value, dtype):
                self.value, self.dtype = value, dtype

            def __index__(self):
                return int(self.value)

        # Integer scalars count as lengths and counts alike; booleans of any kind do neither.
        w.record([Scalar(5, "int64")], count=Scalar(3, "torch.int64"))
        for dtype in ("bool", "torch.bool"):
            with self.assertRaisesRegex(att.TraceError, r"seq_lens\[0\]: expected an integer"):
                w.record([Scalar(1, dtype)])
            with self.assertRaisesRegex(att.TraceError, r"count: expected an integer"):
                w.record([1], count=Scalar(1, dtype))
        self.assertEqual(w._file.getvalue().splitlines()[-1], '{"seq_lens":[5],"count":3}')
        with self.assertRaisesRegex(att.TraceError, r"shape\.heads: not a shape field"):
            att.TraceWriter(io.StringIO(), shape={"heads": 8})
        with self.assertRaisesRegex(att.TraceError, r"shape\.dtype"):
            att.TraceWriter(io.StringIO(), shape={"dtype": "int8"})

    def test_a_byte_order_mark_is_skipped(self):
        path = self.write("bom.jsonl", b'\xef\xbb\xbf{"attn_tune_trace": 1}\n'
                                       b'{"seq_lens": [3], "count": 9007199254740992}\n')
        self.assertEqual(att.read_trace(path), ({"attn_tune_trace": 1}, [([3], 1 << 53)]))

    def test_blank_lines_and_unknown_keys_are_ignored(self):
        path = self.write("t.jsonl", '\n{"seq_lens": [3], "t": 1.5, "rank": 0}\n\n  \n'
                                     '{"count": 2, "seq_lens": [4, 5]}\r\n')
        self.assertEqual(att.read_trace(path), ({}, [([3], 1), ([4, 5], 2)]))


class MalformedTest(TempDir):
    """Every kind of malformed line: one line naming the file, the line and the problem."""

    CASES = [
        ('{"seq_lens": [1, 2]]', r"not JSON: .*\(column \d+\)"),
        ("[1, 2, 3]", r"expected a JSON object, not a list"),
        ('"hello"', r"expected a JSON object, not a string"),
        ('{"count": 2}', r"seq_lens: missing"),
        ('{"seq_lens": 12}', r"seq_lens: expected a list of context lengths, not an integer"),
        ('{"seq_lens": []}', r"seq_lens: empty"),
        ('{"seq_lens": [1, 0]}', r"seq_lens\[1\]: 0 is not a context length \(1 to 10000000\)"),
        ('{"seq_lens": [-5]}', r"seq_lens\[0\]: -5 is not a context length"),
        ('{"seq_lens": [10000001]}', r"seq_lens\[0\]: 10000001 is not a context length"),
        ('{"seq_lens": [3.0]}', r"seq_lens\[0\]: expected an integer, not 3.0"),
        ('{"seq_lens": ["3"]}', r'seq_lens\[0\]: expected an integer, not "3"'),
        ('{"seq_lens": [null]}', r"seq_lens\[0\]: expected an integer, not null"),
        ('{"seq_lens": [true]}', r"seq_lens\[0\]: expected an integer, not true"),
        ('{"seq_lens": [1], "count": 0}', r"count: expected an integer from 1 to 2\^53, not 0"),
        ('{"seq_lens": [1], "count": 1.5}', r"count: expected an integer from 1 to 2\^53, not 1.5"),
        ('{"seq_lens": [1], "count": "2"}', r'count: expected an integer from 1 to 2\^53, not "2"'),
        ('{"seq_lens": [1], "count": 9007199254740993}',
         r"count: expected an integer from 1 to 2\^53, not 9007199254740993"),
        ('{"seq_lens": [1], "count": 2, "count": 3}',
         r"count: the key appears twice in its object \(JSON keeps only the last; give it once\)"),
        ('{"attn_tune_trace": 1, "shape": {"head_dim": 64, "head_dim": 128}}',
         r"shape\.head_dim: the key appears twice"),
        ('{"seq_lens": [1], "t": ' + "[" * 100000 + "]" * 100000 + "}",
         r"nested too deeply to read"),
        ('{"attn_tune_trace": 1, "source": "\\udcff"}',
         r"source: not valid Unicode text \(a lone surrogate\)"),
        ('{"attn_tune_trace": 2}', r"attn_tune_trace: 2 is not a trace version"),
        ('{"attn_tune_trace": true}', r"attn_tune_trace: true is not a trace version"),
        ('{"attn_tune_trace": 1, "source": 5}', r"source: expected a string, not an integer"),
        ('{"attn_tune_trace": 1, "shape": []}', r"shape: expected an object, not a list"),
        # A shape is held to the bounds a sweep holds a profile's axes to, as attn-tune does.
        ('{"attn_tune_trace": 1, "shape": {"head_dim": 0}}',
         r"shape\.head_dim: expected an integer from 1 to 512, not 0"),
        ('{"attn_tune_trace": 1, "shape": {"head_dim": 12}}',
         r"shape\.head_dim: 12 is not a multiple of 8"),
        ('{"attn_tune_trace": 1, "shape": {"num_heads": 8192}}',
         r"shape\.num_heads: expected an integer from 1 to 4096, not 8192"),
        ('{"attn_tune_trace": 1, "shape": {"block_size": 2048}}',
         r"shape\.block_size: expected an integer from 1 to 1024, not 2048"),
        ('{"attn_tune_trace": 1, "shape": {"num_heads": 3, "num_kv_heads": 2}}',
         r"shape\.num_heads: 3 is not a multiple of shape\.num_kv_heads 2"),
        ('{"attn_tune_trace": 1, "shape": {"dtype": "fp8"}}',
         r'shape\.dtype: "fp8" is not one of fp32, fp16, bf16'),
        # A misspelt shape field would leave the profile's value in its place, unsaid.
        ('{"attn_tune_trace": 1, "shape": {"heads": 8}}',
         r"shape\.heads: not a shape field \(num_heads, num_kv_heads, head_dim, block_size, "
         r"dtype\)"),
        ('{"attn_tune_trace": 1, "seq_lens": [3]}', r"seq_lens: a header holds no batch"),
        # Keys a batch does not need are still JSON, as attn-tune's reader holds them to be.
        ('{"seq_lens": [1], "t": NaN}', r"not JSON: NaN is not a JSON number"),
        ('{"seq_lens": [1], "t": -Infinity}', r"not JSON: -Infinity is not a JSON number"),
        ('{"seq_lens": [1], "t": 1e400}', r"not JSON: 1e400 is out of range for a number"),
        ('{"seq_lens": [1], "t": 1' + "0" * 400 + '}', r"not JSON: 1000.* is out of range"),
        ("\x0b", r"not JSON: Expecting value"),
    ]

    def check(self, text, line, pattern):
        path = self.write("bad.jsonl", text)
        with self.assertRaises(att.TraceError) as cm:
            att.read_trace(path)
        msg = str(cm.exception)
        self.assertNotIn("\n", msg)
        self.assertRegex(msg, "^traffic trace " + re.escape(path) + " line %d: " % line + pattern,
                         text)

    def test_each_kind_names_file_line_and_problem(self):
        good = '{"attn_tune_trace": 1}\n{"seq_lens": [4]}\n\n'
        for bad, pattern in self.CASES:
            if '"attn_tune_trace"' in bad:
                self.check(bad + "\n" + good.split("\n", 1)[1], 1, pattern)
            else:
                self.check(good + bad + "\n", 4, pattern)

    def test_header_only_on_the_first_line(self):
        for text in ('{"seq_lens": [4]}\n{"attn_tune_trace": 1}\n', '\n{"attn_tune_trace": 1}\n'):
            self.check(text, 2, r"a header \(attn_tune_trace\) must be the first line")

    def test_too_many_sequences(self):
        self.check('{"seq_lens": [%s]}\n' % ",".join(["1"] * (att.MAX_SEQS + 1)), 1,
                   r"seq_lens: 65537 sequences \(at most 65536\)")
        path = self.write("ok.jsonl", '{"seq_lens": [%s]}\n' % ",".join(["1"] * att.MAX_SEQS))
        self.assertEqual(len(att.read_trace(path)[1][0][0]), att.MAX_SEQS)

    def test_not_utf8_and_missing_file(self):
        self.check(b'{"seq_lens": [1]}\n{"seq_lens": [2]} \xff\n', 2, r"not UTF-8")
        with self.assertRaisesRegex(att.TraceError,
                                    r"^traffic trace .*nope\.jsonl: cannot read it"):
            att.read_trace(self.path("nope.jsonl"))


class ReadersAgreeTest(TempDir):
    """attn-tune's own reader (src/tuning/length_mix.cpp, through `sweep --traffic`) and this one
    accept and refuse the same traces, at the same line: with ATTN_TUNE_BIN set, each trace below
    goes to both. The sweep reads its trace before it asks for a device, so a device that does
    not exist makes it stop right after the read: exit 2 for a trace it refuses, 3 otherwise."""

    PROFILE = os.path.join(HERE, "..", "tests", "traffic", "mixed_profile.json")
    GOOD = '{"seq_lens": [4, 5]}'
    TRACES = [
        GOOD,
        '{"attn_tune_trace": 1, "source": "x", "shape": {"num_heads": 4, "num_kv_heads": 2}}\n'
        + GOOD,
        GOOD + "\n \t\r\n" + GOOD,  # JSON's blanks only
        GOOD + "\n\x0b\n" + GOOD,
        GOOD + "\n\x0c\n" + GOOD,
        GOOD + '\n{"seq_lens": [3], "t": 1.5e300, "rank": 0}',
        GOOD + '\n{"seq_lens": [3], "t": 1e400}',
        GOOD + '\n{"seq_lens": [3], "t": -1e400}',
        GOOD + '\n{"seq_lens": [3], "t": 1' + "0" * 400 + "}",
        GOOD + '\n{"seq_lens": [3], "t": NaN}',
        GOOD + '\n{"seq_lens": [3], "t": Infinity}',
        GOOD + '\n{"seq_lens": [3]}\n[1]',
        GOOD + '\n{"seq_lens": [3], "count": 9007199254740992}',
        GOOD + '\n{"seq_lens": [3], "count": 9007199254740993}',
        GOOD + '\n{"seq_lens": [3], "count": 2.0}',
        GOOD + '\n{"seq_lens": [3.0]}',
        GOOD + '\n{"seq_lens": [3], "seq_lens": [4]}',
        '{"attn_tune_trace": 1, "seq_lens": [3]}\n' + GOOD,
        '{"attn_tune_trace": 1, "shape": {"heads": 4}}\n' + GOOD,
        '{"attn_tune_trace": 1, "shape": {"dtype": "fp8"}}\n' + GOOD,
        GOOD + '\n{"attn_tune_trace": 1}',
        GOOD + '\n{"seq_lens": [1, 2',  # cut short by a killed writer: skipped
        GOOD + '\n{"seq_lens": [1, 2{"seq_lens": [6]}',  # another writer's line glued on
        GOOD + '\n{"seq_lens": [1, 2]]}',
        "\ufeff" + GOOD,
        GOOD + "\n\ufeff" + GOOD,
        GOOD + '\n{"seq_lens": [3], "t": "\\ud800"}',
    ]

    @staticmethod
    def _line(message):
        found = re.search(r" line (\d+): ", message)
        return int(found.group(1)) if found else None

    @unittest.skipUnless(os.environ.get("ATTN_TUNE_BIN"), "ATTN_TUNE_BIN not set")
    def test_both_readers_give_the_same_verdict(self):
        exe = os.environ["ATTN_TUNE_BIN"]
        for i, text in enumerate(self.TRACES):
            with self.subTest(trace=text[:60]):
                self._agree(exe, i, text)

    def _agree(self, exe, i, text):
        if True:
            path = self.write("t%d.jsonl" % i, text + "\n")
            try:
                att.read_trace(path)
                mine = None
            except att.TraceError as e:
                mine = str(e)
            run = subprocess.run([exe, "sweep", "--traffic", path, "--profile", self.PROFILE,
                                  "--device", "999", "--out", self.path("out%d" % i)],
                                 capture_output=True, text=True, timeout=60)
            theirs = run.stderr.strip() if run.returncode == 2 else None
            self.assertIn(run.returncode, (2, 3), run.stderr)
            self.assertEqual(mine is None, theirs is None,
                             "%r: Python %s, attn-tune %s" % (text, mine or "accepts",
                                                              theirs or "accepts"))
            if mine is not None:
                self.assertEqual(self._line(mine), self._line(theirs), "%r: %s / %s"
                                 % (text, mine, theirs))


class LogBatchTest(TempDir):
    def setUp(self):
        super().setUp()
        self._reset()

    def tearDown(self):
        self._reset()
        super().tearDown()

    @staticmethod
    def _reset():
        with att._log_lock:
            if att._log["writer"] is not None:
                att._log["writer"].close()
            att._log.update(writer=None, path=None, pid=None, last=None)

    def test_nothing_happens_without_the_variable(self):
        with mock.patch.dict(os.environ, {}, clear=False):
            os.environ.pop(att.ENV_VAR, None)
            self.assertFalse(att.log_batch([1, 2, 3]))
            with mock.patch.dict(os.environ, {att.ENV_VAR: ""}):
                self.assertFalse(att.log_batch([1, 2, 3]))
        self.assertIsNone(att._log["writer"])
        self.assertEqual(os.listdir(self.tmp), [])

    def test_writes_to_the_named_file_once_per_step(self):
        path = self.path("engine.jsonl")
        with mock.patch.dict(os.environ, {att.ENV_VAR: path}):
            self.assertTrue(att.log_batch([30, 20000]))
            writer = att._log["writer"]
            for _ in range(31):  # the other layers of the same step
                self.assertFalse(att.log_batch([30, 20000]))
            self.assertTrue(att.log_batch([31, 20001]))
            self.assertIs(att._log["writer"], writer)  # opened once
            with self.assertRaises(att.TraceError):
                att.log_batch([0])
            self.assertTrue(att.log_batch([31, 20001], count=2))  # a count makes it another line
        header, batches = att.read_trace(path)
        self.assertEqual(header["source"], "log_batch, pid %d" % os.getpid())
        self.assertEqual(batches, [([30, 20000], 1), ([31, 20001], 1), ([31, 20001], 2)])

    def test_pid_in_the_path(self):
        with mock.patch.dict(os.environ, {att.ENV_VAR: self.path("r{pid}.jsonl")}):
            self.assertTrue(att.log_batch([7]))
        self.assertEqual(att.read_trace(self.path("r%d.jsonl" % os.getpid()))[1], [([7], 1)])

    def test_vllm_hook_keeps_the_decode_rows(self):
        # Two decodes, a prompt chunk of 96 tokens, and a one-token chunk of a prompt.
        query_lens, seq_lens = [1, 1, 96, 1], [513, 20000, 96, 40]
        self.assertEqual(att.decode_seq_lens(query_lens, seq_lens), [513, 20000, 40])
        self.assertEqual(att.decode_seq_lens(query_lens, seq_lens,
                                             is_prefilling=[False, False, True, True]),
                         [513, 20000])
        self.assertEqual(att.decode_seq_lens([3, 1], [50, 60], decode_threshold=4), [50, 60])
        with self.assertRaises(ValueError):
            att.decode_seq_lens([1], [1, 2])
        # A length that is not an integer is refused, not truncated (int(3.9) would write 3).
        with self.assertRaisesRegex(att.TraceError, r"seq_lens\[0\]: expected an integer, not 3.9"):
            att.vllm_hook(att.TraceWriter(io.StringIO()))([1, 1], [3.9, 7])
        buf = io.StringIO()
        step = att.vllm_hook(att.TraceWriter(buf))
        self.assertTrue(step(query_lens, seq_lens))
        self.assertFalse(step([96], [96]))  # a step of prefill only: nothing to record
        self.assertEqual(buf.getvalue().splitlines()[1:], ['{"seq_lens":[513,20000,40]}'])
        path = self.path("vllm.jsonl")
        with mock.patch.dict(os.environ, {att.ENV_VAR: path}):
            self.assertTrue(att.vllm_hook()(query_lens, seq_lens))
        self.assertEqual(att.read_trace(path)[1], [([513, 20000, 40], 1)])


class GeneratorTest(unittest.TestCase):
    def test_deterministic_given_the_seed(self):
        for mix in att.MIXES:
            a = att.make_trace(mix, 50, "1-32", seed=7)
            self.assertEqual(a, att.make_trace(mix, 50, "1-32", seed=7), mix)
            self.assertNotEqual(a, att.make_trace(mix, 50, "1-32", seed=8), mix)
            self.assertEqual(len(a), 50)
            self.assertTrue(all(1 <= len(b) <= 32 for b in a))
            self.assertGreater(len({len(b) for b in a}), 5)  # the sizes vary
            self.assertTrue(all(1 <= n <= att.MAX_CONTEXT for b in a for n in b))
            self.assertEqual({len(b) for b in att.make_trace(mix, 20, 8, seed=1)}, {8})

    def test_each_mix_median_is_near_its_documented_figure(self):
        for mix in att.MIXES:
            for seed in (1, 2):
                lens = [n for b in att.make_trace(mix, 2500, 8, seed) for n in b]
                median = statistics.median(lens)
                self.assertLess(abs(median / att.MIX_MEDIANS[mix] - 1), 0.06,
                                "%s seed %d: median %d, documented %d"
                                % (mix, seed, median, att.MIX_MEDIANS[mix]))

    def test_the_lognormals_have_the_published_means(self):
        import random
        rng = random.Random(3)
        for mean, sigma in ((att.CHAT_PROMPT_MEAN, att.CHAT_PROMPT_SIGMA),  # LMSYS-Chat-1M
                            (att.CHAT_OUTPUT_MEAN, att.CHAT_OUTPUT_SIGMA),
                            (att.DOC_WORDS_MEAN * att.TOKENS_PER_WORD, att.DOC_PROMPT_SIGMA)):
            mu = att.lognormal_mu(mean, sigma=sigma)
            sample = [rng.lognormvariate(mu, sigma) for _ in range(200000)]
            self.assertLess(abs(statistics.fmean(sample) / mean - 1), 0.03, (mean, sigma))
            self.assertAlmostEqual(math.exp(mu), mean * math.exp(-sigma * sigma / 2))

    def test_mixture_puts_long_documents_next_to_short_chats(self):
        with mock.patch.object(att, "_document", lambda rng: 20000), \
                mock.patch.object(att, "_chat", lambda rng: 30):
            for size, most in ((16, 3), (8, 2), (4, 1), (1, 1)):
                seen = set()
                for b in att.make_trace("mixture", 300, size, seed=5):
                    self.assertEqual(len(b), size)
                    seen.add(b.count(20000))
                    self.assertEqual(b.count(20000) + b.count(30), size)
                self.assertEqual(seen, set(range(1, most + 1)), size)
        lens = [n for b in att.make_trace("mixture", 400, 16, seed=5) for n in b]
        share = sum(n >= 2000 for n in lens) / len(lens)  # 1.5 documents per 16 expected
        self.assertTrue(0.06 < share < 0.14, share)

    def test_bad_arguments(self):
        for bad in (0, "0", "5-2", "a", "1-70000", (3, 1)):
            with self.assertRaises(ValueError, msg=repr(bad)):
                att.make_trace("chat", 1, bad, 0)
        with self.assertRaisesRegex(ValueError, r"batches must be a positive int"):
            att.make_trace("chat", 0, 8, 0)  # a trace without a batch no reader accepts
        with self.assertRaisesRegex(ValueError, r"unknown mix"):
            att.make_trace("video", 1, 1, 0)
        self.assertEqual(att.parse_batch_size("1-32"), (1, 32))
        self.assertEqual(att.parse_batch_size(" 8 "), (8, 8))


class CommandLineTest(TempDir):
    def run_cli(self, *args):
        return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True,
                              text=True, timeout=120)

    def test_make_then_check(self):
        out = self.path("chat.jsonl")
        r = self.run_cli("make", "--mix", "chat", "--batches", "40", "--batch-size", "1-32",
                         "--seed", "3", "--out", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        header, batches = att.read_trace(out)
        self.assertEqual([b for b, _ in batches], att.make_trace("chat", 40, "1-32", 3))
        self.assertIn("--mix chat", header["source"])
        r = self.run_cli("check", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 1)
        n = sum(len(b) for b, _ in batches)
        lens = sorted(x for b, _ in batches for x in b)
        self.assertRegex(lines[0], r"^%s: 40 batches, %d sequences, batch size \d+ to \d+, "
                         r"context length min %d median %d max %d; source: attn_tune_trace "
                         r"make --mix chat" % (out.replace(".", r"\."), n, lens[0],
                                               lens[(n - 1) // 2], lens[-1]))
        self.assertTrue(os.path.exists(out) and not any(".tmp" in f for f in os.listdir(self.tmp)))

    def test_check_counts_repeated_batches(self):
        path = self.write("t.jsonl", '{"seq_lens": [10, 20], "count": 3}\n{"seq_lens": [30]}\n')
        r = self.run_cli("check", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(": 4 batches (2 lines), 7 sequences, batch size 1 to 2, context length "
                      "min 10 median 20 max 30", r.stdout)

    def test_bad_input_exits_2_with_one_line(self):
        bad = self.write("bad.jsonl", '{"seq_lens": [1]}\n{"seq_lens": [0]}\n')
        empty = self.write("empty.jsonl", '{"attn_tune_trace": 1}\n')
        for path, pattern in ((bad, r"line 2: seq_lens\[0\]: 0 is not a context length"),
                              (empty, r": no decode batches"),
                              (self.path("missing.jsonl"), r": cannot read it")):
            r = self.run_cli("check", path)
            self.assertEqual(r.returncode, 2, path)
            self.assertEqual(r.stdout, "")
            self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
            self.assertRegex(r.stderr, pattern)
        r = self.run_cli("make", "--mix", "chat", "--batches", "2", "--batch-size", "9-3",
                         "--out", self.path("x.jsonl"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("batch size", r.stderr)
        self.assertFalse(os.path.exists(self.path("x.jsonl")))

    @unittest.skipUnless(os.path.exists(EXAMPLE), "no example")
    def test_example_runs(self):
        r = subprocess.run([sys.executable, EXAMPLE], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("3 batches", r.stdout)


if __name__ == "__main__":
    unittest.main()
