"""Paged attention in plain PyTorch: the function SPEC.md of attn-tune defines, written to be read.

Every call gathers one sequence's keys and values through its block table into a dense
[num_kv_heads, k_len, head_dim] pair (whatever the cache layout), then does masked softmax
attention in float32. Split-KV decode ("v2") computes per-partition (m_t, l_t, o_t) and combines
them with SPEC.md's partition algebra, so the reduce an engine's v2 kernel does is spelled out
here too.

Public API:
    gather_kv(key_cache, value_cache, block_table_row, k_len, kv_layout) -> (k, v)
    paged_prefill(query, key_cache, value_cache, block_tables, cu_seqlens_q, cu_seqlens_k, *,
                  scale, ...) -> (out, lse)
    paged_decode(query, key_cache, value_cache, block_tables, context_lens, *, scale,
                 partition=None, ...) -> (out, lse)
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
"""

import math

import torch

KV_LAYOUTS = ("HND", "NHD", "vllm")

# Most score elements one chunk of query rows may materialise (float32): bounds the memory of
# long prefills without affecting the result.
_MAX_SCORE_ELEMENTS = 1 << 24

_NEG_INF = float("-inf")


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


def gather_kv(key_cache, value_cache, block_table_row, k_len, kv_layout="HND"):
    """Keys and values 0 .. k_len-1 of one sequence, read through its block table.

    block_table_row: the sequence's row of block_tables (a tensor or a list of ints); only its
    first ceil(k_len / block_size) entries are read. Returns (k, v), each
    [num_kv_heads, k_len, head_dim] in the cache's dtype, on the cache's device.
    """
    nb, kvh, bs, d = cache_geometry(key_cache, value_cache, kv_layout)
    if k_len < 0:
        raise ValueError("k_len must be >= 0, got %d" % k_len)
    row = block_table_row.tolist() if torch.is_tensor(block_table_row) else list(block_table_row)
    ids = torch.tensor(_blocks_of(row, k_len, bs, nb), dtype=torch.long, device=key_cache.device)
    n = ids.numel()
    kb, vb = key_cache[ids], value_cache[ids]  # the sequence's pages, in logical order
    if kv_layout == "HND":  # [n, kvh, bs, d]
        k = kb.permute(1, 0, 2, 3).reshape(kvh, n * bs, d)
        v = vb.permute(1, 0, 2, 3).reshape(kvh, n * bs, d)
    elif kv_layout == "NHD":  # [n, bs, kvh, d]
        k = kb.permute(2, 0, 1, 3).reshape(kvh, n * bs, d)
        v = vb.permute(2, 0, 1, 3).reshape(kvh, n * bs, d)
    else:  # key [n, kvh, d/x, bs, x] (element d at [d/x, s, d%x]); value [n, kvh, d, bs]
        k = kb.permute(1, 0, 3, 2, 4).reshape(kvh, n * bs, d)
        v = vb.permute(1, 0, 3, 2).reshape(kvh, n * bs, d)
    return k[:, :k_len], v[:, :k_len]


# --------------------------------------------------------------------------------------------
# The function
# --------------------------------------------------------------------------------------------


def visible_keys(q_len, k_len, *, causal, window_left=-1, window_right=-1, num_keys=None,
                 device=None):
    """bool [q_len, num_keys]: key j visible from query row i (SPEC.md "The function").

    Row i sits at absolute position p = k_len - q_len + i (bottom-right alignment). num_keys
    (default k_len) may exceed k_len to pad for partitions: keys j >= k_len are never visible.
    """
    num_keys = k_len if num_keys is None else num_keys
    p = torch.arange(q_len, device=device).unsqueeze(1) + (k_len - q_len)
    j = torch.arange(num_keys, device=device).unsqueeze(0)
    vis = j < k_len
    if causal:
        vis = vis & (j <= p)
    if window_left >= 0:
        vis = vis & (j >= p - window_left)
    if window_right >= 0:
        vis = vis & (j <= p + window_right)
    return vis


