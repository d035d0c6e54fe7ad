"""Reader of attn-tune threshold tables (docs/threshold-table.md) for engines written in Python.

Standard library only (copy this one file next to the engine). It makes the same choice as
`attn-tune table lookup` and the C++ reader include/attn_tune/threshold_table_reader.hpp: nearest
table point, then the point's crossover context intervals (versions 2 to 5; `v2_from` in version
1), then that family's best configuration at the nearest measured context length. It reads table
versions 1 to 5.

Full lookup (family and the configuration to launch):

    table = ThresholdTable.load("results/nvidia-h200-llama-3-8b.json")
    choice = table.lookup(batch=8, context_len=6000, num_heads=32, num_kv_heads=8,
                          head_dim=128, block_size=16, dtype="bf16")
    choice.family        # "decode_v1" or "decode_v2"
    choice.config        # {"family": ..., "params": {"partition": 512, ...}, "key": ...}
    choice.partition     # 512; None for v1 and for a v2 whose kernel chooses its splits
    choice.kernel_chooses_splits  # v2 without a "partition": launch it without one

A whole decode batch: pass its sequences' context lengths instead of batch and context_len. A
version 4 table with `batch_rules` decides for the batch from its size and its longest, total
and mean length (the nearest rule's tree, docs/threshold-table.md "Batches and batch rules");
any other table answers as for batch=len(seq_lens), context_len=max(seq_lens):

    choice = table.lookup(seq_lens=[30, 20000, 512], num_heads=32, num_kv_heads=8,
                          head_dim=128, block_size=16, dtype="bf16")
    choice.batch_rule    # True where a batch rule answered
    choice.batch_path    # the splits the batch took: "max_len >= 4096, mean_len < 2048"

Replacing an engine's hard-coded v1/v2 rule. Engines such as the seed engine decide with a
function `should_use_paged_v2(seq_len, num_kv_heads, block_size=16, partition_size=512)`; the
table answers the same question for the measured device:

    from ex_engine.factors import attn_dispatch
    table = ThresholdTable.load("results/nvidia-h200-llama-3-8b.json")
    attn_dispatch.should_use_paged_v2 = table.v2_rule(num_heads=28, head_dim=128, dtype="bf16")
    # the call sites stay as they are; passing batch=num_seqs makes the answer batch-aware:
    attn_dispatch.should_use_paged_v2(seq_len, num_kv_heads, batch=num_seqs)

Patch the module attribute before any module does `from ... import should_use_paged_v2` (such an
import keeps the old function). `v2_rule` also binds num_heads, head_dim and dtype as the table's
defaults, so afterwards `table.use_v2(seq_len, num_kv_heads, batch=num_seqs)` works without them
(`table.bind(...)` binds them without making a rule). Without bound defaults, `use_v2` needs them
and raises ValueError naming the missing one. The module function
`use_v2(table_or_path, seq_len, num_kv_heads, ..., num_heads=..., head_dim=..., dtype=...)` does
the same for a table or a path (each path is read once per process).

`use_v2` answers exactly `lookup(...).family == "decode_v2"` (tests check this over grids of
queries), v1 versus v2 only. Its `partition_size` argument is accepted so that it can stand in
for the engine's rule, and is ignored: the table chose the v2 partition that was fastest, and
`lookup(...).partition` says which (None where the kernel chooses its splits; an engine that
launches v2 with its own partition gets the table's v1/v2 decision measured at the table's
partition). It does not warn
when the two differ: engines pass their fixed partition on every decode step, so the warning
would fire on nearly every table and every step.

It runs on every decode step, so answers are cached: per distinct argument tuple (an LRU of
V2_CACHE_SIZE entries), and beneath that the nearest-point search per distinct shape (everything
but seq_len), so a new seq_len of a known shape costs only an interval check. The caches assume
the table is not modified after loading (call `clear_cache()` if it is) and work best with plain
Python ints (convert tensor values with int()). dtype accepts the names `attn-tune table lookup`
accepts (fp32/float32/f32/float, fp16/float16/f16/half, bf16/bfloat16) and torch dtypes
(torch.bfloat16); anything else is a ValueError, as in the CLI.

An fp8 KV cache: pass `kv_dtype="fp8_e4m3"` (or "fp8", vLLM's name for it, or "fp8_e5m2"; the
default "auto" is a cache of `dtype`) to `lookup`, `use_v2`, `bind` or `v2_rule`. Version 5
tables mark the points measured with an fp8 cache with `kv_dtype`; a point of other dtypes (query
or cache) is 64 farther away, as in the C++ reader.

Fleet tables (`attn-tune table combine`; docs/sharding.md, section Fleet tables) hold the tables
of several GPU models keyed by canonical device name. `ThresholdTable.load(path, device_name=...)` reads a fleet
file's entry for that device (any alias: "NVIDIA H100 80GB HBM3", "H100-SXM", "h100-sxm"; without
a name, torch.cuda's current device); `nearest=True` falls back to the entry nearest by SM count
and memory bandwidth. `table.selection` says which entry answers (and is logged); a single table
loads as before, whatever the name.
"""

import functools
import json
import logging
import math
import numbers
import os
import sys
from dataclasses import dataclass, field, replace

SCHEMA = "attn-tune/threshold-table"
FLEET_SCHEMA = "attn-tune/fleet-table"
FLEET_VERSION = 1
# The version attn-tune writes and the oldest one still read (kTableSchemaVersion and
# kOldestTableSchemaVersion of the C++ reader).
VERSION = 5
OLDEST_VERSION = 1
# What a `batch_rules` tree may split on (BatchFeatures of the C++ reader), and its deepest node.
BATCH_FEATURES = ("batch", "max_len", "sum_len", "mean_len")
MAX_TREE_DEPTH = 64
# The deepest nesting of arrays and objects a file may have (kMaxJsonDepth of src/io/json_unique.h):
# no table nests past a dozen levels, and copying, comparing or pickling a deeper one recurses.
MAX_JSON_DEPTH = 200
# What `attn-tune table lookup` takes for --window-left, --window-right and --softcap.
MAX_WINDOW = 1 << 30
MAX_SOFTCAP = 1e30
# Must match kCategoryPenalty and kTieEpsilon of the C++ reader.
CATEGORY_PENALTY = 64.0
TIE_EPSILON = 1e-9
# Entries of the per-argument-tuple cache of use_v2 and of the per-shape cache beneath it.
V2_CACHE_SIZE = 16384
SHAPE_CACHE_SIZE = 1024
# The dtype names `attn-tune table lookup` accepts (parse_dtype in src/model/dtype.cpp), by the
# name tables use.
DTYPE_ALIASES = {
    "fp32": "fp32", "float32": "fp32", "f32": "fp32", "float": "fp32",
    "fp16": "fp16", "float16": "fp16", "f16": "fp16", "half": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
}
# KV-cache dtype names (parse_kv_dtype in src/model/dtype.cpp) by the name tables use; None:
# "auto", the cache has the query's dtype.
KV_DTYPE_ALIASES = {
    "auto": None, "": None,
    "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "e4m3": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2", "e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
}
_MASK_DEFAULTS = {"causal": True, "window_left": -1, "window_right": -1, "softcap": 0.0}


@dataclass
class Choice:
    family: str
    config: dict
    config_key: str
    exact_point: bool
    distance: float
    measured_context: int  # 0 for a batch rule's answer
    point: dict = field(repr=False)  # the decode point (without "measured") or batch rule
    # (without "tree") that answered
    batch_rule: bool = False  # a `batch_rules` tree answered (a lookup with seq_lens)
    batch_path: str = ""  # the splits the batch took to its leaf: "max_len >= 4096, batch < 8",
    # ending "decode points" where the leaf defers to them (the rest is then their answer)
    # The batch rule whose tree answered (without "tree") and its distance from the query's
    # shape; where its leaf defers to the decode points, `point` and `distance` are the decode
    # point's, and these still say whether the rule had the query's shape.
    rule: dict = field(default=None, repr=False)
    rule_distance: float = 0.0

    @property
    def partition(self):
        """The keys per partition a decode_v2 configuration launches with; None for decode_v1
        and for a decode_v2 without a "partition" (the kernel chooses its splits)."""
        if self.family != "decode_v2":
            return None
        return self.config.get("params", {}).get("partition")

    @property
    def kernel_chooses_splits(self):
        """A decode_v2 configuration without a partition: the kernel chooses its own splits."""
        return self.family == "decode_v2" and self.partition is None


