"""Paged attention in plain PyTorch: the function SPEC.md of attn-tune defines, written to be read.

Every call gathers the batch's keys and values through the block tables into dense
[batch, num_kv_heads, keys, head_dim] tensors padded to the longest sequence (whatever the cache
layout), then does masked softmax attention in float32 on all sequences at once: lengths become
masks (arange comparisons), never Python numbers. Split-KV decode ("v2") computes per-partition
(m_t, l_t, o_t) and combines them with SPEC.md's partition algebra, so the reduce an engine's v2
kernel does is spelled out here too.

No host synchronisation. Given the longest query and key lengths as Python ints (max_q_len,
max_k_len: attn-tune's kernels pass the call's), paged_prefill and paged_decode read no tensor
value on the host, so on CUDA a call is enqueued without waiting for the device (attn-tune times
it with the stream held, and an engine may capture it in a CUDA graph). Bad index data cannot
raise then: the rows of a sequence whose lengths or used block-table entries are out of range
come out NaN, out and lse, which any check of the result catches. Without those two ints the
lengths and block tables are read on the host once, checked, and bad input raises ValueError.

Public API:
    gather_kv(key_cache, value_cache, block_table_row, k_len, kv_layout) -> (k, v)
    paged_prefill(query, key_cache, value_cache, block_tables, cu_seqlens_q, cu_seqlens_k, *,
                  scale, max_q_len=None, max_k_len=None, ...) -> (out, lse)
    paged_decode(query, key_cache, value_cache, block_tables, context_lens, *, scale,
                 partition=None, max_k_len=None, ...) -> (out, lse)
    visible_keys(q_len, k_len, *, causal, window_left, window_right) -> bool [q_len, k_len]
    combine_partitions(m, l, o) -> (out, lse)

Shapes (SPEC.md "Tensors" and "KV-cache layouts"):
    query, out   [rows, num_heads, head_dim]   fp32 / fp16 / bf16; out has the query's dtype
    lse          [rows, num_heads]             float32, natural log; -inf where no key is visible
    key_cache    HND  [num_blocks, num_kv_heads, block_size, head_dim]
                 NHD  [num_blocks, block_size, num_kv_heads, head_dim]
                 vllm [num_blocks, num_kv_heads, head_dim / x, block_size, x], x = 16 / elem bytes
    value_cache  HND, NHD as key; vllm [num_blocks, num_kv_heads, head_dim, block_size]
    block_tables int32 [batch, max_blocks_per_seq]; entries past a sequence's blocks never read

fp8 caches (SPEC.md "fp8 KV caches"): with kv_dtype="fp8_e4m3" or "fp8_e5m2" the caches hold
one byte per element (torch.uint8, or torch.float8_e4m3fn / float8_e5m2 where torch has them;
x = 16 in the vllm layout), and k_scale, v_scale (float32, one element or one per KV head; 1
when None) dequantise them: a cached element stands for its fp8 value times its head's scale.
"""

import math

import torch

KV_LAYOUTS = ("HND", "NHD", "vllm")
KV_DTYPES = ("auto", "fp8_e4m3", "fp8_e5m2")

# Most float32 elements one chunk of sequences may hold in its dense keys (or values) and padded
# query rows, and one chunk of query rows in its scores: bound the memory of long sequences and
# large batches without affecting the result. On a CPU a chunk's keys are kept small enough to
# remain in its caches while they are used (larger chunks measured slower); a GPU takes larger ones.
_MAX_KV_ELEMENTS = {"cpu": 1 << 21}
_MAX_SCORE_ELEMENTS = 1 << 24

_NEG_INF = float("-inf")
_NAN = float("nan")


# --------------------------------------------------------------------------------------------
# Cache addressing
# --------------------------------------------------------------------------------------------


def vllm_x(dtype):
    """The vllm key layout's innermost width: 16 bytes of elements (4 for fp32, 8 for fp16/bf16)."""
    size = torch.empty((), dtype=dtype).element_size()
    if 16 % size != 0:
        raise ValueError("vllm layout: element size %d does not divide 16" % size)
    return 16 // size


