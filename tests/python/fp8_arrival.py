"""attn-tune's own PyTorch kernels behind a check of how an fp8 cache reaches a Python kernel
(docs/python-kernels.md): as torch.float8_e4m3fn / torch.float8_e5m2 where this torch has the
format's dtype, as torch.uint8 otherwise, with k_scale and v_scale as float32 tensors of one
element or one per KV head, num_kv_scales elements long (can_run sees num_kv_scales too). The
HND and vllm layouts are what the tests load.

A run whose call breaks that raises, so verify fails the case with the reason. With
ATTN_EXPECT_TORCH_FLOAT8=1 (the test in torch 2.x's environment) the factory also refuses a
torch without the float8 dtypes, so a pass there means the float8 view itself was checked.
"""

import os

import torch

from attn_tune_torch import attn_tune_kernels as _torch_kernels

TORCH_NAMES = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


def _expected_dtype(kv_dtype):
    return getattr(torch, TORCH_NAMES[kv_dtype], torch.uint8)


def check_scale_count(call):
    """Raises unless num_kv_scales says how many scales the call has (can_run sees it too)."""
    want = (0,) if call.kv_dtype == "auto" else (1, call.num_kv_heads)
    if call.num_kv_scales not in want:
        raise TypeError("num_kv_scales %r with kv_dtype %s and %d KV heads"
                        % (call.num_kv_scales, call.kv_dtype, call.num_kv_heads))


def check_arrival(call):
    """Raises unless the call's caches and scales arrived as the docs say."""
    check_scale_count(call)
    if call.kv_dtype == "auto":
        if call.k_scale is not None or call.v_scale is not None:
            raise TypeError("a cache of the query's dtype came with scales")
        return
    want = _expected_dtype(call.kv_dtype)
    for name in ("key_cache", "value_cache"):
        t = getattr(call, name)
        if t.dtype != want:
            raise TypeError("%s %s arrived as %s, not %s" % (call.kv_dtype, name, t.dtype, want))
        if t.element_size() != 1:
            raise TypeError("%s has %d-byte elements" % (name, t.element_size()))
    for name in ("k_scale", "v_scale"):
        s = getattr(call, name)
        if s is None or s.dtype != torch.float32 or s.dim() != 1 or \
                s.shape[0] != call.num_kv_scales:
            raise TypeError("%s is %r, not float32 of shape [num_kv_scales] = [%d]"
                            % (name, None if s is None else (s.dtype, tuple(s.shape)),
                               call.num_kv_scales))


def _checked(run):
    def checked_run(call, config):
        check_arrival(call)
        return run(call, config)

    return checked_run


def _checked_can_run(can_run):
    def checked_can_run(call, config):
        check_scale_count(call)
        return None if can_run is None else can_run(call, config)

    return checked_can_run


def attn_tune_kernels(kv_layout="HND"):
    if os.environ.get("ATTN_EXPECT_TORCH_FLOAT8") == "1" and \
            not all(hasattr(torch, n) for n in TORCH_NAMES.values()):
        raise RuntimeError("torch %s has no float8 dtypes, and this test expects them"
                           % torch.__version__)
    decl = _torch_kernels(kv_layout)
    for family in decl["families"].values():
        family["run"] = _checked(family["run"])
        family["can_run"] = _checked_can_run(family.get("can_run"))
    have = "float8" if hasattr(torch, TORCH_NAMES["fp8_e4m3"]) else "uint8"
    decl["name"] = "fp8-arrival (torch %s, fp8 caches as %s)" % (torch.__version__, have)
    return decl


def attn_tune_kernels_vllm():
    return attn_tune_kernels("vllm")