class TableError(ValueError):
    """The file is not a threshold table this reader understands."""


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


# The largest integer a lookup reads as one (the C++ reader's int): 2^32 + 256 is no window of
# 256, and a table holding it is refused, not answered from.
_INT_MAX = 2147483647


def _int_in(v, lo, hi=_INT_MAX):
    return _is_int(v) and lo <= v <= hi


def _is_number(v):
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _refuse_constant(name):
    raise ValueError("%s is not a JSON value" % name)


class _DuplicateKey(ValueError):
    """An object of the file gives one key twice (args[0]: the key)."""


def _unique_keys(pairs):
    """json.load's object_pairs_hook: the object as a dict, refusing a key it gives twice. JSON
    keeps the last of them, which silently drops the value the author meant (`"batch": 1, ...,
    "batch": 4`), so a table that repeats a key is refused rather than read one way."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


class _Pairs(list):
    """An object of the file as its (key, value) pairs in order, a key given twice kept twice."""


def _duplicate_key_path(text):
    """Where `text` (JSON that _unique_keys refused) first gives a key twice, as the C++ readers
    name it: "decode[0].batch"; None where it cannot be found."""
    try:
        doc = json.loads(text, object_pairs_hook=_Pairs, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return None
    stack = [(doc, "")]
    while stack:  # in document order, an object's own keys before those of its members
        value, path = stack.pop()
        if isinstance(value, _Pairs):
            seen = set()
            for key, _ in value:
                if key in seen:
                    return path + "." + key if path else key
                seen.add(key)
            members = [(v, path + "." + k if path else k) for k, v in value]
        elif isinstance(value, list):
            members = [(v, "%s[%d]" % (path, i)) for i, v in enumerate(value)]
        else:
            continue
        stack.extend(reversed(members))
    return None


def _nests_deeper(doc, limit):
    """Whether `doc` (parsed JSON) has arrays and objects nested more than `limit` deep; walked
    without recursion, so that the walk itself cannot run out of stack."""
    stack = [(doc, 1)] if isinstance(doc, (dict, list)) else []
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def _json_kind(value):
    """What a parsed JSON value is, in JSON's words: "an object", "an array", "a string"..."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return "a number"


def _schema_fail(path, what):
    raise TableError("threshold table: %s: %s" % (path, what))


def _field(obj, path, key):
    if not isinstance(obj, dict) or key not in obj:
        _schema_fail(path + "." + key if path else key, "missing")
    return obj[key]


def _check_config(cfg, path, family):
    """A timed configuration's `config` as a lookup returns it: an object with a string `key`
    and a `params` object of 32-bit integers (what every kernel set declares), whose `partition`
    (where there is one) is a positive integer, and whose `family` (where written) is the family
    it is chosen for; as the C++ reader holds it."""
    if not isinstance(cfg, dict):
        _schema_fail(path, "expected an object")
    if not isinstance(_field(cfg, path, "key"), str):
        _schema_fail(path + ".key", "expected a string")
    if not isinstance(_field(cfg, path, "params"), dict):
        _schema_fail(path + ".params", "expected an object")
    for name, v in cfg["params"].items():
        if not _int_in(v, -_INT_MAX - 1):
            _schema_fail(path + ".params." + str(name), "expected a 32-bit integer")
    partition = cfg["params"].get("partition")
    if partition is not None and partition < 1:
        _schema_fail(path + ".params.partition", "expected a positive integer")
    if "family" in cfg and cfg["family"] != family:
        _schema_fail(path + ".family", "expected \"%s\" (the family it is chosen for)" % family)


def _point_shape(p):
    """What makes a decode point the one for a call: its shape (batch, heads, head_dim,
    block_size, dtypes) and mask, as the C++ reader keys its exact points."""
    return (p["batch"], p["num_kv_heads"], p["gqa_ratio"], p["head_dim"], p["block_size"],
            point_dtypes(p), p["causal"], p["window_left"], p["window_right"],
            float(p["softcap"]))


def _check_provenance(table):
    """The parts of `provenance` the reader reads (kernels, the device's name and memory), where
    the table has them: TableError naming the first of the wrong type."""
    if "provenance" not in table:
        return
    prov = table["provenance"]
    if not isinstance(prov, dict):
        _schema_fail("provenance", "expected an object")
    for key in ("kernels", "device"):
        if key in prov and not isinstance(prov[key], dict):
            _schema_fail("provenance." + key, "expected an object")
    kernels = prov.get("kernels", {})
    for key in ("source", "name"):
        if key in kernels and not isinstance(kernels[key], str):
            _schema_fail("provenance.kernels." + key, "expected a string")
    dev = prov.get("device", {})
    if "name" in dev and not isinstance(dev["name"], str):
        _schema_fail("provenance.device.name", "expected a string")
    if "memory_bytes" in dev and (not _is_int(dev["memory_bytes"]) or dev["memory_bytes"] < 0):
        _schema_fail("provenance.device.memory_bytes", "expected a number of bytes")


def _check_mask(who, causal, window_left, window_right, softcap):
    """A query's mask as `attn-tune table lookup` takes it: ValueError naming the first bad
    argument, rather than an answer from a point with another mask (nothing equals a softcap of
    NaN or a causal of 'yes', so every point would be 64 away and the first one would answer)."""
    if causal is not True and causal is not False:
        raise ValueError("%s: causal must be True or False, not %r" % (who, causal))
    for name, value in (("window_left", window_left), ("window_right", window_right)):
        if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                or value < -1):
            raise ValueError("%s: %s must be -1 (no window) or a length >= 0, not %r"
                             % (who, name, value))
    if (isinstance(softcap, bool) or not isinstance(softcap, numbers.Real)
            or not math.isfinite(softcap) or softcap < 0):
        raise ValueError("%s: softcap must be a number >= 0 (0: off), not %r" % (who, softcap))


def _check_decode_point(p, path, version):
    """A decode point's fields the lookup reads, as src/tuning/table_schema.cpp holds them:
    TableError naming the first bad field, so that a damaged table is refused, not answered."""
    if not isinstance(p, dict):
        _schema_fail(path, "expected an object")
    for key in ("batch", "num_heads", "num_kv_heads", "gqa_ratio", "head_dim", "block_size"):
        v = _field(p, path, key)
        if not _int_in(v, 1):
            _schema_fail(path + "." + key, "expected a positive integer")
    if p["num_heads"] != p["num_kv_heads"] * p["gqa_ratio"]:
        _schema_fail(path + ".num_heads", "expected num_kv_heads x gqa_ratio")
    if _field(p, path, "dtype") not in ("fp32", "fp16", "bf16"):
        _schema_fail(path + ".dtype", "expected \"fp32\", \"fp16\" or \"bf16\"")
    if "kv_dtype" in p and p["kv_dtype"] not in ("fp8_e4m3", "fp8_e5m2"):
        _schema_fail(path + ".kv_dtype", "expected \"fp8_e4m3\" or \"fp8_e5m2\"")
    # The mask: every point has one (the lookup compares it), as the C++ reader requires.
    if not isinstance(_field(p, path, "causal"), bool):
        _schema_fail(path + ".causal", "expected true or false")
    for key in ("window_left", "window_right"):
        v = _field(p, path, key)
        if not _int_in(v, -1):
            _schema_fail(path + "." + key, "expected -1 or a length")
    softcap = _field(p, path, "softcap")
    if not _is_number(softcap) or softcap < 0:
        _schema_fail(path + ".softcap", "expected a number >= 0")
    if version >= 2:
        intervals = _field(p, path, "v2_intervals")
        if not isinstance(intervals, list):
            _schema_fail(path + ".v2_intervals", "expected a list")
        end = 0
        for k, iv in enumerate(intervals):
            where = "%s.v2_intervals[%d]" % (path, k)
            if not isinstance(iv, list) or len(iv) != 2:
                _schema_fail(where, "expected [from, to]")
            lo, hi = iv
            # Apart: a run that ends where the next begins is one run (attn-tune writes it so).
            if not _int_in(lo, 1) or lo <= end:
                _schema_fail(where, "expected a start of at least 1, after the interval before")
            if hi is not None and (not _int_in(hi, 1) or hi <= lo):
                _schema_fail(where, "expected an end after its start, or null")
            if hi is None and k + 1 < len(intervals):
                _schema_fail(where, "an open interval must be the last")
            end = hi if hi is not None else lo
    if version < 2 or "v2_from" in p:
        v2_from = _field(p, path, "v2_from")
        if v2_from not in ("always", "never") and not _int_in(v2_from, 1):
            _schema_fail(path + ".v2_from", "expected a context length, \"always\" or \"never\"")
        if version >= 2:
            ivs = p["v2_intervals"]
            single = len(ivs) == 1 and ivs[0][1] is None
            agrees = (not ivs if v2_from == "never"
                      else single and ivs[0][0] == (1 if v2_from == "always" else v2_from))
            if not agrees:
                _schema_fail(path + ".v2_from", "does not match v2_intervals")
    measured = _field(p, path, "measured")
    if not isinstance(measured, list) or not measured:
        _schema_fail(path + ".measured", "expected at least one measured context length")
    for k, m in enumerate(measured):
        where = "%s.measured[%d]" % (path, k)
        if not isinstance(m, dict):
            _schema_fail(where, "expected an object")
        c = _field(m, where, "context_len")
        if not _int_in(c, 1):
            _schema_fail(where + ".context_len", "expected a positive integer")
        for slot in ("v1", "v2"):
            if m.get(slot) is not None:
                if not isinstance(m[slot], dict):
                    _schema_fail(where + "." + slot, "expected an object or null")
                _check_config(_field(m[slot], where + "." + slot, "config"),
                              where + "." + slot + ".config", "decode_" + slot)


