#!/usr/bin/env python3
"""Seeded mutation harness for attn-tune's input readers (issue 31).

It makes real inputs with the binary (a tiny CPU sweep, a fleet file, traffic traces, profiles,
replay files), damages them in seeded, repeatable ways, runs the command that reads each one and
checks the promise:

  bad input gets ONE line on stderr and exit 2 (1 for a faulting run); never a signal, a hang,
  exit 3 or 4, an "internal error", a traceback, a left-over .tmp file or an output written by a
  command that refused its input; impossible values (targeted cases) exit exactly 2.

Standard library only. See tests/fuzz/README.md for how to run it and how to rerun one case.
"""

import argparse
import concurrent.futures
import copy
import difflib
import fcntl
import hashlib
import json
import os
import random
import re
import resource
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

HARNESS_VERSION = "1"  # bump when the seeds change shape, so cached seeds are made again
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The shape of every workload in the seed sweep, so that lookups hit its points exactly.
SHAPE = {"num_heads": 2, "num_kv_heads": 1, "head_dim": 32, "block_size": 16, "dtype": "fp32"}
LOOKUP_SHAPE = ["--num-heads", "2", "--num-kv-heads", "1", "--head-dim", "32",
                "--block-size", "16", "--dtype", "fp32"]

# A profile small enough that the CPU backend sweeps it in well under a second: two decode batch
# sizes over two context lengths, one prefill shape, a held-out point, few configurations.
TINY_PROFILE = {
    "name": "fuzz-seed",
    "description": "tests/fuzz/mutate_inputs.py: the seed sweep",
    "decode": {"batch": [1, 2], "context_len": [16, 64], "num_kv_heads": 1, "gqa_ratio": 2,
               "head_dim": 32, "block_size": 16, "dtype": "fp32"},
    "prefill": {"batch": 1, "q_len": 16, "k_len": 32, "num_kv_heads": 1, "gqa_ratio": 2,
                "head_dim": 32, "block_size": 16, "dtype": "fp32"},
    "configs": {"decode_v1": "auto",
                "decode_v2": [{"partition": [16, 32], "split": 1}],
                "prefill": [{"q_tile": 16, "k_tile": 32, "split": 0}]},
    "timing": {"warmup": 1, "warmup_seconds": 0.001, "min_reps": 3, "max_reps": 5,
               "max_seconds": 0.005, "target_noise": 0.5, "flush_cache": False},
    "held_out": [{"batch": 1, "context_len": 32}],
}

# Flags every sweep of the harness shares: CPU, one thread (the results header records it, and a
# resume must match it), no progress lines, no report page.
SWEEP_FLAGS = ["--device", "cpu", "--threads", "1", "--quiet", "--no-report"]
TRAFFIC_FLAGS = ["--traffic", "trace.jsonl", "--traffic-batches", "3", "--hold-out", "0.34"]

# The stderr line of a sweep that got past its inputs and stopped at the device lock the harness
# holds (--no-wait): the inputs were accepted.
LOCK_ACCEPTED = "is timing on this device"


# ----------------------------------------------------------------------------------------------
# Hostile values
# ----------------------------------------------------------------------------------------------

class Raw:
    """A token written into the JSON text as it is: not valid JSON (NaN, 1e999) or not
    expressible from Python (a lone surrogate escape, deep nesting)."""

    def __init__(self, token):
        self.token = token

    def __deepcopy__(self, memo):
        return self


# (label, value): what a field is replaced with.
HOSTILE_VALUES = [
    ("an array", []), ("an array of junk", [1, "x", None]), ("the number 7", 7),
    ("2.5", 2.5), ("null", None), ("the string \"x\"", "x"), ("an empty object", {}),
    ("an object", {"x": 1}), ("true", True), ("false", False),
    ("0", 0), ("-1", -1), ("-7", -7), ("INT_MIN", -2147483648), ("2^31", 2 ** 31),
    ("2^32", 2 ** 32), ("2^40+7", 2 ** 40 + 7), ("10^12", 10 ** 12), ("2^63", 2 ** 63),
    ("2^64", 2 ** 64), ("-2^63-1", -(2 ** 63) - 1), ("1e999", Raw("1e999")),
    ("-1e999", Raw("-1e999")), ("NaN", Raw("NaN")), ("Infinity", Raw("Infinity")),
    ("-Infinity", Raw("-Infinity")), ("the string \"nan\"", "nan"), ("the string \"inf\"", "inf"),
    ("1e-320", 1e-320), ("-0.0", -0.0), ("0.5", 0.5), ("1e308", 1e308),
    ("a 100k-character string", "A" * 100000),
    ("control characters", "\x00\x01\x1b[31m\n\r\t\x7f"),
    ("a lone surrogate", Raw('"\\ud800"')), ("non-ASCII text", "h\u00e9llo \u2603 \U0001d11e"),
    ("an empty string", ""),
    # deep enough to find recursion without a limit; `table show --json` prints it indented, so
    # much deeper would spend the timeout on output alone
    ("3000-deep nesting", Raw("[" * 3000 + "]" * 3000)),
]

# What a whole JSONL line, or a whole JSON file, is replaced with.
WHOLE_REPLACEMENTS = ["[]", "1", "null", "\"x\"", "{}", "true", "[{}]", "-1", "1e999", "NaN"]


def encode(doc, indent=None):
    """JSON text of `doc`, with every Raw value written as its token."""
    raws = []

    def swap(node):
        if isinstance(node, Raw):
            raws.append(node.token)
            return "@@RAW%d@@" % (len(raws) - 1)
        if isinstance(node, dict):
            return {k: swap(v) for k, v in node.items()}
        if isinstance(node, list):
            return [swap(v) for v in node]
        return node

    if indent is None:
        text = json.dumps(swap(doc), separators=(",", ":"), ensure_ascii=False)
    else:
        text = json.dumps(swap(doc), indent=indent, ensure_ascii=False)
    for i, token in enumerate(raws):
        text = text.replace('"@@RAW%d@@"' % i, token, 1)
    return text


def path_text(path):
    """workload.context_lens[2] for ["workload", "context_lens", 2]."""
    out = ""
    for p in path:
        if isinstance(p, int):
            out += "[%d]" % p
        else:
            out += ("." if out else "") + str(p)
    return out or "(the whole value)"


def pick_path(doc, rng):
    """A random node of `doc`, found by walking down from the root: at each object or array a
    random child, stopping early at a container now and then. Walking (rather than drawing among
    all nodes) spreads mutations over the top-level keys instead of the largest array."""
    path = []
    node = doc
    while isinstance(node, (dict, list)) and len(node) > 0:
        key = rng.choice(list(node.keys()) if isinstance(node, dict) else range(len(node)))
        path.append(key)
        node = node[key]
        if isinstance(node, (dict, list)) and node and rng.random() < 0.25:
            break
    return path


