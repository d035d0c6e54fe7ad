"""Test fixture: attn-tune's own PyTorch decode_v1 behind a kernel that keeps its last answer,
keyed by the addresses and shapes of its inputs (as a cache of converted K/V or a plan keyed by
data_ptr() would): a call whose buffers and shapes match the call before gets that call's output
back, however their contents changed. Every fresh problem is right, so only a call after the
inputs were rewritten in place (what an engine does every decode step) shows it; verify must
fail it and say so."""

from attn_tune_torch import attn_tune_kernels as _torch_kernels

_decode_v1 = _torch_kernels()["families"]["decode_v1"]
_last = {}


def _key(call):
    return tuple((t.data_ptr(), tuple(t.shape)) for t in (call.query, call.key_cache,
                                                          call.value_cache, call.out))


def _run(call, config):
    key = _key(call)
    if _last.get("key") == key:
        call.out.copy_(_last["out"])
        if call.lse is not None:
            call.lse.copy_(_last["lse"])
        return
    _decode_v1["run"](call, config)
    _last.update(key=key, out=call.out.clone(),
                 lse=call.lse.clone() if call.lse is not None else None)


def attn_tune_kernels():
    decode = dict(_decode_v1)
    decode.update(run=_run)
    return {"name": "pointer-cache", "version": "0.1", "families": {"decode_v1": decode}}