def _check_batch_rule(rule, path, points):
    """A `batch_rules` entry as src/tuning/table_schema.cpp checks it: a shape without `batch`,
    `batches` and a tree (whose {"lookup": "points"} leaves need decode points: `points`);
    TableError naming the first bad field."""
    if not isinstance(rule, dict):
        _schema_fail(path, "expected an object")
    if not isinstance(_field(rule, path, "dtype"), str):
        _schema_fail(path + ".dtype", "expected a string")
    if "kv_dtype" in rule and rule["kv_dtype"] not in ("fp8_e4m3", "fp8_e5m2"):
        _schema_fail(path + ".kv_dtype", "expected \"fp8_e4m3\" or \"fp8_e5m2\"")
    for key in ("head_dim", "block_size", "num_kv_heads", "gqa_ratio", "num_heads",
                "window_left", "window_right", "batches"):
        if not _is_int(_field(rule, path, key)):
            _schema_fail(path + "." + key, "expected an integer")
    for key in ("head_dim", "block_size", "num_kv_heads", "gqa_ratio", "num_heads"):
        if not _int_in(rule[key], 1):
            _schema_fail(path + "." + key, "expected a positive integer")
    for key in ("window_left", "window_right"):
        if not _int_in(rule[key], -1):
            _schema_fail(path + "." + key, "expected -1 or a length")
    if not isinstance(_field(rule, path, "causal"), bool):
        _schema_fail(path + ".causal", "expected true or false")
    if not _is_number(_field(rule, path, "softcap")):
        _schema_fail(path + ".softcap", "expected a number")
    _check_tree(_field(rule, path, "tree"), path + ".tree", 0, points)


def _check_tree(node, path, depth, points):
    if not isinstance(node, dict):
        _schema_fail(path, "expected a split or a leaf object")
    if depth > MAX_TREE_DEPTH:
        _schema_fail(path, "deeper than %d" % MAX_TREE_DEPTH)
    if "feature" in node:
        if node["feature"] not in BATCH_FEATURES:
            _schema_fail(path + ".feature", 'expected "batch", "max_len", "sum_len" or '
                                            '"mean_len"')
        if not _is_number(_field(node, path, "threshold")):
            _schema_fail(path + ".threshold", "expected a number")
        _check_tree(_field(node, path, "below"), path + ".below", depth + 1, points)
        _check_tree(_field(node, path, "at_or_above"), path + ".at_or_above", depth + 1, points)
        return
    if "lookup" in node:
        if node["lookup"] != "points":
            _schema_fail(path + ".lookup", 'expected "points"')
        if not points:
            _schema_fail(path + ".lookup", "the table has no decode points to read")
        return
    if _field(node, path, "family") not in ("decode_v1", "decode_v2"):
        _schema_fail(path + ".family", 'expected "decode_v1" or "decode_v2"')
    config = _field(node, path, "config")
    if not isinstance(_field(config, path + ".config", "family"), str):
        _schema_fail(path + ".config.family", "expected a string")
    _check_config(config, path + ".config", node["family"])


def _batch_key(seq_lens):
    """(size, longest, total) of a batch's context lengths, all a batch rule reads; ValueError
    on an empty batch or a length < 1."""
    if hasattr(seq_lens, "tolist") and not isinstance(seq_lens, (list, tuple)):
        seq_lens = seq_lens.tolist()
    lens = [int(n) for n in seq_lens]
    if not lens or min(lens) < 1:
        raise ValueError("use_v2 needs at least one context length, each >= 1, in seq_lens")
    return len(lens), max(lens), sum(lens)


def batch_features(seq_lens):
    """What a `batch_rules` tree splits on: {"batch", "max_len", "sum_len", "mean_len"} of a
    decode batch's context lengths."""
    total = sum(seq_lens)
    return {"batch": len(seq_lens), "max_len": max(seq_lens), "sum_len": total,
            "mean_len": total / len(seq_lens)}


def batch_tree_leaf(node, features):
    """The leaf of a `batch_rules` tree a batch with `features` reaches, and the splits it took
    ("max_len >= 4096, batch < 8"): a split sends the batch to "below" when its feature is under
    the threshold, else to "at_or_above"."""
    path = []
    while "feature" in node:
        below = features[node["feature"]] < node["threshold"]
        path.append("%s %s %g" % (node["feature"], "<" if below else ">=", node["threshold"]))
        node = node["below" if below else "at_or_above"]
    return node, ", ".join(path)


def _lr(a, b):
    return abs(math.log2(a) - math.log2(b))


def canonical_dtype(dtype):
    """The table's name of `dtype`: "fp32", "fp16" or "bf16", from any name `attn-tune table
    lookup --dtype` accepts or a torch dtype (its str(), e.g. "torch.bfloat16"). A category of
    `dtype_category` ("fp16+fp8_e4m3") stays one, its parts named as tables name them."""
    name = str(dtype)
    if "+" in name:
        query, kv = name.split("+", 1)
        return dtype_category(query, kv)
    if name.startswith("torch."):
        name = name[len("torch."):]
    try:
        return DTYPE_ALIASES[name]
    except KeyError:
        raise ValueError("unknown dtype %r (expected fp32, fp16 or bf16)" % (dtype,)) from None


def canonical_kv_dtype(kv_dtype):
    """The table's name of a KV-cache dtype: None for "auto" (and None), else "fp8_e4m3" or
    "fp8_e5m2", from vLLM's names ("fp8", "fp8_e4m3", "fp8_e5m2") or a torch float8 dtype."""
    if kv_dtype is None:
        return None
    name = str(kv_dtype)
    if name.startswith("torch."):
        name = name[len("torch."):]
    if name in DTYPE_ALIASES:
        return DTYPE_ALIASES[name]  # the query's own dtype named: compared in dtype_category
    try:
        return KV_DTYPE_ALIASES[name]
    except KeyError:
        raise ValueError("unknown KV-cache dtype %r (expected auto, fp8, fp8_e4m3 or fp8_e5m2)"
                         % (kv_dtype,)) from None


def dtype_category(dtype, kv_dtype="auto"):
    """Query dtype and cache dtype as the one category a table point must share with a query to
    be free of the dtype penalty: "fp16", or "fp16+fp8_e4m3" for an fp8 cache."""
    query = canonical_dtype(dtype)
    kv = canonical_kv_dtype(kv_dtype)
    if kv in ("fp32", "fp16", "bf16") and kv != query:
        # As `attn-tune table lookup --kv-dtype` holds it: a cache that is not fp8 has the
        # query's dtype.
        raise ValueError("unknown KV-cache dtype %r for %s queries (expected auto, fp8, fp8_e4m3 "
                         "or fp8_e5m2, or the query dtype)" % (kv_dtype, query))
    return query if kv is None or kv == query else query + "+" + kv