def get_at(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def tweak(value, rng):
    """A change that keeps the JSON type, to reach the checks behind the type checks: numbers
    nudged, scaled or negated, strings swapped for neighbours, lists cut or padded."""
    if isinstance(value, bool):
        return "flipped", (not value)
    if isinstance(value, int):
        choice = rng.choice(["+1", "-1", "negated", "x1000", "0", "x-1 -1"])
        new = {"+1": value + 1, "-1": value - 1, "negated": -value, "x1000": value * 1000,
               "0": 0, "x-1 -1": -value - 1}[choice]
        return "int " + choice, new
    if isinstance(value, float):
        choice = rng.choice(["negated", "x1e6", "0.0", "x1e-6"])
        new = {"negated": -value, "x1e6": value * 1e6, "0.0": 0.0, "x1e-6": value * 1e-6}[choice]
        return "float " + choice, new
    if isinstance(value, str):
        new = rng.choice(["fp64", "decode_v3", "cuda", "header", "measurement", "ok", "fault",
                          "error", value + "x", value[:-1], value.upper(), " " + value])
        return "string", new
    if isinstance(value, list):
        if value and rng.random() < 0.5:
            return "list without its last element", value[:-1]
        return "list with its first element twice", (value[:1] * 2 + value[1:]) if value else [0]
    if isinstance(value, dict):
        if value:
            key = rng.choice(list(value))
            out = dict(value)
            del out[key]
            return "object without '%s'" % key, out
        return "object with an unknown key", {"unknown_key": 1}
    return "unchanged", value


def mutate_doc(doc, rng):
    """One mutation of a parsed JSON document, in place where it can be; returns (doc, what)."""
    path = pick_path(doc, rng)
    if not path:
        label = rng.choice(WHOLE_REPLACEMENTS)
        return Raw(label), "whole value replaced by %s" % label
    parent = get_at(doc, path[:-1])
    key = path[-1]
    r = rng.random()
    if r < 0.15:
        del parent[key]
        return doc, "%s deleted" % path_text(path)
    if r < 0.45:
        what, new = tweak(parent[key], rng)
        parent[key] = new
        return doc, "%s: %s" % (path_text(path), what)
    label, value = rng.choice(HOSTILE_VALUES)
    parent[key] = copy.deepcopy(value)
    return doc, "%s -> %s" % (path_text(path), label)


# ----------------------------------------------------------------------------------------------
# Mutating files
# ----------------------------------------------------------------------------------------------

def mutate_bytes(data, rng):
    """One damage to the raw bytes of a file; returns (data, what)."""
    n = len(data)
    kind = rng.choice(["truncate", "truncate", "flip", "flip", "insert", "drop-newline",
                       "empty", "crlf", "append"])
    if kind == "truncate" and n > 1:
        at = rng.randrange(1, n)
        return data[:at], "truncated at byte %d of %d" % (at, n)
    if kind == "flip" and n > 0:
        out = bytearray(data)
        spots = sorted(rng.randrange(n) for _ in range(rng.randint(1, 4)))
        for at in spots:
            out[at] ^= 1 << rng.randrange(8)
        return bytes(out), "bits flipped at bytes %s" % spots
    if kind == "insert" and n > 0:
        at = rng.randrange(n)
        junk = rng.choice([b"\x00", b"\xff\xfe", b"\xc3\x28", b"\x1b[2J", b"}", b"]", b","])
        return data[:at] + junk + data[at:], "%r inserted at byte %d" % (junk, at)
    if kind == "drop-newline" and data.endswith(b"\n"):
        return data.rstrip(b"\n"), "final newline removed"
    if kind == "empty":
        return b"", "emptied"
    if kind == "crlf":
        return data.replace(b"\n", b"\r\n"), "line ends made CRLF"
    return data + rng.choice([b"garbage\n", b"{\n", b"\x00\x00\n", b"[]\n"]), "junk appended"


def mutate_jsonl(data, rng, header_first):
    """One mutation of a JSON-lines file: a field of one line (header more often than its share),
    a whole line, or the bytes. Returns (data, what)."""
    lines = data.decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the text after the final newline
    r = rng.random()
    if r < 0.55 and lines:
        if header_first and rng.random() < 0.3:
            i = 0
        else:
            i = rng.randrange(len(lines))
        doc, what = mutate_doc(json.loads(lines[i]), rng)
        lines[i] = encode(doc)
        return ("\n".join(lines) + "\n").encode("utf-8"), "line %d: %s" % (i + 1, what)
    if r < 0.8 and lines:
        i = rng.randrange(len(lines))
        kind = rng.choice(["duplicate", "delete", "swap", "replace", "replace", "blank",
                           "header-last", "long"])
        if kind == "duplicate":
            lines.insert(i, lines[i])
            what = "line %d duplicated" % (i + 1)
        elif kind == "delete":
            del lines[i]
            what = "line %d deleted" % (i + 1)
        elif kind == "swap" and len(lines) > 1:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            what = "lines %d and %d swapped" % (i + 1, j + 1)
        elif kind == "blank":
            lines.insert(i, "   ")
            what = "a line of spaces inserted before line %d" % (i + 1)
        elif kind == "header-last":
            lines.append(lines.pop(0))
            what = "first line moved to the end"
        elif kind == "long":
            lines[i] = "{\"x\":\"" + "A" * 1000000 + "\"}"
            what = "line %d replaced by a 1 MB object" % (i + 1)
        else:
            token = rng.choice(WHOLE_REPLACEMENTS)
            lines[i] = token
            what = "line %d replaced by %s" % (i + 1, token)
        return ("\n".join(lines) + "\n").encode("utf-8"), what
    return mutate_bytes(data, rng)


def mutate_json_file(data, rng, indent):
    """One mutation of a JSON file: a field (most often), the whole document, or the bytes."""
    r = rng.random()
    if r < 0.72:
        doc, what = mutate_doc(json.loads(data), rng)
        return (encode(doc, indent) + "\n").encode("utf-8"), what
    if r < 0.8:
        token = rng.choice(WHOLE_REPLACEMENTS)
        return (token + "\n").encode(), "whole file replaced by %s" % token
    return mutate_bytes(data, rng)


def split_safetensors(data):
    """(header object, data section) of a safetensors file."""
    (hlen,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + hlen]), data[8 + hlen:]


def join_safetensors(header_text, body):
    """A safetensors image: the header padded with spaces to 8 bytes, as writers do."""
    raw = header_text.encode("utf-8")
    raw += b" " * ((8 - len(raw) % 8) % 8)
    return struct.pack("<Q", len(raw)) + raw + body


def mutate_replay(data, rng):
    """One mutation of a replay file: a field of its JSON header (shapes, dtypes, offsets,
    metadata), its header length, or its bytes."""
    r = rng.random()
    if r < 0.6:
        header, body = split_safetensors(data)
        doc, what = mutate_doc(header, rng)
        return join_safetensors(encode(doc), body), "header: " + what
    if r < 0.7:
        lie = rng.choice([0, 1, 7, 2 ** 31, 2 ** 63, 2 ** 64 - 1, len(data), len(data) - 8])
        return struct.pack("<Q", lie) + data[8:], "header length set to %d" % lie
    return mutate_bytes(data, rng)


def apply_mutations(data, rng, mutate_once):
    """One mutation most of the time, two or three now and then (stacked damage)."""
    count = rng.choices([1, 2, 3], weights=[70, 20, 10])[0]
    whats = []
    for _ in range(count):
        try:
            data, what = mutate_once(data, rng)
        except (ValueError, UnicodeDecodeError, struct.error, IndexError, RecursionError):
            # An earlier mutation left something the structured mutators cannot parse.
            data, what = mutate_bytes(data, rng)
        whats.append(what)
    return data, whats


# ----------------------------------------------------------------------------------------------
# Seeds: real inputs made by the binary at start-up (cached per binary)
# ----------------------------------------------------------------------------------------------

def run_tool(argv, cwd, env=None, timeout=60):
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), \
        proc.stderr.decode("utf-8", "replace")


def must(rc, out, err, what):
    if rc != 0:
        sys.exit("mutate_inputs: could not make the seed %s (exit %d):\n%s%s"
                 % (what, rc, out, err))


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_trace_by_hand(path, batches, source, shape):
    """docs/traffic.md's format, for a checkout without python/attn_tune_trace.py."""
    with open(path, "w") as f:
        header = {"attn_tune_trace": 1, "source": source}
        if shape:
            header["shape"] = shape
        f.write(json.dumps(header) + "\n")
        for b in batches:
            f.write(json.dumps({"seq_lens": b}) + "\n")


