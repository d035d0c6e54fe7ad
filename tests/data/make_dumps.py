#!/usr/bin/env python3
"""Writes replay files the way an inference engine would, independently of attn-tune's C++.

The tensors are written by the `safetensors` package (numpy API); the expected `out` comes from
the float64 numpy implementation below, written from SPEC.md "The function". Three kinds of file:
  good/  correct answers: `attn-tune replay` must exit 0
  wrong/ one answer element (or lse value) far outside tolerance: must exit 1
  bad/   malformed files and impossible shapes: must exit 2
Usage: make_dumps.py OUTDIR [--expect NAME ...]   (--expect: fail unless exactly these are written)
       make_dumps.py --compare-saved SAVED DUMP
         reads `attn-tune replay DUMP --save SAVED` with the safetensors package and checks its
         out (and lse, when DUMP has one) against DUMP's answer to within one unit in the last place
         and that its metadata names the reference as the one that computed it, and DUMP
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
from safetensors.numpy import save_file

# --------------------------------------------------------------------------------------------
# Rounding to the storage dtypes. numpy rounds float64 -> float32/float16 to nearest even in one
# step; it has no bfloat16, so bf16 rounding is done on the significand with frexp (8 bits).


def round_bf16(x):
    x = np.asarray(x, dtype=np.float64)
    m, e = np.frexp(x)  # x = m * 2**e, 0.5 <= |m| < 1: 8 significant bits are m * 2**8
    return np.ldexp(np.round(m * 256.0) / 256.0, e)  # np.round: halves go to even


def bf16_bits(x):
    """float64 values that are exact bf16 numbers -> their uint16 bit patterns."""
    f32 = np.asarray(x, dtype=np.float64).astype(np.float32)
    return (f32.view(np.uint32) >> 16).astype(np.uint16)


def round_to(x, dtype):
    """Round float64 values to `dtype` ('fp32', 'fp16', 'bf16'); returns float64 again."""
    if dtype == "fp32":
        return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)
    if dtype == "fp16":
        return np.asarray(x, np.float64).astype(np.float16).astype(np.float64)
    return round_bf16(x)


# --------------------------------------------------------------------------------------------
# SPEC.md "The function", in float64.


def attention(q, k_cache, v_cache, block_tables, q_lens, k_lens, causal, scale, window_left,
              window_right, softcap):
    rows, num_heads, head_dim = q.shape
    num_kv_heads, block_size = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    kv_head_of = np.arange(num_heads) // group  # query head h reads kv head h // group
    out = np.zeros((rows, num_heads, head_dim))
    lse = np.full((rows, num_heads), -np.inf)
    q_start = 0
    for b, (q_len, k_len) in enumerate(zip(q_lens, k_lens)):
        j = np.arange(k_len)
        phys = block_tables[b, j // block_size]  # logical key j -> (physical block, slot)
        keys = k_cache[phys, :, j % block_size, :]  # [k_len, num_kv_heads, head_dim]
        vals = v_cache[phys, :, j % block_size, :]
        for i in range(q_len):
            pos = k_len - q_len + i  # bottom-right aligned
            visible = np.ones(k_len, dtype=bool)
            if causal:
                visible &= j <= pos
            if window_left >= 0:
                visible &= j >= pos - window_left
            if window_right >= 0:
                visible &= j <= pos + window_right
            if not visible.any():
                continue  # out stays 0, lse -inf
            kh = keys[visible][:, kv_head_of, :]  # [n, num_heads, head_dim]
            vh = vals[visible][:, kv_head_of, :]
            s = scale * np.einsum("hd,nhd->hn", q[q_start + i], kh)
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            m = s.max(axis=1, keepdims=True)
            p = np.exp(s - m)
            l = p.sum(axis=1, keepdims=True)
            out[q_start + i] = np.einsum("hn,nhd->hd", p, vh) / l
            lse[q_start + i] = (m + np.log(l))[:, 0]
        q_start += q_len
    return out, lse


# --------------------------------------------------------------------------------------------
# Problems: block tables drawn from a shuffled pool three times larger than needed, unused
# entries -1, optionally a prefix of physical blocks shared by every sequence.


def make_problem(rng, dtype, num_heads, num_kv_heads, head_dim, block_size, q_lens, k_lens,
                 shared_blocks=0):
    batch = len(k_lens)
    need = [(k + block_size - 1) // block_size for k in k_lens]
    assert all(n >= shared_blocks for n in need)
    total = shared_blocks + sum(n - shared_blocks for n in need)
    pool = max(1, 3 * total)
    perm = list(rng.permutation(pool))
    cols = max(need) + 1
    tables = np.full((batch, cols), -1, dtype=np.int32)
    prefix = [perm.pop() for _ in range(shared_blocks)]
    for b in range(batch):
        for c in range(need[b]):
            tables[b, c] = prefix[c] if c < shared_blocks else perm.pop()
    rows = sum(q_lens)
    q = round_to(rng.standard_normal((rows, num_heads, head_dim)), dtype)
    kc = round_to(rng.standard_normal((pool, num_kv_heads, block_size, head_dim)), dtype)
    vc = round_to(rng.standard_normal((pool, num_kv_heads, block_size, head_dim)), dtype)
    return q, kc, vc, tables


def storage(x, dtype):
    if dtype == "fp32":
        return np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "fp16":
        return np.ascontiguousarray(x, dtype=np.float16)
    return np.ascontiguousarray(bf16_bits(x))  # uint16 bits; written as BF16 by write_raw


def write_raw(path, tensors, metadata=None, header_override=None, data_override=None):
    """The script's own safetensors writer, for BF16 (numpy has no such dtype) and for the
    deliberately malformed files. tensors: name -> (dtype string, shape, bytes)."""
    header = {}
    offset = 0
    chunks = []
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        chunks.append(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = header_override if header_override is not None else json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    data = data_override if data_override is not None else b"".join(chunks)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    os.replace(path + ".tmp", path)


def save(path, tensors, dtype, metadata):
    """tensors: name -> numpy array (float tensors already in storage form)."""
    if dtype != "bf16":
        save_file(tensors, path, metadata=metadata)
        return
    raw = {}
    for name in sorted(tensors):
        a = tensors[name]
        dt = {np.dtype(np.uint16): "BF16", np.dtype(np.int32): "I32", np.dtype(np.float32): "F32"}[a.dtype]
        raw[name] = (dt, a.shape, a.tobytes())
    write_raw(path, raw, metadata)


# name -> the problem and its SPEC.md options. Lengths hit the edges: 0, 1, bs-1, bs, bs+1,
# the 512 partition boundary +-1, chunked prefill (q < k) and rows that see no key (q > k).
CASES = {
    "decode_defaults_fp32": dict(
        phase="decode", dtype="fp32", h=4, kvh=4, d=64, bs=16, k=[1, 15, 16, 17, 0, 100], meta=None),
    "decode_gqa_scale_softcap_fp16": dict(
        phase="decode", dtype="fp16", h=8, kvh=2, d=128, bs=16, k=[33, 511, 512, 513, 7],
        meta={"causal": "True", "scale": "0.3", "softcap": "5.0"}),
    "decode_mqa_window_left_bf16": dict(
        phase="decode", dtype="bf16", h=4, kvh=1, d=64, bs=8, k=[1, 7, 8, 9, 64, 200],
        meta={"window_left": "31"}),
    "decode_noncausal_windows_fp16": dict(
        phase="decode", dtype="fp16", h=4, kvh=2, d=32, bs=16, k=[3, 40, 16],
        meta={"causal": "false", "window_left": "10", "window_right": "3"}),
    "decode_shared_prefix_fp32": dict(
        phase="decode", dtype="fp32", h=2, kvh=1, d=64, bs=16, k=[40, 48, 70], shared=2,
        meta={"format": "pt", "engine": "test-engine 0.1", "causal": "1"}),
    "prefill_causal_gqa_fp32": dict(
        phase="prefill", dtype="fp32", h=4, kvh=2, d=64, bs=16, q=[1, 17, 33], k=[1, 17, 33],
        meta={"engine_step": "12", "scale": "None", "softcap": "None"}),
    "prefill_chunked_sliding_fp16": dict(
        phase="prefill", dtype="fp16", h=4, kvh=4, d=64, bs=16, q=[5, 16, 1], k=[40, 49, 100],
        meta={"causal": "true", "window_left": "20", "window_right": "-1"}),
    "prefill_q_longer_than_k_bf16": dict(
        phase="prefill", dtype="bf16", h=2, kvh=1, d=64, bs=8, q=[10, 4, 3], k=[6, 0, 3],
        meta={"causal": "true"}),
    "prefill_noncausal_windows_fp32": dict(
        phase="prefill", dtype="fp32", h=2, kvh=2, d=32, bs=16, q=[20, 8], k=[20, 30],
        meta={"causal": "0", "window_left": "5", "window_right": "3"}),
    "prefill_window_right_only_bf16": dict(
        phase="prefill", dtype="bf16", h=2, kvh=1, d=64, bs=16, q=[12, 6], k=[12, 25],
        meta={"causal": "False", "window_right": "4"}),
    "prefill_softcap_scale_fp16": dict(
        phase="prefill", dtype="fp16", h=6, kvh=3, d=32, bs=16, q=[16, 9], k=[16, 30],
        meta={"softcap": "8", "scale": "0.35", "causal": "true"}),
    "prefill_causal_window_both_fp16": dict(
        phase="prefill", dtype="fp16", h=2, kvh=1, d=64, bs=16, q=[30, 7], k=[30, 40],
        meta={"window_left": "6", "window_right": "2"}),
    "prefill_shared_prefix_bf16": dict(
        phase="prefill", dtype="bf16", h=4, kvh=2, d=64, bs=8, q=[4, 4, 4], k=[36, 40, 33],
        shared=2, meta=None, with_lse=True),
    "prefill_noncausal_q_longer_than_k_fp32": dict(
        phase="prefill", dtype="fp32", h=2, kvh=1, d=32, bs=16, q=[9, 5], k=[4, 0],
        meta={"causal": "false"}, with_lse=True),
    # Values in fp16's subnormals (outputs about 1e-6, a few bits each): the correctly rounded
    # answer is further from the exact one, normwise, than fp16's 2e-3, and must still match.
    "decode_subnormal_values_fp16": dict(
        phase="decode", dtype="fp16", h=4, kvh=2, d=64, bs=16, k=[5, 40, 17], meta=None,
        v_mult=1e-6),
}


def options(meta, head_dim):
    # SPEC.md defaults for missing keys; str(None) of an unset optional argument means the same.
    meta = {k: v for k, v in (meta or {}).items() if v != "None"}
    causal = meta.get("causal", "true").lower() in ("true", "1")
    scale = float(meta["scale"]) if "scale" in meta else 1.0 / math.sqrt(head_dim)
    return dict(causal=causal, scale=scale, window_left=int(meta.get("window_left", "-1")),
                window_right=int(meta.get("window_right", "-1")),
                softcap=float(meta.get("softcap", "0")))


def build(name, seed, dtype=None):
    c = dict(CASES[name], dtype=dtype or CASES[name]["dtype"])
    rng = np.random.default_rng(seed)
    k_lens = c["k"]
    q_lens = c["q"] if c["phase"] == "prefill" else [1] * len(k_lens)
    q, kc, vc, tables = make_problem(rng, c["dtype"], c["h"], c["kvh"], c["d"], c["bs"], q_lens,
                                     k_lens, c.get("shared", 0))
    if "v_mult" in c:
        vc = round_to(vc * c["v_mult"], c["dtype"])
    out, lse = attention(q, kc, vc, tables, q_lens, k_lens, **options(c["meta"], c["d"]))
    dt = c["dtype"]
    tensors = {"query": storage(q, dt), "key_cache": storage(kc, dt), "value_cache": storage(vc, dt),
               "block_tables": tables}
    if c["phase"] == "decode":
        tensors["context_lens"] = np.array(k_lens, dtype=np.int32)
    else:
        tensors["cu_seqlens_q"] = np.array([0] + list(np.cumsum(q_lens)), dtype=np.int32)
        tensors["cu_seqlens_k"] = np.array([0] + list(np.cumsum(k_lens)), dtype=np.int32)
    return c, tensors, round_to(out, dt), lse


def write_good(outdir, written):
    for seed, name in enumerate(CASES, start=100):
        c, tensors, out, lse = build(name, seed)
        tensors["out"] = storage(out, c["dtype"])
        if c.get("with_lse"):
            tensors["lse"] = lse.astype(np.float32)
        save(os.path.join(outdir, name + ".safetensors"), tensors, c["dtype"], c["meta"])
        written.append(name)
    # A dump without the engine's answer: replay just computes.
    c, tensors, out, lse = build("prefill_q_longer_than_k_bf16", 99, "fp16")
    save(os.path.join(outdir, "noout_prefill_q_longer_than_k_fp16.safetensors"), tensors, "fp16",
         c["meta"])
    written.append("noout_prefill_q_longer_than_k_fp16")


def write_wrong(outdir, written):
    # (name, base case, dtype of the copy, (tensor, index, delta)): one value far off.
    wrong = [
        ("wrong_decode_out_fp16", "decode_gqa_scale_softcap_fp16", "fp16", ("out", (2, 5, 17), 1.0)),
        ("wrong_decode_out_fp32", "decode_defaults_fp32", "fp32", ("out", (5, 3, 63), 0.01)),
        ("wrong_prefill_out_bf16", "prefill_chunked_sliding_fp16", "bf16", ("out", (3, 1, 0), -0.75)),
        # A row that sees no key must be exactly 0.
        ("wrong_prefill_empty_row_bf16", "prefill_q_longer_than_k_bf16", "bf16",
         ("out", (0, 0, 3), 0.5)),
        ("wrong_prefill_lse_fp32", "prefill_noncausal_windows_fp32", "fp32", ("lse", (4, 1), 0.05)),
    ]
    for seed, (name, base, dt, (tensor, index, delta)) in enumerate(wrong, start=200):
        c, tensors, out, lse = build(base, seed, dt)
        if tensor == "out":
            out = out.copy()
            out[index] = round_to(out[index] + delta, dt)
        else:
            lse = lse.copy()
            lse[index] += delta
        tensors["out"] = storage(out, dt)
        if tensor == "lse" or c.get("with_lse"):
            tensors["lse"] = lse.astype(np.float32)
        save(os.path.join(outdir, name + ".safetensors"), tensors, dt, c["meta"])
        written.append(name)


def write_bad(outdir, written):
    """Malformed files and impossible shapes; each must be refused with one line (exit 2)."""
    rng = np.random.default_rng(7)
    good_path = os.path.join(outdir, "decode_defaults_fp32.safetensors")
    with open(good_path, "rb") as f:
        image = f.read()
    (hlen,) = struct.unpack("<Q", image[:8])

    def put(name, data):
        with open(os.path.join(outdir, name + ".safetensors"), "wb") as f:
            f.write(data)
        written.append(name)

    put("bad_too_short", image[:5])
    put("bad_truncated_header", image[: 8 + hlen // 2])
    put("bad_truncated_data", image[: 8 + hlen + (len(image) - 8 - hlen) // 2])
    put("bad_header_length_lies", struct.pack("<Q", len(image) * 4) + image[8:])
    put("bad_header_json", struct.pack("<Q", 16) + b'{"query": [1, 2' + b" " + b"\0" * 64)

    # A small, valid decode problem as raw tensors, then one lie at a time.
    q = rng.standard_normal((1, 2, 8)).astype(np.float32)
    kc = rng.standard_normal((2, 1, 4, 8)).astype(np.float32)
    base = {
        "block_tables": ("I32", (1, 2), np.array([[1, 0]], np.int32).tobytes()),
        "context_lens": ("I32", (1,), np.array([6], np.int32).tobytes()),
        "key_cache": ("F32", kc.shape, kc.tobytes()),
        "query": ("F32", q.shape, q.tobytes()),
        "value_cache": ("F32", kc.shape, kc.tobytes()),
    }

    def header_of(tensors, edit=None, metadata=None):
        h, off = {}, 0
        for n, (dt, shape, raw) in tensors.items():
            h[n] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
            off += len(raw)
        if metadata:
            h["__metadata__"] = metadata
        if edit:
            edit(h)
        return json.dumps(h).encode()

    def variant(name, edit=None, metadata=None, tensors=None):
        t = tensors if tensors is not None else base
        write_raw(os.path.join(outdir, name + ".safetensors"), t,
                  header_override=header_of(t, edit, metadata))
        written.append(name)

    variant("bad_offsets_out_of_range",
            lambda h: h["value_cache"].update(data_offsets=[h["value_cache"]["data_offsets"][0],
                                                            h["value_cache"]["data_offsets"][1] + 4096]))
    variant("bad_offsets_overlap",
            lambda h: h["key_cache"].update(data_offsets=[h["key_cache"]["data_offsets"][0] - 8,
                                                          h["key_cache"]["data_offsets"][1] - 8]))
    variant("bad_size_mismatch", lambda h: h["query"].update(shape=[1, 2, 16]))
    variant("bad_negative_shape", lambda h: h["query"].update(shape=[1, -2, 8]))
    variant("bad_unsupported_dtype", lambda h: h["key_cache"].update(dtype="F64", shape=[1, 1, 4, 8]))
    variant("bad_meta_causal", metadata={"causal": "maybe"})
    variant("bad_meta_scale", metadata={"scale": "abc"})
    variant("bad_meta_window", metadata={"window_left": "1.5"})
    variant("bad_meta_not_string", lambda h: h.update(__metadata__={"softcap": 30}))
    variant("bad_missing_query", tensors={k: v for k, v in base.items() if k != "query"})
    variant("bad_block_out_of_range", tensors=dict(
        base, block_tables=("I32", (1, 2), np.array([[1, 5]], np.int32).tobytes())))
    variant("bad_block_table_short", tensors=dict(
        base, context_lens=("I32", (1,), np.array([9], np.int32).tobytes())))
    variant("bad_negative_context", tensors=dict(
        base, context_lens=("I32", (1,), np.array([-3], np.int32).tobytes())))
    q3 = rng.standard_normal((1, 3, 8)).astype(np.float32)
    kc2 = rng.standard_normal((2, 2, 4, 8)).astype(np.float32)
    variant("bad_gqa_heads", tensors=dict(base, query=("F32", q3.shape, q3.tobytes()),
                                          key_cache=("F32", kc2.shape, kc2.tobytes()),
                                          value_cache=("F32", kc2.shape, kc2.tobytes())))
    kc16 = rng.standard_normal((2, 1, 4, 16)).astype(np.float32)
    variant("bad_head_dim_mismatch", tensors=dict(base, key_cache=("F32", kc16.shape, kc16.tobytes()),
                                                  value_cache=("F32", kc16.shape, kc16.tobytes())))
    q16 = q.astype(np.float16)
    variant("bad_dtype_mixed", tensors=dict(base, query=("F16", q16.shape, q16.tobytes())))
    variant("bad_out_dtype", tensors=dict(base, out=("F16", q16.shape, q16.tobytes())))
    # A NaN or an infinity the call reads: the function is not defined there (exit 2); the
    # same in a slot nobody reads is an engine's cache as it is (judged).
    q_nan = q.copy()
    q_nan[0, 1, 3] = np.nan
    variant("bad_nan_query", tensors=dict(base, query=("F32", q_nan.shape, q_nan.tobytes())))
    k_inf = kc.copy()
    k_inf[0, 0, 1, 2] = np.inf  # block 0 holds keys 4 and 5 (block_tables [[1, 0]]): key 5
    variant("bad_inf_visible_key",
            tensors=dict(base, key_cache=("F32", k_inf.shape, k_inf.tobytes())))
    k_tail = kc.copy()
    k_tail[0, 0, 2:, :] = np.nan  # keys 6 and 7 of a 6-key sequence: never read
    # The answer under another name: judged as no answer, with a warning naming the tensor.
    variant("noout_misnamed_answer", tensors=dict(base, output=("F32", q.shape, q.tobytes())))
    tail = ("F32", k_tail.shape, k_tail.tobytes())
    variant("noout_nan_unread", tensors=dict(base, key_cache=tail, value_cache=tail))
    variant("bad_meta_softcap_range", metadata={"softcap": "1e40"})
    # An fp8 cache whose values times v_scale average past fp16's 65504: no fp16 answer exists.
    ones = np.full(kc.shape, 0x38, np.uint8)  # E4M3 1.0
    big = np.full(kc.shape, 0x7E, np.uint8)  # E4M3 448
    variant("bad_output_past_range", metadata={"kv_cache_dtype": "fp8_e4m3"}, tensors=dict(
        base, query=("F16", q16.shape, q16.tobytes()), key_cache=("U8", kc.shape, ones.tobytes()),
        value_cache=("U8", kc.shape, big.tobytes()),
        v_scale=("F32", (), np.array(1000.0, np.float32).tobytes())))
    # Keys of 448 * 1e38: every score, and so the lse (fp32 at every dtype), is past fp32's range.
    variant("bad_lse_past_range", metadata={"kv_cache_dtype": "fp8_e4m3"}, tensors=dict(
        base, key_cache=("U8", kc.shape, big.tobytes()), value_cache=("U8", kc.shape, ones.tobytes()),
        k_scale=("F32", (), np.array(1e38, np.float32).tobytes())))
    # A scale written as metadata, not as its tensor: judged with 1, and a warning says so.
    variant("noout_scale_in_metadata", metadata={"kv_cache_dtype": "fp8_e4m3", "k_scale": "0.5"},
            tensors=dict(base, key_cache=("U8", kc.shape, ones.tobytes()),
                         value_cache=("U8", kc.shape, ones.tobytes())))
    # An lse without out: not judged, and said so.
    lse1 = np.zeros((1, 2), np.float32)
    variant("noout_lse_alone", tensors=dict(base, lse=("F32", lse1.shape, lse1.tobytes())))
    variant("bad_cu_seqlens_decreasing", tensors={
        **{k: v for k, v in base.items() if k != "context_lens"},
        "cu_seqlens_q": ("I32", (2,), np.array([0, 1], np.int32).tobytes()),
        "cu_seqlens_k": ("I32", (2,), np.array([0, -2], np.int32).tobytes())})


def within_one_ulp(got, want):
    """Same dtype, shape, infinities; finite values at most one unit in the last place apart."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    inf = np.isinf(want)
    if not np.array_equal(np.isinf(got), inf) or not np.array_equal(got[inf], want[inf]):
        return "infinities differ"
    g = got[~inf].astype(np.float64)
    w = want[~inf].astype(np.float64)
    ulp = np.spacing(np.abs(want[~inf])).astype(np.float64)
    worst = np.max(np.abs(g - w) / ulp, initial=0.0)
    return None if worst <= 1.0 else f"differs by {worst:.1f} ulp"


