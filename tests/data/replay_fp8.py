#!/usr/bin/env python3
"""fp8 replay files (SPEC.md "fp8 KV caches"), written with numpy alone.

Independent of attn-tune's C++: the two formats are decoded here from their definitions (sign,
exponent, mantissa; E4M3FN's S.1111.111 NaN, E5M2's IEEE specials), values are quantised as
SPEC.md says an engine's cache write does (x / scale, nearest value with ties to the even
mantissa, saturated to the largest finite value), and the file writer, the layouts and the
float64 attention are replay_layouts.py's. For decode and prefill, E4M3 and E5M2, HND, NHD and
vllm (x = 16), scales per tensor and per KV head, caches stored as F8_E4M3 / F8_E5M2 or as U8 with
`kv_cache_dtype` named, it writes a file whose `out` is right and expects `attn-tune replay` to
exit 0, with the reference, with `--backend cpu` and, where one is given for the file's layout,
through a plugin that reads that layout (plugin ABI 4 hands it the fp8 cache and its scales); an
`out` computed with the scales left out to exit 1; and a U8 cache without kv_cache_dtype, an F8
cache of the other format, a scale on a 16-bit cache and a scale of the wrong shape to exit 2 with
one line.

Usage: replay_fp8.py ATTN_TUNE OUTDIR [HND=PLUGIN] [NHD=PLUGIN] [vllm=PLUGIN]
       (exits 77, CTest's skip code here, without numpy)
"""
import math
import os
import sys

try:
    import numpy as np
