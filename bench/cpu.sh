#!/usr/bin/env bash
# bench/cpu.sh — ploss's CPU losses against PyTorch's CPU losses (Debian python3-torch under
# /usr/bin/python3, or the PyTorch of --python, e.g. a virtual environment's), in one run.  The cases (bench/cases-cpu.json, or --cases FILE) are the
# GPU benchmark's at CPU sizes: this script writes them out in bench/cases.json's format and
# runs the GPU benchmark's two sides on the CPU over the same inputs, bench/bench.lua --cpu
# (ploss: fused, forward then backward) then bench/torch_bench.py --device cpu (eager
# PyTorch: loss.backward(), the float64 reference), one case at a time so both see the same
# machine load.  For each thread count and round every case runs once; the report takes, per
# case and side, the median over rounds of each round's median.  Writes OUT/raw/ (the
# records), OUT/RESULTS-cpu.md (copied to --results FILE).
#
#   source tools/env.sh build && bench/cpu.sh [--out DIR] [--results FILE] [--cases FILE]
#       [--only id1,id2] [--threads "2 1"] [--rounds 3] [--runs 9] [--warmup 2] [--python PATH]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=out/bench-cpu results="" cases=bench/cases-cpu.json only="" threads="2 1" rounds=3 runs=9 warmup=2
python=/usr/bin/python3
cmd="bench/cpu.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;; --results) results=$2; shift 2 ;; --cases) cases=$2; shift 2 ;;
    --only) only=$2; shift 2 ;; --threads) threads=$2; shift 2 ;; --rounds) rounds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;; --warmup) warmup=$2; shift 2 ;; --python) python=$2; shift 2 ;;
    *) echo "bench/cpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "${PLOSS_LIBRARY:-}" ] || { echo "bench/cpu.sh: source tools/env.sh BUILDDIR first" >&2; exit 1; }
