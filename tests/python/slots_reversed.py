"""Test fixture: attn-tune's own PyTorch decode_v1 reading each block's slots in reverse order
(slot s of a block taken from slot block_size - 1 - s: a layout misread). Rows whose last block is
partly filled read the slots past their length, which verify's nan-tails cases fill with NaN, so
they come out NaN; that is not the stale-slot bug (a kernel folding those slots in with a zero
weight), because the rows stay wrong when those slots hold finite values, and verify must not
say it is."""

from attn_tune_torch import attn_tune_kernels as _torch_kernels

_decode_v1 = _torch_kernels()["families"]["decode_v1"]


class _Reversed:
    """The call, with its caches' slots reversed within each block (HND: dimension 2)."""

    def __init__(self, call):
        self._call = call
        self.key_cache = call.key_cache.flip(2)
        self.value_cache = call.value_cache.flip(2)

    def __getattr__(self, name):
        return getattr(self._call, name)


def _run(call, config):
    _decode_v1["run"](_Reversed(call), config)


def attn_tune_kernels():
    decode = dict(_decode_v1)
    decode.update(run=_run, kv_dtypes=[])
    return {"name": "slots-reversed", "version": "0.1", "families": {"decode_v1": decode}}
