"""Log an engine's decode batches as a traffic trace (docs/traffic.md), with neither vLLM nor the
seed engine installed: stand-ins feed the two hooks what the engines hold at that point.

In vLLM (vllm/v1/worker/gpu_model_runner.py, GPUModelRunner.execute_model, right after
`self._build_attention_metadata(...)` returns; read in vLLM's source, not run against it):

    _trace_step(num_scheduled_tokens_np[:num_reqs], self.optimistic_seq_lens_cpu[:num_reqs])

with `_trace_step = attn_tune_trace.vllm_hook()` once at module level. In a seed-shaped
dispatch module (ex_engine/factors/attn_dispatch.py), the first line of dispatch_decode:

    attn_tune_trace.log_batch(context_lens)

Both write to the file named by $ATTN_TUNE_TRACE and do nothing when it is unset.

    /usr/bin/python3 python/examples/vllm_trace_hook.py [--out trace.jsonl]

Standard library only (no torch).
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import attn_tune_trace  # noqa: E402

_trace_step = attn_tune_trace.vllm_hook()


def vllm_step(num_scheduled_tokens_np, optimistic_seq_lens_cpu):
    """What execute_model holds after building the attention metadata: tokens scheduled per
    request this step, and each request's context (computed tokens + scheduled ones)."""
    num_reqs = len(num_scheduled_tokens_np)
    _trace_step(num_scheduled_tokens_np[:num_reqs], optimistic_seq_lens_cpu[:num_reqs])


def dispatch_decode(context_lens, num_layers=4):
    """The seed-shaped dispatch_decode runs once per layer with the same context_lens; the
    repeats after the first layer are not logged again."""
    for _ in range(num_layers):
        attn_tune_trace.log_batch(context_lens)
        # ... the decode attention of this layer ...


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="the trace to write (default: a temporary file)")
    a = ap.parse_args(argv)
    if a.out is None:
        with tempfile.TemporaryDirectory(prefix="attn_trace_") as tmp:
            return run(os.path.join(tmp, "trace.jsonl"))
    return run(a.out)


def run(out):
    os.environ[attn_tune_trace.ENV_VAR] = out

    # Two vLLM steps: three requests decoding and one prompt chunk of 96 tokens (not logged).
    vllm_step([1, 1, 96, 1], [30, 20000, 96, 512])
    vllm_step([1, 1, 1], [31, 20001, 513])
    # One step of the seed engine, four layers.
    dispatch_decode([120, 4097])

    header, batches = attn_tune_trace.read_trace(out)
    for lens, _ in batches:
        print(lens)
    print(attn_tune_trace.summarize(out, header, batches))
    return 0


if __name__ == "__main__":
    sys.exit(main())