def make_traces(seeds):
    """Trace A from the generator's command line (`make`), trace B from its TraceWriter with a
    model shape in the header and a repeated batch; both docs/traffic.md's format."""
    a = os.path.join(seeds, "trace_a.jsonl")
    b = os.path.join(seeds, "trace_b.jsonl")
    script = os.path.join(REPO, "python", "attn_tune_trace.py")
    shape = dict(SHAPE)
    if os.path.isfile(script):
        rc, out, err = run_tool([sys.executable, script, "make", "--mix", "chat", "--batches",
                                 "12", "--batch-size", "1-3", "--seed", "1", "--out", a], seeds)
        must(rc, out, err, "trace (attn_tune_trace.py make)")
        sys.path.insert(0, os.path.dirname(script))
        sys.dont_write_bytecode = True  # no __pycache__ in the source tree
        import attn_tune_trace  # the project's own writer
        with attn_tune_trace.TraceWriter(b, source="tests/fuzz seed", shape=shape) as w:
            for lens in attn_tune_trace.make_trace("mixture", 6, "1-3", 2):
                w.record(lens)
            w.record([40, 300])
            w.record([40, 300])
            w.record([64, 64], count=3)  # the last line: the targeted cases damage it
    else:
        write_trace_by_hand(a, [[466], [175], [244, 443, 222], [187], [30, 900]], "by hand", None)
        write_trace_by_hand(b, [[40, 300], [40, 300], [1000], [12, 13, 14]], "by hand", shape)
        with open(b, "a") as f:
            f.write(json.dumps({"seq_lens": [64, 64], "count": 3}) + "\n")


def make_replays(binary, seeds):
    """A decode and a prefill replay file (SPEC.md "Replay files"), each holding as `out` the
    answer `attn-tune replay --save` computed for it, so that the seed is judged (MATCH)."""
    rng = random.Random(7)

    def f32(count):
        return struct.pack("<%df" % count, *[rng.gauss(0.0, 1.0) for _ in range(count)])

    def image(tensors, metadata):
        header, offset, body = {}, 0, b""
        for name, (dtype, shape, raw) in tensors.items():
            header[name] = {"dtype": dtype, "shape": shape,
                            "data_offsets": [offset, offset + len(raw)]}
            offset += len(raw)
            body += raw
        header["__metadata__"] = metadata
        return join_safetensors(json.dumps(header), body)

    # decode: 1 sequence of 6 keys, 2 query heads over 1 KV head, head_dim 8, blocks of 4.
    # prefill: 3 queries over 6 keys, same caches.
    problems = {
        "replay_decode.safetensors": ({
            "block_tables": ("I32", [1, 2], struct.pack("<2i", 2, 0)),
            "context_lens": ("I32", [1], struct.pack("<i", 6)),
            "key_cache": ("F32", [3, 1, 4, 8], f32(96)),
            "query": ("F32", [1, 2, 8], f32(16)),
            "value_cache": ("F32", [3, 1, 4, 8], f32(96))},
            {"causal": "true", "softcap": "0", "window_left": "-1"}),
        "replay_prefill.safetensors": ({
            "block_tables": ("I32", [1, 2], struct.pack("<2i", 1, 2)),
            "cu_seqlens_k": ("I32", [2], struct.pack("<2i", 0, 6)),
            "cu_seqlens_q": ("I32", [2], struct.pack("<2i", 0, 3)),
            "key_cache": ("F32", [3, 1, 4, 8], f32(96)),
            "query": ("F32", [3, 2, 8], f32(48)),
            "value_cache": ("F32", [3, 1, 4, 8], f32(96))},
            {"causal": "true", "scale": "0.3", "softcap": "0"}),
    }
    for name, (tensors, metadata) in problems.items():
        path = os.path.join(seeds, name)
        with open(path, "wb") as f:
            f.write(image(tensors, metadata))
        saved = os.path.join(seeds, "saved_" + name)
        rc, out, err = run_tool([binary, "replay", path, "--backend", "reference",
                                 "--save", saved], seeds)
        must(rc, out, err, "replay file %s" % name)
        with open(saved, "rb") as f:
            saved_header, saved_body = split_safetensors(f.read())
        start, end = saved_header["out"]["data_offsets"]
        tensors["out"] = (saved_header["out"]["dtype"], saved_header["out"]["shape"],
                          saved_body[start:end])
        with open(path, "wb") as f:
            f.write(image(tensors, metadata))


def make_seeds(binary, work):
    """Runs the binary to make every seed input into WORK/seeds; reuses them when they were made
    by the same binary and harness version. Returns the seeds as a dict of bytes and facts."""
    seeds = os.path.join(work, "seeds")
    stamp = "%s %s" % (HARNESS_VERSION, file_sha256(binary))
    stamp_path = os.path.join(seeds, "stamp")
    if not (os.path.isfile(stamp_path) and open(stamp_path).read() == stamp):
        shutil.rmtree(seeds, ignore_errors=True)
        os.makedirs(os.path.join(seeds, "locks"))
        env = dict(os.environ, ATTN_TUNE_LOCK_DIR=os.path.join(seeds, "locks"))
        with open(os.path.join(seeds, "profile.json"), "w") as f:
            json.dump(TINY_PROFILE, f, indent=1)
        make_traces(seeds)
        shutil.copy(os.path.join(seeds, "trace_a.jsonl"), os.path.join(seeds, "trace.jsonl"))
        rc, out, err = run_tool([binary, "sweep"] + SWEEP_FLAGS + TRAFFIC_FLAGS +
                                ["--profile", "profile.json", "--out", "sweep"], seeds, env)
        must(rc, out, err, "sweep")
        # A second device model for the fleet file: the same table, measured "on an H100".
        with open(os.path.join(seeds, "sweep", "threshold_table.json")) as f:
            other = json.load(f)
        other["provenance"]["device"].update(name="NVIDIA H100 80GB HBM3", backend="cuda",
                                             id="cuda:0", sm_count=132)
        with open(os.path.join(seeds, "h100_table.json"), "w") as f:
            json.dump(other, f, indent=1)
        rc, out, err = run_tool([binary, "table", "combine", "fleet.json",
                                 "sweep/threshold_table.json", "h100_table.json"], seeds)
        must(rc, out, err, "fleet table (table combine)")
        make_replays(binary, seeds)
        with open(stamp_path, "w") as f:
            f.write(stamp)

    def read(name):
        with open(os.path.join(seeds, name), "rb") as f:
            return f.read()

    locks = [n for n in os.listdir(os.path.join(seeds, "locks")) if n.endswith(".lock")]
    if len(locks) != 1:
        sys.exit("mutate_inputs: the seed sweep left %d device locks, expected 1: %s"
                 % (len(locks), locks))
    s = {
        "results": read("sweep/results.jsonl"),
        "table": read("sweep/threshold_table.json"),
        "fleet": read("fleet.json"),
        "profile": read("profile.json"),
        "trace_a": read("trace_a.jsonl"),
        "trace_b": read("trace_b.jsonl"),
        "replay_decode": read("replay_decode.safetensors"),
        "replay_prefill": read("replay_prefill.safetensors"),
        "device_lock": locks[0],
    }
    # The shipped profiles are real inputs too (quick has prefill, traffic-cpu a length_mix).
    for name in ("quick", "traffic-cpu"):
        path = os.path.join(REPO, "profiles", name + ".json")
        if os.path.isfile(path):
            with open(path, "rb") as f:
                s["profile_" + name] = f.read()
    fleet = json.loads(s["fleet"])
    s["fleet_names"] = [e["raw_name"] for e in fleet["devices"]] + \
                       [e["device"] for e in fleet["devices"]]
    return s


# ----------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------