def point_dtypes(p):
    """A table point's (or batch rule's) category as `dtype_category` makes a query's."""
    kv = p.get("kv_dtype")
    return p["dtype"] if kv in (None, "auto", p["dtype"]) else p["dtype"] + "+" + kv


class ThresholdTable:
    def __init__(self, table):
        if not isinstance(table, dict) or table.get("schema") != SCHEMA:
            raise TableError('not an attn-tune threshold table (schema is not "%s")' % SCHEMA)
        version = table.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise TableError("threshold table has no integer 'version'")
        if not OLDEST_VERSION <= version <= VERSION:
            raise TableError("unsupported threshold table version %d (this reader reads versions "
                             "%d to %d)" % (version, OLDEST_VERSION, VERSION))
        if not isinstance(table.get("decode"), list):
            raise TableError("threshold table has no 'decode' list")
        shapes = {}
        for i, point in enumerate(table["decode"]):
            _check_decode_point(point, "decode[%d]" % i, version)
            # Two points for one shape: which one answers would depend on their order in the
            # file, and a sweep never writes two.
            first = shapes.setdefault(_point_shape(point), i)
            if first != i:
                _schema_fail("decode[%d]" % i, "the shape and mask of decode[%d] again (one "
                                               "point per shape; which one is meant?)" % first)
        _check_provenance(table)
        if version >= 4 and "batch_rules" in table:
            rules = table["batch_rules"]
            if not isinstance(rules, list):
                _schema_fail("batch_rules", "expected a list")
            for i, rule in enumerate(rules):
                _check_batch_rule(rule, "batch_rules[%d]" % i, bool(table["decode"]))
        self.table = table
        self.version = version
        self.selection = None  # set when read for a device (open_for_device)
        self._bound = {}
        self._make_caches()

    def _make_caches(self):
        # Per instance (a table's answers are its own); cleared, never replaced, so the rules
        # v2_rule returned keep using them.
        self._answer = functools.lru_cache(maxsize=V2_CACHE_SIZE)(self._answer_uncached)
        self._batch_answer = functools.lru_cache(maxsize=V2_CACHE_SIZE)(
            self._batch_answer_uncached)
        self._shape = functools.lru_cache(maxsize=SHAPE_CACHE_SIZE)(self._shape_uncached)

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_answer"], state["_batch_answer"], state["_shape"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._make_caches()

    @classmethod
    def load(cls, path, device_name=None, nearest=False, sm_count=None, bandwidth_gbps=None):
        """The table at `path` (a sweep's --out folder stands for its threshold_table.json); a
        fleet table's entry for `device_name` (open_for_device). TableError, naming the file,
        when it cannot be read, is not JSON (NaN, Infinity and a key given twice in one object
        count as not JSON), nests deeper than MAX_JSON_DEPTH or is not an object."""
        if os.path.isdir(path):
            folder, path = path, os.path.join(path, "threshold_table.json")
            if not os.path.isfile(path):
                raise TableError("%s: a folder without a threshold_table.json (give a sweep's "
                                 "--out folder or a table file)" % folder)
        too_deep = TableError("%s is not a threshold table: it nests deeper than %d levels"
                              % (path, MAX_JSON_DEPTH))
        try:
            # utf-8-sig: a byte order mark at the start, as some editors write one, is skipped
            # (the C++ readers skip it too).
            with open(path, encoding="utf-8-sig") as f:
                text = f.read()
            # NaN and Infinity are no JSON: refused as the C++ readers refuse them.
            doc = json.loads(text, parse_constant=_refuse_constant,
                             object_pairs_hook=_unique_keys)
        except OSError as e:
            raise TableError("cannot read threshold table %s (%s)" % (path, e.strerror or e)) \
                from None
        except RecursionError:  # the parser recursed once per level
            raise too_deep from None
        except _DuplicateKey as e:
            where = _duplicate_key_path(text) or e.args[0]
            raise TableError("%s: %s: the key appears twice in its object (JSON keeps only the "
                             "last; give it once)" % (path, where)) from None
        except ValueError as e:  # not JSON, or not UTF-8
            raise TableError("%s is not valid JSON (%s)" % (path, e)) from None
        if _nests_deeper(doc, MAX_JSON_DEPTH):
            raise too_deep
        if not isinstance(doc, dict):
            raise TableError("%s is not a threshold table: the top level is %s, not an object"
                             % (path, _json_kind(doc)))
        if device_name is None and not nearest and doc.get("schema") != FLEET_SCHEMA:
            return cls(doc)
        return open_for_device(doc, device_name, nearest, sm_count, bandwidth_gbps)

    @property
    def provenance(self):
        """The table's `provenance` (TableError for a table without one)."""
        if "provenance" not in self.table:
            _schema_fail("provenance", "missing")
        return self.table["provenance"]

    @property
    def kernels(self):
        """The kernels the table timed: {"source": "built-in", "name": "attn-tune"} or a plugin's
        {"source": "plugin", "name", "version", "library_sha256", ...}. Tables made before
        plugins existed timed the built-in kernels."""
        return self.provenance.get("kernels", {"source": "built-in", "name": "attn-tune"})

    @property
    def engine_rule(self):
        """The engine rule the timed kernels replace ("vllm-cuda", "vllm-cpu", "seed"), which the
        table's regret names as the kernel set's own rule; "" where they name none (and in
        tables made before kernel sets named one)."""
        rule = self.kernels.get("engine_rule", "")
        return rule if isinstance(rule, str) else ""

    def timed_kernels_named(self, name):
        """Whether the table timed the kernels called `name` (a plugin's name, or "attn-tune"
        for the built-in ones): an engine checks this before it trusts the thresholds."""
        k = self.kernels
        if k.get("source") != "plugin":
            return name in ("attn-tune", "built-in")
        return k.get("name") == name

    @staticmethod
    def distance(p, batch, num_heads, num_kv_heads, head_dim, block_size, dtype, causal,
                 window_left, window_right, softcap):
        # The batch term plus the rest, in the C++ reader's order.
        return _lr(p["batch"], batch) + ThresholdTable.shape_distance(
            p, num_heads, num_kv_heads, head_dim, block_size, dtype, causal, window_left,
            window_right, softcap)

    @staticmethod
    def uses_v2(p, version, context_len):
        """Whether decode point `p` of a table of `version` chooses v2 at `context_len`."""
        if version >= 2:
            return any(context_len >= lo and (hi is None or context_len < hi)
                       for lo, hi in p["v2_intervals"])
        v2_from = p["v2_from"]
        if isinstance(v2_from, str):
            return v2_from == "always"
        return context_len >= v2_from

    def _nearest(self, batch, num_heads, num_kv_heads, head_dim, block_size, dtype, causal,
                 window_left, window_right, softcap):
        """The nearest decode point and its distance (step 1 of the lookup)."""
        best, best_d = None, 0.0
        for p in self.table["decode"]:
            d = self.distance(p, batch, num_heads, num_kv_heads, head_dim, block_size, dtype,
                              causal, window_left, window_right, softcap)
            if best is None or d < best_d - TIE_EPSILON:
                best, best_d = p, d
        if best is None:
            raise TableError("threshold table has no decode points")
        return best, best_d

    @staticmethod
    def shape_distance(p, num_heads, num_kv_heads, head_dim, block_size, dtype, causal,
                       window_left, window_right, softcap):
        """`distance` without the batch term: the distance of a batch rule, which covers every
        batch (summed in the C++ reader's order)."""
        d = (_lr(p["num_kv_heads"], num_kv_heads) + _lr(p["gqa_ratio"], num_heads / num_kv_heads)
             + _lr(p["head_dim"], head_dim) + _lr(p["block_size"], block_size))
        if point_dtypes(p) != dtype:
            d += CATEGORY_PENALTY
        if (p["causal"] != causal or p["window_left"] != window_left
                or p["window_right"] != window_right or float(p["softcap"]) != float(softcap)):
            d += CATEGORY_PENALTY
        return d

    @property
    def has_batch_rules(self):
        """Whether the table decides whole batches (version 4 with a non-empty `batch_rules`)."""
        return self.version >= 4 and bool(self.table.get("batch_rules"))

    def lookup(self, batch=None, context_len=None, num_heads=None, num_kv_heads=None,
               head_dim=None, block_size=None, dtype=None, causal=True, window_left=-1,
               window_right=-1, softcap=0.0, *, seq_lens=None, kv_dtype="auto"):
        """v1 or v2 and the configuration for a decode call of `batch` sequences whose longest
        is `context_len`, or for the decode batch whose context lengths are `seq_lens` (then
        batch and context_len may be left out; given, they must be its size and longest). With
        seq_lens, a table with batch rules answers from the nearest rule's tree (Choice.batch_rule
        True); any other table as for batch=len(seq_lens), context_len=max(seq_lens)."""
        for name, value in (("num_heads", num_heads), ("num_kv_heads", num_kv_heads),
                            ("head_dim", head_dim), ("block_size", block_size),
                            ("dtype", dtype)):
            if value is None:
                raise TypeError("lookup() missing required argument: '%s'" % name)
        dtype = dtype_category(dtype, kv_dtype)  # kv_dtype: an fp8 cache (module docstring)
        _check_mask("lookup", causal, window_left, window_right, softcap)
        if (_is_int(num_heads) and _is_int(num_kv_heads) and num_kv_heads >= 1
                and num_heads % num_kv_heads != 0):
            # As `attn-tune table lookup`: a fractional gqa ratio is no call an engine makes.
            raise ValueError("lookup: num_heads=%r is not a multiple of num_kv_heads=%r"
                             % (num_heads, num_kv_heads))
        if seq_lens is not None:
            if hasattr(seq_lens, "tolist") and not isinstance(seq_lens, (list, tuple)):
                seq_lens = seq_lens.tolist()
            seq_lens = list(seq_lens)
            if not seq_lens:
                raise ValueError("lookup needs at least one context length in seq_lens")
            if any(not _is_int(n) or n < 1 for n in seq_lens):
                raise ValueError("lookup needs context lengths >= 1 (integers)")
            for name, given, got in (("batch", batch, len(seq_lens)),
                                     ("context_len", context_len, max(seq_lens))):
                if given is not None and given != got:
                    raise ValueError("lookup: %s=%r disagrees with seq_lens (%r)"
                                     % (name, given, got))
            if self.has_batch_rules:
                return self._lookup_batch(seq_lens, num_heads, num_kv_heads, head_dim,
                                          block_size, dtype, causal, window_left, window_right,
                                          softcap)
            batch, context_len = len(seq_lens), max(seq_lens)
        for name, value in (("batch", batch), ("context_len", context_len)):
            if value is None:
                raise TypeError("lookup() missing required argument: '%s' (or seq_lens)" % name)
        if min(batch, context_len, num_heads, num_kv_heads, head_dim, block_size) < 1:
            raise ValueError("lookup needs positive batch, context_len, heads, head_dim and "
                             "block_size")
        best, best_d = self._nearest(batch, num_heads, num_kv_heads, head_dim, block_size, dtype,
                                     causal, window_left, window_right, softcap)
        point = {k: v for k, v in best.items() if k != "measured"}
        v2 = self.uses_v2(best, self.version, context_len)
        family = "decode_v2" if v2 else "decode_v1"
        for _ in range(2):
            slot = "v2" if family == "decode_v2" else "v1"
            pick, pick_d = None, 0.0
            for m in best["measured"]:
                if m.get(slot) is None:
                    continue
                d = _lr(m["context_len"], context_len)
                # A tie goes to the shorter length, whatever order the list is in.
                if pick is None or d < pick_d - TIE_EPSILON or (
                        abs(d - pick_d) <= TIE_EPSILON and m["context_len"] < pick["context_len"]):
                    pick, pick_d = m, d
            if pick is not None:
                cfg = pick[slot]["config"]
                return Choice(family=family, config=cfg, config_key=cfg["key"],
                              exact_point=best_d == 0.0, distance=best_d,
                              measured_context=pick["context_len"], point=point)
            family = "decode_v1" if family == "decode_v2" else "decode_v2"
        raise TableError("threshold table point has no measured configuration")

    def _nearest_rule(self, num_heads, num_kv_heads, head_dim, block_size, dtype, causal,
                      window_left, window_right, softcap):
        """The batch rule that decides for the shape and its distance: the nearest one (ties: the
        first rule), or (None, None) where the decode points have a nearer shape (the query's
        own): another shape's leaf could name what this shape cannot run (a partition that is
        no multiple of its block size), so the points answer, as in a table without batch
        rules. lookup and use_v2 both ask here."""
        best, best_d = None, 0.0
        for r in self.table["batch_rules"]:
            d = self.shape_distance(r, num_heads, num_kv_heads, head_dim, block_size, dtype,
                                    causal, window_left, window_right, softcap)
            if best is None or d < best_d - TIE_EPSILON:
                best, best_d = r, d
        if best_d > 0.0 and any(
                self.shape_distance(p, num_heads, num_kv_heads, head_dim, block_size, dtype,
                                    causal, window_left, window_right, softcap)
                < best_d - TIE_EPSILON for p in self.table["decode"]):
            return None, None
        return best, best_d

    def _lookup_batch(self, seq_lens, num_heads, num_kv_heads, head_dim, block_size, dtype,
                      causal, window_left, window_right, softcap):
        """The nearest batch rule's leaf for the batch `seq_lens` (ties: the first rule)."""
        if min(num_heads, num_kv_heads, head_dim, block_size) < 1:
            raise ValueError("lookup needs positive heads, head_dim and block_size")
        best, best_d = self._nearest_rule(num_heads, num_kv_heads, head_dim, block_size, dtype,
                                          causal, window_left, window_right, softcap)
        if best is None:
            return self.lookup(len(seq_lens), max(seq_lens), num_heads, num_kv_heads, head_dim,
                               block_size, dtype, causal, window_left, window_right, softcap)
        leaf, path = batch_tree_leaf(best["tree"], batch_features(seq_lens))
        rule = {k: v for k, v in best.items() if k != "tree"}
        if "lookup" in leaf:  # the decode points answer, read with size and longest length
            c = self.lookup(len(seq_lens), max(seq_lens), num_heads, num_kv_heads, head_dim,
                            block_size, dtype, causal, window_left, window_right, softcap)
            return replace(c, batch_rule=True,
                           batch_path=path + (", " if path else "") + "decode points",
                           rule=rule, rule_distance=best_d)
        cfg = leaf["config"]
        return Choice(family=leaf["family"], config=cfg, config_key=cfg["key"],
                      exact_point=best_d == 0.0, distance=best_d, measured_context=0,
                      point=rule, batch_rule=True, batch_path=path, rule=rule,
                      rule_distance=best_d)

    # ---- v1/v2 answers for an engine's hot path -------------------------------------------

    def bind(self, num_heads=None, head_dim=None, dtype=None, kv_dtype=None):
        """Bind the model's num_heads, head_dim and dtype as the defaults of `use_v2` (those
        given; the others stay as they were). Returns the table."""
        for name, value in (("num_heads", num_heads), ("head_dim", head_dim)):
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError("%s must be a positive int, not %r" % (name, value))
                self._bound[name] = value
        if dtype is not None:
            self._bound["dtype"] = canonical_dtype(dtype)
        if kv_dtype is not None:
            canonical_kv_dtype(kv_dtype)  # an unknown name fails here, not on a decode step
            self._bound["kv_dtype"] = kv_dtype
        return self

    @property
    def bound(self):
        """The defaults `bind` or `v2_rule` bound: {"num_heads": ..., "head_dim": ..., "dtype": ...}
        (those bound so far)."""
        return dict(self._bound)

    def use_v2(self, seq_len, num_kv_heads, block_size=16, partition_size=512, *, batch=1,
               num_heads=None, head_dim=None, dtype=None, causal=True, window_left=-1,
               window_right=-1, softcap=0.0, seq_lens=None, kv_dtype=None):
        """Whether the table chooses decode_v2 for a decode step of `batch` sequences whose
        longest is `seq_len`: exactly `lookup(batch, seq_len, ...).family == "decode_v2"`. Given
        the batch's context lengths `seq_lens` instead (seq_len and batch are then ignored; pass
        seq_len=None), exactly `lookup(seq_lens=seq_lens, ...).family == "decode_v2"`: a table
        with batch rules decides for the whole batch.

        The parameters of the seed engine's `should_use_paged_v2` plus `batch` and the model.
        num_heads, head_dim and dtype default to those bound by `bind` or `v2_rule`; ValueError
        names the first that is neither given nor bound. `partition_size` is ignored: the answer
        is v1 versus v2 only, and the partition the table chose is `lookup(...).partition`.
        Answers are cached (see the module docstring)."""
        if num_heads is None or head_dim is None or dtype is None:
            bound, name = self._bound, "num_heads"
            try:
                if num_heads is None:
                    num_heads = bound[name]
                name = "head_dim"
                if head_dim is None:
                    head_dim = bound[name]
                name = "dtype"
                if dtype is None:
                    dtype = bound[name]
            except KeyError:
                raise ValueError("use_v2 needs %s: pass %s=... or bind it first with "
                                 "table.bind(%s=...) or table.v2_rule(num_heads, head_dim, dtype)"
                                 % (name, name, name)) from None
        if kv_dtype is None:
            kv_dtype = self._bound.get("kv_dtype", "auto")
        if kv_dtype != "auto":
            # One concatenation per decode step; the cached answers beneath canonicalise it
            # (canonical_dtype reads "dtype+kv_dtype" as dtype_category does).
            dtype = "%s+%s" % (dtype, kv_dtype)
        if seq_lens is not None:
            return self._batch_answer(*_batch_key(seq_lens), num_kv_heads, block_size, num_heads,
                                      head_dim, dtype, causal, window_left, window_right, softcap)
        return self._answer(seq_len, num_kv_heads, block_size, batch, num_heads, head_dim, dtype,
                            causal, window_left, window_right, softcap)

    def v2_rule(self, num_heads, head_dim, dtype, batch=1, kv_dtype="auto", **masks):
        """A drop-in for the seed engine's rule: a function
        `should_use_paged_v2(seq_len, num_kv_heads, block_size=16, partition_size=512, *,
        batch=<batch>) -> bool` that answers `use_v2` for this model (num_heads query heads,
        head_dim, dtype) and mask (`masks`: causal, window_left, window_right, softcap; default
        causal without window or softcap). The engine's call sites keep working; those that
        pass `batch=num_seqs` get batch-aware answers. Also binds num_heads, head_dim and dtype
        as the table's defaults (`bind`), replacing any bound before; rules made before keep
        their own."""
        unknown = sorted(set(masks) - set(_MASK_DEFAULTS))
        if unknown:
            raise TypeError("v2_rule() got unexpected keyword argument(s) %s (the masks are %s)"
                            % (", ".join(unknown), ", ".join(_MASK_DEFAULTS)))
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError("batch must be a positive int, not %r" % (batch,))
        m = dict(_MASK_DEFAULTS, **masks)
        _check_mask("v2_rule", m["causal"], m["window_left"], m["window_right"], m["softcap"])
        self.bind(num_heads=num_heads, head_dim=head_dim, dtype=dtype, kv_dtype=kv_dtype)
        dtype = dtype_category(dtype, kv_dtype)
        causal, window_left, window_right, softcap = (
            m["causal"], m["window_left"], m["window_right"], m["softcap"])
        answer = self._answer
        default_batch = batch

        batch_answer = self._batch_answer

        def should_use_paged_v2(seq_len: int, num_kv_heads: int, block_size: int = 16,
                                partition_size: int = 512, *, batch: int = default_batch,
                                seq_lens=None) -> bool:
            if seq_lens is not None:
                return batch_answer(*_batch_key(seq_lens), num_kv_heads, block_size, num_heads,
                                    head_dim, dtype, causal, window_left, window_right, softcap)
            return answer(seq_len, num_kv_heads, block_size, batch, num_heads, head_dim, dtype,
                          causal, window_left, window_right, softcap)

        should_use_paged_v2.__doc__ = (
            "Whether the threshold table chooses decode_v2 (num_heads=%d, head_dim=%d, dtype=%s, "
            "causal=%s, window_left=%d, window_right=%d, softcap=%g; batch defaults to %d; "
            "seq_lens=[...] decides for a whole batch). partition_size is ignored." % (num_heads, head_dim, dtype, causal, window_left,
                                            window_right, softcap, default_batch))
        should_use_paged_v2.table = self
        should_use_paged_v2.bound = dict(num_heads=num_heads, head_dim=head_dim, dtype=dtype,
                                         batch=default_batch, **m)
        return should_use_paged_v2

    def clear_cache(self):
        """Forget the cached answers (after modifying `self.table`)."""
        self._answer.cache_clear()
        self._batch_answer.cache_clear()
        self._shape.cache_clear()

    def cache_info(self):
        """{"answers": ..., "batch_answers": ..., "shapes": ...}: functools cache statistics of
        the caches (batch_answers: use_v2 with seq_lens)."""
        return {"answers": self._answer.cache_info(),
                "batch_answers": self._batch_answer.cache_info(),
                "shapes": self._shape.cache_info()}

    def _answer_uncached(self, seq_len, num_kv_heads, block_size, batch, num_heads, head_dim,
                         dtype, causal, window_left, window_right, softcap):
        if seq_len < 1:
            raise ValueError("use_v2 needs a positive seq_len, not %r" % (seq_len,))
        for lo, hi in self._shape(batch, num_heads, num_kv_heads, head_dim, block_size, dtype,
                                  causal, window_left, window_right, softcap):
            if lo <= seq_len and (hi is None or seq_len < hi):
                return True
        return False

    def _batch_answer_uncached(self, batch, longest, total, num_kv_heads, block_size, num_heads,
                               head_dim, dtype, causal, window_left, window_right, softcap):
        """use_v2 for a batch of `batch` sequences, the longest `longest`, `total` in all: what
        a batch rule's tree and its decode-points leaves read, so one answer per such triple."""
        if not self.has_batch_rules:
            return self._answer(longest, num_kv_heads, block_size, batch, num_heads, head_dim,
                                dtype, causal, window_left, window_right, softcap)
        if min(num_heads, num_kv_heads, head_dim, block_size) < 1:
            raise ValueError("use_v2 needs positive heads, head_dim and block_size")
        _check_mask("use_v2", causal, window_left, window_right, softcap)
        dtype = canonical_dtype(dtype)
        best, _ = self._nearest_rule(num_heads, num_kv_heads, head_dim, block_size, dtype,
                                     causal, window_left, window_right, softcap)
        if best is None:
            return self._answer(longest, num_kv_heads, block_size, batch, num_heads, head_dim,
                                dtype, causal, window_left, window_right, softcap)
        leaf, _ = batch_tree_leaf(best["tree"], {"batch": batch, "max_len": longest,
                                                 "sum_len": total, "mean_len": total / batch})
        if "lookup" in leaf:
            return self._answer(longest, num_kv_heads, block_size, batch, num_heads, head_dim,
                                dtype, causal, window_left, window_right, softcap)
        return leaf["family"] == "decode_v2"

    def _shape_uncached(self, batch, num_heads, num_kv_heads, head_dim, block_size, dtype,
                        causal, window_left, window_right, softcap):
        """The context intervals [lo, hi) (hi None: open) where `lookup` of this shape returns
        decode_v2: the nearest point's crossover, with lookup's fallback to the other family
        where one was never measured at that point."""
        if min(batch, num_heads, num_kv_heads, head_dim, block_size) < 1:
            raise ValueError("use_v2 needs positive batch, heads, head_dim and block_size")
        _check_mask("use_v2", causal, window_left, window_right, softcap)
        best, _ = self._nearest(batch, num_heads, num_kv_heads, head_dim, block_size,
                                canonical_dtype(dtype), causal, window_left, window_right,
                                softcap)
        has_v1 = any(m.get("v1") is not None for m in best["measured"])
        has_v2 = any(m.get("v2") is not None for m in best["measured"])
        if not has_v1 and not has_v2:
            raise TableError("threshold table point has no measured configuration")
        if not has_v2:
            return ()
        if not has_v1:
            return ((1, None),)
        if self.version >= 2:
            return tuple((lo, hi) for lo, hi in best["v2_intervals"])
        v2_from = best["v2_from"]
        if isinstance(v2_from, str):
            return ((1, None),) if v2_from == "always" else ()
        return ((v2_from, None),)