def _partials(q, k, v, vis, scale, softcap):
    """Softmax partials of query rows against T groups of keys (partitions).

    q: [q_len, H, d] float32; k, v: [T, kvh, P, d] float32; vis: bool [T, q_len, P].
    Returns m, l: [T, q_len, H] and o: [T, q_len, H, d], where m is the max visible score
    (-inf when none), l = sum exp(s - m) over visible keys (0 when none) and o the normalised
    partial output (0 when none).
    """
    q_len, num_heads, d = q.shape
    num_parts, kvh = k.shape[0], k.shape[1]
    group = num_heads // kvh  # query head h reads kv head h // group
    qg = q.reshape(q_len, kvh, group, d)
    s = torch.einsum("qhgd,thpd->thgqp", qg, k) * scale  # [T, kvh, group, q_len, P]
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~vis[:, None, None], _NEG_INF)
    m = s.amax(dim=-1)  # -inf for a row with no visible key
    m_safe = m.masked_fill(m == _NEG_INF, 0.0)  # keeps exp() off (-inf) - (-inf)
    p = torch.exp(s - m_safe.unsqueeze(-1))  # masked keys give exactly 0
    l = p.sum(dim=-1)
    l_safe = torch.where(l > 0, l, torch.ones_like(l))  # o = 0 where no key is visible
    o = torch.einsum("thgqp,thpd->thgqd", p, v) / l_safe.unsqueeze(-1)

    def rows_first(x):  # [T, kvh, group, q_len, ...] -> [T, q_len, H, ...]
        x = x.movedim(3, 1)
        return x.reshape(num_parts, q_len, num_heads, *x.shape[4:])

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


