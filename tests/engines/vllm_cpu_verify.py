"""engine.vllm_cpu.verify: `attn-tune verify --intensity quick` through vLLM's CPU attention
passes, and every configuration of the paths that need a block size divisible by 32 (`vec`, and
`amx` where the CPU has AMX) is checked, not skipped, by the mask and GQA groups, and in decode
by the long-context group too (its JUnit report says how many cases each testcase passed).

    python vllm_cpu_verify.py ATTN_TUNE WORKDIR

Runs inside the engine's environment (in_engine_venv.sh)."""

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

# The groups each phase must check every configuration with (at whichever block size it takes).
REQUIRED = {"decode": ("masks", "gqa", "long"), "prefill": ("masks", "gqa", "chunked")}
# vLLM CPU's knob isa: 1 is vec, 2 is amx (attn_tune_engines.vllm_cpu.ISAS).
WIDE = re.compile(r"\[isa=[12]\]$")


def main(exe, workdir):
    os.makedirs(workdir, exist_ok=True)
    junit = os.path.join(workdir, "verify.xml")
    cmd = [exe, "verify", "--kernels", "python:attn_tune_engines.vllm_cpu", "--intensity",
           "quick", "--threads", "2", "--junit", junit]
    run = subprocess.run(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True)
    print(run.stdout)
    if run.returncode != 0 or not re.search(r" 0 failed, \d+ skipped", run.stdout):
        return "verify exited %d without '0 failed'" % run.returncode
    passed = {}  # (configuration, phase/group without its -bsN) -> cases passed
    for tc in ET.parse(junit).iter("testcase"):
        config, group = tc.get("name").split(" ", 1)
        m = re.match(r"(decode|prefill)/([a-z-]+?)(-bs\d+)?/\w+$", group)
        if m is None:
            return "unexpected group name %r" % group
        n = int(tc.find("system-out").text.split(" passed")[0])
        key = (config, m.group(1), m.group(2))
        passed[key] = passed.get(key, 0) + n
    wide = sorted({c for c, _, _ in passed if WIDE.search(c)})
    print("configurations needing block sizes divisible by 32:", ", ".join(wide))
    if not any(c.endswith("[isa=1]") for c in wide):
        return "verify ran no vec configuration"
    missing = []
    for config in wide:
        phase = "prefill" if config.startswith("prefill") else "decode"
        for group in REQUIRED[phase]:
            n = passed.get((config, phase, group), 0)
            print("%s %s/%s: %d passed" % (config, phase, group, n))
            if n == 0:
                missing.append("%s %s/%s" % (config, phase, group))
    if missing:
        return "no case passed (all skipped) for: " + "; ".join(missing)
    return None


if __name__ == "__main__":
    problem = main(sys.argv[1], sys.argv[2])
    if problem:
        print("FAIL: " + problem)
        sys.exit(1)