# Device models known by name: SM count and memory bandwidth (GB/s), as known_devices() in
# include/attn_tune/fleet_table.hpp (the nearest-device fallback compares them).
KNOWN_DEVICES = {
    "b200": (148, 8000), "gh200": (132, 4000), "h200": (132, 4800), "h200-nvl": (132, 4800),
    "h100-sxm": (132, 3350), "h100-nvl": (132, 3900), "h100-pcie": (114, 2000),
    "h800-sxm": (132, 3350), "h800-pcie": (114, 2000), "h20": (78, 4000),
    "a100-sxm4-80gb": (108, 2039), "a100-sxm4-40gb": (108, 1555),
    "a100-pcie-80gb": (108, 1935), "a100-pcie-40gb": (108, 1555),
    "a800-sxm4-80gb": (108, 2039), "l40s": (142, 864), "l40": (142, 864), "l4": (58, 300),
    "a40": (84, 696), "a30": (56, 933), "a10g": (80, 600), "a10": (72, 600), "t4": (40, 320),
    "v100-sxm2": (80, 900), "v100-pcie": (80, 900), "rtx-4090": (128, 1008),
    "rtx-6000-ada": (142, 960), "mi300x": (304, 5300), "mi250x": (220, 3277),
}
_VENDOR_WORDS = {"nvidia", "amd", "geforce", "tesla", "instinct"}
_log = logging.getLogger("attn_tune_table")