class Case:
    """One run of attn-tune on one (possibly damaged) input, in a folder of its own.

    argv is relative to that folder; files maps a relative path to its bytes; target is the
    damaged file (compared with original in --case output); outputs are the paths a command
    that refuses its input must not leave behind; expect is "any" (random damage may leave the
    input valid: 0, 1, 2 pass), "refuse" (targeted: exactly 2) or "accept" (pristine: 0)."""

    def __init__(self, cid, surface, variant, argv, files, target, original, whats, expect,
                 outputs=(), dirs=(), locked=False):
        self.id = cid
        self.surface = surface
        self.variant = variant
        self.argv = argv
        self.files = files
        self.target = target
        self.original = original
        self.whats = whats
        self.expect = expect
        self.outputs = list(outputs)
        self.dirs = list(dirs)
        self.locked = locked  # a sweep that stops at the device lock the harness holds
        self.target_name = None  # targeted cases: the impossible value, as the summary lists it


def results_files(seeds, results):
    """The folder a results surface reads: the damaged results.jsonl and, for report and resume,
    the table its sweep wrote and the profile and trace it ran with."""
    return {"in/results.jsonl": results, "in/threshold_table.json": seeds["table"],
            "profile.json": seeds["profile"], "trace.jsonl": seeds["trace_a"]}


# Each surface: its variants, as (name, function(rng, seeds) -> (argv, extra files, outputs,
# dirs, locked)). argv paths are relative to the case folder.
def results_variant(name, rng, seeds):
    if name == "merge":
        return (["merge", "out", "in"], {}, ["out/results.jsonl", "out/threshold_table.json"], [],
                False)
    if name == "merge-two":
        # the damaged folder beside an intact copy: duplicates and the same-sweep checks
        order = ["in", "in2"] if rng.random() < 0.5 else ["in2", "in"]
        return (["merge", "out"] + order, {"in2/results.jsonl": seeds["results"]},
                ["out/results.jsonl", "out/threshold_table.json"], [], False)
    if name == "merge-partial":
        return (["merge", "--partial", "out", "in"], {},
                ["out/results.jsonl", "out/threshold_table.json"], [], False)
    if name == "report":
        return ["report", "in", "--out", "out/report.html"], {}, ["out/report.html"], ["out"], False
    if name == "report-csv":
        return (["report", "in", "--format", "csv", "--out", "out/csv"], {}, ["out/csv"], ["out"],
                False)
    if name == "resume":
        return (["sweep"] + SWEEP_FLAGS + TRAFFIC_FLAGS +
                ["--profile", "profile.json", "--out", "in", "--resume"], {}, [], [], False)
    if name == "search-check-replay":
        # the adaptive search replayed on the damaged folder as on an exhaustive sweep's
        return (["search-check", "--replay", "in", "--out", "out"], {},
                ["out/replayed_table.json", "out/replayed_results.jsonl"], [], False)
    if name == "search-check-control":
        # the damaged folder as the control of an intact exhaustive sweep
        return (["search-check", "--replay", "in2", "--replay-control", "in", "--out", "out"],
                {"in2/results.jsonl": seeds["results"]},
                ["out/replayed_table.json", "out/replayed_results.jsonl",
                 "out/control_judgement.json"], [], False)
    raise KeyError(name)


def lookup_args(rng):
    if rng.random() < 0.3:
        return ["--seq-lens", rng.choice(["20,200", "64,64", "5", "3000,16,1"])]
    return ["--batch", str(rng.choice([1, 2, 3, 64])),
            "--context-len", str(rng.choice([1, 16, 40, 64, 100000]))]


def table_variant(name, rng, seeds):
    if name == "show":
        return ["table", "show", "t.json"], {}, [], [], False
    if name == "show-json":
        return ["table", "show", "--json", "t.json"], {}, [], [], False
    if name == "lookup":
        extra = ["--json"] if rng.random() < 0.3 else []
        return (["table", "lookup", "t.json", "--device", "cpu"] + lookup_args(rng) +
                LOOKUP_SHAPE + extra, {}, [], [], False)
    if name == "report":
        return ["report", "t.json", "--out", "out/t.html"], {}, ["out/t.html"], ["out"], False
    if name == "report-against":
        return (["report", "t0.json", "--against", "t.json", "--out", "out/t.html"],
                {"t0.json": seeds["table"]}, ["out/t.html"], ["out"], False)
    if name == "combine":
        return (["table", "combine", "out/fleet.json", "t.json"], {}, ["out/fleet.json"], ["out"],
                False)
    raise KeyError(name)


def fleet_variant(name, rng, seeds):
    if name == "show":
        return ["table", "show", "f.json"], {}, [], [], False
    if name == "lookup":
        return (["table", "lookup", "f.json", "--device-name", rng.choice(seeds["fleet_names"])] +
                lookup_args(rng) + LOOKUP_SHAPE, {}, [], [], False)
    if name == "lookup-nearest":
        if rng.random() < 0.5:
            device = ["--device-name", "a100-sxm4-80gb", "--nearest"]
        else:
            device = ["--device-name", "mystery-gpu", "--nearest", "--sm-count", "100",
                      "--bandwidth-gbps", "2000"]
        return (["table", "lookup", "f.json"] + device + lookup_args(rng) + LOOKUP_SHAPE, {}, [],
                [], False)
    if name == "combine":
        return ["table", "combine", "out/f2.json", "f.json"], {}, ["out/f2.json"], ["out"], False
    raise KeyError(name)


def profile_variant(name, rng, seeds):
    # The sweep reads the profile, plans it, opens its results file, then stops at the device
    # lock the harness holds (--no-wait): the profile is exercised, nothing is measured.
    return (["sweep"] + SWEEP_FLAGS + ["--profile", "p.json", "--out", "out", "--no-wait"], {}, [],
            [], True)


def traffic_variant(name, rng, seeds):
    return (["sweep"] + SWEEP_FLAGS + ["--profile", "p.json", "--traffic", "trace.jsonl",
                                       "--traffic-batches", "3", "--out", "out", "--no-wait"],
            {"p.json": seeds["profile"]}, [], [], True)


def replay_variant(name, rng, seeds):
    backend = ["--backend", rng.choice(["reference", "cpu"])]
    if name == "replay-save":
        return (["replay", "r.safetensors"] + backend + ["--save", "out/o.safetensors"], {},
                ["out/o.safetensors"], ["out"], False)
    return ["replay", "r.safetensors"] + backend, {}, [], [], False


SURFACES = {
    # name: (variants, variant function, where the damaged file goes)
    "results": (["merge", "merge-two", "merge-partial", "report", "report-csv", "resume",
                 "search-check-replay", "search-check-control"], results_variant,
                "in/results.jsonl"),
    "table": (["show", "show-json", "lookup", "report", "report-against", "combine"],
              table_variant, "t.json"),
    "fleet": (["show", "lookup", "lookup-nearest", "combine"], fleet_variant, "f.json"),
    "profile": (["sweep"], profile_variant, "p.json"),
    "traffic": (["sweep"], traffic_variant, "trace.jsonl"),
    "replay": (["replay", "replay-save"], replay_variant, "r.safetensors"),
}


def seed_names(surface, seeds):
    """The seeds a surface damages; a name listed twice is drawn twice as often."""
    if surface == "profile":
        # mostly the tiny profile; the shipped ones add prefill grids and a length_mix
        shipped = [n for n in ("profile_quick", "profile_traffic-cpu") if n in seeds]
        return ["profile"] * 3 + shipped
    return {"results": ["results"], "table": ["table"], "fleet": ["fleet"],
            "traffic": ["trace_a", "trace_b"],
            "replay": ["replay_decode", "replay_prefill"]}[surface]


def mutator(surface):
    """mutate_once(data, rng) -> (data, what) for the inputs of a surface."""
    if surface in ("results", "traffic"):
        return lambda d, r: mutate_jsonl(d, r, header_first=True)
    if surface == "replay":
        return mutate_replay
    return lambda d, r: mutate_json_file(d, r, 1)  # indented, as attn-tune writes its tables


