"""Tests of attn_tune_torch against a naive float64 reference written here from SPEC.md (one
query row and head at a time, one key at a time), on paged caches built from logical K/V with
randomly permuted block tables over a pool 3x larger than needed, in every KV layout; and that
attn-tune's run reads no tensor value on the host (on CUDA, a wait for the device).

Run from the repository root: /usr/bin/python3 -m unittest python/test_attn_tune_torch.py
"""

import math
import os
import sys
import types
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attn_tune_torch as att  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# (atol, rtol) on out, and the bound on the normwise error ||out - ref|| / ||ref||. Outputs are
# rounded to the dtype: rtol is about one ulp of the result (2^-10 for fp16, 2^-7 for bf16).
TOL = {"fp32": (1e-5, 1e-5, 1e-5), "fp16": (1e-4, 1e-3, 2e-3), "bf16": (1e-3, 8e-3, 1e-2)}
LSE_TOL = {"fp32": 2e-5, "fp16": 1e-4, "bf16": 1e-4}  # lse is fp32 from the same rounded inputs
GARBAGE_BLOCK = 1 << 20  # a block id far outside any pool: reading it would raise or crash


# ----------------------------------------------------------------------------------------------
# The naive reference (SPEC.md "The function"), float64, independent of the module under test
# ----------------------------------------------------------------------------------------------


def reference_sequence(q, k, v, *, scale, causal, window_left, window_right, softcap):
    """q [q_len, H, d], k/v [k_len, kvh, d] float64 tensors. Returns out [q_len, H, d] float64
    and lse [q_len, H] float64, row by row, head by head, key by key."""
    q_len, num_heads, d = q.shape
    k_len, kvh = k.shape[0], k.shape[1]
    group = num_heads // kvh
    out = torch.zeros(q_len, num_heads, d, dtype=torch.float64)
    lse = torch.full((q_len, num_heads), -math.inf, dtype=torch.float64)
    qs, ks, vs = q.tolist(), k.tolist(), v.tolist()
    for i in range(q_len):
        p = k_len - q_len + i
        visible = [j for j in range(k_len)
                   if (not causal or j <= p)
                   and (window_left < 0 or j >= p - window_left)
                   and (window_right < 0 or j <= p + window_right)]
        if not visible:
            continue
        for h in range(num_heads):
            kh = h // group
            scores = []
            for j in visible:
                s = scale * math.fsum(a * b for a, b in zip(qs[i][h], ks[j][kh]))
                if softcap > 0:
                    s = softcap * math.tanh(s / softcap)
                scores.append(s)
            m = max(scores)
            weights = [math.exp(s - m) for s in scores]
            total = math.fsum(weights)
            acc = [0.0] * d
            for w, j in zip(weights, visible):
                vj = vs[j][kh]
                for c in range(d):
                    acc[c] += w * vj[c]
            out[i, h] = torch.tensor(acc, dtype=torch.float64) / total
            lse[i, h] = m + math.log(total)
    return out, lse


# ----------------------------------------------------------------------------------------------
# Paged caches built slot by slot from logical K/V
# ----------------------------------------------------------------------------------------------


