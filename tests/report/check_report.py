#!/usr/bin/env python3
"""Checks `attn-tune report` on a threshold table: the page parses as XML (it is written to be
XHTML-compatible), holds one decision map per shape, one latency chart per decode point, one
prefill chart per prefill point and every rule's regret on the sweep and held-out points, with
no scripts and no external references; the --against page lists no differing calls for a table
against itself and some for a table whose thresholds moved; the CSV files hold the rows the
page's tables hold.

usage: check_report.py ATTN_TUNE TABLE.json WORKDIR
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

NS = {"h": "http://www.w3.org/1999/xhtml", "s": "http://www.w3.org/2000/svg"}
RULES = ["fitted_rule", "table_lookup", "vllm_cuda", "vllm_cpu", "seed_engine"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(exe, *args):
    p = subprocess.run([exe, "report", *args], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"attn-tune report {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p.stdout


def map_key(p):
    return (p["dtype"], p["head_dim"], p["block_size"], p["num_kv_heads"], p["gqa_ratio"],
            p["causal"], p["window_left"], p["window_right"], p["softcap"])


def parse(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    check(text.startswith("<!DOCTYPE html>"), f"{path}: starts with the HTML doctype")
    check("<script" not in text.lower(), f"{path}: holds no script")
    check("prefers-color-scheme: dark" in text, f"{path}: has a dark-mode style")
    check("@media print" in text, f"{path}: has a print style")
    for ref in ("http://", "https://"):
        # Only the XML namespaces may name a URL; nothing is loaded from anywhere.
        others = [l for l in text.split(ref)[1:]
                  if not l.startswith(("www.w3.org/1999/xhtml", "www.w3.org/2000/svg"))]
        check(not others, f"{path}: no external reference ({ref}{others[:1]})")
    return ET.parse(path).getroot()  # raises on malformed markup


def svgs(root, cls):
    return [s for s in root.iter(f"{{{NS['s']}}}svg") if s.get("class") == f"chart {cls}"]


def data_rows(root, table_id):
    for t in root.iter(f"{{{NS['h']}}}table"):
        if t.get("data-table") == table_id:
            return len(t.findall("h:tbody/h:tr", NS))
    return None


def check_page(root, table, label):
    shapes = {map_key(p) for p in table["decode"]}
    check(len(svgs(root, "decision-map")) == len(shapes),
          f"{label}: one decision map per shape ({len(svgs(root, 'decision-map'))} for "
          f"{len(shapes)})")
    check(len(svgs(root, "latency")) == len(table["decode"]),
          f"{label}: one latency chart per decode point")
    check(len(svgs(root, "prefill")) == len(table.get("prefill", [])),
          f"{label}: one prefill chart per prefill point")
    check(len(svgs(root, "regret")) == 2, f"{label}: regret on the sweep and held-out points")
    regret = [s for s in root.iter(f"{{{NS['h']}}}section") if s.get("id") == "regret"]
    check(len(regret) == 1, f"{label}: a regret section")
    if regret:
        named = [li.get("data-rule") for li in regret[0].iter(f"{{{NS['h']}}}li")
                 if li.get("data-rule")]
        for r in RULES:
            check(named.count(r) == 2, f"{label}: rule {r}'s worst points on both point sets")
        text = "".join(regret[0].itertext())
        for name in ("fitted rule", "table lookup", "vLLM CUDA", "vLLM CPU", "seed engine"):
            check(name in text, f"{label}: regret names {name}")
    glance = [tr.get("data-rule") for tr in root.iter(f"{{{NS['h']}}}tr") if tr.get("data-rule")]
    check(sorted(set(glance)) == sorted(RULES), f"{label}: the summary prices every rule")
    for s in svgs(root, "decision-map"):
        check(s.get("viewBox"), f"{label}: a decision map has a viewBox")
        lines = [e for e in s.iter(f"{{{NS['s']}}}line")
                 if (e.get("class") or "").startswith("r-")]
        check(lines, f"{label}: a decision map draws rule switch lines")
        cells = [e for e in s.iter(f"{{{NS['s']}}}rect") if "cellbox" in (e.get("class") or "")]
        check(cells, f"{label}: a decision map has cells")
    measured = sum(len(p["measured"]) for p in table["decode"])
    check(data_rows(root, "decision_map") == measured,
          f"{label}: the decision_map table has a row per measured point")


def main():
    exe, table_path, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    table = json.load(open(table_path))

    page = os.path.join(work, "report.html")
    run(exe, table_path, "--out", page)
    check_page(parse(page), table, "report")

    # --against itself: the same views twice and no differing calls.
    same = os.path.join(work, "same.html")
    out = run(exe, table_path, "--against", table_path, "--out", same)
    check("report: 0 decode calls" in out, "--against itself: no differing calls")
    root = parse(same)
    shapes = {map_key(p) for p in table["decode"]}
    check(len(svgs(root, "decision-map")) == 2 * len(shapes), "--against: maps side by side")

    # A second table whose decisions flip to v1 everywhere: every call that chose v2 differs.
    moved = json.loads(json.dumps(table))
    flips = 0
    for p in moved["decode"]:
        if "v2_intervals" in p:
            p["v2_intervals"] = []
        p["v2_from"] = "never"
    for p in table["decode"]:
        for m in p["measured"]:
            v2 = any(m["context_len"] >= iv[0] and (iv[1] is None or m["context_len"] < iv[1])
                     for iv in p.get("v2_intervals", [])) if "v2_intervals" in p else (
                p["v2_from"] == "always" or (isinstance(p["v2_from"], int) and
                                             m["context_len"] >= p["v2_from"]))
            flips += 1 if v2 else 0
    moved_path = os.path.join(work, "moved.json")
    json.dump(moved, open(moved_path, "w"))
    out = run(exe, table_path, "--against", moved_path, "--out", os.path.join(work, "moved.html"))
    root = parse(os.path.join(work, "moved.html"))
    diff_rows = data_rows(root, "decision_diff")
    check(flips > 0, "the table chooses v2 somewhere (else this check proves nothing)")
    check(diff_rows is not None and diff_rows >= flips,
          f"--against a table without v2: at least {flips} differing calls (got {diff_rows})")
    check(f"report: {diff_rows} decode calls" in out, "--against prints the count it lists")

    # CSV: one file per view, a `table` column first, the page's rows.
    folder = os.path.join(work, "csv")
    run(exe, table_path, "--against", moved_path, "--format", "csv", "--out", folder)
    files = sorted(os.listdir(folder))
    for name in ("provenance", "measurements", "decode_latency", "decision_map", "rule_switches",
                 "regret_summary", "regret", "prefill", "decision_diff"):
        check(f"{name}.csv" in files, f"csv: {name}.csv written")
    rows = list(csv.DictReader(open(os.path.join(folder, "decision_map.csv"))))
    check(rows and list(rows[0].keys())[0] == "table", "csv: the first column is `table`")
    measured = sum(len(p["measured"]) for p in table["decode"])
    check(len(rows) == 2 * measured, "csv: decision_map rows of both tables")
    summary = list(csv.DictReader(open(os.path.join(folder, "regret_summary.csv"))))
    check(sorted({r["rule"] for r in summary}) == sorted(RULES), "csv: every rule's regret")
    diffs = list(csv.DictReader(open(os.path.join(folder, "decision_diff.csv"))))
    check(len(diffs) == diff_rows, "csv: decision_diff holds the page's differing calls")

    if failures:
        sys.exit(f"{len(failures)} checks failed")
    print("report checks passed")


if __name__ == "__main__":
    main()
