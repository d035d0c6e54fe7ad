"""Test fixture: a helper module beside hashed_main.py that holds its kernels
(tests/python/sources_hash.cmake appends to a copy of this file)."""

from attn_tune_torch import attn_tune_kernels as _torch_kernels


def decode_v1():
    return _torch_kernels()["families"]["decode_v1"]