def write_slot(key_cache, value_cache, layout, block, slot, k_tok, v_tok):
    """Stores one token's k/v ([kvh, d]) at (block, slot) following SPEC.md's layout table."""
    if layout == "HND":
        key_cache[block, :, slot, :] = k_tok
        value_cache[block, :, slot, :] = v_tok
    elif layout == "NHD":
        key_cache[block, slot, :, :] = k_tok
        value_cache[block, slot, :, :] = v_tok
    else:
        x = key_cache.shape[-1]
        kvh, d = k_tok.shape
        for c in range(d):  # element c of slot s at [.., c / x, s, c % x]; value at [.., c, s]
            key_cache[block, :, c // x, slot, c % x] = k_tok[:, c]
            value_cache[block, :, c, slot] = v_tok[:, c]


def empty_cache(layout, num_blocks, kvh, block_size, d, dtype):
    """Caches full of NaN, so that any read of an unused slot or block shows in the result."""
    if layout == "HND":
        ks = vs = (num_blocks, kvh, block_size, d)
    elif layout == "NHD":
        ks = vs = (num_blocks, block_size, kvh, d)
    else:
        x = 16 // torch.empty((), dtype=dtype).element_size()
        ks, vs = (num_blocks, kvh, d // x, block_size, x), (num_blocks, kvh, d, block_size)
    return torch.full(ks, math.nan, dtype=dtype), torch.full(vs, math.nan, dtype=dtype)


class Problem:
    """A batch of sequences: logical q/k/v (rounded to the dtype) and a paged cache per layout."""

    def __init__(self, gen, q_lens, k_lens, *, num_heads, kvh, d, block_size, dtype="fp32",
                 share_prefix=False):
        self.dtype = dtype
        tdt = DTYPES[dtype]
        self.q_lens, self.k_lens = list(q_lens), list(k_lens)
        self.num_heads, self.kvh, self.d, self.block_size = num_heads, kvh, d, block_size

        def randn(*shape):
            return torch.randn(*shape, generator=gen, dtype=torch.float64).to(tdt)

        self.q = randn(sum(q_lens), num_heads, d)
        self.k = [randn(n, kvh, d) for n in k_lens]
        self.v = [randn(n, kvh, d) for n in k_lens]
        blocks = [-(-n // block_size) for n in k_lens]
        self.max_blocks = max(blocks + [1]) + 2
        needed = sum(blocks)
        self.num_blocks = max(3 * needed, 4)
        perm = torch.randperm(self.num_blocks, generator=gen).tolist()
        self.tables = torch.empty(len(k_lens), self.max_blocks, dtype=torch.int32)
        for b, n in enumerate(blocks):
            self.tables[b, :n] = torch.tensor(perm[:n], dtype=torch.int32)
            perm = perm[n:]
            # Unused entries hold -1 or garbage.
            for e in range(n, self.max_blocks):
                self.tables[b, e] = -1 if (b + e) % 2 else GARBAGE_BLOCK + e
        if share_prefix and len(k_lens) >= 2 and blocks[1] >= 2 and blocks[0] >= 2:
            # Prefix caching: sequence 1's first full block is sequence 0's first block.
            self.tables[1, 0] = self.tables[0, 0]
            self.k[1][:block_size] = self.k[0][:block_size]
            self.v[1][:block_size] = self.v[0][:block_size]
        self.caches = {}
        for layout in att.KV_LAYOUTS:
            kc, vc = empty_cache(layout, self.num_blocks, kvh, block_size, d, tdt)
            for b, n in enumerate(k_lens):
                for j in range(n):
                    blk = int(self.tables[b, j // block_size])
                    write_slot(kc, vc, layout, blk, j % block_size, self.k[b][j], self.v[b][j])
            self.caches[layout] = (kc, vc)
        self.cu_q = torch.tensor([0] + list(_cumsum(q_lens)), dtype=torch.int32)
        self.cu_k = torch.tensor([0] + list(_cumsum(k_lens)), dtype=torch.int32)
        self.context_lens = torch.tensor(k_lens, dtype=torch.int32)

    def reference(self, **opts):
        outs, lses = [], []
        r0 = 0
        for b, (nq, nk) in enumerate(zip(self.q_lens, self.k_lens)):
            o, s = reference_sequence(self.q[r0:r0 + nq].double(), self.k[b].double(),
                                      self.v[b].double(), **opts)
            outs.append(o)
            lses.append(s)
            r0 += nq
        return torch.cat(outs), torch.cat(lses)


def _cumsum(xs):
    total = 0
    for x in xs:
        total += x
        yield total


def opts_of(scale=None, causal=True, window_left=-1, window_right=-1, softcap=0.0, d=32):
    return dict(scale=1.0 / math.sqrt(d) if scale is None else scale, causal=causal,
                window_left=window_left, window_right=window_right, softcap=softcap)


# ----------------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------------


class Base(unittest.TestCase):
    def assert_matches(self, out, lse, ref_out, ref_lse, dtype, what=""):
        atol, rtol, norm_tol = TOL[dtype]
        out64, lse64 = out.double(), lse.double()
        self.assertFalse(torch.isnan(out64).any(), "NaN in out " + what)
        self.assertFalse(torch.isnan(lse64).any(), "NaN in lse " + what)
        self.assertTrue(torch.isfinite(out64).all(), "Inf in out " + what)
        err = (out64 - ref_out).abs()
        bound = atol + rtol * ref_out.abs()
        if (err > bound).any():
            idx = (err > bound).nonzero()[:5].tolist()
            self.fail("out mismatch %s (max err %.3g) at %s: got %s want %s"
                      % (what, err.max().item(), idx, [out64[tuple(i)].item() for i in idx],
                         [ref_out[tuple(i)].item() for i in idx]))
        ref_norm = ref_out.norm().item()
        if ref_norm > 0:
            self.assertLess((out64 - ref_out).norm().item() / ref_norm, norm_tol, what)
        # lse: -inf exactly where the reference has no visible key, close elsewhere.
        empty = torch.isinf(ref_lse)
        self.assertTrue(torch.equal(torch.isinf(lse64), empty), "lse -inf pattern " + what)
        self.assertTrue((lse64[empty] < 0).all(), what)
        if (~empty).any():
            lse_err = (lse64[~empty] - ref_lse[~empty]).abs().max().item()
            scale = 1 + ref_lse[~empty].abs().max().item()
            self.assertLess(lse_err, LSE_TOL[dtype] * scale, what)
        # Rows with no visible key are exact zeros.
        self.assertTrue((out64[empty] == 0).all(), "rows with no visible key must be 0 " + what)

    def run_prefill(self, pb, layout="HND", **opts):
        kc, vc = pb.caches[layout]
        out = torch.full_like(pb.q, math.nan)
        lse = torch.full((pb.q.shape[0], pb.num_heads), math.nan)
        o, s = att.paged_prefill(pb.q, kc, vc, pb.tables, pb.cu_q, pb.cu_k, kv_layout=layout,
                                 out=out, lse=lse, **opts)
        self.assertIs(o, out)
        self.assertIs(s, lse)
        return out, lse

    def run_decode(self, pb, layout="HND", partition=None, **opts):
        kc, vc = pb.caches[layout]
        out = torch.full_like(pb.q, math.nan)
        lse = torch.full((pb.q.shape[0], pb.num_heads), math.nan)
        att.paged_decode(pb.q, kc, vc, pb.tables, pb.context_lens, kv_layout=layout,
                         partition=partition, out=out, lse=lse, **opts)
        return out, lse


class PrefillTest(Base):
    def test_every_mask_option(self):
        gen = torch.Generator().manual_seed(1)
        d = 16
        # Sequences: plain, chunked (q < k), q > k, k = 0, q = k = 1, q = 0.
        pb = Problem(gen, q_lens=[9, 4, 7, 3, 1, 0], k_lens=[9, 21, 3, 0, 1, 5],
                     num_heads=4, kvh=2, d=d, block_size=5)
        cases = [
            opts_of(d=d),
            opts_of(d=d, causal=False),
            opts_of(d=d, window_left=3),
            opts_of(d=d, causal=False, window_left=2, window_right=1),
            opts_of(d=d, causal=False, window_right=0),
            opts_of(d=d, causal=False, window_left=0, window_right=0),
            opts_of(d=d, window_left=0),
            opts_of(d=d, softcap=2.0, scale=0.9),
            opts_of(d=d, causal=False, softcap=5.0),
            opts_of(d=d, scale=0.05, window_left=6, window_right=2),
        ]
        for opts in cases:
            with self.subTest(**opts):
                ref = pb.reference(**opts)
                out, lse = self.run_prefill(pb, **opts)
                self.assert_matches(out, lse, *ref, "fp32", str(opts))

    def test_gqa_ratios_and_mqa(self):
        gen = torch.Generator().manual_seed(2)
        for num_heads, kvh in ((4, 4), (4, 2), (8, 2), (6, 1)):
            with self.subTest(num_heads=num_heads, kvh=kvh):
                pb = Problem(gen, q_lens=[5, 3], k_lens=[5, 17], num_heads=num_heads, kvh=kvh,
                             d=8, block_size=4)
                opts = opts_of(d=8)
                out, lse = self.run_prefill(pb, **opts)
                self.assert_matches(out, lse, *pb.reference(**opts), "fp32")

    def test_q_longer_than_k_under_causal_gives_empty_rows(self):
        gen = torch.Generator().manual_seed(3)
        pb = Problem(gen, q_lens=[6, 2], k_lens=[2, 0], num_heads=2, kvh=1, d=8, block_size=4)
        out, lse = self.run_prefill(pb, **opts_of(d=8))
        # Sequence 0: rows 0..3 sit at p < 0 and see nothing; rows 4, 5 see keys 0 and 0..1.
        self.assertTrue((out[:4] == 0).all() and (out[6:] == 0).all())
        self.assertTrue(torch.isneginf(lse[:4]).all() and torch.isneginf(lse[6:]).all())
        self.assertTrue(torch.isfinite(lse[4:6]).all())
        self.assert_matches(out, lse, *pb.reference(**opts_of(d=8)), "fp32")

    def test_chunked_prefill_with_shared_prefix(self):
        gen = torch.Generator().manual_seed(4)
        pb = Problem(gen, q_lens=[16, 7, 33], k_lens=[40, 37, 33], num_heads=4, kvh=2, d=32,
                     block_size=16, share_prefix=True)
        self.assertEqual(int(pb.tables[0, 0]), int(pb.tables[1, 0]))
        for opts in (opts_of(d=32), opts_of(d=32, window_left=8), opts_of(d=32, causal=False)):
            with self.subTest(**opts):
                out, lse = self.run_prefill(pb, **opts)
                self.assert_matches(out, lse, *pb.reference(**opts), "fp32")

    def test_half_precision(self):
        for dtype in ("fp16", "bf16"):
            gen = torch.Generator().manual_seed(5)
            pb = Problem(gen, q_lens=[8, 3, 5], k_lens=[8, 19, 2], num_heads=4, kvh=2, d=32,
                         block_size=8, dtype=dtype)
            for opts in (opts_of(d=32), opts_of(d=32, causal=False, softcap=3.0, window_right=4)):
                with self.subTest(dtype=dtype, **opts):
                    for layout in att.KV_LAYOUTS:
                        out, lse = self.run_prefill(pb, layout, **opts)
                        self.assertEqual(out.dtype, DTYPES[dtype])
                        self.assertEqual(lse.dtype, torch.float32)
                        self.assert_matches(out, lse, *pb.reference(**opts), dtype, layout)

    def test_all_layouts_give_identical_results(self):
        gen = torch.Generator().manual_seed(6)
        pb = Problem(gen, q_lens=[3, 10], k_lens=[13, 10], num_heads=8, kvh=2, d=16,
                     block_size=4)
        opts = opts_of(d=16, window_left=5, softcap=4.0)
        results = [self.run_prefill(pb, layout, **opts) for layout in att.KV_LAYOUTS]
        for out, lse in results[1:]:
            self.assertTrue(torch.equal(out, results[0][0]))
            self.assertTrue(torch.equal(lse, results[0][1]))
        self.assert_matches(*results[0], *pb.reference(**opts), "fp32")

    def test_allocates_outputs_when_not_given(self):
        gen = torch.Generator().manual_seed(7)
        pb = Problem(gen, q_lens=[4], k_lens=[6], num_heads=2, kvh=2, d=8, block_size=4)
        kc, vc = pb.caches["HND"]
        out, lse = att.paged_prefill(pb.q, kc, vc, pb.tables, pb.cu_q, pb.cu_k, scale=0.3)
        self.assert_matches(out, lse, *pb.reference(**opts_of(scale=0.3)), "fp32")

    def test_bad_input_raises(self):
        gen = torch.Generator().manual_seed(8)
        pb = Problem(gen, q_lens=[4], k_lens=[6], num_heads=2, kvh=2, d=8, block_size=4)
        kc, vc = pb.caches["HND"]
        with self.assertRaises(ValueError):  # a used block-table entry is -1
            tables = pb.tables.clone()
            tables[0, 1] = -1
            att.paged_prefill(pb.q, kc, vc, tables, pb.cu_q, pb.cu_k, scale=0.3)
        with self.assertRaises(ValueError):  # cu_seqlens_q does not cover the query
            att.paged_prefill(pb.q, kc, vc, pb.tables, torch.tensor([0, 3], dtype=torch.int32),
                              pb.cu_k, scale=0.3)
        with self.assertRaises(ValueError):  # wrong layout for these shapes
            att.paged_prefill(pb.q, kc, vc, pb.tables, pb.cu_q, pb.cu_k, scale=0.3,
                              kv_layout="vllm")
        with self.assertRaises(ValueError):  # num_heads not a multiple of num_kv_heads
            att.paged_prefill(pb.q[:, :1], kc, vc, pb.tables, pb.cu_q, pb.cu_k, scale=0.3)


class DecodeTest(Base):
    def test_v1_and_v2_at_partition_boundaries(self):
        gen = torch.Generator().manual_seed(10)
        bs = 16
        lens = [1, bs - 1, bs, bs + 1, 255, 256, 257, 511, 512, 513, 0, 700]
        pb = Problem(gen, q_lens=[1] * len(lens), k_lens=lens, num_heads=4, kvh=2, d=16,
                     block_size=bs)
        opts = opts_of(d=16)
        ref = pb.reference(**opts)
        v1 = self.run_decode(pb, **opts)
        self.assert_matches(*v1, *ref, "fp32", "v1")
        for partition in (256, 512):
            with self.subTest(partition=partition):
                v2 = self.run_decode(pb, partition=partition, **opts)
                self.assert_matches(*v2, *ref, "fp32", "v2 P=%d" % partition)
                # v1 and v2 agree to fp32 rounding.
                self.assertLess((v1[0] - v2[0]).abs().max().item(), 2e-6)
                finite = torch.isfinite(v1[1])
                self.assertTrue(torch.equal(finite, torch.isfinite(v2[1])))
                self.assertLess((v1[1][finite] - v2[1][finite]).abs().max().item(), 2e-6)

    def test_masks_in_decode(self):
        gen = torch.Generator().manual_seed(11)
        lens = [1, 7, 8, 9, 33, 64, 65, 0]
        pb = Problem(gen, q_lens=[1] * len(lens), k_lens=lens, num_heads=8, kvh=2, d=16,
                     block_size=8)
        cases = [
            opts_of(d=16, causal=False),
            opts_of(d=16, window_left=10),  # sliding window of 11 keys
            opts_of(d=16, window_left=0),
            opts_of(d=16, causal=False, window_left=3, window_right=5),
            opts_of(d=16, softcap=1.5),
            opts_of(d=16, scale=1.3),
        ]
        for opts in cases:
            for partition in (None, 16, 32):  # small partitions to get several per sequence
                with self.subTest(partition=partition, **opts):
                    out, lse = self.run_decode(pb, partition=partition, **opts)
                    self.assert_matches(out, lse, *pb.reference(**opts), "fp32")

    def test_window_leaves_whole_partitions_empty(self):
        # With a window of 5 keys at the end of a 600-key context, partitions 0 and 1 (P=256)
        # have no visible key and must contribute nothing.
        gen = torch.Generator().manual_seed(12)
        pb = Problem(gen, q_lens=[1], k_lens=[600], num_heads=2, kvh=1, d=8, block_size=16)
        opts = opts_of(d=8, window_left=4)
        out, lse = self.run_decode(pb, partition=256, **opts)
        self.assert_matches(out, lse, *pb.reference(**opts), "fp32")

    def test_gqa_and_layouts(self):
        gen = torch.Generator().manual_seed(13)
        lens = [5, 40, 257, 31]
        for num_heads, kvh in ((4, 4), (4, 2), (8, 2), (4, 1)):
            pb = Problem(gen, q_lens=[1] * len(lens), k_lens=lens, num_heads=num_heads, kvh=kvh,
                         d=16, block_size=16)
            opts = opts_of(d=16)
            ref = pb.reference(**opts)
            first = None
            for layout in att.KV_LAYOUTS:
                for partition in (None, 256):
                    with self.subTest(heads=num_heads, kvh=kvh, layout=layout,
                                      partition=partition):
                        res = self.run_decode(pb, layout, partition, **opts)
                        self.assert_matches(*res, *ref, "fp32")
                        if partition is None:
                            if first is None:
                                first = res
                            self.assertTrue(torch.equal(res[0], first[0]))
                            self.assertTrue(torch.equal(res[1], first[1]))

    def test_half_precision(self):
        lens = [1, 15, 16, 17, 255, 256, 257, 0]
        for dtype in ("fp16", "bf16"):
            gen = torch.Generator().manual_seed(14)
            pb = Problem(gen, q_lens=[1] * len(lens), k_lens=lens, num_heads=4, kvh=1, d=32,
                         block_size=16, dtype=dtype)
            opts = opts_of(d=32, softcap=10.0)
            ref = pb.reference(**opts)
            for layout in att.KV_LAYOUTS:
                for partition in (None, 256):
                    with self.subTest(dtype=dtype, layout=layout, partition=partition):
                        out, lse = self.run_decode(pb, layout, partition, **opts)
                        self.assertEqual(out.dtype, DTYPES[dtype])
                        self.assert_matches(out, lse, *ref, dtype)


class Fp8Test(Base):
    """fp8 caches (kv_dtype): random bytes, decoded here through fp16 bit patterns (E5M2 is the top
    byte of an fp16; an E4M3 value is 256 times the fp16 with its exponent and mantissa bits
    shifted in), times per-head scales, must give bit for bit what the same values in a float32
    cache give, in every layout."""

    @staticmethod
    def decode(bytes_, kv_dtype):
        b = bytes_.to(torch.int32)
        if kv_dtype == "fp8_e5m2":
            bits = b << 8
            scale = 1.0
        else:
            bits = ((b & 0x80) << 8) | ((b & 0x7F) << 7)
            scale = 256.0
        bits = torch.where(bits >= 0x8000, bits - 0x10000, bits).to(torch.int16)
        return bits.view(torch.float16).float() * scale

    @staticmethod
    def layouts(hnd_k, hnd_v):
        nb, kvh, bs, d = hnd_k.shape
        x = 16 // hnd_k.element_size()
        return {"HND": (hnd_k, hnd_v),
                "NHD": (hnd_k.permute(0, 2, 1, 3).contiguous(),
                        hnd_v.permute(0, 2, 1, 3).contiguous()),
                "vllm": (hnd_k.reshape(nb, kvh, bs, d // x, x).permute(0, 1, 3, 2, 4)
                         .contiguous(), hnd_v.permute(0, 1, 3, 2).contiguous())}

    def test_fp8_caches_read_as_their_values_times_the_scales(self):
        gen = torch.Generator().manual_seed(21)
        lens = [1, 16, 17, 300, 0]
        pb = Problem(gen, q_lens=[1] * len(lens), k_lens=lens, num_heads=4, kvh=2, d=32,
                     block_size=16)
        opts = opts_of(d=32)
        shape = (pb.num_blocks, 2, 16, 32)
        for kv_dtype, nan_free in (("fp8_e4m3", lambda b: (b & 0x7F) != 0x7F),
                                   ("fp8_e5m2", lambda b: (b & 0x7C) != 0x7C)):
            raw_k = torch.randint(0, 256, shape, generator=gen, dtype=torch.int32)
            raw_v = torch.randint(0, 256, shape, generator=gen, dtype=torch.int32)
            # No NaN or infinity (E4M3's S.1111.111, E5M2's top exponent) anywhere.
            raw_k = torch.where(nan_free(raw_k), raw_k, raw_k & 0x3F).to(torch.uint8)
            raw_v = torch.where(nan_free(raw_v), raw_v, raw_v & 0x3F).to(torch.uint8)
            k_scale, v_scale = torch.tensor([0.01, 3.0]), torch.tensor([0.5])
            want_k = self.decode(raw_k, kv_dtype) * k_scale.view(1, 2, 1, 1)
            want_v = self.decode(raw_v, kv_dtype) * v_scale
            fp8 = self.layouts(raw_k, raw_v)
            f32 = self.layouts(want_k, want_v)
            for layout in att.KV_LAYOUTS:
                for partition in (None, 256):
                    with self.subTest(kv_dtype=kv_dtype, layout=layout, partition=partition):
                        got = att.paged_decode(pb.q, *fp8[layout], pb.tables, pb.context_lens,
                                               kv_layout=layout, partition=partition,
                                               kv_dtype=kv_dtype, k_scale=k_scale,
                                               v_scale=v_scale, **opts)
                        want = att.paged_decode(pb.q, *f32[layout], pb.tables, pb.context_lens,
                                                kv_layout=layout, partition=partition, **opts)
                        self.assertTrue(torch.equal(got[0], want[0]))
                        self.assertTrue(torch.equal(got[1], want[1]))
        with self.assertRaises(ValueError):
            att.paged_decode(pb.q, *fp8["HND"], pb.tables, pb.context_lens, kv_dtype="fp8_e3m4",
                             **opts)
        with self.assertRaises(ValueError):  # a float cache is not fp8 bytes
            att.paged_decode(pb.q, *f32["HND"], pb.tables, pb.context_lens, kv_dtype="fp8_e4m3",
                             **opts)


class PiecesTest(Base):
    def test_gather_kv_reads_the_logical_sequence(self):
        gen = torch.Generator().manual_seed(20)
        for dtype in DTYPES:
            pb = Problem(gen, q_lens=[1, 1], k_lens=[13, 4], num_heads=2, kvh=2, d=16,
                         block_size=4, dtype=dtype)
            for layout in att.KV_LAYOUTS:
                kc, vc = pb.caches[layout]
                for b in range(2):
                    with self.subTest(dtype=dtype, layout=layout, b=b):
                        k, v = att.gather_kv(kc, vc, pb.tables[b], pb.k_lens[b], layout)
                        self.assertTrue(torch.equal(k, pb.k[b].transpose(0, 1)))
                        self.assertTrue(torch.equal(v, pb.v[b].transpose(0, 1)))

    def test_combine_partitions_ignores_empty_ones(self):
        o = torch.tensor([[1.0, 2.0], [5.0, 5.0], [3.0, 4.0]])
        m = torch.tensor([0.5, -math.inf, 1.5])
        l = torch.tensor([2.0, 0.0, 1.0])
        out, lse = att.combine_partitions(m, l, o)
        w = torch.tensor([2.0 * math.exp(-1.0), 1.0])
        self.assertTrue(torch.allclose(out, (w[0] * o[0] + w[1] * o[2]) / w.sum()))
        self.assertAlmostEqual(lse.item(), 1.5 + math.log(w.sum().item()), places=6)
        out, lse = att.combine_partitions(torch.full((2,), -math.inf), torch.zeros(2),
                                          torch.zeros(2, 3))
        self.assertTrue((out == 0).all() and torch.isneginf(lse))

    def test_visible_keys_follow_the_formula(self):
        vis = att.visible_keys(3, 5, causal=True, window_left=1)
        # p = 2, 3, 4: keys [1, 2], [2, 3], [3, 4]
        want = [[0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]
        self.assertEqual(vis.int().tolist(), want)


# ----------------------------------------------------------------------------------------------
# No host synchronisation
# ----------------------------------------------------------------------------------------------


class HostRead(AssertionError):
    """A tensor value was read on the host: on CUDA, a wait for the device."""


class no_host_reads:
    """Within it, every way this module could read a tensor value on the host raises HostRead.

    On CUDA each of these waits for the device: inside attn-tune's timed region, where the stream
    is held while a rep is enqueued, such a wait stalls until the hold gives up. On CPU torch the
    same call sites run, so catching them here proves the CUDA path free of them. Two layers: the
    Python-level readers (tolist, item, int(), bool(), cpu(), numpy(), ...) are replaced, and a
    dispatch mode refuses the operators whose result size or value the host must learn (a boolean
    index, nonzero, masked_select, unique, repeat_interleave without output_size).
    """

    READERS = ("tolist", "item", "cpu", "numpy", "__array__", "__bool__", "__int__", "__float__",
               "__index__", "__complex__")
    DATA_DEPENDENT = {"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select",
                      "aten::_unique", "aten::_unique2", "aten::unique_dim",
                      "aten::unique_consecutive"}

    def __enter__(self):
        self.saved = {name: torch.Tensor.__dict__.get(name) for name in self.READERS}
        for name in self.READERS:
            setattr(torch.Tensor, name, self._refuse(name))
        self.mode = self._dispatch_mode()
        if self.mode is not None:
            self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        if self.mode is not None:
            self.mode.__exit__(*exc)
        for name, saved in self.saved.items():
            if saved is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, saved)
        return False

    @staticmethod
    def _refuse(name):
        def refuse(self, *args, **kwargs):
            raise HostRead("Tensor.%s reads a tensor value on the host" % name)
        return refuse

    @classmethod
    def _dispatch_mode(cls):
        try:
            from torch.utils._python_dispatch import TorchDispatchMode
        except ImportError:  # an older torch: the readers alone
            return None
        data_dependent = cls.DATA_DEPENDENT

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = func._schema.name
                why = None
                if name in data_dependent:
                    why = "computes a result whose size or value the host must read"
                elif name in ("aten::index", "aten::index_put", "aten::index_put_",
                              "aten::_index_put_impl_") and any(
                        i is not None and i.dtype in (torch.bool, torch.uint8) for i in args[1]):
                    why = "indexes with a boolean mask (its size is read on the host)"
                elif name == "aten::repeat_interleave" and kwargs.get("output_size") is None:
                    why = "repeats by tensor counts without output_size"
                if why is not None:
                    raise HostRead("%s %s" % (name, why))
                return func(*args, **kwargs)

        return Mode()


# ----------------------------------------------------------------------------------------------
# The attn-tune Python-kernel protocol
# ----------------------------------------------------------------------------------------------


def fake_call(pb, family, layout, *, causal=True, window_left=-1, window_right=-1, softcap=0.0,
              scale=None, poison=True):
    kc, vc = pb.caches[layout] if pb is not None else (None, None)
    decode = family != "prefill"
    rows = pb.q.shape[0]
    out = torch.full_like(pb.q, math.nan if poison else 0.0)
    lse = torch.full((rows, pb.num_heads), math.nan if poison else 0.0)
    return types.SimpleNamespace(
        family=family, dtype=pb.dtype, kv_layout=layout, num_heads=pb.num_heads,
        num_kv_heads=pb.kvh, head_dim=pb.d, block_size=pb.block_size,
        scale=1.0 / math.sqrt(pb.d) if scale is None else scale, softcap=softcap, causal=causal,
        window_left=window_left, window_right=window_right, batch=len(pb.k_lens),
        num_rows=rows, max_q_len=max(pb.q_lens), max_k_len=max(pb.k_lens),
        num_blocks=pb.num_blocks, max_blocks_per_seq=pb.max_blocks, threads=1,
        query=pb.q, key_cache=kc, value_cache=vc, block_tables=pb.tables,
        context_lens=pb.context_lens if decode else None,
        cu_seqlens_q=None if decode else pb.cu_q, cu_seqlens_k=None if decode else pb.cu_k,
        out=out, lse=lse)


def shapes_only(call):
    fields = dict(vars(call))
    for name in ("query", "key_cache", "value_cache", "block_tables", "context_lens",
                 "cu_seqlens_q", "cu_seqlens_k", "out", "lse"):
        fields[name] = None
    return types.SimpleNamespace(**fields)


class ProtocolTest(Base):
    FACTORIES = {"HND": att.attn_tune_kernels, "NHD": att.attn_tune_kernels_nhd,
                 "vllm": att.attn_tune_kernels_vllm}

    def test_declaration(self):
        for layout, factory in self.FACTORIES.items():
            decl = factory()
            self.assertEqual(decl["name"], "attn_tune_torch")
            self.assertEqual(decl["version"], att.__version__)
            self.assertEqual(decl["device"], "cpu")
            self.assertEqual(set(decl["families"]), {"decode_v1", "decode_v2", "prefill"})
            for name, fam in decl["families"].items():
                self.assertEqual(fam["kv_layout"], layout)
                self.assertIs(fam["writes_lse"], True)
                self.assertTrue(callable(fam["run"]))
            self.assertEqual(decl["families"]["decode_v1"]["params"], {})
            self.assertEqual(decl["families"]["prefill"]["params"], {})
            self.assertEqual(decl["families"]["decode_v2"]["params"], {"partition": [256, 512]})
            self.assertTrue(callable(decl["families"]["decode_v2"]["can_run"]))

    def test_can_run_refuses_partition_not_multiple_of_block_size(self):
        gen = torch.Generator().manual_seed(30)
        pb = Problem(gen, q_lens=[1], k_lens=[50], num_heads=2, kvh=1, d=8, block_size=48)
        can_run = att.attn_tune_kernels()["families"]["decode_v2"]["can_run"]
        call = shapes_only(fake_call(pb, "decode_v2", "HND"))
        self.assertEqual(can_run(call, {"partition": 256}),
                         "partition 256 is not a multiple of block_size 48")
        call.block_size = 16
        self.assertIsNone(can_run(call, {"partition": 256}))
        self.assertIsNone(can_run(call, {"partition": 512}))

    def test_run_fills_poisoned_outputs_reading_no_tensor_on_the_host(self):
        gen = torch.Generator().manual_seed(31)
        for dtype in DTYPES:
            dec = Problem(gen, q_lens=[1] * 6, k_lens=[0, 1, 16, 255, 257, 40], num_heads=4,
                          kvh=2, d=16, block_size=16, dtype=dtype)
            pre = Problem(gen, q_lens=[5, 9, 2], k_lens=[12, 4, 0], num_heads=4, kvh=2, d=16,
                          block_size=16, dtype=dtype)
            opts = dict(causal=True, window_left=100, window_right=-1, softcap=0.0)
            ref_dec = dec.reference(scale=0.25, **opts)
            ref_pre = pre.reference(scale=0.25, **opts)
            for layout, factory in self.FACTORIES.items():
                families = factory()["families"]
                for family, config in (("decode_v1", {}), ("decode_v2", {"partition": 256}),
                                       ("decode_v2", {"partition": 512}), ("prefill", {})):
                    with self.subTest(dtype=dtype, layout=layout, family=family, **config):
                        pb, ref = (pre, ref_pre) if family == "prefill" else (dec, ref_dec)
                        call = fake_call(pb, family, layout, scale=0.25, **opts)
                        out, lse = call.out, call.lse
                        with no_host_reads():  # what a CUDA run must not do: wait for the device
                            result = families[family]["run"](call, config)
                        self.assertIsNone(result)
                        self.assertIs(call.out, out)
                        self.assertFalse(torch.isnan(out).any())
                        self.assertFalse(torch.isnan(lse).any())
                        self.assert_matches(out, lse, *ref, dtype)

    def test_run_raises_on_bad_input(self):
        gen = torch.Generator().manual_seed(32)
        pb = Problem(gen, q_lens=[1, 1], k_lens=[20, 3], num_heads=2, kvh=1, d=8, block_size=16)
        families = att.attn_tune_kernels()["families"]
        with self.assertRaises(ValueError):  # a family's run handed another family
            families["decode_v1"]["run"](fake_call(pb, "decode_v2", "HND"), {})
        with self.assertRaises(ValueError):  # a refused configuration
            call = fake_call(pb, "decode_v2", "HND")
            call.block_size = 48
            families["decode_v2"]["run"](call, {"partition": 256})
        with self.assertRaises(ValueError):  # the call's dtype disagrees with the tensors
            call = fake_call(pb, "decode_v1", "HND")
            call.dtype = "fp16"
            families["decode_v1"]["run"](call, {})
        with self.assertRaises(ValueError):  # missing partition
            families["decode_v2"]["run"](fake_call(pb, "decode_v2", "HND"), {})
        with self.assertRaises(ValueError):  # longer than the block table can hold
            call = fake_call(pb, "decode_v1", "HND")
            call.max_k_len = 16 * pb.max_blocks + 1
            families["decode_v1"]["run"](call, {})

    def test_run_gives_nan_rows_for_bad_index_data(self):
        # run reads no index tensor on the host, so bad values cannot raise: the rows of the
        # sequences they belong to come out NaN, and the other rows stay right.
        gen = torch.Generator().manual_seed(33)
        dec = Problem(gen, q_lens=[1, 1, 1], k_lens=[20, 3, 17], num_heads=2, kvh=1, d=8,
                      block_size=16)
        pre = Problem(gen, q_lens=[4, 2, 3], k_lens=[20, 3, 17], num_heads=2, kvh=1, d=8,
                      block_size=16)
        families = att.attn_tune_kernels()["families"]
        opts = opts_of(d=8)

        def run(pb, family, config, edit):
            call = fake_call(pb, family, "HND")
            call.block_tables = pb.tables.clone()
            call.context_lens = None if call.context_lens is None else pb.context_lens.clone()
            call.cu_seqlens_q = None if call.cu_seqlens_q is None else pb.cu_q.clone()
            edit(call)
            families[family]["run"](call, config)
            return call.out, call.lse

        def garbage_block(call):  # sequence 0's second block (in use: 20 keys)
            call.block_tables[0, 1] = GARBAGE_BLOCK

        def negative_block(call):
            call.block_tables[2, 0] = -1

        def too_long(call):  # sequence 1 beyond the max_k_len the call declares
            call.max_k_len = 17
            if call.context_lens is not None:
                call.context_lens[1] = 18

        def negative_length(call):
            call.context_lens[1] = -1

        cases = [("decode_v1", {}, dec, garbage_block, [0]),
                 ("decode_v2", {"partition": 16}, dec, garbage_block, [0]),
                 ("decode_v1", {}, dec, negative_block, [2]),
                 ("decode_v2", {"partition": 16}, dec, too_long, [0, 1]),
                 ("decode_v1", {}, dec, negative_length, [1]),
                 ("prefill", {}, pre, garbage_block, [0]),
                 ("prefill", {}, pre, too_long, [0])]
        for family, config, pb, edit, bad in cases:
            with self.subTest(family=family, edit=edit.__name__):
                out, lse = run(pb, family, config, edit)
                ref_out, ref_lse = pb.reference(**opts)
                r0 = 0
                for b, nq in enumerate(pb.q_lens):
                    rows = slice(r0, r0 + nq)
                    r0 += nq
                    if b in bad:
                        self.assertTrue(torch.isnan(out[rows]).all(), "sequence %d" % b)
                        self.assertTrue(torch.isnan(lse[rows]).all(), "sequence %d" % b)
                    else:
                        self.assert_matches(out[rows], lse[rows], ref_out[rows], ref_lse[rows],
                                            "fp32", "sequence %d" % b)
        # Offsets that do not tile the query: no row can be trusted.
        out, lse = run(pre, "prefill", {}, lambda call: call.cu_seqlens_q.sub_(1).clamp_(min=0))
        self.assertTrue(torch.isnan(out).all() and torch.isnan(lse).all())


# ----------------------------------------------------------------------------------------------
# No host synchronisation: the guard's self-test and the entry points
# ----------------------------------------------------------------------------------------------


class NoHostSyncTest(Base):
    def test_the_guard_catches_every_kind_of_host_read(self):
        t = torch.arange(6, dtype=torch.float32)
        reads = {"tolist": lambda: t.tolist(), "item": lambda: t.sum().item(),
                 "int": lambda: int(t[2]), "float": lambda: float(t[2]),
                 "bool": lambda: bool((t > 2).any()), "if": lambda: 1 if t[0] == 0 else 0,
                 "index": lambda: [1, 2, 3][t.long()[1]], "cpu": lambda: t.cpu(),
                 "numpy": lambda: t.numpy(), "mask": lambda: t[t > 2],
                 "nonzero": lambda: t.nonzero(), "masked_select": lambda: t.masked_select(t > 1),
                 "unique": lambda: torch.unique(t),
                 "repeat_interleave": lambda: t.repeat_interleave(t.long())}
        for what, read in reads.items():
            with self.subTest(what=what):
                with self.assertRaises(HostRead), no_host_reads():
                    read()
        self.assertEqual(t.tolist(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])  # restored on exit
        self.assertTrue(bool(t.any()))

    def test_without_the_lengths_the_entry_points_read_them(self):
        # What the guard would catch if run did not pass the call's longest lengths.
        gen = torch.Generator().manual_seed(41)
        pb = Problem(gen, q_lens=[3, 1], k_lens=[5, 9], num_heads=2, kvh=1, d=8, block_size=4)
        kc, vc = pb.caches["HND"]
        with self.assertRaises(HostRead), no_host_reads():
            att.paged_prefill(pb.q, kc, vc, pb.tables, pb.cu_q, pb.cu_k, scale=0.3)
        with self.assertRaises(HostRead), no_host_reads():
            att.paged_decode(pb.q[:2], kc, vc, pb.tables, pb.context_lens, scale=0.3)
        with no_host_reads():
            att.paged_prefill(pb.q, kc, vc, pb.tables, pb.cu_q, pb.cu_k, scale=0.3, max_q_len=3,
                              max_k_len=9)
            att.paged_decode(pb.q[:2], kc, vc, pb.tables, pb.context_lens, scale=0.3,
                             partition=4, max_k_len=9)


if __name__ == "__main__":
    unittest.main()
