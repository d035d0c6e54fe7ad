"""The quick profile with an fp8 variant (issue 29): a sweep of its decode grid with KV caches
"auto" and "fp8_e4m3" writes a table whose fp8 points `table lookup --kv-dtype fp8_e4m3` returns,
decision and configuration, while calls without --kv-dtype get the points of the fp16 cache.

    usage: fp8_sweep_lookup.py ATTN_TUNE QUICK_PROFILE WORKDIR [DEVICE]

DEVICE is `cpu` (the default; CTest) or a GPU such as `cuda:0` (scripts/device-check.sh).
"""
import json
import os
import shutil
import subprocess
import sys


def fail(msg):
    sys.exit("fp8_sweep_lookup: " + msg)


def uses_v2(point, ctx):
    return any(lo <= ctx and (hi is None or ctx < hi) for lo, hi in point["v2_intervals"])


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit("usage: fp8_sweep_lookup.py ATTN_TUNE QUICK_PROFILE WORKDIR [DEVICE]")
    tool, quick, work = sys.argv[1:4]
    device = sys.argv[4] if len(sys.argv) == 5 else "cpu"
    threads = ["--threads", "2"] if device == "cpu" else []
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    with open(quick) as f:
        profile = json.load(f)
    profile["name"] = "quick-fp8"
    profile["decode"]["kv_dtype"] = ["auto", "fp8_e4m3"]
    # Decode only: the table's v1/v2 decisions are what the lookup answers. The grid stays the
    # quick profile's; fewer repetitions than its own (the test checks that lookups return what
    # the table decided, not how well the timings decide) keep the test to seconds.
    profile.pop("prefill", None)
    profile["configs"].pop("prefill", None)
    profile["timing"].update({"min_reps": 3, "max_reps": 5, "max_seconds": 0.01,
                              "warmup_seconds": 0.005})
    path = os.path.join(work, "quick-fp8.json")
    with open(path, "w") as f:
        json.dump(profile, f, indent=1)
    out = os.path.join(work, "out")
    r = subprocess.run([tool, "sweep", "--device", device, "--profile", path] + threads +
                       ["--quiet", "--no-report", "--out", out], capture_output=True, text=True)
    if r.returncode != 0:
        fail("the sweep exited %d: %s" % (r.returncode, r.stderr))
    table_path = os.path.join(out, "threshold_table.json")
    with open(table_path) as f:
        table = json.load(f)
    if table["version"] != 5:
        fail("the table is version %r, not 5" % table["version"])
    fp8 = [p for p in table["decode"] if p.get("kv_dtype") == "fp8_e4m3"]
    plain = [p for p in table["decode"] if "kv_dtype" not in p]
    if not fp8 or len(fp8) != len(plain):
        fail("expected as many fp8_e4m3 points as fp16-cache points, got %d and %d"
             % (len(fp8), len(plain)))
    checked = 0
    for p in table["decode"]:
        kv = p.get("kv_dtype", "auto")
        for m in p["measured"]:
            ctx = m["context_len"]
            args = [tool, "table", "lookup", table_path, "--device", device, "--json",
                    "--batch", str(p["batch"]), "--context-len", str(ctx),
                    "--num-heads", str(p["num_heads"]), "--num-kv-heads", str(p["num_kv_heads"]),
                    "--head-dim", str(p["head_dim"]), "--block-size", str(p["block_size"]),
                    "--dtype", p["dtype"]]
            if kv != "auto":
                args += ["--kv-dtype", kv]
            r = subprocess.run(args, capture_output=True, text=True)
            if r.returncode != 0:
                fail("%s exited %d: %s" % (" ".join(args), r.returncode, r.stderr))
            got = json.loads(r.stdout)
            where = "kv=%s batch=%d kvh=%d ctx=%d" % (kv, p["batch"], p["num_kv_heads"], ctx)
            if not got["exact_point"]:
                fail("%s: the lookup did not answer from its own point" % where)
            if got["point"].get("kv_dtype", "auto") != kv:
                fail("%s: answered from a point with kv_dtype %r"
                     % (where, got["point"].get("kv_dtype", "auto")))
            family = "decode_v2" if uses_v2(p, ctx) else "decode_v1"
            slot = "v2" if family == "decode_v2" else "v1"
            want = m[slot]["config"]["key"] if m.get(slot) else None
            if got["family"] != family or (want is not None and got["config"]["key"] != want):
                fail("%s: lookup says %s %s, the table's point %s %s"
                     % (where, got["family"], got["config"]["key"], family, want))
            checked += 1
    r = subprocess.run([tool, "table", "show", table_path], capture_output=True, text=True)
    if r.returncode != 0 or "kv=fp8_e4m3" not in r.stdout:
        fail("table show does not name the fp8 points (exit %d)" % r.returncode)
    print("fp8_sweep_lookup: %s: %d lookups of %d fp8_e4m3 and %d fp16-cache points agree with the "
          "table" % (device, checked, len(fp8), len(plain)))


if __name__ == "__main__":
    main()
