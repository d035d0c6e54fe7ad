#!/usr/bin/env python3
"""Plugins that misbehave in each entry point (issue 31): attn-tune must end normally and say
what the plugin did, whatever the plugin does and wherever it does it.

The test plugin (tests/plugins/init_plugin.c) reads ATTN_TEST_INIT: "ENTRY:ACTION" makes it
crash (segv), abort, exit(0), exit(7) or hang in can_run, workspace_size, run or destroy; "abort",
"exit" and "hang" do that in its init. Each mode goes through `plugin check` and `verify` (and a
small `sweep`). A case passes when attn-tune's own exit status is 1 or 2 (never 0: a gate that
checked nothing must not pass; never a signal, 3 or 4), it ended within its time limit, and its
output names what happened (a signal, an exit status, a deadline, the teardown).

    python3 tests/fuzz/hostile_plugins.py --attn-tune build/attn-tune --plugin LIB --work DIR
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys

ENTRIES = ["can_run", "workspace", "run", "destroy"]
ACTIONS = ["segv", "abort", "exit0", "exit7"]
# Words one of which the output must hold: how attn-tune names what a plugin did.
NAMED = ["SIG", "exited with status", "teardown", "had not answered", "timeout", "killed"]

# A sweep of one decode point and one configuration: a fault costs one worker, not minutes.
TINY_PROFILE = {
    "name": "hostile-plugins",
    "decode": {"batch": [1], "context_len": [64], "num_kv_heads": [1], "gqa_ratio": [1],
               "head_dim": [64], "block_size": [16], "dtype": ["fp32"]},
    "configs": {"decode_v1": "auto"},
    "timing": {"warmup": 1, "warmup_seconds": 0.0, "min_reps": 2, "max_reps": 2,
               "max_seconds": 0.01, "flush_cache": False},
}


def modes():
    out = ["%s:%s" % (e, a) for e in ENTRIES for a in ACTIONS]
    return out + ["destroy:hang", "abort", "exit", "hang"]


def commands(binary, plugin, work, mode):
    slug = mode.replace(":", "-")
    profile = os.path.join(work, "profile.json")
    return {
        "plugin check": [binary, "plugin", "check", plugin, "--device", "cpu"],
        "verify": [binary, "verify", "--kernels", plugin, "--device", "cpu", "--intensity",
                   "quick", "--dtypes", "fp32", "--families", "decode_v1"],
        "sweep": [binary, "sweep", "--kernels", plugin, "--device", "cpu", "--profile", profile,
                  "--out", os.path.join(work, "sweep-" + slug), "--no-report"],
    }


def wanted(mode, name):
    """Every mode through plugin check and verify; sweep (the same supervisor, a results file
    to keep) for crashes and exits in run, to keep the test under a minute."""
    return name != "sweep" or (mode.split(":")[0] == "run"
                               and mode.split(":")[-1] in ("segv", "exit0"))


def run_case(binary, plugin, work, mode, name, argv, timeout):
    env = dict(os.environ, ATTN_TEST_INIT=mode, ATTN_TUNE_PLUGIN_PROBE_TIMEOUT="1",
               ATTN_TUNE_LOCK_DIR=os.path.join(work, "locks"))
    try:
        p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return "%s %s: FAIL: no end after %d s" % (mode, name, timeout)
    text = (p.stdout + p.stderr).decode("utf-8", "replace")
    if p.returncode < 0:
        return "%s %s: FAIL: attn-tune was killed by signal %d" % (mode, name, -p.returncode)
    if p.returncode not in (1, 2):
        last = text.strip().splitlines()[-1:] or [""]
        return "%s %s: FAIL: exit %d (%s)" % (mode, name, p.returncode, last[0][:120])
    if not any(w in text for w in NAMED):
        return "%s %s: FAIL: exit %d without naming what the plugin did" % (
            mode, name, p.returncode)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attn-tune", required=True)
    ap.add_argument("--plugin", required=True, help="the test plugin (libattn_test_plugin_init.so)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=120, help="seconds per command")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(os.path.join(a.work, "locks"))
    with open(os.path.join(a.work, "profile.json"), "w") as f:
        json.dump(TINY_PROFILE, f)
    jobs = []
    for mode in modes():
        for name, argv in commands(a.attn_tune, a.plugin, a.work, mode).items():
            if wanted(mode, name):
                jobs.append((mode, name, argv))
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(lambda j: run_case(a.attn_tune, a.plugin, a.work, j[0], j[1],
                                                   j[2], a.timeout), jobs))
    failures = [r for r in results if r]
    for r in failures:
        print(r)
    print("hostile_plugins: %d cases (%d modes through plugin check, verify and sweep), %d failed"
          % (len(jobs), len(modes()), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
