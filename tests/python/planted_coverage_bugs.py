"""Test fixture: attn-tune's own PyTorch decode_v1, each factory with one planted bug that is
wrong only in a shape or batch verify once left out (an outside audit of verify found each of
these passing it). `verify --intensity quick` must fail every one:

- heads_over_32: heads 32 and up are never written (no case had more than 32 heads);
- batch_over_16: sequences 16 and up get sequence b % 16's output (edge batches had at most 14
  sequences when the set declared partition 384);
- after_empty: a sequence that follows an empty one gets half its output (empty sequences came
  last);
- gqa_odd: heads 0 and 1 swap their output when num_heads / num_kv_heads is no power of two;
- window_block_edge: the output is halved where a window's first visible key is a block's first
  key, (context_len - 1 - window_left) % block_size == 0;
- fp8_scale_two_heads: per-KV-head fp8 scales read as scale[kv_head & 1] (every case had two KV
  heads);
- first_length: sequence 0's length used for every sequence (verify failed it, but named the
  mistake only where sequence 0 was the batch's shortest)."""

from attn_tune_torch import attn_tune_kernels as _torch_kernels

_v1 = _torch_kernels()["families"]["decode_v1"]


def _kernels(name, after=None, before=None):
    def run(call, config):
        if before is not None:
            before(call)
        _v1["run"](call, config)
        if after is not None:
            after(call)

    decode = dict(_v1)
    decode["run"] = run
    return {"name": name, "version": "0.1", "families": {"decode_v1": decode}}


def _lens(call):
    return [int(n) for n in call.context_lens.tolist()]


def heads_over_32():
    def after(call):
        call.out[:, 32:, :] = 0
    return _kernels("heads-over-32", after=after)


def batch_over_16():
    def after(call):
        for b in range(16, call.out.shape[0]):
            call.out[b] = call.out[b % 16]
    return _kernels("batch-over-16", after=after)


def after_empty():
    def after(call):
        lens = _lens(call)
        for b in range(1, len(lens)):
            if lens[b] > 0 and 0 in lens[:b]:
                call.out[b] *= 0.5
    return _kernels("after-empty", after=after)


def gqa_odd():
    def after(call):
        group = call.num_heads // call.num_kv_heads
        if group & (group - 1):
            call.out[:, [0, 1]] = call.out[:, [1, 0]].clone()
    return _kernels("gqa-odd", after=after)


def window_block_edge():
    def after(call):
        if call.window_left < 0:
            return
        for b, n in enumerate(_lens(call)):
            if n > call.window_left + 1 and (n - 1 - call.window_left) % call.block_size == 0:
                call.out[b] *= 0.5
    return _kernels("window-block-edge", after=after)


def fp8_scale_two_heads():
    def before(call):
        if getattr(call, "kv_dtype", "auto") != "auto" and call.k_scale.numel() > 2:
            for scale in (call.k_scale, call.v_scale):
                flat = scale.reshape(-1)
                for h in range(2, flat.numel()):
                    flat[h] = flat[h & 1]
    return _kernels("fp8-scale-two-heads", before=before)


def first_length():
    saved = []

    def before(call):
        saved[:] = [call.context_lens.clone()]
        call.context_lens[:] = saved[0][0]

    def after(call):
        call.context_lens.copy_(saved[0])
    return _kernels("first-length", after=after, before=before)