def assemble(cid, surface, variant, rng, seeds, data, original, whats, expect):
    variants, make_variant, target = SURFACES[surface]
    argv, extra, outputs, dirs, locked = make_variant(variant, rng, seeds)
    if surface == "results":
        files = results_files(seeds, data)
    else:
        files = {target: data}
    files.update(extra)
    return Case(cid, surface, variant, argv, files, target, original, whats, expect, outputs, dirs,
                locked)


def random_case(surface, n, seeds, base_seed):
    """Case `surface:n`: decided by (base seed, surface, n) alone."""
    rng = random.Random("%d/%s/%d" % (base_seed, surface, n))
    variants = SURFACES[surface][0]
    variant = rng.choice(variants)
    name = rng.choice(seed_names(surface, seeds))
    original = seeds[name]
    data, whats = apply_mutations(original, rng, mutator(surface))
    return assemble("%s:%d" % (surface, n), surface, variant, rng, seeds, data, original,
                    ["seed %s" % name] + whats, "any")


def pristine_cases(surface, seeds):
    """Every intact seed through every variant: they must be accepted, or the harness (or the
    tool) is wrong before any damage. Ids: SURFACE:p-VARIANT-SEED."""
    out = []
    for variant in SURFACES[surface][0]:
        for name in sorted(set(seed_names(surface, seeds))):
            rng = random.Random("pristine/%s/%s/%s" % (surface, variant, name))
            out.append(assemble("%s:p-%s-%s" % (surface, variant, name), surface, variant, rng,
                                seeds, seeds[name], seeds[name], ["seed %s, intact" % name],
                                "accept"))
    return out


# ---- targeted cases: impossible values that must be refused with exit 2 ----------------------
#
# An edit is a function that changes a parsed document in place and returns nothing; the helpers
# below make the common ones. `get` finds the object or array to change inside the document.

def set_in(get, key, value):
    """doc -> get(doc)[key] = value."""
    def edit(doc):
        get(doc)[key] = value
    return edit


def delete_in(get, key):
    """doc -> del get(doc)[key]."""
    def edit(doc):
        del get(doc)[key]
    return edit


def both(*edits):
    def edit(doc):
        for e in edits:
            e(doc)
    return edit


def move_line(src, dst):
    def edit(lines):
        lines.insert(dst, lines.pop(src))
    return edit


class Whole:
    """Not an edit: the whole file becomes this JSON text."""

    def __init__(self, text):
        self.text = text


def edit_jsonl(data, edit):
    """The JSON-lines file with edit(lines) applied to its parsed lines."""
    lines = [json.loads(l) for l in data.decode().splitlines() if l.strip()]
    edit(lines)
    return ("\n".join(encode(l) for l in lines) + "\n").encode()


def edit_json(data, edit):
    if isinstance(edit, Whole):
        return (edit.text + "\n").encode()
    doc = json.loads(data)
    edit(doc)
    return (encode(doc, 1) + "\n").encode()


def first_measurement(lines):
    return next(l for l in lines if isinstance(l, dict) and l.get("type") == "measurement")


def index_of_first_measurement(lines):
    return lines.index(first_measurement(lines))


def mixed_workload(lines):
    """The workload of the first line that measured a batch of mixed lengths (context_lens)."""
    return next(l["workload"] for l in lines
                if isinstance(l, dict) and "context_lens" in l.get("workload", {}))


def results_targets():
    m = first_measurement
    w = lambda ls: m(ls)["workload"]
    t = lambda ls: m(ls)["timing"]
    header = lambda ls: ls[0]
    plan = lambda ls: ls[0]["plan"]
    whole_line = lambda token: lambda ls: ls.__setitem__(index_of_first_measurement(ls), Raw(token))
    return [
        ("workload.num_kv_heads 0", set_in(w, "num_kv_heads", 0)),
        ("workload.num_heads INT_MIN with num_kv_heads -1",
         both(set_in(w, "num_heads", -2147483648), set_in(w, "num_kv_heads", -1))),
        ("workload.context_len 10^12", set_in(w, "context_len", 10 ** 12)),
        ("workload.batch 0", set_in(w, "batch", 0)),
        ("workload.batch -1", set_in(w, "batch", -1)),
        ("workload.head_dim 0", set_in(w, "head_dim", 0)),
        ("workload.context_lens[0] 0", set_in(lambda ls: mixed_workload(ls)["context_lens"], 0, 0)),
        ("header shard count 0", set_in(header, "shard", {"index": 0, "count": 0})),
        ("header shard count -3", set_in(header, "shard", {"index": 0, "count": -3})),
        ("header plan.measurements 10^12", set_in(plan, "measurements", 10 ** 12)),
        ("timing.median_s 1e999", set_in(t, "median_s", Raw("1e999"))),
        ("timing.median_s NaN", set_in(t, "median_s", Raw("NaN"))),
        ("timing.median_s -1", set_in(t, "median_s", -1.0)),
        ("a measurement line that is []", whole_line("[]")),
        ("a measurement line that is 1", whole_line("1")),
        ("a measurement line that is null", whole_line("null")),
        ("a measurement line that is \"x\"", whole_line("\"x\"")),
        ("workload is a string", set_in(m, "workload", "x")),
        ("timing is an array", set_in(m, "timing", [])),
        ("the header line is []", set_in(lambda ls: ls, 0, [])),
        ("header.device is a string", set_in(header, "device", "x")),
    ]


def table_targets(table_of):
    """Edits of a threshold table; table_of(doc) is the table inside the document (the document
    itself, or a fleet entry's table). decode[0] is the point at batch 1, context 16 and 64."""
    top = table_of
    p = lambda d: table_of(d)["decode"][0]
    meas = lambda d: p(d)["measured"][0]
    best = lambda d: meas(d)["best"]
    return [
        ("decode[0].measured[0].context_len 0", set_in(meas, "context_len", 0)),
        ("decode[0].measured[0].context_len -5", set_in(meas, "context_len", -5)),
        ("decode[0].measured[0].context_len 10^12", set_in(meas, "context_len", 10 ** 12)),
        ("decode[0].batch 0", set_in(p, "batch", 0)),
        ("decode[0].num_kv_heads 0", set_in(p, "num_kv_heads", 0)),
        ("decode[0].measured[0].best.median_s 1e999", set_in(best, "median_s", Raw("1e999"))),
        ("decode[0].measured[0].best.median_s NaN", set_in(best, "median_s", Raw("NaN"))),
        ("decode is an object", set_in(top, "decode", {})),
        ("decode[0] is an array", set_in(lambda d: top(d)["decode"], 0, [])),
        ("provenance is null", set_in(top, "provenance", None)),
        ("decode[0].measured is a string", set_in(p, "measured", "x")),
        ("decode[0].v2_intervals is a string", set_in(p, "v2_intervals", "x")),
        ("batches[0].seq_lens [0]", set_in(lambda d: top(d)["batches"][0], "seq_lens", [0])),
        ("batch_rules[0].tree is an array",
         set_in(lambda d: top(d)["batch_rules"][0], "tree", [])),
    ]


def fleet_targets():
    e = lambda d: d["devices"][0]
    entry_table = lambda d: d["devices"][0]["table"]
    return [
        ("fleet entry without table", delete_in(e, "table")),
        ("fleet entry sm_count is a string", set_in(e, "sm_count", "x")),
        ("fleet entry sm_count -1", set_in(e, "sm_count", -1)),
        ("fleet entry bandwidth_gbps is a string", set_in(e, "bandwidth_gbps", "x")),
        ("fleet devices is an object", set_in(lambda d: d, "devices", {})),
        ("fleet devices is null", set_in(lambda d: d, "devices", None)),
        ("fleet devices[0] is an array", set_in(lambda d: d["devices"], 0, [])),
        ("fleet entry table is an array", set_in(e, "table", [])),
        ("the whole fleet file is []", Whole("[]")),
    ] + [("fleet entry table: " + n, edit) for n, edit in table_targets(entry_table)[:5]]