def compare_saved(saved_path, dump_path):
    from safetensors.numpy import load_file
    saved = load_file(saved_path)
    dump = load_file(dump_path)
    if sorted(saved) != ["lse", "out"]:
        sys.exit(f"make_dumps: {saved_path} holds {sorted(saved)}, expected lse and out")
    if saved["lse"].dtype != np.float32 or saved["lse"].shape != saved["out"].shape[:2]:
        sys.exit(f"make_dumps: {saved_path} lse is {saved['lse'].dtype}{saved['lse'].shape}")
    for name in ("out", "lse"):
        if name in dump:
            why = within_one_ulp(saved[name], dump[name])
            if why:
                sys.exit(f"make_dumps: {saved_path} {name} disagrees with {dump_path}: {why}")
    # The file says whose answer it holds (README, replay --save): here the reference's.
    from safetensors import safe_open
    with safe_open(saved_path, framework="numpy") as f:
        meta = f.metadata() or {}
    if (not meta.get("attn_tune_computed_by", "").startswith("reference")
            or os.path.basename(meta.get("attn_tune_replay_of", "")) != os.path.basename(dump_path)
            or not meta.get("attn_tune_version")):
        sys.exit(f"make_dumps: {saved_path} metadata does not say whose answer it is: {meta}")
    print(f"make_dumps: {saved_path} agrees with {dump_path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--expect", nargs="*", help="the exact set of file names (without suffix)")
    ap.add_argument("--compare-saved", nargs=2, metavar=("SAVED", "DUMP"))
    args = ap.parse_args()
    if args.compare_saved:
        compare_saved(*args.compare_saved)
        return
    if not args.outdir:
        ap.error("OUTDIR is required")
    os.makedirs(args.outdir, exist_ok=True)
    written = []
    write_good(args.outdir, written)
    write_wrong(args.outdir, written)
    write_bad(args.outdir, written)
    if args.expect is not None and sorted(args.expect) != sorted(written):
        missing = sorted(set(written) - set(args.expect))
        extra = sorted(set(args.expect) - set(written))
        sys.exit(f"make_dumps: the test list and the script disagree: not in the list {missing}, "
                 f"not written {extra}")
    print(f"make_dumps: wrote {len(written)} files to {args.outdir}")


if __name__ == "__main__":
    main()
