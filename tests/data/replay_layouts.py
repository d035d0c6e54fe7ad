#!/usr/bin/env python3
"""Replay files in every KV-cache layout (SPEC.md "KV-cache layouts"), written with numpy alone.

Independent of attn-tune's C++ and of the safetensors package: this script has its own
safetensors writer, its own float64 attention written from SPEC.md "The function" (reading keys
and values through the layout the file declares), and its own rearrangement of an HND cache into
NHD and vllm. For decode and prefill in HND, NHD and vllm (fp32, fp16, bf16) it writes a file
with the correct `out` and expects `attn-tune replay FILE` to exit 0 (and `--backend cpu` too,
which rearranges to HND before running); a file whose `out` is wrong in one element to exit 1;
and caches that do not fit the declared layout, or an unknown layout, to exit 2 with one line.
Given LAYOUT=PLUGIN arguments, each good file is also replayed with `--kernels PLUGIN` (every
configuration of a plugin that reads the file's layout) and must match.

Usage: replay_layouts.py ATTN_TUNE OUTDIR [HND=PLUGIN] [NHD=PLUGIN] [vllm=PLUGIN]
Exits 77 (CTest's skip code here) when numpy is missing.
"""
import json
import math
import os
import struct
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print(f"replay_layouts: skipped, numpy is not installed for {sys.executable}")
    sys.exit(77)

LAYOUTS = ("HND", "NHD", "vllm")
ELEM_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
ST_DTYPE = {"fp32": "F32", "fp16": "F16", "bf16": "BF16"}

# --------------------------------------------------------------------------------------------
# Storage dtypes. Values are rounded once from float64 (numpy rounds to nearest even); bf16,
# which numpy lacks, is rounded on the float32 bit pattern (nearest even) and kept as bits.


def bf16_bits(x):
    u = np.asarray(x, dtype=np.float64).astype(np.float32).view(np.uint32).astype(np.uint64)
    u = u + 0x7FFF + ((u >> 16) & 1)
    return (u >> 16).astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def round_to(x, dtype):
    if dtype == "fp32":
        return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)
    if dtype == "fp16":
        return np.asarray(x, np.float64).astype(np.float16).astype(np.float64)
    return bf16_value(bf16_bits(x))


def storage_bytes(x, dtype):
    if dtype == "fp32":
        return np.ascontiguousarray(x, dtype="<f4").tobytes()
    if dtype == "fp16":
        return np.ascontiguousarray(x, dtype="<f2").tobytes()
    return np.ascontiguousarray(bf16_bits(x), dtype="<u2").tobytes()


# --------------------------------------------------------------------------------------------
# The script's own safetensors writer: 8-byte little-endian header length, JSON header (padded
# with spaces to a multiple of 8), then the tensors' bytes back to back.