def cache_geometry(key_cache, value_cache, kv_layout):
    """(num_blocks, num_kv_heads, block_size, head_dim) of a paged cache, after checking that the
    key and value caches have the shapes `kv_layout` prescribes."""
    if kv_layout not in KV_LAYOUTS:
        raise ValueError("unknown kv_layout %r (expected one of %s)"
                         % (kv_layout, ", ".join(KV_LAYOUTS)))
    if key_cache.dtype != value_cache.dtype:
        raise ValueError("key_cache is %s but value_cache is %s"
                         % (key_cache.dtype, value_cache.dtype))
    kshape, vshape = tuple(key_cache.shape), tuple(value_cache.shape)
    if kv_layout == "HND":
        if len(kshape) != 4:
            raise ValueError("HND key_cache must be 4-D, got shape %s" % (kshape,))
        nb, kvh, bs, d = kshape
        expect_v = kshape
    elif kv_layout == "NHD":
        if len(kshape) != 4:
            raise ValueError("NHD key_cache must be 4-D, got shape %s" % (kshape,))
        nb, bs, kvh, d = kshape
        expect_v = kshape
    else:
        if len(kshape) != 5:
            raise ValueError("vllm key_cache must be 5-D, got shape %s" % (kshape,))
        nb, kvh, d_over_x, bs, x = kshape
        if x != vllm_x(key_cache.dtype):
            raise ValueError("vllm key_cache: x is %d but 16 bytes of %s make %d"
                             % (x, key_cache.dtype, vllm_x(key_cache.dtype)))
        d = d_over_x * x
        expect_v = (nb, kvh, d, bs)
    if vshape != expect_v:
        raise ValueError("%s value_cache must have shape %s, got %s"
                         % (kv_layout, expect_v, vshape))
    return nb, kvh, bs, d


def _fp8_value(byte, e4m3):
    """One fp8 byte's value from its fields: E4M3FN (bias 7, no infinity, S.1111.111 NaN) or
    E5M2 (bias 15, IEEE infinities and NaNs). Every value is exact in float32."""
    sign = -1.0 if byte & 0x80 else 1.0
    mbits, bias, top = (3, 7, 15) if e4m3 else (2, 15, 31)
    exponent, mantissa = (byte & 0x7F) >> mbits, byte & ((1 << mbits) - 1)
    if e4m3 and exponent == top and mantissa == (1 << mbits) - 1:
        return _NAN
    if not e4m3 and exponent == top:
        return sign * math.inf if mantissa == 0 else _NAN
    if exponent == 0:
        return sign * math.ldexp(mantissa, 1 - bias - mbits)
    return sign * math.ldexp((1 << mbits) + mantissa, exponent - bias - mbits)


_FP8_TABLES = {}


def _fp8_decode(pages, kv_dtype):
    """The float32 values of fp8 bytes (uint8, or torch's float8 dtype viewed as its bytes)."""
    key = (kv_dtype, pages.device)
    table = _FP8_TABLES.get(key)
    if table is None:
        values = [_fp8_value(b, kv_dtype == "fp8_e4m3") for b in range(256)]
        table = _FP8_TABLES[key] = torch.tensor(values, dtype=torch.float32, device=pages.device)
    if pages.dtype != torch.uint8:
        pages = pages.view(torch.uint8)
    return table[pages.long()]


def _head_scale(scale, kvh, device):
    """An fp8 cache's scale (None: 1; one element, or one per KV head) shaped to multiply dense
    [B, kvh, keys, d] keys or values."""
    if scale is None:
        return None
    s = torch.as_tensor(scale, dtype=torch.float32, device=device).reshape(-1)
    if s.numel() not in (1, kvh):
        raise ValueError("an fp8 scale has %d elements; it must have 1 or num_kv_heads (%d)"
                         % (s.numel(), kvh))
    return s.reshape(1, -1, 1, 1)


