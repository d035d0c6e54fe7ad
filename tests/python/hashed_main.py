"""Test fixture: a module that imports a helper from beside it (hashed_helper.py). Its sources
SHA-256 must cover the helper too, so that an edit to the helper alone is other kernels to
--resume and to table lookup (tests/python/sources_hash.cmake)."""

import hashed_helper


def attn_tune_kernels():
    return {"name": "hashed-main", "version": "0.1",
            "families": {"decode_v1": hashed_helper.decode_v1()}}