def canonical_device_name(raw, memory_bytes=0):
    """The canonical name of a device model, as canonical_device_name() of the C++ reader:
    "NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB", "H100-SXM" -> "h100-sxm"; "NVIDIA H100
    PCIe" -> "h100-pcie"; "NVIDIA A100-SXM4-40GB" -> "a100-sxm4-40gb" (the size from
    `memory_bytes` when the name has none; without either, "a100-sxm4"); other names -> their
    words in lower case joined by '-', without the vendor."""
    words, cur = [], ""
    for ch in str(raw):
        if not ch.isascii():  # kept as it is, as the C++ reader keeps its UTF-8 bytes
            cur += ch
        elif ch.isalnum():
            cur += ch.lower()
        elif cur:
            words.append(cur)
            cur = ""
    if cur:
        words.append(cur)
    t = [w for w in words if w not in _VENDOR_WORDS]
    pcie, nvl = "pcie" in t, "nvl" in t

    def sized(base):
        if "80gb" in t or "80g" in t:
            return base + "-80gb"
        if "40gb" in t or "40g" in t:
            return base + "-40gb"
        if memory_bytes and memory_bytes > 0:
            return base + ("-80gb" if memory_bytes > (60 << 30) else "-40gb")
        return base

    if "gh200" in t:
        return "gh200"
    if "h200" in t:
        return "h200-nvl" if nvl else "h200"
    for h in ("h100", "h800"):
        if h in t:
            return h + ("-pcie" if pcie else "-nvl" if nvl else "-sxm")
    for a in ("a100", "a800"):
        if a in t:
            return sized(a + ("-pcie" if pcie else "-sxm4"))
    if "v100" in t:
        return "v100-pcie" if pcie else "v100-sxm2"
    if "rtx" in t and "6000" in t and "ada" in t:
        return "rtx-6000-ada"
    kept = [w for w in t if not (len(w) > 2 and w.endswith("gb") and w[0].isdigit())]
    return "-".join(kept)