def _blocks_of(block_table_row, k_len, block_size, num_blocks):
    """The physical blocks holding keys 0 .. k_len-1, checked; later entries are never looked at."""
    n = -(-k_len // block_size)
    if n > len(block_table_row):
        raise ValueError("k_len %d needs %d blocks but the block table row has %d"
                         % (k_len, n, len(block_table_row)))
    ids = block_table_row[:n]
    for i, blk in enumerate(ids):
        if not 0 <= blk < num_blocks:
            raise ValueError("block table entry %d is %d, outside [0, %d)" % (i, blk, num_blocks))
    return ids


def _dense(key_pages, value_pages, kv_layout):
    """Pages gathered by block id, [B, n, <one block of the layout>], as contiguous float32 k, v
    [B, num_kv_heads, n * block_size, head_dim]: key j of a sequence is slot j % block_size of its
    page j // block_size. One copy per tensor, into the same memory order for every layout, so
    that the results do not depend on the layout."""
    if kv_layout == "HND":  # [B, n, kvh, bs, d]
        k = key_pages.permute(0, 2, 1, 3, 4)
        v = value_pages.permute(0, 2, 1, 3, 4)
    elif kv_layout == "NHD":  # [B, n, bs, kvh, d]
        k = key_pages.permute(0, 3, 1, 2, 4)
        v = value_pages.permute(0, 3, 1, 2, 4)
    else:  # key [B, n, kvh, d/x, bs, x] (element d at [d/x, s, d%x]); value [B, n, kvh, d, bs]
        k = key_pages.permute(0, 2, 1, 4, 3, 5)
        v = value_pages.permute(0, 2, 1, 4, 3)
    b, kvh, n, bs, d = v.shape  # now [B, kvh, n, bs, ...] in every layout
    f32 = dict(dtype=torch.float32, memory_format=torch.contiguous_format)
    return k.to(**f32).reshape(b, kvh, n * bs, d), v.to(**f32).reshape(b, kvh, n * bs, d)


def gather_kv(key_cache, value_cache, block_table_row, k_len, kv_layout="HND"):
    """Keys and values 0 .. k_len-1 of one sequence, read through its block table.

    block_table_row: the sequence's row of block_tables (a tensor or a list of ints); only its
    first ceil(k_len / block_size) entries are read, on the host, and checked. Returns (k, v),
    each [num_kv_heads, k_len, head_dim] in the cache's dtype, on the cache's device.
    """
    nb, _, bs, _ = cache_geometry(key_cache, value_cache, kv_layout)
    if k_len < 0:
        raise ValueError("k_len must be >= 0, got %d" % k_len)
    row = block_table_row.tolist() if torch.is_tensor(block_table_row) else list(block_table_row)
    ids = torch.tensor(_blocks_of(row, k_len, bs, nb), dtype=torch.long, device=key_cache.device)
    k, v = _dense(key_cache[ids].unsqueeze(0), value_cache[ids].unsqueeze(0), kv_layout)
    return k[0, :, :k_len].to(key_cache.dtype), v[0, :, :k_len].to(key_cache.dtype)


# --------------------------------------------------------------------------------------------
# The function
# --------------------------------------------------------------------------------------------


def _visible(i, j, q_len, k_len, causal, window_left, window_right):
    """Key j visible from query row i of a sequence of q_len rows over k_len keys; ints or
    tensors that broadcast. Row i sits at absolute position p = k_len - q_len + i (bottom-right
    alignment); keys j >= k_len are never visible."""
    p = i + (k_len - q_len)
    vis = j < k_len
    if causal:
        vis = vis & (j <= p)
    if window_left >= 0:
        vis = vis & (j >= p - window_left)
    if window_right >= 0:
        vis = vis & (j <= p + window_right)
    return vis


def visible_keys(q_len, k_len, *, causal, window_left=-1, window_right=-1, num_keys=None,
                 device=None):
    """bool [q_len, num_keys]: key j visible from query row i (SPEC.md "The function").

    Row i sits at absolute position p = k_len - q_len + i (bottom-right alignment). num_keys
    (default k_len) may exceed k_len to pad for partitions: keys j >= k_len are never visible.
    """
    num_keys = k_len if num_keys is None else num_keys
    i = torch.arange(q_len, device=device).unsqueeze(1)
    j = torch.arange(num_keys, device=device).unsqueeze(0)
    return _visible(i, j, q_len, k_len, causal, window_left, window_right).expand(q_len, num_keys)


def _partials(q, k, v, vis, scale, softcap):
    """Softmax partials of query rows against T groups of keys (partitions), per sequence.

    q: [B, R, H, d] float32; k, v: [B, kvh, T, P, d] float32; vis: bool [B, T, R, P].
    Returns m, l: [B, T, R, H] and o: [B, T, R, H, d], where m is the max visible score
    (-inf when none), l = sum exp(s - m) over visible keys (0 when none) and o the normalised
    partial output (0 when none). Invisible keys may hold anything in k; in v they must be
    finite (0 * inf is NaN).
    """
    batch, rows, num_heads, d = q.shape
    kvh, num_parts = k.shape[1], k.shape[2]
    group = num_heads // kvh  # query head h reads kv head h // group
    # [B, kvh, 1, group * R, d]: one matrix of query rows per KV head, against every partition's
    # keys by broadcasting; matmul reads k transposed in place.
    qg = q.reshape(batch, rows, kvh, group, d).permute(0, 2, 3, 1, 4)
    qg = qg.reshape(batch, kvh, 1, group * rows, d)
    s = torch.matmul(qg, k.transpose(-1, -2)).mul_(scale)  # [B, kvh, T, group * R, P]
    if softcap > 0:
        s = s.div_(softcap).tanh_().mul_(softcap)
    invisible = ~vis[:, None, :, None]  # [B, 1, T, 1, R, P]
    s = s.view(batch, kvh, num_parts, group, rows, -1).masked_fill_(invisible, _NEG_INF)
    m = s.amax(dim=-1)  # -inf for a row with no visible key
    m_safe = m.masked_fill(m == _NEG_INF, 0.0)  # keeps exp() off (-inf) - (-inf)
    p = s.sub_(m_safe.unsqueeze(-1)).exp_()  # masked keys give exactly 0
    l = p.sum(dim=-1)
    l_safe = torch.where(l > 0, l, torch.ones_like(l))  # o = 0 where no key is visible
    o = torch.matmul(p.view(batch, kvh, num_parts, group * rows, -1), v)
    o = o.view(batch, kvh, num_parts, group, rows, d) / l_safe.unsqueeze(-1)

    def rows_first(x):  # [B, kvh, T, group, R, ...] -> [B, T, R, H, ...]
        x = x.permute(0, 2, 4, 1, 3, *range(5, x.dim()))
        return x.reshape(batch, num_parts, rows, num_heads, *x.shape[5:])

    return rows_first(m), rows_first(l), rows_first(o)


def combine_partitions(m, l, o):
    """SPEC.md "Split-KV partials": merge per-partition (m_t, l_t, o_t) stacked on dim 0.

        m = max_t m_t;  w_t = l_t * exp(m_t - m);  out = sum_t w_t o_t / sum_t w_t;
        lse = m + log(sum_t w_t)

    A partition with l_t = 0 (no visible key) gets w_t = 0. Rows where every partition is empty
    get out = 0, lse = -inf. m, l: [T, ...]; o: [T, ..., d]. Returns (out, lse) in float32.
    """
    m_max = m.amax(dim=0)
    m_max_safe = m_max.masked_fill(m_max == _NEG_INF, 0.0)
    w = torch.where(l > 0, l * torch.exp(m - m_max_safe), torch.zeros_like(l))
    w_sum = w.sum(dim=0)
    nonempty = w_sum > 0
    w_sum_safe = torch.where(nonempty, w_sum, torch.ones_like(w_sum))
    out = (w.unsqueeze(-1) * o).sum(dim=0) / w_sum_safe.unsqueeze(-1)
    lse = torch.where(nonempty, m_max + torch.log(w_sum), torch.full_like(w_sum, _NEG_INF))
    return out, lse


def _run_batch(query, key_cache, value_cache, block_tables, kv_layout, out, lse, seqs, opts):
    """Attention of every sequence of the batch, with no host read of any tensor.

    seqs: (q_start, q_len, k_len, ok, max_q_len, max_k_len): int64 [batch] tensors of each
    sequence's first query row (None for decode: row b is sequence b's one row) and lengths,
    bool [batch] ok where the caller found them valid, and the longest lengths as Python ints
    (the padding). Every row of out and lse is written: NaN for the rows of a sequence that is
    not ok, whose lengths exceed the padding or whose used block-table entries fall outside the
    cache, and for rows of no sequence.
    """
    q_start, q_len, k_len, ok, max_q_len, max_k_len = seqs
    scale, softcap, partition = opts["scale"], opts["softcap"], opts["partition"]
    mask = dict(causal=opts["causal"], window_left=opts["window_left"],
                window_right=opts["window_right"])
    num_blocks, kvh, bs, d = cache_geometry(key_cache, value_cache, kv_layout)
    rows, num_heads = query.shape[0], query.shape[1]
    batch = q_len.shape[0]
    dev = query.device
    kv_dtype = opts["kv_dtype"]
    k_scale = _head_scale(opts["k_scale"], kvh, dev) if kv_dtype != "auto" else None
    v_scale = _head_scale(opts["v_scale"], kvh, dev) if kv_dtype != "auto" else None
    n_blocks = -(-max_k_len // bs)  # block-table columns that can hold a used entry
    if n_blocks > block_tables.shape[1]:
        raise ValueError("max_k_len %d needs %d blocks but block_tables has %d columns"
                         % (max_k_len, n_blocks, block_tables.shape[1]))
    if n_blocks > 0 and num_blocks == 0:
        raise ValueError("max_k_len is %d but the cache has no blocks" % max_k_len)
    ok = ok & (q_len <= max_q_len) & (k_len <= max_k_len)
    # Key slots per sequence: whole blocks up to max_k_len (v1, one partition), or whole
    # partitions of P (v2); slots past a sequence's keys are masked.
    part = n_blocks * bs if partition is None else partition
    num_parts = 1 if partition is None else -(-max_k_len // partition)
    keys = num_parts * part

    # Results in float32, NaN until a sequence that is ok writes its rows; prefill writes through
    # index_copy_, its padding rows landing in a spare last row.
    out_f = torch.full((rows + 1, num_heads, d), _NAN, dtype=torch.float32, device=dev)
    lse_f = torch.full((rows + 1, num_heads), _NAN, dtype=torch.float32, device=dev)
    i_all = torch.arange(max_q_len, device=dev)
    j_keys = torch.arange(keys, device=dev)
    j_blocks = torch.arange(n_blocks, device=dev)
    per_seq = max(kvh * keys * d, max_q_len * num_heads * d, 1)
    seqs_per_chunk = max(1, _MAX_KV_ELEMENTS.get(dev.type, _MAX_SCORE_ELEMENTS) // per_seq)
    for b0 in range(0, batch if rows > 0 and max_q_len > 0 else 0, seqs_per_chunk):
        b1 = min(batch, b0 + seqs_per_chunk)
        nseq = b1 - b0
        ql, kl = q_len[b0:b1, None], k_len[b0:b1, None]
        # The query rows, padded to max_q_len (rows past a sequence's own are read but not kept).
        if q_start is None:
            q = query[b0:b1, None].float()
        else:
            first = q_start[b0:b1, None] + i_all  # [nseq, max_q_len]
            q = query.index_select(0, first.clamp(0, rows - 1).reshape(-1))
            q = q.reshape(nseq, max_q_len, num_heads, d).float()
            dest = torch.where(i_all < ql, first.clamp(0, rows), rows)
        # Keys and values through the block table; entries past a sequence's blocks are never
        # used (they may be garbage), so block 0 stands in for them and its keys are masked.
        ids = block_tables[b0:b1, :n_blocks].long()
        used = j_blocks < (kl + bs - 1).div(bs, rounding_mode="floor")
        outside = (ids < 0) | (ids >= num_blocks)
        bad = ~ok[b0:b1] | (used & outside).any(dim=1)
        ids = ids.masked_fill(~used | outside, 0)
        kp, vp = key_cache[ids], value_cache[ids]
        if kv_dtype != "auto":  # fp8 bytes to their values; the scales follow
            kp, vp = _fp8_decode(kp, kv_dtype), _fp8_decode(vp, kv_dtype)
        k, v = _dense(kp, vp, kv_layout)  # [nseq, kvh, slots, d]
        if k_scale is not None:
            k = k * k_scale
        if v_scale is not None:
            v = v * v_scale
        if k.shape[2] > keys:  # a partition size that is not a multiple of block_size
            k, v = k[:, :, :keys], v[:, :, :keys]
        elif k.shape[2] < keys:  # the last partition runs past the last block
            pad = (0, 0, 0, keys - k.shape[2])
            k, v = torch.nn.functional.pad(k, pad), torch.nn.functional.pad(v, pad)
        # Slots past a sequence's keys may hold anything, NaN included.
        v = v.masked_fill_((j_keys >= kl)[:, None, :, None], 0.0)
        k = k.reshape(nseq, kvh, num_parts, part, d)  # [nseq, kvh, T, P, d]
        v = v.reshape(nseq, kvh, num_parts, part, d)
        # Query rows go in chunks only to bound the score matrix's memory.
        rows_per_chunk = max(1, _MAX_SCORE_ELEMENTS // max(1, nseq * num_heads * keys))
        for r0 in range(0, max_q_len, rows_per_chunk):
            r1 = min(max_q_len, r0 + rows_per_chunk)
            i = i_all[r0:r1, None]
            vis = _visible(i, j_keys, ql[:, :, None], kl[:, :, None], **mask)
            vis = vis.expand(nseq, r1 - r0, keys)  # [nseq, R, keys]
            vis = vis.reshape(nseq, r1 - r0, num_parts, part).transpose(1, 2)  # [nseq, T, R, P]
            if keys > 0:
                m, l, o = _partials(q[:, r0:r1], k, v, vis, scale, softcap)
                if partition is None:  # one partition holding every key: lse = m + log(l)
                    m, l, o = m[:, 0], l[:, 0], o[:, 0]
                    s = torch.where(l > 0, m + torch.log(l), torch.full_like(l, _NEG_INF))
                else:
                    o, s = combine_partitions(m.transpose(0, 1), l.transpose(0, 1),
                                              o.transpose(0, 1))
            else:  # no sequence has a key
                o = q.new_zeros(nseq, r1 - r0, num_heads, d)
                s = q.new_full((nseq, r1 - r0, num_heads), _NEG_INF)
            o = o.masked_fill(bad[:, None, None, None], _NAN)
            s = s.masked_fill(bad[:, None, None], _NAN)
            if q_start is None:
                out_f[b0:b1] = o[:, 0]
                lse_f[b0:b1] = s[:, 0]
            else:
                to = dest[:, r0:r1].reshape(-1)
                out_f.index_copy_(0, to, o.reshape(-1, num_heads, d))
                lse_f.index_copy_(0, to, s.reshape(-1, num_heads))
    out.copy_(out_f[:rows])  # rounded to out's dtype as it is copied
    lse.copy_(lse_f[:rows])


# --------------------------------------------------------------------------------------------
# Batched entry points
# --------------------------------------------------------------------------------------------


def _outputs(query, out, lse):
    rows, num_heads, _ = query.shape
    if out is None:
        out = torch.empty_like(query)
    elif tuple(out.shape) != tuple(query.shape) or out.dtype != query.dtype:
        raise ValueError("out must be %s %s like the query, got %s %s"
                         % (tuple(query.shape), query.dtype, tuple(out.shape), out.dtype))
    if lse is None:
        lse = torch.empty(rows, num_heads, dtype=torch.float32, device=query.device)
    elif tuple(lse.shape) != (rows, num_heads) or lse.dtype != torch.float32:
        raise ValueError("lse must be float32 %s, got %s %s"
                         % ((rows, num_heads), lse.dtype, tuple(lse.shape)))
    return out, lse


def _check_common(query, key_cache, value_cache, block_tables, kv_layout, scale,
                  kv_dtype="auto"):
    if kv_dtype not in KV_DTYPES:
        raise ValueError("unknown kv_dtype %r (expected one of %s)"
                         % (kv_dtype, ", ".join(KV_DTYPES)))
    if kv_dtype != "auto" and key_cache.element_size() != 1:
        raise ValueError("a %s cache holds bytes (torch.uint8 or float8), not %s"
                         % (kv_dtype, key_cache.dtype))
    if query.dim() != 3:
        raise ValueError("query must be [rows, num_heads, head_dim], got shape %s"
                         % (tuple(query.shape),))
    if query.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError("unsupported dtype %s" % query.dtype)
    _, kvh, _, d = cache_geometry(key_cache, value_cache, kv_layout)
    num_heads = query.shape[1]
    if query.shape[2] != d:
        raise ValueError("query head_dim %d != cache head_dim %d" % (query.shape[2], d))
    if kvh <= 0 or num_heads % kvh != 0:
        raise ValueError("num_heads %d is not a multiple of num_kv_heads %d"
                         % (num_heads, kvh))
    if block_tables.dim() != 2:
        raise ValueError("block_tables must be [batch, max_blocks_per_seq]")
    if scale is None or not math.isfinite(scale):
        raise ValueError("scale must be a finite number (resolve the 1/sqrt(head_dim) default"
                         " first)")


def _check_tables_on_host(key_cache, value_cache, block_tables, k_lens, kv_layout):
    """Every block-table entry the keys k_lens[b] use, read on the host and checked."""
    nb, _, bs, _ = cache_geometry(key_cache, value_cache, kv_layout)
    tables = block_tables[:len(k_lens)].tolist()
    for row, k_len in zip(tables, k_lens):
        _blocks_of(row, k_len, bs, nb)


def _opts(scale, causal, window_left, window_right, softcap, partition=None, kv_dtype="auto",
          k_scale=None, v_scale=None):
    return dict(scale=float(scale), causal=bool(causal), window_left=int(window_left),
                window_right=int(window_right), softcap=float(softcap), partition=partition,
                kv_dtype=kv_dtype, k_scale=k_scale, v_scale=v_scale)


def paged_prefill(query, key_cache, value_cache, block_tables, cu_seqlens_q, cu_seqlens_k, *,
                  scale, causal=True, window_left=-1, window_right=-1, softcap=0.0,
                  kv_layout="HND", out=None, lse=None, max_q_len=None, max_k_len=None,
                  kv_dtype="auto", k_scale=None, v_scale=None):
    """Varlen attention over a paged KV cache (prefill, chunked prefill, prefix caching).

    query [total_q, H, d]; cu_seqlens_q/k int [batch+1] (start at 0, non-decreasing, and
    cu_seqlens_q[batch] == total_q). Sequence b's query rows are cu_seqlens_q[b] ..
    cu_seqlens_q[b+1]-1 and its keys logical positions 0 .. k_len-1 through block_tables[b].
    max_q_len, max_k_len: the longest query and key lengths (Python ints, upper bounds will do):
    with both, nothing is read back to the host and bad lengths or block-table entries give NaN
    rows; without them the lengths and tables are read and checked, and bad ones raise.
    Writes into `out`/`lse` when given (every element), else allocates them. Returns (out, lse).
    kv_dtype, k_scale, v_scale: an fp8 cache and its scales (the module's docstring).
    """
    _check_common(query, key_cache, value_cache, block_tables, kv_layout, scale, kv_dtype)
    batch = cu_seqlens_q.shape[0] - 1 if cu_seqlens_q.dim() == 1 else -1
    if batch < 0 or tuple(cu_seqlens_k.shape) != (batch + 1,):
        raise ValueError("cu_seqlens_q and cu_seqlens_k must both have batch+1 entries (%s, %s)"
                         % (tuple(cu_seqlens_q.shape), tuple(cu_seqlens_k.shape)))
    if block_tables.shape[0] < batch:
        raise ValueError("block_tables has %d rows for a batch of %d"
                         % (block_tables.shape[0], batch))
    rows = query.shape[0]
    if max_q_len is None or max_k_len is None:
        cq, ck = [int(x) for x in cu_seqlens_q.tolist()], [int(x) for x in cu_seqlens_k.tolist()]
        for name, cu in (("cu_seqlens_q", cq), ("cu_seqlens_k", ck)):
            if cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
                raise ValueError("%s must start at 0 and be non-decreasing: %s" % (name, cu))
        if cq[-1] != rows:
            raise ValueError("cu_seqlens_q ends at %d but the query has %d rows" % (cq[-1], rows))
        k_lens = [b - a for a, b in zip(ck, ck[1:])]
        _check_tables_on_host(key_cache, value_cache, block_tables, k_lens, kv_layout)
        max_q_len = max([b - a for a, b in zip(cq, cq[1:])], default=0)
        max_k_len = max(k_lens, default=0)
    out, lse = _outputs(query, out, lse)
    cu_q, cu_k = cu_seqlens_q.long(), cu_seqlens_k.long()
    q_len, k_len = cu_q[1:] - cu_q[:-1], cu_k[1:] - cu_k[:-1]
    # Non-decreasing offsets from 0 to total_q: the sequences' rows tile the query exactly.
    ok = (q_len >= 0) & (k_len >= 0) & (cu_q[0] == 0) & (cu_k[0] == 0) & (cu_q[-1] == rows)
    seqs = (cu_q[:-1], q_len, k_len, ok, int(max_q_len), int(max_k_len))
    _run_batch(query, key_cache, value_cache, block_tables, kv_layout, out, lse, seqs,
               _opts(scale, causal, window_left, window_right, softcap, None, kv_dtype, k_scale,
                     v_scale))
    return out, lse


def paged_decode(query, key_cache, value_cache, block_tables, context_lens, *, scale,
                 causal=True, window_left=-1, window_right=-1, softcap=0.0, kv_layout="HND",
                 partition=None, out=None, lse=None, max_k_len=None, kv_dtype="auto",
                 k_scale=None, v_scale=None):
    """Decode attention: one query row per sequence over its context_lens[b] cached keys.

    query [batch, H, d]. partition=None is "v1" (one pass over the context); an int P is "v2"
    (split-KV): partitions of P keys each give (m_t, l_t, o_t), merged by combine_partitions.
    Both agree to rounding. SPEC.md has P a multiple of block_size (a kernel constraint, which
    the attn-tune declaration enforces); the result here is the same for any P > 0.
    max_k_len: the longest context (a Python int, an upper bound will do): with it nothing is
    read back to the host and bad lengths or block-table entries give NaN rows; without it the
    lengths and tables are read and checked, and bad ones raise.
    kv_dtype, k_scale, v_scale: an fp8 cache and its scales (the module's docstring).
    Returns (out, lse), written into `out`/`lse` when given.
    """
    _check_common(query, key_cache, value_cache, block_tables, kv_layout, scale, kv_dtype)
    batch = query.shape[0]
    if tuple(context_lens.shape) != (batch,):
        raise ValueError("context_lens has shape %s for %d query rows"
                         % (tuple(context_lens.shape), batch))
    if block_tables.shape[0] < batch:
        raise ValueError("block_tables has %d rows for a batch of %d"
                         % (block_tables.shape[0], batch))
    if partition is not None and (int(partition) != partition or partition <= 0):
        raise ValueError("partition must be a positive int, got %r" % (partition,))
    if max_k_len is None:
        lens = [int(x) for x in context_lens.tolist()]
        if any(n < 0 for n in lens):
            raise ValueError("negative context length in %s" % lens)
        _check_tables_on_host(key_cache, value_cache, block_tables, lens, kv_layout)
        max_k_len = max(lens, default=0)
    out, lse = _outputs(query, out, lse)
    k_len = context_lens.long()
    seqs = (None, torch.ones_like(k_len), k_len, k_len >= 0, 1, int(max_k_len))
    _run_batch(query, key_cache, value_cache, block_tables, kv_layout, out, lse, seqs,
               _opts(scale, causal, window_left, window_right, softcap,
                     None if partition is None else int(partition), kv_dtype, k_scale, v_scale))
    return out, lse
