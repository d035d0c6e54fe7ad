"""Writes a tiny decode replay file (SPEC.md "Replay files") with the standard library alone:
one sequence of 5 keys, 2 query heads over 1 KV head, head_dim 8, one 16-slot HND block, fp32,
causal, and no `out` (so replay judges only the kernels it is given against the reference).
Usage: tiny_replay.py FILE (tests/python/replay_raising.cmake)."""

import json
import math
import struct
import sys

HEADS, KV_HEADS, DIM, BLOCK, KEYS = 2, 1, 8, 16, 5


def values(count, phase):
    return [math.sin(0.37 * i + phase) for i in range(count)]


tensors = [  # name, safetensors dtype, struct code, shape, values
    ("block_tables", "I32", "i", [1, 1], [0]),
    ("context_lens", "I32", "i", [1], [KEYS]),
    ("key_cache", "F32", "f", [1, KV_HEADS, BLOCK, DIM], values(KV_HEADS * BLOCK * DIM, 0.5)),
    ("query", "F32", "f", [1, HEADS, DIM], values(HEADS * DIM, 1.0)),
    ("value_cache", "F32", "f", [1, KV_HEADS, BLOCK, DIM], values(KV_HEADS * BLOCK * DIM, 2.0)),
]
header = {"__metadata__": {"causal": "true", "kv_layout": "HND", "softcap": "0",
                           "window_left": "-1", "window_right": "-1"}}
data = b""
for name, dtype, code, shape, vals in tensors:
    raw = struct.pack("<%d%s" % (len(vals), code), *vals)
    header[name] = {"dtype": dtype, "shape": shape,
                    "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + data)
