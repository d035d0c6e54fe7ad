#!/usr/bin/env python3
"""The Ray driver's fault reruns (python/attn_tune_ray.py), without Ray: its Driver runs on a
stand-in for the ray module that runs each actor in this process, against a stand-in attn-tune
(this file, called with `stub`) whose sweep ends with faults in its table as the real one does.

- A shard whose faults go away when measured again (a busy node) is rerun once with
  --resume --retry-faults and ends with status 0.
- A shard whose faults stay (a kernel that crashes) is rerun --fault-retries times, then left
  with its sweep's status; --fault-retries 0 never reruns.
- A shard that ends with failed validation but no faults is not rerun.

    python3 tests/ray/test_ray_fault_reruns.py
"""

import json
import os
import shutil
import sys
import tempfile
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))


def stub_sweep(argv):
    """attn-tune sweep as far as the driver sees it: results.jsonl, threshold_table.json with
    measurement_counts, an exit status. STUB_MODE picks what the shard's configurations do."""
    out = argv[argv.index("--out") + 1]
    mode = os.environ["STUB_MODE"]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "calls.txt"), "a", encoding="utf-8") as f:
        f.write(" ".join(argv) + "\n")
    retry = "--retry-faults" in argv
    if retry and "--resume" not in argv:
        print("attn-tune: error: --retry-faults continues an earlier sweep: it needs --resume")
        return 2
    faults = 2 if mode == "kernel_faults" or (mode == "transient" and not retry) else 0
    failed = 1 if mode == "wrong_results" else 0
    with open(os.path.join(out, "results.jsonl"), "a", encoding="utf-8") as f:
        f.write("{}\n")
    with open(os.path.join(out, "threshold_table.json"), "w", encoding="utf-8") as f:
        json.dump({"measurement_counts": {"ok": 5, "failed": failed, "fault": faults}}, f)
    print("sweep: 5 measurements, %d faults" % faults)
    return 1 if faults or failed else 0


class FakeRay:
    """The part of the ray module the Driver uses; an actor's streamed items are its run()'s."""

    class exceptions:  # noqa: N801 (the ray module's name)
        class RayActorError(Exception):
            pass

        class WorkerCrashedError(Exception):
            pass

        class ObjectLostError(Exception):
            pass

    def remote(self, **_resources):
        def wrap(cls):
            class Handle:
                @staticmethod
                def remote():
                    inst = cls()
                    run = types.SimpleNamespace(
                        options=lambda **_: types.SimpleNamespace(remote=inst.run))
                    return types.SimpleNamespace(run=run)
            return Handle
        return wrap

    @staticmethod
    def get(ref):
        return ref

    @staticmethod
    def kill(_actor, no_restart=False):
        pass


def run_driver(mode, fault_retries=1):
    import attn_tune_ray  # noqa: PLC0415

    out = tempfile.mkdtemp(prefix="ray_faults_")
    stub = os.path.join(out, "attn-tune")
    with open(stub, "w", encoding="utf-8") as f:
        f.write("#!/bin/sh\nexec %s %s stub \"$@\"\n" % (sys.executable, os.path.abspath(__file__)))
    os.chmod(stub, 0o755)
    os.environ["STUB_MODE"] = mode
    args = types.SimpleNamespace(workers=1, device="cpu", profile="quick", out=out,
                                 attn_tune=stub, threads=None, actor_cpus=1, max_retries=3,
                                 retry_delay=0.0, sweep_arg=[], fault_retries=fault_retries)
    results = attn_tune_ray.Driver(FakeRay(), args).run()
    with open(os.path.join(out, "shard-0", "calls.txt"), encoding="utf-8") as f:
        calls = f.read().splitlines()
    shutil.rmtree(out)
    return results[0], calls


def check(cond, msg):
    if not cond:
        print("FAIL: " + msg, flush=True)
        sys.exit(1)


def main():
    status, calls = run_driver("transient")
    check(status == 0, "transient faults: the rerun's status 0 is the shard's, got %r" % status)
    check(len(calls) == 2, "transient faults: one sweep and one rerun, got %r" % calls)
    check("--retry-faults" not in calls[0] and calls[1].endswith("--resume --retry-faults"),
          "transient faults: the rerun resumes with --retry-faults: %r" % calls)

    status, calls = run_driver("kernel_faults", fault_retries=2)
    check(status == 1, "lasting faults: the sweep's status 1 stays, got %r" % status)
    check(len(calls) == 3 and all("--retry-faults" in c for c in calls[1:]),
          "lasting faults with --fault-retries 2: a sweep and two reruns, got %r" % calls)

    status, calls = run_driver("kernel_faults", fault_retries=0)
    check(status == 1 and len(calls) == 1, "--fault-retries 0: no rerun, got %r %r"
          % (status, calls))

    status, calls = run_driver("wrong_results")
    check(status == 1 and len(calls) == 1,
          "failed validation without faults is not rerun, got %r %r" % (status, calls))
    print("ok: fault reruns", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "stub":
        sys.exit(stub_sweep(sys.argv[2:]))
    main()