mkdir -p "$out/raw"
rm -f "$out"/raw/*.jsonl
# the CPU cases in bench/cases.json's format: each the GPU case it names (without its
# targets), with this file's fields over it
ids=$(/usr/bin/python3 - "$cases" bench/cases.json "$out/cases.json" "$only" <<'PY'
import json, sys
cpu, gpu = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
base = {c["id"]: c for c in gpu["cases"]}
only = set(filter(None, sys.argv[4].split(",")))
cases = []
for c in cpu["cases"]:
    if only and c["id"] not in only:
        continue
    if "case" in c and c["case"] not in base:
        sys.exit(f"bench/cpu.sh: {c['id']}: no case {c['case']} in {sys.argv[2]}")
    d = {k: v for k, v in base.get(c.get("case"), {}).items()
         if not k.startswith("target_") and k not in ("anchor", "issue")}
    d.update({k: v for k, v in c.items() if k != "case"})
    cases.append(d)
if only - {c["id"] for c in cases}:
    sys.exit(f"bench/cpu.sh: no case {', '.join(sorted(only - {c['id'] for c in cases}))} in {sys.argv[1]}")
top = {k: v for k, v in gpu.items() if k not in ("cases", "comment")}
json.dump(dict(top, cases=cases), open(sys.argv[3], "w"), indent=0)
print(" ".join(c["id"] for c in cases))
PY
)
for th in $threads; do
  for r in $(seq "$rounds"); do
    for id in $ids; do
      OMP_NUM_THREADS=$th luajit bench/bench.lua --cpu --cases "$out/cases.json" --only "$id" --runs "$runs" \
        --warmup "$warmup" --no-copy --out "$out/raw/$th-$r-$id-ploss.jsonl"
      OMP_NUM_THREADS=$th "$python" bench/torch_bench.py --device cpu --cases "$out/cases.json" --only "$id" \
        --runs "$runs" --warmup "$warmup" --no-compile --no-liger --copy-bytes 1048576 \
        --ploss-lib "$PLOSS_LIBRARY" --out "$out/raw/$th-$r-$id-torch.jsonl" >/dev/null
      echo "[bench cpu] threads $th round $r $id" >&2
    done
  done
done
/usr/bin/python3 - "$out" "$cmd" "${PLOSS_CPU_ISA:-auto}" "$python" <<'PY'
import datetime, glob, json, os, re, statistics, subprocess, sys
out = sys.argv[1]
cases = {c["id"]: c for c in json.load(open(os.path.join(out, "cases.json")))["cases"]}
recs = {}  # (threads, id) -> {"fused": [...], "fwd_bwd": [...], "torch": [...], "loss": x, "ref": x}
torch_v = "?"
for path in sorted(glob.glob(os.path.join(out, "raw", "*.jsonl"))):
    th, _, cid, side = re.match(r"(\d+)-(\d+)-(.+)-(ploss|torch)\.jsonl$", os.path.basename(path)).groups()
    r = recs.setdefault((int(th), cid), {"fused": [], "fwd_bwd": [], "torch": []})
    for line in open(path):
        o = json.loads(line)
        if o.get("kind") == "env" and "torch" in o:
            torch_v = o["torch"]
        elif side == "ploss" and o.get("kind") == "ploss" and o.get("mode") in ("fused", "fwd_bwd", "update"):
            r["fwd_bwd" if o["mode"] == "fwd_bwd" else "fused"].append(o["ms_median"])  # update: EMA
            r.setdefault("loss", o.get("loss"))
        elif side == "torch" and o.get("kind") == "torch" and "ms_median" in o:  # eager; EMA: the foreach form
            r["torch"].append(o["ms_median"])
        elif side == "torch" and o.get("kind") == "ref":
            r.setdefault("ref", o.get("loss"))
med = lambda v: statistics.median(v) if v else float("nan")
lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith("Model name")), "?")
lines = ["# ploss CPU losses against PyTorch CPU", "",
         f"- date: {datetime.date.today().isoformat()}", f"- command: `{sys.argv[2]}`",
         f"- CPU: {model} (lscpu), `nproc` = {os.cpu_count()}",
         f"- PyTorch {torch_v} ({'Debian python3-torch' if sys.argv[4] == '/usr/bin/python3' else sys.argv[4]}), eager; f32; each case's options and inputs are"
         " those of the bench/cases.json case it is drawn from (bench/cases-cpu.json)",
         f"- ploss kernel build: {sys.argv[3]} (PLOSS_CPU_ISA)",
         "- times: wall clock in ms, fused forward+backward (ploss fwd+bwd: forward, then backward),"
         " median over rounds of per-round medians; sides interleaved per case",
         "- loss Δ: |ploss − reference| / |reference|, the reference PyTorch's float64 composite on the same inputs",
         "- target: the CPU backend's issue, ploss fused ≤ 0.5× PyTorch (its ten cases); else whether ploss is ahead", ""]
for th in sorted({k[0] for k in recs}, reverse=True):
    lines += [f"## {th} thread{'s' if th > 1 else ''}", "",
              "| case | ploss fused | ploss fwd+bwd | PyTorch | ploss ÷ PyTorch | loss Δ | target | status |",
              "|---|---:|---:|---:|---:|---:|:---:|:---:|"]
    for cid in cases:
        r = recs.get((th, cid))
        if not r:
            continue
        f, fb, t = med(r["fused"]), med(r["fwd_bwd"]), med(r["torch"])
        x = f / t
        loss, ref = r.get("loss"), r.get("ref")
        d = f"{abs(loss - ref) / max(abs(ref), 1e-300):.1e}" if loss is not None and ref is not None else "—"
        k = cases[cid].get("target_x")
        status = ("met" if x <= k else "**missed**") if k else ("ahead" if x < 1 else "**behind**")
        lines.append(f"| {cid} | {f:.3g} | {fb:.3g} | {t:.3g} | {x:.2f} | {d} | {f'≤ {k}×' if k else '—'} | {status} |")
    lines.append("")
open(os.path.join(out, "RESULTS-cpu.md"), "w").write("\n".join(lines))
print("\n".join(lines))
PY
[ -z "$results" ] || cp "$out/RESULTS-cpu.md" "$results"
