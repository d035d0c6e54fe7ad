#!/usr/bin/env python3
"""The Ray driver end to end (label `ray`): a local Ray with two CPU actors runs the two shards of
the quick profile on the CPU backend (--threads 1 each) and merges them, while the test hook kills
shard 1's actor after its third progress line, so that shard resumes in a new actor. Then:
the merged table is complete and holds every measurement of the plan once; the shards never
overlap; the merged table decides, point for point, what the table `merge` builds from the same
measurements as one unsharded folder decides; and merge refuses a folder from another device with
one line and exit 2. Exits 77 (skipped) when the ray package is not importable.

    ATTN_TUNE_BIN=build/attn-tune python3 tests/ray/test_ray_sharded.py
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def read_results(path):
    header, lines = None, []
    with open(path, encoding="utf-8") as f:
        for raw in f:
            if not raw.endswith("\n"):
                break
            j = json.loads(raw)
            if j["type"] == "header":
                header = j
            else:
                lines.append(j)
    return header, lines


def key(line):
    return line["workload_key"] + " | " + line["config_key"]


def decisions(table):
    out = {}
    for p in table["decode"]:
        shape = {k: v for k, v in p.items() if k not in ("measured", "v2_intervals", "v2_from")}
        out["decode " + json.dumps(shape, sort_keys=True)] = (
            p["v2_intervals"], p.get("v2_from"),
            [(m["context_len"], m["best"]["config"]["key"],
              m["v1"] and m["v1"]["config"]["key"], m["v2"] and m["v2"]["config"]["key"])
             for m in p["measured"]])
    for p in table["prefill"]:
        shape = {k: v for k, v in p.items() if k != "best"}
        out["prefill " + json.dumps(shape, sort_keys=True)] = p["best"]["config"]["key"]
    return out


def main():
    try:
        import ray  # noqa: F401
    except ImportError:
        print("ray is not importable with %s; skipped" % sys.executable)
        return SKIP
    exe = os.environ.get("ATTN_TUNE_BIN", os.path.join(ROOT, "build", "attn-tune"))
    work = tempfile.mkdtemp(prefix="attn_ray_")
    out = os.path.join(work, "sweep")
    env = dict(os.environ, ATTN_TUNE_RAY_TEST_KILL="1:3", RAY_DEDUP_LOGS="0")
    started = time.time()
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, "python", "attn_tune_ray.py"), "--workers", "2",
         "--device", "cpu", "--profile", "quick", "--out", out, "--threads", "1",
         "--attn-tune", exe, "--retry-delay", "0.2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    wall = time.time() - started
    print(run.stdout)
    print("ray driver: exit %d in %.1f s" % (run.returncode, wall), flush=True)
    check(run.returncode == 0, "the driver failed")
    check("[shard 1/2] test hook ATTN_TUNE_RAY_TEST_KILL: killing this shard's actor" in run.stdout,
          "the test hook did not kill shard 1's actor")
    check("[shard 1/2] actor died" in run.stdout, "the driver did not see the actor die")
    check("[shard 1/2] attempt 2 on" in run.stdout and "--resume" in run.stdout,
          "shard 1 was not resumed by a new actor")
    check("[shard 0/2] sweep exited with status 0" in run.stdout, "shard 0 did not finish")
    check("[shard 1/2] sweep exited with status 0" in run.stdout, "shard 1 did not finish")
    check("resuming:" in run.stdout, "the resumed sweep did not say it resumed")

    # The shards: disjoint, and each complete against its plan.
    shards = []
    for i in range(2):
        h, lines = read_results(os.path.join(out, "shard-%d" % i, "results.jsonl"))
        check(h["shard"] == {"index": i, "count": 2}, "shard %d header: %s" % (i, h.get("shard")))
        keys = {key(l) for l in lines}
        check(len(keys) == h["plan"]["measurements"],
              "shard %d has %d of %d measurements" % (i, len(keys), h["plan"]["measurements"]))
        shards.append((h, lines, keys))
    check(not shards[0][2] & shards[1][2], "the shards overlap")
    check(shards[0][2] and shards[1][2], "a shard is empty")

    # The merged folder: complete, every measurement once.
    mh, mlines = read_results(os.path.join(out, "results.jsonl"))
    check(len(mlines) == len({key(l) for l in mlines}), "merged results hold a key twice")
    check({key(l) for l in mlines} == shards[0][2] | shards[1][2],
          "merged results are not the union of the shards")
    with open(os.path.join(out, "threshold_table.json"), encoding="utf-8") as f:
        merged = json.load(f)
    check(merged["provenance"]["merge"]["complete"] is True, "merged table marked incomplete")
    check(merged["provenance"]["merge"]["missing_shards"] == [], "merged table misses shards")
    check(merged["decode"] and merged["prefill"], "merged table is empty")

    # The same measurements as one unsharded folder, through merge: the same decisions.
    unsharded = os.path.join(work, "unsharded")
    os.makedirs(unsharded)
    header = dict(shards[0][0])
    header.pop("shard")
    header["plan"] = {"measurements": shards[0][0]["plan"]["measurements"] +
                      shards[1][0]["plan"]["measurements"]}
    with open(os.path.join(unsharded, "results.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for _, lines, _ in shards:
            for l in lines:
                f.write(json.dumps(l) + "\n")
    rc = subprocess.run([exe, "merge", os.path.join(work, "unsharded-table"), unsharded],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(rc.returncode == 0, "merge of the unsharded folder failed: " + rc.stdout)
    with open(os.path.join(work, "unsharded-table", "threshold_table.json"), encoding="utf-8") as f:
        single = json.load(f)
    want, got = decisions(single), decisions(merged)
    check(want == got, "decisions differ at %s"
          % sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))[:3])
    print("decisions agree at %d points" % len(want))

    # A folder from another device is refused with one line and exit 2.
    other = os.path.join(work, "other-device")
    os.makedirs(other)
    h = dict(shards[1][0])
    h["device"] = dict(h["device"], name="NVIDIA H100 80GB HBM3", backend="cuda")
    with open(os.path.join(other, "results.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps(h) + "\n")
    rc = subprocess.run([exe, "merge", os.path.join(work, "mixed"),
                         os.path.join(out, "shard-0"), other],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check(rc.returncode == 2, "merge of another device's folder exited %d" % rc.returncode)
    check(len(rc.stderr.strip().splitlines()) == 1 and "one device model" in rc.stderr,
          "merge's refusal is not one line: %r" % rc.stderr)
    shutil.rmtree(work, ignore_errors=True)
    print("PASS (driver %.1f s)" % wall)
    return 0


if __name__ == "__main__":
    sys.exit(main())
