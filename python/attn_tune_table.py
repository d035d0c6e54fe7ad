"""Reader of attn-tune threshold tables (docs/threshold-table.md) for engines written in Python.

Standard library only. It makes the same choice as `attn-tune table lookup` and the C++ reader
include/attn_tune/threshold_table_reader.hpp: nearest table point, then the point's crossover
context intervals (version 2; `v2_from` in version 1), then that family's best configuration at
the nearest measured context length. It reads table versions 1 and 2.

    table = ThresholdTable.load("results/nvidia-h200-llama-3-8b.json")
    choice = table.lookup(batch=8, context_len=6000, num_heads=32, num_kv_heads=8,
                          head_dim=128, block_size=16, dtype="bf16")
    choice.family        # "decode_v1" or "decode_v2"
    choice.config        # {"family": ..., "params": {"partition": 512, ...}, "key": ...}
"""

import json
import math
import sys
from dataclasses import dataclass, field

SCHEMA = "attn-tune/threshold-table"
# The version attn-tune writes and the oldest one still read (kTableSchemaVersion and
# kOldestTableSchemaVersion of the C++ reader).
VERSION = 2
OLDEST_VERSION = 1
# Must match kCategoryPenalty and kTieEpsilon of the C++ reader.
CATEGORY_PENALTY = 64.0
TIE_EPSILON = 1e-9


@dataclass
class Choice:
    family: str
    config: dict
    config_key: str
    exact_point: bool
    distance: float
    measured_context: int
    point: dict = field(repr=False)


class TableError(ValueError):
    """The file is not a threshold table this reader understands."""


def _lr(a, b):
    return abs(math.log2(a) - math.log2(b))


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
        self.table = table
        self.version = version

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f))

    @property
    def provenance(self):
        return self.table["provenance"]

    @property
    def kernels(self):
        """The kernels the table timed: {"source": "built-in", "name": "attn-tune"} or a plugin's
        {"source": "plugin", "name", "version", "library_sha256", ...}. Tables made before
        plugins existed timed the built-in kernels."""
        return self.table["provenance"].get("kernels", {"source": "built-in", "name": "attn-tune"})

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
        d = (_lr(p["batch"], batch) + _lr(p["num_kv_heads"], num_kv_heads)
             + _lr(p["gqa_ratio"], num_heads / num_kv_heads) + _lr(p["head_dim"], head_dim)
             + _lr(p["block_size"], block_size))
        if p["dtype"] != dtype:
            d += CATEGORY_PENALTY
        if (p["causal"] != causal or p["window_left"] != window_left
                or p["window_right"] != window_right or float(p["softcap"]) != float(softcap)):
            d += CATEGORY_PENALTY
        return d

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

    def lookup(self, batch, context_len, num_heads, num_kv_heads, head_dim, block_size, dtype,
               causal=True, window_left=-1, window_right=-1, softcap=0.0):
        if min(batch, context_len, num_heads, num_kv_heads, head_dim, block_size) < 1:
            raise ValueError("lookup needs positive batch, context_len, heads, head_dim and "
                             "block_size")
        best, best_d = None, 0.0
        for p in self.table["decode"]:
            d = self.distance(p, batch, num_heads, num_kv_heads, head_dim, block_size, dtype,
                              causal, window_left, window_right, softcap)
            if best is None or d < best_d - TIE_EPSILON:
                best, best_d = p, d
        if best is None:
            raise TableError("threshold table has no decode points")
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
                if pick is None or d < pick_d - TIE_EPSILON:
                    pick, pick_d = m, d
            if pick is not None:
                cfg = pick[slot]["config"]
                return Choice(family=family, config=cfg, config_key=cfg["key"],
                              exact_point=best_d == 0.0, distance=best_d,
                              measured_context=pick["context_len"], point=point)
            family = "decode_v1" if family == "decode_v2" else "decode_v2"
        raise TableError("threshold table point has no measured configuration")


def main(argv=None):
    """`python3 attn_tune_table.py TABLE --batch B --context-len C ...`: prints what
    `attn-tune table lookup` prints ("family config_key")."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("table")
    for name in ("batch", "context-len", "num-heads", "num-kv-heads", "head-dim", "block-size"):
        ap.add_argument("--" + name, type=int, required=True)
    ap.add_argument("--dtype", required=True)
    ap.add_argument("--window-left", type=int, default=-1)
    ap.add_argument("--softcap", type=float, default=0.0)
    a = ap.parse_args(argv)
    c = ThresholdTable.load(a.table).lookup(
        a.batch, a.context_len, a.num_heads, a.num_kv_heads, a.head_dim, a.block_size, a.dtype,
        window_left=a.window_left, softcap=a.softcap)
    print(c.family, c.config_key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