def profile_targets():
    dec = lambda d: d["decode"]
    top = lambda d: d
    return [
        ("decode.num_kv_heads 0", set_in(dec, "num_kv_heads", 0)),
        ("decode.batch [1, 0]", set_in(dec, "batch", [1, 0])),
        ("decode.batch -1", set_in(dec, "batch", -1)),
        ("decode.context_len [0, 64]", set_in(dec, "context_len", [0, 64])),
        ("decode.context_len 10^12", set_in(dec, "context_len", 10 ** 12)),
        ("decode.head_dim 0", set_in(dec, "head_dim", 0)),
        ("decode is an array", set_in(top, "decode", [])),
        ("decode is null", set_in(top, "decode", None)),
        ("timing.max_seconds 1e999", set_in(lambda d: d["timing"], "max_seconds", Raw("1e999"))),
        ("timing.target_noise NaN", set_in(lambda d: d["timing"], "target_noise", Raw("NaN"))),
        ("held_out[0].batch 0", set_in(lambda d: d["held_out"][0], "batch", 0)),
        ("held_out[0].context_len 10^12",
         set_in(lambda d: d["held_out"][0], "context_len", 10 ** 12)),
        ("prefill.q_len 0", set_in(lambda d: d["prefill"], "q_len", 0)),
        ("pool_factor 0.5 (docs/profiles.md: at least 1)", set_in(top, "pool_factor", 0.5)),
        ("the whole profile is []", Whole("[]")),
    ]


def traffic_targets():
    last = lambda ls: ls[-1]  # trace B's last line: {"seq_lens": [64, 64], "count": 3}
    last_line = lambda value: lambda ls: ls.__setitem__(len(ls) - 1, value)
    return [
        ("seq_lens [0]", set_in(last, "seq_lens", [0])),
        ("seq_lens [-1]", set_in(last, "seq_lens", [-1])),
        ("seq_lens [10^12]", set_in(last, "seq_lens", [10 ** 12])),
        ("seq_lens [2^31]", set_in(last, "seq_lens", [2 ** 31])),
        ("seq_lens is a string", set_in(last, "seq_lens", "x")),
        ("seq_lens []", set_in(last, "seq_lens", [])),
        ("count 0", set_in(last, "count", 0)),
        ("count -1", set_in(last, "count", -1)),
        ("count 1e999", set_in(last, "count", Raw("1e999"))),
        ("a batch line that is []", last_line([])),
        ("a batch line that is 1", last_line(1)),
        ("a batch line that is null", last_line(Raw("null"))),
        ("a batch line that is \"x\"", last_line("x")),
        ("header version 2", set_in(lambda ls: ls[0], "attn_tune_trace", 2)),
        ("header shape.num_heads 0", set_in(lambda ls: ls[0]["shape"], "num_heads", 0)),
        ("header shape is an array", set_in(lambda ls: ls[0], "shape", [])),
        ("the header on line 3", move_line(0, 2)),
    ]


# The commands of the targeted cases, fixed (no random choice) so that each reaches the damaged
# part: lookups ask for decode[0]'s point (batch 1, context 16) of devices[0] (this machine's
# table); merges take --partial, since without it any lost line is refused as incomplete anyway.
def targeted_argv(surface, variant, seeds):
    exact = ["--batch", "1", "--context-len", "16"] + LOOKUP_SHAPE
    if surface == "results" and variant == "merge-partial":
        return ["merge", "--partial", "out", "in"]
    if surface == "table" and variant == "lookup":
        return ["table", "lookup", "t.json", "--device", "cpu"] + exact
    if surface == "fleet" and variant == "lookup":
        return ["table", "lookup", "f.json", "--device-name", seeds["fleet_names"][0],
                "--nearest"] + exact
    return None  # the variant's own command


TARGETED = {
    # surface: (edits, the seed they apply to, editor, the commands each goes through)
    "results": (results_targets, "results", edit_jsonl, ["merge-partial", "report", "resume"]),
    "table": (lambda: table_targets(lambda d: d) + [
        ("the whole table is %s" % tok, Whole(tok)) for tok in ("[]", "1", "null", "\"x\"")],
              "table", edit_json, ["show", "lookup", "report", "combine"]),
    "fleet": (fleet_targets, "fleet", edit_json, ["show", "lookup", "combine"]),
    "profile": (profile_targets, "profile", edit_json, ["sweep"]),
    "traffic": (traffic_targets, "trace_b", edit_jsonl, ["sweep"]),
}


def targeted_cases(surface, seeds):
    """Each impossible value of a surface through each command that reads it; all must exit 2.
    Ids: SURFACE:tN in this order."""
    if surface not in TARGETED:
        return []
    targets, seed_name, editor, variants = TARGETED[surface]
    cases = []
    for name, edit in targets():
        data = editor(seeds[seed_name], edit)
        for variant in variants:
            rng = random.Random("targeted/%s/%d" % (surface, len(cases)))
            case = assemble("%s:t%d" % (surface, len(cases)), surface, variant, rng, seeds, data,
                            seeds[seed_name], ["targeted: " + name], "refuse")
            case.argv = targeted_argv(surface, variant, seeds) or case.argv
            case.target_name = name
            cases.append(case)
    return cases


def all_cases(surfaces, seeds, base_seed, per_surface, targeted=True):
    cases = []
    for s in surfaces:
        cases += pristine_cases(s, seeds)
        if targeted:
            cases += targeted_cases(s, seeds)
        cases += [random_case(s, n, seeds, base_seed) for n in range(per_surface)]
    return cases


def case_by_id(cid, seeds, base_seed):
    surface, _, label = cid.partition(":")
    if surface not in SURFACES:
        sys.exit("mutate_inputs: unknown surface in case id '%s' (surfaces: %s)"
                 % (cid, ", ".join(SURFACES)))
    if label.isdigit():
        return random_case(surface, int(label), seeds, base_seed)
    pool = pristine_cases(surface, seeds) + targeted_cases(surface, seeds)
    for c in pool:
        if c.id == cid:
            return c
    sys.exit("mutate_inputs: no case '%s' (ids: SURFACE:N, SURFACE:tN, SURFACE:p-VARIANT-SEED)"
             % cid)


# ----------------------------------------------------------------------------------------------
# Running and judging a case
# ----------------------------------------------------------------------------------------------

class Outcome:
    def __init__(self, case, rc, stdout, stderr, seconds, timed_out, problems, folder):
        self.case = case
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.seconds = seconds
        self.timed_out = timed_out
        self.problems = problems  # empty: PASS
        self.folder = folder


def case_folder(work, case):
    return os.path.join(work, "cases", case.id.replace(":", "-"))