@dataclass
class Selection:
    """Which fleet entry answers for a device: its canonical name, the raw name it was measured
    on, whether it is the device's own entry (False: the nearest one, or a single table measured
    on another model) and a line saying so."""
    device: str
    raw_name: str
    exact: bool
    distance: float
    said: str


def _current_device_name():
    try:
        import torch  # noqa: PLC0415 (only when a fleet file is loaded without a device name)
        if torch.cuda.is_available():
            return torch.cuda.get_device_name()
    except ImportError:
        pass
    return None


def _fleet_fail(path, what):
    raise TableError("fleet table: %s: %s" % (path, what))


def _check_fleet(fleet):
    """A fleet table's `devices` list, each entry checked for what selecting one reads (a device
    name, given once; a table; the raw name, SM count and bandwidth where present): TableError
    naming the first bad entry and field. The entry's table is checked when it is read."""
    if (not isinstance(fleet, dict) or not _is_int(fleet.get("version"))
            or fleet["version"] != FLEET_VERSION or not isinstance(fleet.get("devices"), list)
            or not fleet["devices"]):
        raise TableError("not a fleet table of version %d with a 'devices' list" % FLEET_VERSION)
    devices = fleet["devices"]
    seen = {}
    for i, e in enumerate(devices):
        at = "devices[%d]" % i
        if not isinstance(e, dict):
            _fleet_fail(at, "expected an object")
        if "device" not in e:
            _fleet_fail(at + ".device", "missing")
        if not isinstance(e["device"], str) or not e["device"]:
            _fleet_fail(at + ".device", "expected a canonical device name (a string), not %s"
                        % json.dumps(e["device"]))
        if e["device"] in seen:
            # Which of the two would answer would depend on their order in the file.
            _fleet_fail(at + ".device", "%s again (devices[%d] is %s too); a fleet table holds "
                                        "one table per device model"
                        % (e["device"], seen[e["device"]], e["device"]))
        seen[e["device"]] = i
        if "table" not in e:
            _fleet_fail(at + ".table", "missing")
        if not isinstance(e["table"], dict):
            _fleet_fail(at + ".table", "expected an object")
        if "raw_name" in e and not isinstance(e["raw_name"], str):
            _fleet_fail(at + ".raw_name", "expected a string")
        if e.get("sm_count") is not None and (not _is_int(e["sm_count"]) or e["sm_count"] < 0):
            _fleet_fail(at + ".sm_count", "expected a number of SMs")
        bw = e.get("bandwidth_gbps")
        if bw is not None and (not _is_number(bw) or bw <= 0):
            _fleet_fail(at + ".bandwidth_gbps", "expected a number > 0")
    return devices


def select_fleet_entry(fleet, device_name, nearest=False, sm_count=None, bandwidth_gbps=None):
    """The entry of a fleet table (parsed JSON) for `device_name`, and its Selection; raises
    LookupError naming the entries there are when it has none (unless `nearest`)."""
    devices = _check_fleet(fleet)
    want = canonical_device_name(device_name)
    hit = next((e for e in devices if e.get("device") == want), None)
    if hit is None:
        # Only a memory size may follow ("a100-sxm4" -> "a100-sxm4-80gb"), never another model.
        def sized_form(d):
            rest = d[len(want) + 1:] if d.startswith(want + "-") else ""
            return len(rest) > 2 and rest.endswith("gb") and rest[:-2].isdigit()
        sized = [e for e in devices if sized_form(e.get("device", ""))]
        hit = sized[0] if len(sized) == 1 else None
    if hit is not None:
        return hit, Selection(hit["device"], hit.get("raw_name", ""), True, 0.0,
                              "fleet entry %s (measured on %s) for device '%s'"
                              % (hit["device"], hit.get("raw_name", ""), device_name))
    have = ", ".join(e.get("device", "") for e in devices)
    if not nearest:
        raise LookupError("fleet table has no entry for '%s' (%s); it has %s (ask for the nearest "
                          "by SM count and bandwidth to use one)" % (device_name, want, have))
    sm, bw = KNOWN_DEVICES.get(want, (None, None))
    sm, bw = sm_count or sm, bandwidth_gbps or bw
    if not sm or not bw:
        raise LookupError("fleet table has no entry for '%s' (%s) and its SM count and memory "
                          "bandwidth are unknown; give them to pick the nearest of %s"
                          % (device_name, want, have))
    best, best_d = None, 0.0
    for e in devices:
        esm, ebw = e.get("sm_count") or 0, e.get("bandwidth_gbps") or 0
        if esm <= 0 or ebw <= 0:
            continue
        d = abs(math.log2(esm / sm)) + abs(math.log2(ebw / bw))
        if best is None or d < best_d - TIE_EPSILON:
            best, best_d = e, d
    if best is None:
        raise LookupError("no entry of the fleet table records its SM count and bandwidth")
    return best, Selection(best["device"], best.get("raw_name", ""), False, best_d,
                           "no fleet entry for '%s' (%s); using the nearest, %s (measured on %s, "
                           "%d SMs), distance %.2f" % (device_name, want, best["device"],
                                                       best.get("raw_name", ""),
                                                       best.get("sm_count", 0), best_d))


