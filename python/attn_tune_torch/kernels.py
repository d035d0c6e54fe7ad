"""attn-tune's Python-kernel declaration for attention.py: what `python:attn_tune_torch` hands
the bridge.

A factory returns {"name", "version", "device", "families"}; each family holds the KV layout its
caches arrive in, whether it writes lse, its configuration space ({param: [values]}), the fp8
caches it reads ("kv_dtypes": both), `run` and optionally `can_run`. `run(call, config)` writes the result into call.out and call.lse in place
(both arrive poisoned); `can_run(call, config)` returns None or the reason it refuses (tensors
are None then). Bad shapes raise an ordinary exception, which the bridge reports as a failure;
bad values in the index tensors (lengths, block-table entries) give NaN rows instead, as `run`
reads no tensor on the host (attention.py).
"""

import torch

from .attention import KV_DTYPES, KV_LAYOUTS, cache_geometry, paged_decode, paged_prefill

FAMILIES = ("decode_v1", "decode_v2", "prefill")
V2_PARTITIONS = [256, 512]

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_PARAMS = {"decode_v1": {}, "decode_v2": {"partition": V2_PARTITIONS}, "prefill": {}}


def _check_config(family, config):
    config = dict(config or {})
    unknown = sorted(set(config) - set(_PARAMS[family]))
    if unknown:
        raise ValueError("%s has no parameter %s" % (family, ", ".join(unknown)))
    missing = sorted(set(_PARAMS[family]) - set(config))
    if missing:
        raise ValueError("%s needs parameter %s" % (family, ", ".join(missing)))
    return config


def can_run(call, config):
    """None when `config` computes `call` exactly as SPEC.md says, else the reason it does not."""
    family = call.family
    if family not in FAMILIES:
        return "unknown family %r" % (family,)
    if call.dtype not in _DTYPES:
        return "dtype %r is not supported" % (call.dtype,)
    if call.kv_layout not in KV_LAYOUTS:
        return "kv_layout %r is not supported" % (call.kv_layout,)
    if call.num_kv_heads <= 0 or call.num_heads % call.num_kv_heads != 0:
        return "num_heads %d is not a multiple of num_kv_heads %d" % (call.num_heads,
                                                                      call.num_kv_heads)
    if family == "decode_v2":
        partition = int(_check_config(family, config)["partition"])
        if partition <= 0 or partition % call.block_size != 0:
            return "partition %d is not a multiple of block_size %d" % (partition, call.block_size)
    return None


def _check_call(call):
    """The tensors must be what the call's fields say (catches a bridge that hands over the
    wrong view rather than computing garbage from it)."""
    dtype = _DTYPES[call.dtype]
    rows = (call.num_rows, call.num_heads, call.head_dim)
    if call.query.dtype != dtype or tuple(call.query.shape) != rows:
        raise ValueError("query is %s %s, the call says %s %s"
                         % (call.query.dtype, tuple(call.query.shape), dtype, rows))
    kv_dtype = getattr(call, "kv_dtype", "auto")
    if kv_dtype == "auto" and call.key_cache.dtype != dtype:
        raise ValueError("key_cache is %s, the call says %s" % (call.key_cache.dtype, dtype))
    if kv_dtype != "auto" and call.key_cache.element_size() != 1:
        raise ValueError("key_cache is %s, the call says %s (one byte per element)"
                         % (call.key_cache.dtype, kv_dtype))
    geometry = cache_geometry(call.key_cache, call.value_cache, call.kv_layout)
    expect = (call.num_blocks, call.num_kv_heads, call.block_size, call.head_dim)
    if geometry != expect:
        raise ValueError("%s cache holds (num_blocks, kv_heads, block_size, head_dim) = %s,"
                         " the call says %s" % (call.kv_layout, geometry, expect))
    if tuple(call.block_tables.shape) != (call.batch, call.max_blocks_per_seq):
        raise ValueError("block_tables has shape %s, the call says %s"
                         % (tuple(call.block_tables.shape), (call.batch, call.max_blocks_per_seq)))


def _use_threads(call):
    threads = getattr(call, "threads", None) or getattr(call, "host_threads", None)
    if threads and threads >= 1 and torch.get_num_threads() != threads:
        torch.set_num_threads(int(threads))


def _make_run(family):
    def run(call, config):
        if call.family != family:
            raise ValueError("the %s kernel was called for family %r" % (family, call.family))
        config = _check_config(family, config)
        reason = can_run(call, config)
        if reason is not None:
            raise ValueError("cannot run: " + reason)
        _check_call(call)
        _use_threads(call)
        # The call's longest lengths (plain ints) size the padding, so that nothing is read
        # back from the tensors: on CUDA the run is enqueued without a host synchronisation,
        # which attn-tune's timing (the stream held while a rep is enqueued) relies on.
        opts = dict(scale=call.scale, causal=bool(call.causal), window_left=call.window_left,
                    window_right=call.window_right, softcap=call.softcap,
                    kv_layout=call.kv_layout, out=call.out, lse=call.lse,
                    max_k_len=int(call.max_k_len))
        kv_dtype = getattr(call, "kv_dtype", "auto")
        if kv_dtype != "auto":  # an fp8 cache (attn-tune's plugin ABI 4) and its scales
            opts.update(kv_dtype=kv_dtype, k_scale=call.k_scale, v_scale=call.v_scale)
        if family == "prefill":
            paged_prefill(call.query, call.key_cache, call.value_cache, call.block_tables,
                          call.cu_seqlens_q, call.cu_seqlens_k, max_q_len=int(call.max_q_len),
                          **opts)
        else:
            partition = int(config["partition"]) if family == "decode_v2" else None
            paged_decode(call.query, call.key_cache, call.value_cache, call.block_tables,
                         call.context_lens, partition=partition, **opts)

    run.__name__ = "run_" + family
    run.__doc__ = "Computes the %s family of SPEC.md into call.out and call.lse." % family
    return run


def attn_tune_kernels(kv_layout="HND"):
    """The declaration attn-tune's Python bridge loads: three families reading `kv_layout`."""
    from . import __version__  # defined before this module is imported

    if kv_layout not in KV_LAYOUTS:
        raise ValueError("unknown kv_layout %r" % (kv_layout,))
    families = {}
    for family in FAMILIES:
        decl = {"kv_layout": kv_layout, "writes_lse": True,
                "params": {name: list(values) for name, values in _PARAMS[family].items()},
                "run": _make_run(family), "kv_dtypes": list(KV_DTYPES[1:])}
        if family == "decode_v2":
            decl["can_run"] = can_run
        families[family] = decl
    return {"name": "attn_tune_torch", "version": __version__, "device": "cpu",
            "families": families}


def attn_tune_kernels_nhd():
    """The same kernels, reading NHD caches (`python:attn_tune_torch:attn_tune_kernels_nhd`)."""
    return attn_tune_kernels("NHD")


def attn_tune_kernels_vllm():
    """The same kernels, reading vLLM's caches (`python:attn_tune_torch:attn_tune_kernels_vllm`)."""
    return attn_tune_kernels("vllm")


def attn_tune_kernels_cuda():
    """The same kernels on the GPU (`python:attn_tune_torch:attn_tune_kernels_cuda`): HND caches
    in device memory, run on the stream attn-tune times (no host synchronisation inside a call)."""
    decl = attn_tune_kernels("HND")
    decl["device"] = "cuda"
    return decl
