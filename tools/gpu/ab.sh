#!/usr/bin/env bash
# tools/gpu/ab.sh — runs ON the GPU machine: ploss's fused pass of some bench cases timed
# with several staged builds, alternated (A B … A B …) within one call, so that builds are
# compared on one machine's clocks (the same case moves by a few % between machines).
#
#   tools/gpu/ab.sh [--rounds R] [--runs N] [--mode MODE] CASES BUILD...
#
#   CASES   bench case ids, comma-separated (bench/cases.json)
#   BUILD   staged build folders (tools/gpu/prepare.sh stages .gpu/build; copy it aside,
#           e.g. to .gpu/build_base, before staging the next one), each optionally prefixed
#           by environment assignments for its runs: VAR=VALUE[,VAR=VALUE...]@FOLDER
#   R       rounds (default 2), N timed runs per case (default 20, after 3 warm-up runs),
#           MODE the bench mode printed (default fused; also fwd_bwd, inplace)
#   AB_CASES (environment) another cases file, in bench/cases.json's form (its seed and
#           logit_std too), for cases not in it
# Prints one line per round, build and case: `BUILD CASE MEDIAN_MS`.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
rounds=2 runs=20 mode=fused
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --mode) mode=$2; shift 2 ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || { echo "usage: tools/gpu/ab.sh [--rounds R] [--runs N] [--mode MODE] CASES BUILD..." >&2; exit 2; }
cases=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for ((r = 1; r <= rounds; ++r)); do
    for b in "$@"; do
        dir=${b#*@} assigns=()
        [ "$dir" != "$b" ] && IFS=, read -ra assigns <<<"${b%%@*}"
        if ! env ${assigns[@]+"${assigns[@]}"} OUT= bash tools/gpu/run.sh --build "$dir" bench ${AB_CASES:+--cases "$AB_CASES"} --only "$cases" --runs "$runs" --warmup 3 --no-copy \
            --no-checksums --out "$tmp/r.jsonl" >"$tmp/r.log" 2>&1; then
            echo "ab.sh: $b failed:" >&2
            tail -5 "$tmp/r.log" >&2
            status=1
            continue
        fi
        python3 - "$tmp/r.jsonl" "$b" "$mode" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    if d.get("kind") == "ploss" and d.get("mode") == sys.argv[3]:
        print(sys.argv[2], d["case"], round(d["ms_median"], 4))
PY
        rm -f "$tmp/r.jsonl"
    done
done
exit "$status"
