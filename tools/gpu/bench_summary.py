#!/usr/bin/env python3
"""Print a short table of a bench/bench.lua JSON-lines file: per case and mode the median
time, and against the copy bandwidth measured in the same run, the floor (one read and
one write of the input) and the ratio.  Usage: bench_summary.py FILE.jsonl"""
import json
import sys

recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bw = next((r.get("gbps") or r.get("bandwidth_gbps") or r.get("GBps") for r in recs if r.get("kind") == "copy_bw"), None)
inputs = {r["case"]: r for r in recs if r.get("kind") == "inputs" and "case" in r}
print("copy bandwidth:", bw, "GB/s")
for r in recs:
    if r.get("kind") != "ploss":
        continue
    cid = r.get("case", "?")
    ms = r.get("ms_median")
    inp = inputs.get(cid, {})
    floor = None
    if bw and inp.get("input_bytes"):
        floor = 2 * inp["input_bytes"] / (bw * 1e9) * 1e3
    ratio = f"{ms / floor:.2f}x" if (ms and floor) else ""
    print(f"{cid:32s} {r.get('mode', ''):8s} {ms if ms is not None else r.get('error', '')!s:>10} "
          f"floor {floor and round(floor, 4)} {ratio}")