def open_for_device(doc, device_name=None, nearest=False, sm_count=None, bandwidth_gbps=None):
    """A ThresholdTable from a threshold table or a fleet table (parsed JSON), for the device
    `device_name` (a fleet needs one: None asks torch for the current CUDA device). The table's
    `selection` says which entry answers; it is also logged (logger "attn_tune_table")."""
    if isinstance(doc, dict) and doc.get("schema") == FLEET_SCHEMA:
        name = device_name or _current_device_name()
        if not name:
            raise TableError("a fleet table needs the name of the device to read it for "
                             "(device_name=...)")
        entry, sel = select_fleet_entry(doc, name, nearest, sm_count, bandwidth_gbps)
        try:
            t = ThresholdTable(entry["table"])
        except TableError as e:
            i = next(k for k, d in enumerate(doc["devices"]) if d is entry)
            raise TableError("fleet table: devices[%d] (%s): %s"
                             % (i, entry["device"], e)) from None
        t.selection = sel
        (_log.info if sel.exact else _log.warning)("%s", sel.said)
        return t
    t = ThresholdTable(doc)
    dev = t.table.get("provenance", {}).get("device", {})
    raw = dev.get("name", "")
    canon = canonical_device_name(raw, dev.get("memory_bytes", 0))
    t.selection = Selection(canon, raw, True, 0.0, "")
    if device_name and canonical_device_name(device_name) != canon:
        t.selection = Selection(canon, raw, False, 0.0,
                                "the table was measured on %s (%s), not on '%s' (%s)"
                                % (raw, canon, device_name, canonical_device_name(device_name)))
        _log.warning("%s", t.selection.said)
    return t


_LOADED = {}


def load_cached(table_or_path):
    """`table_or_path` itself if it is a ThresholdTable, else the table at that path, read once
    per process (later calls with the same path return the same table)."""
    if isinstance(table_or_path, ThresholdTable):
        return table_or_path
    try:
        return _LOADED[table_or_path]
    except (KeyError, TypeError):
        pass
    if not isinstance(table_or_path, (str, bytes, os.PathLike)):
        raise TypeError("expected a ThresholdTable or a path, not %s"
                        % type(table_or_path).__name__)
    t = _LOADED[table_or_path] = ThresholdTable.load(table_or_path)
    return t


def use_v2(table_or_path, seq_len, num_kv_heads, block_size=16, partition_size=512, **kw):
    """`ThresholdTable.use_v2` on a table or the table at a path (read once per process); `kw`
    as there (batch, num_heads, head_dim, dtype, causal, window_left, window_right, softcap)."""
    return load_cached(table_or_path).use_v2(seq_len, num_kv_heads, block_size, partition_size,
                                             **kw)


def _cli_bool(text):
    """A BOOLEAN option's value as `attn-tune table lookup` (CLI11) reads it: true/false,
    yes/no, on/off, enable/disable, 1/0, t/f, y/n, +/- (any case) or an integer (> 0: true)."""
    v = text.strip().lower()
    if v in ("true", "yes", "on", "enable", "t", "y", "+"):
        return True
    if v in ("false", "no", "off", "disable", "f", "n", "-"):
        return False
    try:
        return int(v) > 0
    except ValueError:
        import argparse
        raise argparse.ArgumentTypeError("expected true or false, not %r" % text) from None


def main(argv=None):
    """`python3 attn_tune_table.py TABLE --batch B --context-len C ...` (or `--seq-lens
    30,20000,512` for a whole batch), with the options of `attn-tune table lookup` (the mask:
    --causal true|false, --window-left, --window-right, --softcap; --kv-dtype; a fleet table's
    --device-name, --nearest, --sm-count, --bandwidth-gbps): prints what `attn-tune table
    lookup` prints ("family config_key", then "(the kernel chooses its splits)" after a decode_v2
    without a partition and "(batch rule: PATH)" where a batch rule answered)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("table")
    for name in ("batch", "context-len"):
        ap.add_argument("--" + name, type=int)
    ap.add_argument("--seq-lens", help="the batch's context lengths, comma-separated (in place "
                                       "of --batch and --context-len)")
    for name in ("num-heads", "num-kv-heads", "head-dim", "block-size"):
        ap.add_argument("--" + name, type=int, required=True)
    ap.add_argument("--dtype", required=True)
    ap.add_argument("--kv-dtype", default="auto", help="the KV cache's dtype: auto (--dtype), "
                                                       "fp8_e4m3 (fp8) or fp8_e5m2")
    # The mask, with `attn-tune table lookup`'s names, defaults and ranges.
    ap.add_argument("--window-left", type=int, default=-1, help="sliding window (-1: none)")
    ap.add_argument("--window-right", type=int, default=-1,
                    help="keys after the query's position it may see (-1: none beyond the causal "
                         "mask)")
    ap.add_argument("--causal", type=_cli_bool, default=True, metavar="BOOLEAN",
                    help="whether the call is causal (true or false; a profile may sweep both); "
                         "default true")
    ap.add_argument("--softcap", type=float, default=0.0, help="logit softcap (0: off)")
    ap.add_argument("--device-name", help="the device's entry of a fleet table (any alias)")
    ap.add_argument("--nearest", action="store_true",
                    help="no entry for the device: the nearest by SM count and bandwidth")
    ap.add_argument("--sm-count", type=int,
                    help="with --nearest: the device's SM count, when this reader does not know "
                         "the model")
    ap.add_argument("--bandwidth-gbps", type=float,
                    help="with --nearest: the device's memory bandwidth in GB/s, likewise")
    a = ap.parse_args(argv)
    for name, value in (("--window-left", a.window_left), ("--window-right", a.window_right)):
        if not -1 <= value <= MAX_WINDOW:
            ap.error("%s: %d is not in [-1, %d]" % (name, value, MAX_WINDOW))
    if not 0 <= a.softcap <= MAX_SOFTCAP:  # NaN is not either
        ap.error("--softcap: %r is not in [0, %g]" % (a.softcap, MAX_SOFTCAP))
    if a.sm_count is not None and a.sm_count < 1:
        ap.error("--sm-count: expected an integer > 0, not %d" % a.sm_count)
    if a.bandwidth_gbps is not None and not (math.isfinite(a.bandwidth_gbps)
                                             and a.bandwidth_gbps > 0):
        ap.error("--bandwidth-gbps: expected a finite number > 0, not %r" % a.bandwidth_gbps)
    seq_lens = None
    if a.seq_lens is not None:
        try:
            seq_lens = [int(x) for x in a.seq_lens.replace(" ", "").split(",")]
        except ValueError:
            ap.error("--seq-lens: expected comma-separated context lengths, not %r" % a.seq_lens)
    elif a.batch is None or a.context_len is None:
        ap.error("give --batch and --context-len, or a batch's --seq-lens")
    try:
        t = ThresholdTable.load(a.table, device_name=a.device_name, nearest=a.nearest,
                                sm_count=a.sm_count, bandwidth_gbps=a.bandwidth_gbps)
        if t.selection is not None and t.selection.said:
            print(t.selection.said, file=sys.stderr)
        c = t.lookup(
            None if seq_lens else a.batch, None if seq_lens else a.context_len, a.num_heads,
            a.num_kv_heads, a.head_dim, a.block_size, a.dtype, causal=a.causal,
            window_left=a.window_left, window_right=a.window_right, softcap=a.softcap,
            seq_lens=seq_lens, kv_dtype=a.kv_dtype)
    except (TableError, ValueError, LookupError, OSError) as e:  # one line, as attn-tune says
        print("attn_tune_table: error: %s" % e, file=sys.stderr)
        return 2
    print(c.family, c.config_key, *(["(the kernel chooses its splits)"]
                                     if c.kernel_chooses_splits else []),
          *(["(batch rule: %s)" % (c.batch_path or "one leaf")] if c.batch_rule else []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
