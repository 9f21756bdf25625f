#!/usr/bin/env bash
# bench/run.sh — the whole benchmark in one command: copy bandwidth + PyTorch (eager,
# torch.compile, float64 reference) + ploss (fused, forward-then-backward, in place), then
# bench/report.py writes RESULTS.md.  Meant for a CUDA machine with PyTorch installed (see
# bench/README.md); `--cpu --small` tests it on a machine without a GPU.
#
#   bench/run.sh [--build DIR] [--out DIR] [--results FILE] [--small] [--cpu]
#                [--only id1,id2] [--runs N] [--warmup N] [--no-compile] [--no-liger]
#
#   --build DIR    a ploss build tree (default: $PLOSS_BUILD; else, when $PLOSS_LIBRARY names
#                  an existing library, the environment as it is — `source tools/env.sh DIR`
#                  sets it up; else build-bench-gpu, or build-bench-cpu
#                  with --cpu); configured and built when it has no libploss yet
#                  (meson setup DIR -Dcuda=enabled|disabled; ninja -C DIR)
#   --out DIR      where the JSON lines, logs and RESULTS.md go (default: $OUT, else out/bench)
#   --results FILE also copy RESULTS.md there (e.g. bench/RESULTS.md)
#   --small        shrink every shape (harness test, not a measurement)
#   --cpu          run both sides on the CPU (harness test)
#   --only, --runs, --warmup, --no-compile, --no-liger   passed to both sides (--no-compile
#                  and --no-liger: torch only)
# Wheels: when the repository root has a .whl/ folder with wheels (Liger-Kernel, Cut
# Cross-Entropy, see bench/README.md), they are installed with pip (no index, no
# dependencies) into /tmp/ploss-site, which is put first on the PYTHONPATH of the PyTorch
# side; a failed install is logged (wheels.log) and only costs the Liger and CCE columns.
# Environment: PYTHON (default python3: must import torch), LUAJIT (default luajit),
# BENCH_WHEELS / BENCH_SITE (the wheel folder and the install target, defaults above),
# BENCH_COMMAND (the command line recorded in RESULTS.md; default this script's own),
# BENCH_TORCH_TIMEOUT / BENCH_PLOSS_TIMEOUT (seconds, default 300 / 230: the whole run
# within 10 minutes).
# Exit status: 0 when the report was written (a failing side is reported in it), 1 otherwise.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build="${PLOSS_BUILD:-}"
outdir="${OUT:-$root/out/bench}"
results=""
device=cuda
small=()
common=()
torch_only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --out) outdir="$2"; shift 2 ;;
    --results) results="$2"; shift 2 ;;
    --small) small=(--small); shift ;;
    --cpu) device=cpu; shift ;;
    --only|--runs|--warmup) common+=("$1" "$2"); shift 2 ;;
    --no-compile|--no-liger) torch_only+=("$1"); shift ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "bench/run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
use_env=0
if [ -z "$build" ] && [ -n "${PLOSS_LIBRARY:-}" ] && [ -e "${PLOSS_LIBRARY}" ]; then
  use_env=1 # the caller's environment is ready (tools/env.sh)
fi
[ -n "$build" ] || { [ "$device" = cpu ] && build=build-bench-cpu || build=build-bench-gpu; }
case "$build" in /*) ;; *) build="$root/$build" ;; esac
PYTHON="${PYTHON:-python3}"
LUAJIT="${LUAJIT:-luajit}"
command_line="${BENCH_COMMAND:-bench/run.sh ${*:-}}"
mkdir -p "$outdir"
t0=$(date +%s)
log() { echo "[bench $(($(date +%s) - t0))s] $*" >&2; }

# ---- build (only when the tree has no library yet) --------------------------------------
if [ $use_env = 1 ]; then
  log "using the environment's ploss: PLOSS_LIBRARY=$PLOSS_LIBRARY"
elif [ ! -e "$build/libploss.so.0" ]; then
  cuda_opt=enabled; [ "$device" = cpu ] && cuda_opt=disabled
  log "building ploss in $build (cuda=$cuda_opt)"
  { [ -f "$build/build.ninja" ] || meson setup "$build" -Dcuda=$cuda_opt -Dbuildtype=release; } \
    >"$outdir/build.log" 2>&1 && ninja -C "$build" >>"$outdir/build.log" 2>&1
  if [ ! -e "$build/libploss.so.0" ]; then
    log "build failed: see $outdir/build.log"; tail -30 "$outdir/build.log" >&2; exit 1
  fi
  log "built"
fi
# shellcheck source=/dev/null
[ $use_env = 1 ] || source "$root/tools/env.sh" "$build"

# ---- the card, as the machine reports it -------------------------------------------------
if [ "$device" = cuda ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv >"$outdir/nvidia-smi.csv" 2>&1 || true
fi

# ---- ploss side ---------------------------------------------------------------------------
pdev=(); [ "$device" = cpu ] && pdev=(--cpu)
log "ploss side: $LUAJIT bench/bench.lua"
timeout "${BENCH_PLOSS_TIMEOUT:-230}" "$LUAJIT" bench/bench.lua "${pdev[@]}" "${small[@]}" "${common[@]}" \
  --out "$outdir/ploss.jsonl" 2>"$outdir/ploss.log"
rc=$?
[ $rc -eq 0 ] || { log "ploss side exited with $rc (see ploss.log)"; tail -20 "$outdir/ploss.log" >&2; }

# ---- wheels for the PyTorch side (Liger-Kernel), when the checkout carries them ---------------
wheels="${BENCH_WHEELS:-$root/.whl}"
site="${BENCH_SITE:-/tmp/ploss-site}"
torch_path="${PYTHONPATH:-}"
shopt -s nullglob
whl=("$wheels"/*.whl)
shopt -u nullglob
if [ ${#whl[@]} -gt 0 ]; then
  if "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" "${whl[@]}" >"$outdir/wheels.log" 2>&1; then
    log "installed ${#whl[@]} wheel(s) of $wheels into $site: $(cd "$wheels" && echo *.whl)"
    torch_path="$site${torch_path:+:$torch_path}"
  else
    log "installing the wheels of $wheels failed (see wheels.log): no Liger and CCE columns"
    tail -5 "$outdir/wheels.log" >&2
  fi
fi

# ---- PyTorch side -------------------------------------------------------------------------
log "torch side: $PYTHON bench/torch_bench.py"
PYTHONPATH="$torch_path" PYTHONUNBUFFERED=1 timeout "${BENCH_TORCH_TIMEOUT:-300}" "$PYTHON" bench/torch_bench.py --device "$device" \
  "${small[@]}" "${common[@]}" "${torch_only[@]}" --ploss-lib "$PLOSS_LIBRARY" \
  --out "$outdir/torch.jsonl" 2>"$outdir/torch.log"
rc=$?
[ $rc -eq 0 ] || { log "torch side exited with $rc (see torch.log)"; tail -20 "$outdir/torch.log" >&2; }

# ---- report -------------------------------------------------------------------------------
log "report"
if ! "$PYTHON" bench/report.py --torch "$outdir/torch.jsonl" --ploss "$outdir/ploss.jsonl" \
    --command "$command_line" --out "$outdir/RESULTS.md"; then
  log "report failed"; exit 1
fi
if [ -n "$results" ]; then cp "$outdir/RESULTS.md" "$results"; fi
log "done: $outdir/RESULTS.md"
sed -n '/^| case/,/^$/p' "$outdir/RESULTS.md"