def _attend(q, k, v, *, scale, causal, window_left, window_right, softcap, partition=None):
    """One sequence: q [q_len, H, d], k/v [kvh, k_len, d] (any float dtype). Returns float32
    out [q_len, H, d] and lse [q_len, H]. partition=None: one pass; an int: split-KV."""
    q_len, num_heads, d = q.shape
    kvh, k_len = k.shape[0], k.shape[1]
    if k_len == 0 or q_len == 0:
        return (torch.zeros(q_len, num_heads, d, dtype=torch.float32, device=q.device),
                torch.full((q_len, num_heads), _NEG_INF, dtype=torch.float32, device=q.device))
    q, k, v = q.float(), k.float(), v.float()
    mask = dict(causal=causal, window_left=window_left, window_right=window_right, device=q.device)

    if partition is None:
        # One pass: a single "partition" holding every key; lse = m + log(l).
        # Query rows go in chunks only to bound the score matrix's memory.
        vis = visible_keys(q_len, k_len, **mask)
        rows_per_chunk = max(1, _MAX_SCORE_ELEMENTS // (num_heads * k_len))
        outs, lses = [], []
        for r0 in range(0, q_len, rows_per_chunk):
            r1 = min(q_len, r0 + rows_per_chunk)
            m, l, o = _partials(q[r0:r1], k.unsqueeze(0), v.unsqueeze(0),
                                vis[r0:r1].unsqueeze(0), scale, softcap)
            m, l, o = m[0], l[0], o[0]
            outs.append(o)
            lses.append(torch.where(l > 0, m + torch.log(l), torch.full_like(l, _NEG_INF)))
        return torch.cat(outs), torch.cat(lses)

    # Split-KV: partition t covers keys [t*P, min((t+1)*P, k_len)); the tail is padded with
    # invisible keys so that every partition has P slots.
    num_parts = -(-k_len // partition)
    padded = num_parts * partition
    pad = (0, 0, 0, padded - k_len)
    k_parts = torch.nn.functional.pad(k, pad).reshape(kvh, num_parts, partition, d).transpose(0, 1)
    v_parts = torch.nn.functional.pad(v, pad).reshape(kvh, num_parts, partition, d).transpose(0, 1)
    vis = visible_keys(q_len, k_len, num_keys=padded, **mask)  # [q_len, padded]
    vis = vis.reshape(q_len, num_parts, partition).transpose(0, 1)  # [T, q_len, P]
    m, l, o = _partials(q, k_parts, v_parts, vis, scale, softcap)
    return combine_partitions(m, l, o)


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


def _check_common(query, key_cache, value_cache, block_tables, kv_layout, scale):
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


def _run_sequences(query, key_cache, value_cache, block_tables, seqs, kv_layout, out, lse, opts):
    """seqs: (row0, row1, k_len) per batch entry. Writes every row of out and lse."""
    tables = block_tables.tolist()
    for b, (r0, r1, k_len) in enumerate(seqs):
        k, v = gather_kv(key_cache, value_cache, tables[b], k_len, kv_layout)
        o, s = _attend(query[r0:r1], k, v, **opts)
        out[r0:r1] = o.to(out.dtype)
        lse[r0:r1] = s


def paged_prefill(query, key_cache, value_cache, block_tables, cu_seqlens_q, cu_seqlens_k, *,
                  scale, causal=True, window_left=-1, window_right=-1, softcap=0.0,
                  kv_layout="HND", out=None, lse=None):
    """Varlen attention over a paged KV cache (prefill, chunked prefill, prefix caching).

    query [total_q, H, d]; cu_seqlens_q/k int [batch+1] (start at 0, non-decreasing, and
    cu_seqlens_q[batch] == total_q). Sequence b's query rows are cu_seqlens_q[b] ..
    cu_seqlens_q[b+1]-1 and its keys logical positions 0 .. k_len-1 through block_tables[b].
    Writes into `out`/`lse` when given (every element), else allocates them. Returns (out, lse).
    """
    _check_common(query, key_cache, value_cache, block_tables, kv_layout, scale)
    cq, ck = [int(x) for x in cu_seqlens_q.tolist()], [int(x) for x in cu_seqlens_k.tolist()]
    batch = len(cq) - 1
    if batch < 0 or len(ck) != batch + 1:
        raise ValueError("cu_seqlens_q and cu_seqlens_k must both have batch+1 entries (%d, %d)"
                         % (len(cq), len(ck)))
    if block_tables.shape[0] < batch:
        raise ValueError("block_tables has %d rows for a batch of %d"
                         % (block_tables.shape[0], batch))
    for name, cu in (("cu_seqlens_q", cq), ("cu_seqlens_k", ck)):
        if cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
            raise ValueError("%s must start at 0 and be non-decreasing: %s" % (name, cu))
    if cq[-1] != query.shape[0]:
        raise ValueError("cu_seqlens_q ends at %d but the query has %d rows"
                         % (cq[-1], query.shape[0]))
    out, lse = _outputs(query, out, lse)
    seqs = [(cq[b], cq[b + 1], ck[b + 1] - ck[b]) for b in range(batch)]
    opts = dict(scale=float(scale), causal=bool(causal), window_left=int(window_left),
                window_right=int(window_right), softcap=float(softcap))
    _run_sequences(query, key_cache, value_cache, block_tables, seqs, kv_layout, out, lse, opts)
    return out, lse


def paged_decode(query, key_cache, value_cache, block_tables, context_lens, *, scale,
                 causal=True, window_left=-1, window_right=-1, softcap=0.0, kv_layout="HND",
                 partition=None, out=None, lse=None):
    """Decode attention: one query row per sequence over its context_lens[b] cached keys.

    query [batch, H, d]. partition=None is "v1" (one pass over the context); an int P is "v2"
    (split-KV): partitions of P keys each give (m_t, l_t, o_t), merged by combine_partitions.
    Both agree to rounding. SPEC.md has P a multiple of block_size (a kernel constraint, which
    the attn-tune declaration enforces); the result here is the same for any P > 0.
    Returns (out, lse), written into `out`/`lse` when given.
    """
    _check_common(query, key_cache, value_cache, block_tables, kv_layout, scale)
    lens = [int(x) for x in context_lens.tolist()]
    batch = query.shape[0]
    if len(lens) != batch:
        raise ValueError("context_lens has %d entries for %d query rows" % (len(lens), batch))
    if block_tables.shape[0] < batch:
        raise ValueError("block_tables has %d rows for a batch of %d"
                         % (block_tables.shape[0], batch))
    if any(n < 0 for n in lens):
        raise ValueError("negative context length in %s" % lens)
    if partition is not None and (int(partition) != partition or partition <= 0):
        raise ValueError("partition must be a positive int, got %r" % (partition,))
    out, lse = _outputs(query, out, lse)
    seqs = [(b, b + 1, lens[b]) for b in range(batch)]
    opts = dict(scale=float(scale), causal=bool(causal), window_left=int(window_left),
                window_right=int(window_right), softcap=float(softcap),
                partition=None if partition is None else int(partition))
    _run_sequences(query, key_cache, value_cache, block_tables, seqs, kv_layout, out, lse, opts)
    return out, lse
