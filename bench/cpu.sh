#!/usr/bin/env bash
# bench/cpu.sh — ploss's CPU losses against PyTorch's CPU losses (Debian python3-torch under
# /usr/bin/python3), in one run: for each thread count and round, every case of
# bench/cases-cpu.json (or --cases FILE) runs on the ploss side (bench/cpu_ploss.lua) then
# the torch side (bench/cpu_torch.py), so both see the same machine load; the report takes,
# per case and side, the median over rounds of each round's median.  Writes OUT/cpu.jsonl
# and OUT/RESULTS-cpu.md (and copies it to --results FILE).
#
#   source tools/env.sh build && bench/cpu.sh [--out DIR] [--results FILE] [--cases FILE]
#       [--threads "2 1"] [--rounds 3] [--runs 9] [--warmup 2]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=out/bench-cpu results="" cases=bench/cases-cpu.json threads="2 1" rounds=3 runs=9 warmup=2
cmd="bench/cpu.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;; --results) results=$2; shift 2 ;; --cases) cases=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;; --rounds) rounds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;; --warmup) warmup=$2; shift 2 ;;
    *) echo "bench/cpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "${PLOSS_LIBRARY:-}" ] || { echo "bench/cpu.sh: source tools/env.sh BUILDDIR first" >&2; exit 1; }
mkdir -p "$out"
ids=$(/usr/bin/python3 -c "import json,sys; print(' '.join(c['id'] for c in json.load(open('$cases'))['cases']))")
: >"$out/cpu.jsonl"
for th in $threads; do
  for r in $(seq "$rounds"); do
    for id in $ids; do
      OMP_NUM_THREADS=$th luajit bench/cpu_ploss.lua "$cases" "$id" "$runs" "$warmup" >>"$out/cpu.jsonl"
      OMP_NUM_THREADS=$th /usr/bin/python3 bench/cpu_torch.py "$cases" "$id" "$runs" "$warmup" "$th" >>"$out/cpu.jsonl"
      echo "[bench cpu] threads $th round $r $id" >&2
    done
  done
done
/usr/bin/python3 - "$out/cpu.jsonl" "$out/RESULTS-cpu.md" "$cmd" "${PLOSS_CPU_ISA:-auto}" <<'PY'
import datetime, json, statistics, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(side, cid, th, key):
    v = [r[key] for r in rows if r["side"] == side and r["id"] == cid and r["threads"] == th and key in r]
    return statistics.median(v) if v else float("nan")
lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith("Model name")), "?")
torch_v = next((r["torch"] for r in rows if r["side"] == "torch"), "?")
ids = list(dict.fromkeys(r["id"] for r in rows))
out = ["# ploss CPU losses against PyTorch CPU", "",
       f"- date: {datetime.date.today().isoformat()}", f"- command: `{sys.argv[3]}`",
       f"- CPU: {model} (lscpu), `nproc` = {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()}",
       f"- PyTorch {torch_v} (Debian python3-torch), f32, mean reduction, fused forward+backward",
       f"- ploss kernel build: {sys.argv[4]} (PLOSS_CPU_ISA)",
       "- times: wall clock in ms, median over rounds of per-round medians; sides interleaved per case", ""]
for th in sorted({r["threads"] for r in rows}, reverse=True):
    out += [f"## {th} thread{'s' if th > 1 else ''}", "",
            "| case | ploss fused | ploss fwd+bwd | PyTorch | ploss/PyTorch | target ≤ 0.5 |", "|---|---:|---:|---:|---:|:---:|"]
    for cid in ids:
        f, fb, t = med("ploss", cid, th, "fused_ms"), med("ploss", cid, th, "fwd_bwd_ms"), med("torch", cid, th, "fused_ms")
        out.append(f"| {cid} | {f:.2f} | {fb:.2f} | {t:.2f} | {f / t:.2f} | {'yes' if f / t <= 0.5 else 'no'} |")
    out.append("")
open(sys.argv[2], "w").write("\n".join(out))
print("\n".join(out))
PY
[ -z "$results" ] || cp "$out/RESULTS-cpu.md" "$results"
