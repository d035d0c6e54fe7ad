"""Test fixture: attn-tune's own PyTorch decode_v1 in vLLM's cache layout with a planted bug of
engines that take the key packing x from the query's element size: over an fp8 cache (x = 16) it
reads the keys as packed by x = 8 (16 / 2 bytes of fp16). verify fails it and names the misread,
though the caches are handed in the kernel's layout, not the problem's."""

from attn_tune_torch import attn_tune_kernels_vllm as _torch_vllm

_decode = _torch_vllm()["families"]["decode_v1"]


def _run(call, config):
    kc = call.key_cache
    nb, kvh, dx, bs, x = kc.shape
    if x != 16 or getattr(call, "kv_dtype", "auto") == "auto":
        _decode["run"](call, config)
        return
    # The misreading: the same memory seen as [nb, kvh, 2 dx, bs, 8], so that key dimension d of
    # slot s comes from ((d / 8) * bs + s) * 8 + d % 8; laid out again with x = 16 for the right
    # kernel, which then computes what the misreading kernel would.
    keys = kc.reshape(nb, kvh, dx * 2, bs, 8).permute(0, 1, 3, 2, 4).reshape(nb, kvh, bs, dx * 16)
    misread = keys.reshape(nb, kvh, bs, dx, 16).permute(0, 1, 3, 2, 4).contiguous()
    kept = kc.clone()
    kc.copy_(misread)
    try:
        _decode["run"](call, config)
    finally:
        kc.copy_(kept)  # the harness's cache as it was handed


def attn_tune_kernels():
    decode = dict(_decode)
    decode.update(run=_run)
    return {"name": "vllm-x8-fp8", "version": "0.1", "families": {"decode_v1": decode}}
