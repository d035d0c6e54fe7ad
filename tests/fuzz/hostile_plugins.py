#!/usr/bin/env python3
"""Foreign code that misbehaves in each entry point (issue 31): attn-tune must end normally and
say what the plugin or module did, whatever it does and wherever it does it.

Plugins: the test plugin (tests/plugins/init_plugin.c) reads ATTN_TEST_INIT: "ENTRY:ACTION" makes
it crash (segv), abort, exit(0), exit(7) or hang in can_run, workspace_size, run or destroy;
"abort", "exit" and "hang" do that in its init; "decl:WHAT" declares garbage (pointers to
nowhere, counts of 2^30 or -5). --data-entry-plugin adds a plugin whose entry point is data.
Python modules (--module): tests/fuzz/hostile_module.py reads ATTN_TEST_MODULE, "ENTRY:ACTION"
with ENTRY import, factory, can_run, workspace, prepare or run and ACTION segv, abort, exit0,
exit7, hang or raise.

Each mode goes through `plugin check` and `verify` (and a small `sweep` for crashes and exits in
run). A case passes when attn-tune's own exit status is 1 or 2 (never 0: a gate that checked
nothing must not pass; never a signal, 3 or 4), it ended within its time limit, and its output
names what happened (a signal, an exit status, a deadline, the teardown, the exception).

    python3 tests/fuzz/hostile_plugins.py --attn-tune build/attn-tune --plugin LIB --work DIR
    python3 tests/fuzz/hostile_plugins.py --attn-tune build/attn-tune --module --work DIR
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
# Words one of which the output must hold: how attn-tune names what a plugin did (a signal, an
# exit, a deadline, the teardown, the module's exception, a declaration it refuses).
NAMED = ["SIG", "exited with status", "teardown", "had not answered", "timeout", "killed",
         "RuntimeError", "declar"]
# The module's hooks and what each is tried with. Every case starts Python and imports torch
# (seconds each, twice: the declaration probe and the worker), so CTest runs the import-time
# cases, where a module's own code runs before it has declared anything (the class of the issue:
# os._exit(0) at import made verify pass having checked nothing) and an exit in the factory, and a
# crash and an exit in run (wanted() says through which command); --all adds the rest: every
# action at import and in the factory, a crash and an exit in every hook, each through both
# commands.
MODULE_MODES_CI = ["import:segv", "import:exit0", "import:hang", "import:raise", "factory:exit0",
                   "run:segv", "run:exit0"]
MODULE_MODES_ALL = (["import:" + a for a in ("segv", "abort", "exit0", "exit7", "hang", "raise")]
                    + ["factory:" + a for a in ("segv", "exit0", "raise")]
                    + ["%s:%s" % (e, a) for e in ("can_run", "workspace", "prepare")
                       for a in ("segv", "exit0")]
                    + ["run:" + a for a in ("segv", "abort", "exit0", "exit7", "raise")])

# A sweep of one decode point and one configuration: a fault costs one worker, not minutes.
TINY_PROFILE = {
    "name": "hostile-plugins",
    "decode": {"batch": [1], "context_len": [64], "num_kv_heads": [1], "gqa_ratio": [1],
               "head_dim": [64], "block_size": [16], "dtype": ["fp32"]},
    "configs": {"decode_v1": "auto"},
    "timing": {"warmup": 1, "warmup_seconds": 0.0, "min_reps": 2, "max_reps": 2,
               "max_seconds": 0.01, "flush_cache": False},
}


def modes(module, everything=False):
    if module:
        return MODULE_MODES_ALL if everything else MODULE_MODES_CI
    out = ["%s:%s" % (e, a) for e in ENTRIES for a in ACTIONS]
    decls = ["decl:" + w for w in ("families", "count", "negative", "params", "name")]
    return out + ["destroy:hang", "abort", "exit", "hang"] + decls


def commands(binary, kernels, work, mode):
    slug = mode.replace(":", "-")
    profile = os.path.join(work, "profile.json")
    return {
        "plugin check": [binary, "plugin", "check", kernels, "--device", "cpu", "--threads", "1"],
        "verify": [binary, "verify", "--kernels", kernels, "--device", "cpu", "--intensity",
                   "quick", "--dtypes", "fp32", "--families", "decode_v1", "--threads", "1"],
        "sweep": [binary, "sweep", "--kernels", kernels, "--device", "cpu", "--profile", profile,
                  "--out", os.path.join(work, "sweep-" + slug), "--no-report", "--threads", "1"],
    }


def wanted(mode, name, module=False, everything=False):
    """Plugins: every mode through plugin check and verify; sweep (the same supervisor, a results
    file to keep) for crashes and exits in run, to keep the test under a minute. Modules, unless
    --all: what dies before declaring through verify (and an exit at import through plugin check
    too); a crash or an exit in run through plugin check, whose one tiny case per family costs
    one worker (verify would start a worker, which imports torch again, for each of its cases)."""
    if module and not everything:
        if mode.startswith("run:"):
            return name == "plugin check"
        return name == "verify" or (name == "plugin check" and mode == "import:exit0")
    return name != "sweep" or (mode.split(":")[0] == "run"
                               and mode.split(":")[-1] in ("segv", "exit0"))


def run_case(env_var, probe_timeout, work, mode, name, argv, timeout):
    env = dict(os.environ, ATTN_TUNE_PLUGIN_PROBE_TIMEOUT=str(probe_timeout),
               ATTN_TUNE_LOCK_DIR=os.path.join(work, "locks"))
    env[env_var] = mode
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
    ap.add_argument("--plugin", help="the test plugin (libattn_test_plugin_init.so)")
    ap.add_argument("--data-entry-plugin",
                    help="also a plugin whose entry point is exported as data "
                         "(tests/plugins/data_entry_plugin.c)")
    ap.add_argument("--module", action="store_true",
                    help="Python modules instead: tests/fuzz/hostile_module.py")
    ap.add_argument("--all", action="store_true",
                    help="modules: every mode through every command (minutes), not CI's set")
    ap.add_argument("--work", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=120, help="seconds per command")
    a = ap.parse_args()
    if a.module == bool(a.plugin):
        ap.error("give --plugin LIB or --module")
    if a.module:
        # The module is found on PYTHONPATH; importing torch takes seconds (more beside other
        # tests), so the declaration probe gets 20 (a hang at import costs that).
        here = os.path.dirname(os.path.abspath(__file__))
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        kernels, env_var, probe_timeout = "python:hostile_module", "ATTN_TEST_MODULE", 20
    else:
        kernels, env_var, probe_timeout = a.plugin, "ATTN_TEST_INIT", 1
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(os.path.join(a.work, "locks"))
    with open(os.path.join(a.work, "profile.json"), "w") as f:
        json.dump(TINY_PROFILE, f)
    jobs = []
    for mode in modes(a.module, a.all):
        for name, argv in commands(a.attn_tune, kernels, a.work, mode).items():
            if wanted(mode, name, a.module, a.all):
                jobs.append((mode, name, argv))
    if a.data_entry_plugin:
        for name, argv in commands(a.attn_tune, a.data_entry_plugin, a.work, "data-entry").items():
            if name != "sweep":
                jobs.append(("data-entry", name, argv))
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(lambda j: run_case(env_var, probe_timeout, a.work, j[0], j[1],
                                                   j[2], a.timeout), jobs))
    failures = [r for r in results if r]
    for r in failures:
        print(r)
    print("hostile_%s: %d cases (%d modes through plugin check, verify and sweep), %d failed"
          % ("modules" if a.module else "plugins", len(jobs), len(modes(a.module, a.all)),
             len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