def prepare(case, work):
    folder = case_folder(work, case)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "locks"))
    for rel, data in case.files.items():
        path = os.path.join(folder, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    for d in case.dirs:
        os.makedirs(os.path.join(folder, d), exist_ok=True)
    return folder


def signal_name(n):
    try:
        return signal.Signals(n).name
    except ValueError:
        return "signal %d" % n


def run_case(case, binary, work, timeout, held_lock_dir):
    folder = prepare(case, work)
    env = dict(os.environ)
    # Sweeps that must get past the device lock take one of their own; the profile and traffic
    # sweeps meet the one the harness holds.
    env["ATTN_TUNE_LOCK_DIR"] = held_lock_dir if case.locked else os.path.join(folder, "locks")
    start = time.monotonic()
    proc = subprocess.Popen([binary] + case.argv, cwd=folder, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the command and any worker it started
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
    seconds = time.monotonic() - start
    stdout = out.decode("utf-8", "replace")
    stderr = err.decode("utf-8", "replace")
    problems = judge(case, proc.returncode, stdout, stderr, timed_out, folder)
    return Outcome(case, proc.returncode, stdout, stderr, seconds, timed_out, problems, folder)


def judge(case, rc, stdout, stderr, timed_out, folder):
    """The broken promises of one run: a list of short causes, empty when it passed."""
    problems = []
    if timed_out:
        return ["timeout (hang)"]
    if rc < 0:
        return ["killed by %s" % signal_name(-rc)]
    if rc >= 128:
        problems.append("exit %d (128+%s)" % (rc, signal_name(rc - 128)))
    # Lines as a terminal or a log shows them: split at "\n" only (a "\r" echoed from the input
    # does not start a line in a log file).
    lines = stderr.rstrip("\n").split("\n") if stderr else []
    accepted_at_lock = case.locked and rc == 3 and len(lines) == 1 and LOCK_ACCEPTED in stderr
    accepted = rc == 0 or accepted_at_lock
    if case.expect == "refuse" and rc != 2:
        problems.append("accepted (exit %d, want 2)" % rc if accepted else "exit %d, want 2" % rc)
    elif case.expect == "accept" and not accepted:
        problems.append("intact seed not accepted (exit %d)" % rc)
    elif case.expect == "any" and rc not in (0, 1, 2) and not accepted_at_lock and rc < 128:
        problems.append("exit %d" % rc)
    # Exit 1 of replay and sweep is a finding, not an error: a wrong answer (replay prints its
    # verdict on stdout) or configurations that failed or faulted (a sweep also lists its noisy
    # decisions and the remedy on stderr). Any other nonzero exit is an error: one line.
    finding = rc == 1 and case.argv[0] in ("replay", "sweep")
    if rc != 0 and not accepted_at_lock and not finding:
        if not lines:
            problems.append("exit %d with nothing on stderr" % rc)
        elif len(lines) > 1:
            problems.append("%d lines on stderr" % len(lines))
    for word in ("internal error", "Traceback", "AddressSanitizer", "runtime error:",
                 "terminate called"):
        if word in stderr or word in stdout:
            problems.append("'%s' printed" % word)
    for root, dirs, files in os.walk(folder):
        for name in files + dirs:
            if ".tmp" in name:
                problems.append("left %s" % os.path.relpath(os.path.join(root, name), folder))
    for rel in case.outputs:
        path = os.path.join(folder, rel)
        if rc == 2 and os.path.exists(path) and not (os.path.isdir(path) and not os.listdir(path)):
            problems.append("refused but wrote %s" % rel)
        elif os.path.isfile(path) and path.endswith(".json"):
            try:
                with open(path) as f:
                    json.load(f)
            except ValueError:
                problems.append("half-written %s" % rel)
    return problems


# ----------------------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------------------

def first_line_key(o, case_dir):
    """The group of a failure: its cause, the exit code, and the first 80 characters of its
    first stderr line with the case folder and numbers blurred, so that one bug is one group."""
    line = o.stderr.splitlines()[0] if o.stderr.strip() else "(no stderr)"
    line = line.replace(case_dir, "<case>")
    line = re.sub(r"\d+", "N", line)[:80]
    cause = o.problems[0]
    cause = re.sub(r"\d+ lines on stderr", "N lines on stderr", cause)
    return "%s | exit %s | %s" % (cause, "timeout" if o.timed_out else o.rc, line)


def repro_command(args, cid):
    return "%s %s --attn-tune %s --work %s --seed %d --case %s" % (
        "/usr/bin/python3", shlex.quote(os.path.abspath(__file__)),
        shlex.quote(args.attn_tune), shlex.quote(args.work), args.seed, cid)


def summarize(outcomes, args, seconds):
    by_surface = {}
    for o in outcomes:
        by_surface.setdefault(o.case.surface, []).append(o)
    print("\nmutate_inputs: seed %d, %d cases in %.1f s with %d jobs"
          % (args.seed, len(outcomes), seconds, args.jobs))
    print("%-9s %6s %6s %6s %9s   %s" % ("surface", "cases", "pass", "FAIL", "targeted",
                                          "failures by command"))
    for surface, members in by_surface.items():
        fails = [o for o in members if o.problems]
        targeted = [o for o in members if o.case.expect == "refuse"]
        targeted_fails = [o for o in targeted if o.problems]
        per_cmd = {}
        for o in fails:
            per_cmd[o.case.variant] = per_cmd.get(o.case.variant, 0) + 1
        print("%-9s %6d %6d %6d %4d/%-4d   %s" % (
            surface, len(members), len(members) - len(fails), len(fails), len(targeted_fails),
            len(targeted), ", ".join("%s %d" % kv for kv in sorted(per_cmd.items()))))
    print("(targeted: FAIL/all of the impossible values that must exit 2)")
    fails = [o for o in outcomes if o.problems]
    groups = {}
    for o in fails:
        groups.setdefault(first_line_key(o, o.folder), []).append(o)
    if groups:
        print("\nfailures by cause (%d groups; cause | exit | first 80 chars of stderr):"
              % len(groups))
        for key, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            surfaces = sorted({m.case.surface for m in members})
            first = members[0]
            print("%5d  %s  [%s]" % (len(members), key, ",".join(surfaces)))
            print("       e.g. %s: %s; %s" % (first.case.id, first.case.variant,
                                              "; ".join(first.case.whats)[:160]))
            print("       rerun: %s" % repro_command(args, first.case.id))
    targeted = {}
    for o in fails:
        if o.case.target_name:
            targeted.setdefault((o.case.surface, o.case.target_name), []).append(o)
    if targeted:
        print("\ntargeted cases that failed (each must exit 2 with one line):")
        for (surface, name), members in targeted.items():
            print("  %s: %s" % (surface, name))
            for o in members:
                print("      %-8s %-14s %s%s" % (o.case.id, o.case.variant, o.problems[0],
                                                 (": " + o.stderr.split("\n")[0][:90])
                                                 if o.stderr.strip() else ""))
    slow = max(outcomes, key=lambda o: o.seconds) if outcomes else None
    if slow:
        print("\nslowest case: %s %.2f s" % (slow.case.id, slow.seconds))
    print("mutate_inputs: %s (%d of %d cases failed)"
          % ("FAIL" if fails else "PASS", len(fails), len(outcomes)))
    return bool(fails)


def write_report(outcomes, work):
    """WORK/summary.json: every case with its verdict, for scripts and for comparing runs."""
    rows = [{"id": o.case.id, "surface": o.case.surface, "command": o.case.variant,
             "argv": o.case.argv, "mutation": o.case.whats, "expect": o.case.expect,
             "exit": o.rc, "timed_out": o.timed_out, "seconds": round(o.seconds, 3),
             "stderr": o.stderr[:2000], "problems": o.problems} for o in outcomes]
    with open(os.path.join(work, "summary.json"), "w") as f:
        json.dump(rows, f, indent=1)


def clip_around(line, at, width=160):
    """The part of a long line around character `at`, control characters made visible."""
    def visible(text):
        return repr(text)[1:-1] if re.search(r"[\x00-\x1f\x7f]", text) else text
    if len(line) <= 2 * width:
        return visible(line)
    lo = max(0, at - width // 2)
    return "%s%s%s (line of %d chars)" % ("..." if lo else "", visible(line[lo:lo + width]),
                                           "..." if lo + width < len(line) else "", len(line))


def safetensors_as_text(data):
    """A replay file shown as its header (pretty JSON) and the size of its data, for diffs."""
    try:
        header, body = split_safetensors(data)
        return "%s\n(header length field %d, %d data bytes)" % (
            json.dumps(header, indent=1, sort_keys=True), struct.unpack("<Q", data[:8])[0],
            len(body))
    except (ValueError, UnicodeDecodeError, struct.error, RecursionError):
        return None


def show_input(case):
    """What --case prints about the damaged input: the mutation, then the changed lines against
    the seed (long lines clipped around the first changed character), or for a binary file the
    bytes that differ."""
    print("mutation: %s" % "; ".join(case.whats))
    new = case.files[case.target]
    print("input: %s (%d bytes; the seed had %d)" % (case.target, len(new), len(case.original)))
    a = b = None
    if case.target.endswith(".safetensors"):
        old_text, new_text = safetensors_as_text(case.original), safetensors_as_text(new)
        if old_text is not None and new_text is not None:
            a, b = old_text.split("\n"), new_text.split("\n")
    else:
        try:
            a = case.original.decode("utf-8").split("\n")
            b = new.decode("utf-8").split("\n")
        except UnicodeDecodeError:
            pass
    if a is None or (len(a) == 1 and len(b) == 1 and len(a[0]) > 10000):
        # a binary file (replay) or one long line: show where the bytes differ
        same = 0
        while same < min(len(new), len(case.original)) and new[same] == case.original[same]:
            same += 1
        print("  first difference at byte %d: seed %r / input %r"
              % (same, case.original[same:same + 40], new[same:same + 40]))
        return
    shown = 0
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        print("  @@ seed lines %d-%d -> input lines %d-%d (%s)" % (i1 + 1, i2, j1 + 1, j2, op))
        for k in range(max(i2 - i1, j2 - j1)):
            old = a[i1 + k] if i1 + k < i2 else None
            cur = b[j1 + k] if j1 + k < j2 else None
            at = 0
            if old is not None and cur is not None:
                while at < min(len(old), len(cur)) and old[at] == cur[at]:
                    at += 1
            if old is not None:
                print("  -" + clip_around(old, at))
            if cur is not None:
                print("  +" + clip_around(cur, at))
            shown += 1
            if shown >= 30:
                print("  ... (more changes; the input is in the case folder)")
                return


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--attn-tune", required=True, help="the attn-tune binary")
    p.add_argument("--work", required=True, help="a folder for seeds, cases and summary.json")
    p.add_argument("--seed", type=int, default=1, help="seed of the mutations (default 1)")
    p.add_argument("--cases-per-surface", type=int, default=200,
                   help="random cases per surface, besides the targeted and intact ones")
    p.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    p.add_argument("--surface", action="append",
                   help="only this surface (repeatable, or comma-separated): "
                        + ", ".join(SURFACES))
    p.add_argument("--case", help="rerun one case by id (SURFACE:N random, SURFACE:tN targeted, "
                                  "SURFACE:p-VARIANT-SEED intact), print its command and input, "
                                  "keep its folder")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per case (default 10)")
    p.add_argument("--no-targeted", action="store_true", help="random cases only")
    p.add_argument("--keep", action="store_true", help="keep the folders of passing cases too")
    p.add_argument("--mem-limit-mb", type=int, default=4096,
                   help="address-space limit of every attn-tune run (0: none; none for a binary "
                        "built with AddressSanitizer)")
    return p.parse_args(argv)


def prepare_work(work):
    """Makes WORK, refusing to take over a folder that is not ours (it clears WORK/cases)."""
    marker = os.path.join(work, ".mutate_inputs")
    if os.path.isdir(work) and os.listdir(work) and not os.path.exists(marker):
        sys.exit("mutate_inputs: %s is not empty and not a mutate_inputs folder" % work)
    os.makedirs(work, exist_ok=True)
    open(marker, "a").close()


def hold_device_lock(work, lock_name):
    """Takes the device lock the seed sweep used, in a folder of its own, for the whole run: the
    profile and traffic sweeps then stop there (--no-wait, exit 3) after reading their inputs."""
    held = os.path.join(work, "held-lock")
    os.makedirs(held, exist_ok=True)
    fd = os.open(os.path.join(held, lock_name), os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return held, fd


def main(argv=None):
    args = parse_args(argv)
    args.attn_tune = os.path.abspath(args.attn_tune)
    args.work = os.path.abspath(args.work)
    if not os.access(args.attn_tune, os.X_OK):
        sys.exit("mutate_inputs: %s is not an executable" % args.attn_tune)
    with open(args.attn_tune, "rb") as f:
        sanitized = b"__asan_init" in f.read()  # ASan reserves terabytes of address space
    if args.mem_limit_mb > 0 and not sanitized:
        # Inherited by every attn-tune run: an impossible size that the reader lets through
        # becomes a failed allocation (an internal error, reported), not a machine out of memory.
        limit = args.mem_limit_mb << 20
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    surfaces = list(SURFACES)
    if args.surface:
        surfaces = [s for arg in args.surface for s in arg.split(",") if s]
        unknown = [s for s in surfaces if s not in SURFACES]
        if unknown:
            sys.exit("mutate_inputs: unknown surface %s (surfaces: %s)"
                     % (", ".join(unknown), ", ".join(SURFACES)))
    prepare_work(args.work)
    start = time.monotonic()
    binary_sha = file_sha256(args.attn_tune)
    seeds = make_seeds(args.attn_tune, args.work)
    seeded = time.monotonic() - start
    held, lock_fd = hold_device_lock(args.work, seeds["device_lock"])

    if args.case:
        case = case_by_id(args.case, seeds, args.seed)
        folder = case_folder(args.work, case)
        print("case %s (%s, %s; expect %s)" % (case.id, case.surface, case.variant, case.expect))
        show_input(case)
        o = run_case(case, args.attn_tune, args.work, args.timeout, held)
        lock_env = held if case.locked else os.path.join(folder, "locks")
        print("command: cd %s && ATTN_TUNE_LOCK_DIR=%s %s"
              % (shlex.quote(folder), shlex.quote(lock_env),
                 shlex.join([args.attn_tune] + case.argv)))
        if case.locked:
            print("  (the harness held the device lock; without it the sweep would measure)")
        print("exit: %s in %.2f s" % ("timeout" if o.timed_out else o.rc, o.seconds))
        print("stdout:\n" + "".join("  " + l + "\n" for l in o.stdout.splitlines()[:20]), end="")
        print("stderr:\n" + "".join("  " + l + "\n" for l in o.stderr.splitlines()[:20]), end="")
        print("verdict: %s" % ("PASS" if not o.problems else "FAIL: " + "; ".join(o.problems)))
        print("folder kept: %s" % folder)
        return 1 if o.problems else 0

    shutil.rmtree(os.path.join(args.work, "cases"), ignore_errors=True)
    cases = all_cases(surfaces, seeds, args.seed, args.cases_per_surface, not args.no_targeted)
    print("mutate_inputs: %s (sha256 %s); seeds ready in %.1f s (%s); running %d cases on %d jobs"
          % (args.attn_tune, binary_sha[:12], seeded, os.path.join(args.work, "seeds"),
             len(cases), args.jobs), flush=True)
    done = []
    lock = threading.Lock()

    def one(case):
        o = run_case(case, args.attn_tune, args.work, args.timeout, held)
        if not o.problems and not args.keep:
            shutil.rmtree(o.folder, ignore_errors=True)
        with lock:
            done.append(o)
        return o

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        outcomes = list(pool.map(one, cases))
    seconds = time.monotonic() - start
    write_report(outcomes, args.work)
    failed = summarize(outcomes, args, seconds)
    if file_sha256(args.attn_tune) != binary_sha:
        print("mutate_inputs: WARNING: %s changed during the run (rebuilt?); the verdicts mix two "
              "builds: run again" % args.attn_tune)
        failed = True
    print("mutate_inputs: details in %s; failing cases' folders under %s"
          % (os.path.join(args.work, "summary.json"), os.path.join(args.work, "cases")))
    os.close(lock_fd)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
