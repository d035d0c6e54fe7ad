"""The vLLM hook of python/attn_tune_trace.py against the vLLM installed in the engine's
environment: the line its docstring tells an engine author to add to GPUModelRunner.execute_model
names locals and attributes that exist there, after the attention metadata is built, and the
CPU runner inherits that method; then the hook, fed what those names hold (a numpy array of
tokens scheduled per request and a slice of the int32 CPU tensor of context lengths), writes the
decode rows as a trace that attn-tune reads. Static, since running execute_model needs a model.

    python vllm_trace_hook.py ATTN_TUNE WORK_DIR     (inside the engine's environment)
"""
import ast
import importlib.util
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import attn_tune_trace  # noqa: E402


def source_of(module):
    """The parsed source of vllm's `module` (dotted, under vllm), found without importing vllm
    (whose import needs more than its kernels do)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        sys.exit("FAIL: vllm is not installed")
    path = os.path.join(os.path.dirname(spec.origin), *module.split(".")[1:]) + ".py"
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read()), path


def method(tree, cls, name):
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                    return item
            return None
    sys.exit("FAIL: no class %s" % cls)


def main():
    exe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    gpu, gpu_path = source_of("vllm.v1.worker.gpu_model_runner")
    run = method(gpu, "GPUModelRunner", "execute_model")
    if run is None:
        sys.exit("FAIL: GPUModelRunner has no execute_model in %s" % gpu_path)
    stored = {n.id for n in ast.walk(run) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Store)}
    stored |= {a.arg for a in run.args.args}
    for local in ("num_reqs", "num_scheduled_tokens_np"):
        if local not in stored:
            sys.exit("FAIL: execute_model has no local %r (the hook's line reads it)" % local)
    calls = [n for n in ast.walk(run) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr == "_build_attention_metadata"]
    if not calls:
        sys.exit("FAIL: execute_model does not call self._build_attention_metadata")
    init = method(gpu, "GPUModelRunner", "__init__")
    attrs = {n.attr for n in ast.walk(init) if isinstance(n, ast.Attribute)
             and isinstance(n.ctx, ast.Store)}
    if "optimistic_seq_lens_cpu" not in attrs:
        sys.exit("FAIL: GPUModelRunner.__init__ sets no optimistic_seq_lens_cpu")
    cpu, cpu_path = source_of("vllm.v1.worker.cpu_model_runner")
    if method(cpu, "CPUModelRunner", "execute_model") is not None:
        sys.exit("FAIL: CPUModelRunner overrides execute_model (%s): the hook's line is not "
                 "enough there" % cpu_path)
    print("vLLM %s: execute_model has num_reqs and num_scheduled_tokens_np, calls "
          "_build_attention_metadata; optimistic_seq_lens_cpu is set in __init__; "
          "CPUModelRunner inherits execute_model" % gpu_path)

    # The values those names hold: tokens per request this step (prompt chunks, decode rows) and
    # the int32 CPU tensor of context lengths, sliced as the line slices them.
    import torch
    try:
        import numpy as np

        def tokens_array(values):
            return np.array(values, dtype=np.int32)
    except ImportError:  # the CPU wheel's environment may lack numpy: the hook takes tensors too
        def tokens_array(values):
            return torch.tensor(values, dtype=torch.int32)
    trace = os.path.join(work, "hook.jsonl")
    if os.path.exists(trace):
        os.remove(trace)
    optimistic = torch.zeros(8, dtype=torch.int32)
    steps = [([37, 1, 1], [37, 500, 20031]), ([1, 1, 1, 4], [38, 501, 20032, 4]),
             ([512], [512])]
    with open(trace, "w", encoding="utf-8") as f:
        writer = attn_tune_trace.TraceWriter(f)
        step = attn_tune_trace.vllm_hook(writer)
        for tokens, lens in steps:
            num_reqs = len(tokens)
            num_scheduled_tokens_np = tokens_array(tokens)
            optimistic[:num_reqs] = torch.tensor(lens, dtype=torch.int32)
            step(num_scheduled_tokens_np[:num_reqs], optimistic[:num_reqs])
    _, got = attn_tune_trace.read_trace(trace)
    want = [[500, 20031], [38, 501, 20032]]
    if [list(lens) for lens, _count in got] != want:
        sys.exit("FAIL: the trace holds %r, expected the decode rows %r" % (got, want))
    lookup = subprocess.run([exe, "table", "lookup",
                             os.path.join(HERE, "..", "..", "python", "testdata",
                                          "table_v4_batch_rules.json"),
                             "--seq-lens", ",".join(map(str, want[0])), "--num-heads", "32",
                             "--num-kv-heads", "8", "--head-dim", "128", "--block-size", "16",
                             "--dtype", "fp16"], capture_output=True, text=True)
    if lookup.returncode != 0 or "batch rule" not in lookup.stdout:
        sys.exit("FAIL: table lookup of the hooked batch: %s%s" % (lookup.stdout, lookup.stderr))
    print("the hook wrote the decode rows %r; attn-tune answers the first: %s"
          % (want, lookup.stdout.strip()))


if __name__ == "__main__":
    main()
