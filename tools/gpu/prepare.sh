#!/usr/bin/env bash
# tools/gpu/prepare.sh [--gnuplot] [--no-build]  — run HERE, before a GPU run.
#
#   1. builds build-gpu/ (CUDA kernels compiled, release) with meson + ninja;
#   2. stages what the GPU machine needs of it in .gpu/build/ (git-ignored): the library
#      (libploss.so.0.gz, gzip'd) and the generated Lua modules (lua/ploss/*.lua) — the
#      rest of a Meson build folder is this machine's absolute paths and objects;
#   3. downloads the Debian packages the GPU machine lacks into .debs/ (fetch_debs.sh;
#      gnuplot only with --gnuplot: its libraries add about 18 MB);
#   4. checks that the tree that travels (tracked + untracked-not-ignored files, shared/,
#      and the carried .debs and .gpu) stays under the device tool's 64 MiB;
#   5. prints the device `run` call to make (command + carry).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
gnuplot=0 build=1
for a in "$@"; do
    case "$a" in
        --gnuplot) gnuplot=1 ;;
        --no-build) build=0 ;;
        *) echo "usage: tools/gpu/prepare.sh [--gnuplot] [--no-build]" >&2; exit 2 ;;
    esac
done
export PATH="/usr/local/cuda/bin:$PATH"

if [ "$build" = 1 ]; then
    bash tools/fetch_cutlass.sh || echo "prepare.sh: CUTLASS not fetched; the fused margin and InfoNCE GEMMs are left out"
    if [ -d build-gpu ]; then
        meson setup --reconfigure build-gpu -Dcuda=enabled -Dbuildtype=release >/dev/null
    else
        meson setup build-gpu -Dcuda=enabled -Dbuildtype=release >/dev/null
    fi
    # Meson before 1.1 gives nvcc no depfile, so ninja does not know the headers a CUDA
    # source includes and would keep kernels whose header changed: drop the CUDA objects
    # older than the newest header first.
    if [ "$(printf '%s\n' 1.1.0 "$(meson --version)" | sort -V | head -1)" != 1.1.0 ]; then
        newest=$(find kernels core -name '*.cuh' -o -name '*.h' | xargs stat -c %Y | sort -n | tail -1)
        find build-gpu -name '*.cu.o' | while read -r o; do
            [ "$(stat -c %Y "$o")" -ge "$newest" ] || rm -f "$o"
        done
    fi
    ninja -C build-gpu
fi
[ -f build-gpu/libploss.so.0 ] || { echo "prepare.sh: build-gpu/libploss.so.0 missing" >&2; exit 1; }

rm -rf .gpu/build
mkdir -p .gpu/build/lua/ploss
# gzip'd (the kernels' machine code is already compressed; the rest shrinks); run.sh unpacks
# it there
strip --strip-debug -o .gpu/build/libploss.so.0 build-gpu/libploss.so.0 2>/dev/null ||
    cp -L build-gpu/libploss.so.0 .gpu/build/libploss.so.0
gzip -6 .gpu/build/libploss.so.0
cp build-gpu/lua/ploss/*.lua .gpu/build/lua/ploss/

if [ "$gnuplot" = 1 ]; then
    bash tools/gpu/fetch_debs.sh .debs
else
    bash tools/gpu/fetch_debs.sh --no-gnuplot .debs
fi

# what travels: tracked files, untracked files git does not ignore, shared/, carried paths
bytes_of() { xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
tree=$(git ls-files -z --cached --others --exclude-standard | bytes_of)
shared=0
[ -d shared ] && shared=$(find shared -type f -print0 | bytes_of)
debs=$(find .debs -type f -print0 | bytes_of)
staged=$(find .gpu -type f -print0 | bytes_of)
total=$((tree + shared + debs + staged))
limit=$((64 * 1024 * 1024))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo
echo "prepare.sh: travelling tree $(mib "$total") of 64 MiB:" \
     "working tree $(mib "$tree"), shared/ $(mib "$shared"), .debs $(mib "$debs"), .gpu $(mib "$staged")"
if [ "$total" -ge "$limit" ]; then
    echo "prepare.sh: OVER the 64 MiB limit; drop --gnuplot or remove large untracked files" >&2
    exit 1
fi

cat <<'EOF'

Device call (kind nvidia-h200), carry [".debs", ".gpu"]; for example:
  command: bash tools/gpu/run.sh specs; bash tools/gpu/run.sh sanitize all
  other subcommands: specs cuda | sanitize memcheck cuda_cross_entropy | bench ARGS | example ARGS | exec CMD
Logs come back in $OUT (specs.log, sanitize-<tool>.log, ... ) and in output_tail.
EOF