def write_safetensors(path, tensors, metadata):
    """tensors: name -> (safetensors dtype, shape, bytes)."""
    header, chunks, offset = {}, [], 0
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        chunks.append(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


# --------------------------------------------------------------------------------------------
# Layouts: HND -> stored arrays, and reading (physical block, slot) pairs back from storage.


def vllm_x(dtype):
    return 16 // ELEM_BYTES[dtype]


def arrange(k_hnd, v_hnd, layout, dtype):
    """HND caches [N, KVH, BS, D] -> the two caches as `layout` stores them."""
    if layout == "HND":
        return k_hnd, v_hnd
    if layout == "NHD":  # [N, BS, KVH, D]
        return k_hnd.transpose(0, 2, 1, 3), v_hnd.transpose(0, 2, 1, 3)
    n, kvh, bs, d = k_hnd.shape
    x = vllm_x(dtype)
    # key [N, KVH, D/x, BS, x]: element d of slot s at [.., d // x, s, d % x]
    k = k_hnd.reshape(n, kvh, bs, d // x, x).transpose(0, 1, 3, 2, 4)
    # value [N, KVH, D, BS]: element d of slot s at [.., d, s]
    v = v_hnd.transpose(0, 1, 3, 2)
    return k, v


def gather(k, v, layout, phys, slot):
    """Keys and values [n, KVH, D] of the (physical block, slot) pairs, read from storage."""
    if layout == "HND":
        return k[phys, :, slot, :], v[phys, :, slot, :]
    if layout == "NHD":
        return k[phys, slot, :, :], v[phys, slot, :, :]
    keys = k[phys, :, :, slot, :]  # [n, KVH, D/x, x]
    n, kvh, chunks, x = keys.shape
    return keys.reshape(n, kvh, chunks * x), v[phys, :, :, slot]


# --------------------------------------------------------------------------------------------
# SPEC.md "The function", in float64, over caches in any layout.


def attention(q, k, v, layout, block_size, num_kv_heads, tables, q_lens, k_lens, causal, scale,
              window_left, window_right, softcap):
    rows, num_heads, head_dim = q.shape
    kv_head_of = np.arange(num_heads) // (num_heads // num_kv_heads)
    out = np.zeros((rows, num_heads, head_dim))
    q0 = 0
    for b, (q_len, k_len) in enumerate(zip(q_lens, k_lens)):
        j = np.arange(k_len)
        keys, vals = gather(k, v, layout, tables[b, j // block_size], j % block_size)
        for i in range(q_len):
            pos = k_len - q_len + i  # bottom-right aligned
            vis = np.ones(k_len, dtype=bool)
            if causal:
                vis &= j <= pos
            if window_left >= 0:
                vis &= j >= pos - window_left
            if window_right >= 0:
                vis &= j <= pos + window_right
            if not vis.any():
                continue  # no visible key: out stays 0
            kh = keys[vis][:, kv_head_of, :]  # [n, H, D]
            vh = vals[vis][:, kv_head_of, :]
            s = scale * np.einsum("hd,nhd->hn", q[q0 + i], kh)
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[q0 + i] = np.einsum("hn,nhd->hd", p, vh) / p.sum(axis=1, keepdims=True)
        q0 += q_len
    return out


# --------------------------------------------------------------------------------------------
# Cases: (phase, dtype, heads, kv heads, head_dim, block_size, q_lens, k_lens, metadata).

CASES = [
    ("decode", "fp16", 8, 2, 64, 16, None, [1, 15, 16, 17, 0, 130],
     {"window_left": "40", "softcap": "20.0"}),
    ("decode", "bf16", 4, 1, 128, 8, None, [7, 8, 9, 64], {"scale": "0.1"}),
    ("decode", "fp32", 4, 4, 32, 16, None, [33, 3], {"causal": "false", "window_right": "2"}),
    ("prefill", "bf16", 6, 2, 64, 16, [5, 17, 1], [40, 17, 33], {}),
    ("prefill", "fp16", 4, 2, 32, 8, [16, 3, 4], [50, 20, 2], {"window_left": "12"}),
    ("prefill", "fp32", 8, 4, 64, 16, [20, 9], [20, 4], {"causal": "false", "window_left": "5",
                                                        "window_right": "4"}),
]


def options(meta, head_dim):
    return dict(causal=meta.get("causal", "true").lower() in ("true", "1"),
                scale=float(meta["scale"]) if "scale" in meta else 1.0 / math.sqrt(head_dim),
                window_left=int(meta.get("window_left", "-1")),
                window_right=int(meta.get("window_right", "-1")),
                softcap=float(meta.get("softcap", "0")))


def build(case, layout, seed):
    """The case's tensors (stored in `layout`), its expected out (float64) and its metadata."""
    phase, dtype, h, kvh, d, bs, q_lens, k_lens, meta = case
    rng = np.random.default_rng(seed)
    q_lens = q_lens if phase == "prefill" else [1] * len(k_lens)
    need = [(k + bs - 1) // bs for k in k_lens]
    pool = 3 * max(1, sum(need))  # blocks drawn from a shuffled pool three times larger
    perm = list(rng.permutation(pool))
    tables = np.full((len(k_lens), max(need) + 1), -1, dtype=np.int32)
    for b, n in enumerate(need):
        for c in range(n):
            tables[b, c] = perm.pop()
    q = round_to(rng.standard_normal((sum(q_lens), h, d)), dtype)
    k_hnd = round_to(rng.standard_normal((pool, kvh, bs, d)), dtype)
    v_hnd = round_to(rng.standard_normal((pool, kvh, bs, d)), dtype)
    k, v = arrange(k_hnd, v_hnd, layout, dtype)
    out = round_to(attention(q, k, v, layout, bs, kvh, tables, q_lens, k_lens, **options(meta, d)),
                   dtype)
    # The rearrangement keeps every logical element: reading HND and the layout agree.
    j = np.arange(max(k_lens))
    phys, slot = tables[0, j[: k_lens[0]] // bs], j[: k_lens[0]] % bs
    for a, b in zip(gather(k_hnd, v_hnd, "HND", phys, slot), gather(k, v, layout, phys, slot)):
        assert np.array_equal(a, b), f"{layout} rearrangement lost values"
    st = ST_DTYPE[dtype]
    tensors = {
        "query": (st, q.shape, storage_bytes(q, dtype)),
        "key_cache": (st, k.shape, storage_bytes(k, dtype)),
        "value_cache": (st, v.shape, storage_bytes(v, dtype)),
        "block_tables": ("I32", tables.shape, tables.astype("<i4").tobytes()),
    }
    if phase == "decode":
        tensors["context_lens"] = ("I32", (len(k_lens),), np.array(k_lens, "<i4").tobytes())
    else:
        for name, lens in (("cu_seqlens_q", q_lens), ("cu_seqlens_k", k_lens)):
            cu = np.concatenate([[0], np.cumsum(lens)]).astype("<i4")
            tensors[name] = ("I32", cu.shape, cu.tobytes())
    meta = dict(meta, kv_layout=layout)
    return tensors, out, meta


# --------------------------------------------------------------------------------------------


def run(exe, path, *extra):
    p = subprocess.run([exe, "replay", path, "--threads", "2", *extra], capture_output=True,
                       text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    exe, outdir = sys.argv[1], sys.argv[2]
    # LAYOUT=PATH: a kernel plugin that reads that layout; each file is replayed through it too.
    plugins = dict(arg.split("=", 1) for arg in sys.argv[3:])
    os.makedirs(outdir, exist_ok=True)
    failures = []

    def expect(path, code, needle, *extra):
        got, text = run(exe, path, *extra)
        name = os.path.basename(path) + (" " + " ".join(extra) if extra else "")
        if got != code or needle not in text:
            failures.append(f"{name}: exit {got} (expected {code}, output containing {needle!r}):"
                            f"\n{text}")
            print(f"FAIL  {name}")
        else:
            print(f"ok    {name}: exit {code}")
        return text

    seed = 300
    for layout in LAYOUTS:
        for case in CASES:
            seed += 1
            phase, dtype = case[0], case[1]
            tensors, out, meta = build(case, layout, seed)
            base = f"{phase}_{dtype}_{layout}"
            if layout == "HND" and phase == "decode" and dtype == "fp16":
                del meta["kv_layout"]  # absent means HND
            good = dict(tensors, out=(ST_DTYPE[dtype], out.shape, storage_bytes(out, dtype)))
            path = os.path.join(outdir, base + ".safetensors")
            write_safetensors(path, good, meta)
            expect(path, 0, "file out vs reference: MATCH")
            if dtype == "fp16":  # the CPU kernels too, once per layout and phase
                expect(path, 0, "vs reference: MATCH", "--backend", "cpu")
            if layout in plugins:  # through a plugin of the file's layout (every configuration)
                text = expect(path, 0, "vs reference: MATCH", "--kernels", plugins[layout])
                if "MISMATCH" in text or "(plugin " not in text:
                    failures.append(f"{path} through the {layout} plugin:\n{text}")

        # One element of `out` far off: the replay must find it.
        tensors, out, meta = build(CASES[3], layout, seed + 1000)
        out = out.copy()
        out[2, 1, 5] = round_to(out[2, 1, 5] + 0.5, "bf16")
        path = os.path.join(outdir, f"wrong_prefill_bf16_{layout}.safetensors")
        wrong = dict(tensors, out=("BF16", out.shape, storage_bytes(out, "bf16")))
        write_safetensors(path, wrong, meta)
        text = expect(path, 1, "file out vs reference: MISMATCH")
        listed = "out[row=2, head=1, dim=5]"
        if listed not in text:
            failures.append(f"{path}: the mismatch list does not name {listed}:\n{text}")

    # Caches that do not fit the declared layout, and a layout that does not exist: exit 2.
    tensors, _, meta = build(CASES[0], "vllm", 900)  # fp16 vllm key [N, 2, 8, 16, 8]
    path = os.path.join(outdir, "bad_vllm_declared_hnd.safetensors")
    write_safetensors(path, tensors, dict(meta, kv_layout="HND"))
    expect(path, 2, "expected rank 4 for kv_layout HND")
    tensors, _, meta = build(CASES[0], "NHD", 901)
    n, bs, kvh, d = tensors["key_cache"][1]  # an NHD key beside a value labelled HND's shape
    dt, _, raw = tensors["value_cache"]
    tensors["value_cache"] = (dt, (n, kvh, bs, d), raw)
    path = os.path.join(outdir, "bad_nhd_value_in_hnd.safetensors")
    write_safetensors(path, tensors, meta)
    expect(path, 2, f"value_cache has shape [{n}, {kvh}, {bs}, {d}], expected [{n}, {bs}, {kvh}, "
                    f"{d}] for kv_layout NHD")
    tensors, _, meta = build(CASES[1], "HND", 902)
    path = os.path.join(outdir, "bad_kv_layout_value.safetensors")
    write_safetensors(path, tensors, dict(meta, kv_layout="paged"))
    text = expect(path, 2, "__metadata__ kv_layout = 'paged' is not a KV-cache layout")
    if text.strip().count("\n") != 0:
        failures.append(f"{path}: expected one line, got:\n{text}")

    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"replay_layouts: every file in {outdir} replayed as expected")


if __name__ == "__main__":
    main()