except ImportError:
    print(f"replay_fp8: skipped, numpy is not installed for {sys.executable}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay_layouts as rl  # noqa: E402

FORMATS = {  # name: (exponent bits, mantissa bits, bias, safetensors dtype)
    "fp8_e4m3": (4, 3, 7, "F8_E4M3"),
    "fp8_e5m2": (5, 2, 15, "F8_E5M2"),
}


def values(fmt):
    """The value of each of the 256 bit patterns (NaN where the format has none)."""
    e_bits, m_bits, bias, _ = FORMATS[fmt]
    out = np.empty(256)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        e = (b >> m_bits) & ((1 << e_bits) - 1)
        m = b & ((1 << m_bits) - 1)
        if fmt == "fp8_e4m3" and e == 15 and m == 7:
            out[b] = math.nan
        elif fmt == "fp8_e5m2" and e == 31:
            out[b] = sign * math.inf if m == 0 else math.nan
        elif e == 0:
            out[b] = sign * m * 2.0 ** (1 - bias - m_bits)
        else:
            out[b] = sign * (1 + m / (1 << m_bits)) * 2.0 ** (e - bias)
    return out


def quantise(x, fmt):
    """The bit patterns nearest to x (ties to the even pattern), saturated to +-max."""
    table = values(fmt)
    finite = [b for b in range(128) if np.isfinite(table[b])]  # non-negative, ascending
    mags = table[finite]
    a = np.minimum(np.abs(x), mags[-1])  # saturate
    idx = np.searchsorted(mags, a)  # mags[idx-1] < a <= mags[idx]
    idx = np.clip(idx, 1, len(mags) - 1)
    lo, hi = mags[idx - 1], mags[idx]
    pick_hi = (a - lo > hi - a) | ((a - lo == hi - a) & (np.array(finite)[idx] % 2 == 0))
    bits = np.where(pick_hi, np.array(finite)[idx], np.array(finite)[idx - 1])
    bits = np.where(a == 0, 0, bits)
    return (bits | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


CASES = [  # phase, query dtype, heads, kv heads, head_dim, block_size, q_lens, k_lens, metadata
    ("decode", "fp16", 8, 2, 64, 16, None, [1, 15, 16, 17, 0, 130], {"softcap": "20.0"}),
    ("prefill", "bf16", 4, 2, 32, 8, [5, 17, 1], [40, 17, 33], {"window_left": "12"}),
]
SCALES = [([1 / 200], [0.37]), ([24.0, 0.5], [4.0])]  # (k_scale, v_scale): per tensor, per head


def build(case, layout, fmt, scales, seed, stored_as):
    phase, dtype, h, kvh, d, bs, q_lens, k_lens, meta = case
    rng = np.random.default_rng(seed)
    q_lens = q_lens if phase == "prefill" else [1] * len(k_lens)
    need = [(k + bs - 1) // bs for k in k_lens]
    pool = 3 * max(1, sum(need))
    perm = list(rng.permutation(pool))
    tables = np.full((len(k_lens), max(need) + 1), -1, dtype=np.int32)
    for b, n in enumerate(need):
        for c in range(n):
            tables[b, c] = perm.pop()
    q = rl.round_to(rng.standard_normal((sum(q_lens), h, d)), dtype)
    k_scale, v_scale = (np.array(s, dtype=np.float32) for s in scales)
    per_head = lambda s: np.broadcast_to(s.astype(np.float64), (kvh,))[None, :, None, None]  # noqa
    k_bits = quantise(rng.standard_normal((pool, kvh, bs, d)) / per_head(k_scale), fmt)
    v_bits = quantise(rng.standard_normal((pool, kvh, bs, d)) / per_head(v_scale), fmt)
    table = values(fmt)
    k_val = table[k_bits] * per_head(k_scale)  # what the cache stands for, exact in float64
    v_val = table[v_bits] * per_head(v_scale)
    # Both caches in the layout (x = 16 one-byte elements in vllm's key cache).
    k_store, v_store = arrange(k_bits, v_bits, layout)
    k_ref, v_ref = arrange(k_val, v_val, layout)
    opts = rl.options(meta, d)
    out = rl.round_to(rl.attention(q, k_ref, v_ref, layout, bs, kvh, tables, q_lens, k_lens,
                                   **opts), dtype)
    unscaled = rl.round_to(rl.attention(q, *arrange(table[k_bits], table[v_bits], layout),
                                        layout, bs, kvh, tables, q_lens, k_lens, **opts), dtype)
    st = FORMATS[fmt][3] if stored_as == "F8" else "U8"
    tensors = {
        "query": (rl.ST_DTYPE[dtype], q.shape, rl.storage_bytes(q, dtype)),
        "key_cache": (st, k_store.shape, np.ascontiguousarray(k_store).tobytes()),
        "value_cache": (st, v_store.shape, np.ascontiguousarray(v_store).tobytes()),
        "block_tables": ("I32", tables.shape, tables.astype("<i4").tobytes()),
        "k_scale": ("F32", [] if k_scale.size == 1 else [kvh], k_scale.astype("<f4").tobytes()),
        "v_scale": ("F32", [] if v_scale.size == 1 else [kvh], v_scale.astype("<f4").tobytes()),
    }
    if phase == "decode":
        tensors["context_lens"] = ("I32", (len(k_lens),), np.array(k_lens, "<i4").tobytes())
    else:
        for name, lens in (("cu_seqlens_q", q_lens), ("cu_seqlens_k", k_lens)):
            cu = np.concatenate([[0], np.cumsum(lens)]).astype("<i4")
            tensors[name] = ("I32", cu.shape, cu.tobytes())
    meta = dict(meta, kv_layout=layout)
    if stored_as == "U8" or seed % 2 == 0:  # F8 files name the format half the time
        meta["kv_cache_dtype"] = fmt
    return tensors, out, unscaled, meta


def arrange(k_hnd, v_hnd, layout):
    """replay_layouts.arrange with vllm's x for one-byte elements (16)."""
    if layout != "vllm":
        return rl.arrange(k_hnd, v_hnd, layout, "fp32")
    n, kvh, bs, d = k_hnd.shape
    return (k_hnd.reshape(n, kvh, bs, d // 16, 16).transpose(0, 1, 3, 2, 4),
            v_hnd.transpose(0, 1, 3, 2))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    exe, outdir = sys.argv[1], sys.argv[2]
    plugins = dict(arg.split("=", 1) for arg in sys.argv[3:])
    os.makedirs(outdir, exist_ok=True)
    # The decoding and the quantising agree with the formats' landmarks.
    assert values("fp8_e4m3")[0x7E] == 448 and math.isnan(values("fp8_e4m3")[0x7F])
    assert values("fp8_e5m2")[0x7B] == 57344 and values("fp8_e5m2")[0x7C] == math.inf
    assert list(quantise(np.array([1.0625, 500.0, -0.3, 1e-9]), "fp8_e4m3")) == [0x38, 0x7E,
                                                                                 0xAA, 0x00]
    failures = []

    def expect(path, code, needle, *extra):
        got, text = rl.run(exe, path, *extra)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if got != code or (needle and needle not in text) or (code == 2 and len(lines) != 1):
            failures.append(f"{os.path.basename(path)} {' '.join(extra)}: exit {got}, "
                            f"expected {code} ({needle!r})\n{text}")

    seed = 0
    for case in CASES:
        for fmt in FORMATS:
            for layout in rl.LAYOUTS:
                for scales in SCALES:
                    seed += 1
                    stored_as = "U8" if seed % 3 == 0 else "F8"
                    tensors, out, unscaled, meta = build(case, layout, fmt, scales, seed,
                                                         stored_as)
                    name = f"{case[0]}_{fmt}_{layout}_{seed}"
                    dtype = case[1]
                    good = dict(tensors, out=(rl.ST_DTYPE[dtype], out.shape,
                                              rl.storage_bytes(out, dtype)))
                    path = os.path.join(outdir, name + ".safetensors")
                    rl.write_safetensors(path, good, meta)
                    # The scales the answer is judged with are named (%g: 6 digits, as the C side).
                    words = [(("%s per KV head " % n) if len(v) > 1 else n + " ") +
                             ", ".join("%g" % x for x in v)
                             for n, v in (("k_scale", scales[0]), ("v_scale", scales[1]))]
                    expect(path, 0, "fp8 scales: " + ", ".join(words))
                    expect(path, 0, "", "--backend", "cpu")
                    if layout in plugins:  # every configuration of a plugin of that layout
                        expect(path, 0, "(plugin ", "--kernels", plugins[layout])
                    wrong = dict(tensors, out=(rl.ST_DTYPE[dtype], unscaled.shape,
                                               rl.storage_bytes(unscaled, dtype)))
                    path = os.path.join(outdir, name + "_unscaled.safetensors")
                    rl.write_safetensors(path, wrong, meta)
                    expect(path, 1, "")
    # A dump that lost its scales: judged with 1 (SPEC.md), which the first lines say.
    tensors, out, _, meta = build(CASES[0], "HND", "fp8_e4m3", SCALES[0], 2, "F8")
    lost = {k: v for k, v in tensors.items() if k not in ("k_scale", "v_scale")}
    lost["out"] = (rl.ST_DTYPE[CASES[0][1]], out.shape, rl.storage_bytes(out, CASES[0][1]))
    path = os.path.join(outdir, "scales_lost.safetensors")
    rl.write_safetensors(path, lost, meta)
    expect(path, 1, "fp8 scales: no k_scale (1, as SPEC.md reads one absent), no v_scale")
    # Files that are not what they say.
    tensors, out, _, meta = build(CASES[0], "HND", "fp8_e4m3", SCALES[0], 2, "U8")
    meta.pop("kv_cache_dtype")
    path = os.path.join(outdir, "u8_unnamed.safetensors")
    rl.write_safetensors(path, tensors, meta)
    expect(path, 2, "an fp8 cache names its format in __metadata__ kv_cache_dtype")
    tensors, out, _, meta = build(CASES[0], "HND", "fp8_e4m3", SCALES[0], 2, "F8")
    path = os.path.join(outdir, "other_format.safetensors")
    rl.write_safetensors(path, tensors, dict(meta, kv_cache_dtype="fp8_e5m2"))
    expect(path, 2, "key_cache is F8_E4M3 but kv_cache_dtype is fp8_e5m2")
    bad_shape = dict(tensors, k_scale=("F32", [3], np.ones(3, "<f4").tobytes()))
    path = os.path.join(outdir, "scale_shape.safetensors")
    rl.write_safetensors(path, bad_shape, meta)
    expect(path, 2, "k_scale has shape [3], expected [] (per tensor) or [2] (per KV head)")
    plain, _, _ = rl.build(rl.CASES[0], "HND", 5)
    plain["k_scale"] = ("F32", [], np.ones(1, "<f4").tobytes())
    path = os.path.join(outdir, "scale_without_fp8.safetensors")
    rl.write_safetensors(path, plain, {"kv_layout": "HND"})
    expect(path, 2, "k_scale is given but the cache is not fp8")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    through = f" and the plugins of {', '.join(sorted(plugins))}" if plugins else ""
    print(f"replay_fp8: {seed} cases in E4M3 and E5M2 over HND, NHD and vllm passed with the "
          f"reference, --backend cpu{through}; unscaled answers caught; malformed files refused")


if __name__ == "__main__":
    main()
