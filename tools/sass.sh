#!/usr/bin/env bash
# tools/sass.sh — the machine code (SASS) of kernels of a CUDA build, on the development
# machine (no GPU needed): instruction counts per kernel are read here instead of spending
# device time on them.
#
#   tools/sass.sh [--lib FILE] [--histogram] REGEX
#
#   REGEX        an awk regular expression matched against the mangled kernel names
#                (e.g. 'dice_sumsIfLb0ELb1E', 'ce_samplesI13__nv_bfloat16Li24')
#   --lib FILE   the library (default build-gpu/libploss.so.0)
#   --histogram  print each matching kernel's instruction count and its opcodes by
#                frequency instead of the listing
#
# cuobjdump (and the nvdisasm it runs): the CUDA toolkit's when it has them, else NVIDIA's
# nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels from PyPI, unpacked once under
# $PLOSS_NVTOOLS (default ~/.cache/ploss-nvtools).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

lib=build-gpu/libploss.so.0 hist=0 regex=
while [ $# -gt 0 ]; do
    case "$1" in
        --lib) lib=$2; shift 2 ;;
        --histogram) hist=1; shift ;;
        -*) echo "usage: tools/sass.sh [--lib FILE] [--histogram] REGEX" >&2; exit 2 ;;
        *) regex=$1; shift ;;
    esac
done
[ -n "$regex" ] || { echo "usage: tools/sass.sh [--lib FILE] [--histogram] REGEX" >&2; exit 2; }
[ -f "$lib" ] || { echo "sass.sh: $lib not found (build with -Dcuda=enabled first)" >&2; exit 1; }

cuobjdump=$(command -v cuobjdump || true)
[ -n "$cuobjdump" ] || [ ! -x /usr/local/cuda/bin/cuobjdump ] || cuobjdump=/usr/local/cuda/bin/cuobjdump
if [ -z "$cuobjdump" ]; then
    tools=${PLOSS_NVTOOLS:-$HOME/.cache/ploss-nvtools}
    cuobjdump=$(find "$tools" -name cuobjdump -type f 2>/dev/null | head -1 || true)
    if [ -z "$cuobjdump" ] || [ ! -f "$(dirname "$cuobjdump")/nvdisasm" ]; then
        mkdir -p "$tools"
        python3 -m pip download --quiet --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm -d "$tools/wheels" >&2
        python3 - "$tools" <<'EOF'
import glob, sys, zipfile
for w in glob.glob(sys.argv[1] + "/wheels/nvidia_cuda_*.whl"):
    zipfile.ZipFile(w).extractall(sys.argv[1])
EOF
        cuobjdump=$(find "$tools" -name cuobjdump -type f | head -1)
        chmod +x "$cuobjdump" "$(dirname "$cuobjdump")/nvdisasm"
    fi
    export PATH="$(dirname "$cuobjdump"):$PATH" # cuobjdump -sass runs nvdisasm
fi

# One instruction per line ("ADDR OPCODE OPERANDS"), each kernel headed by its name.
"$cuobjdump" -sass "$lib" | awk -v re="$regex" -v hist="$hist" '
    function flush() {
        if (name != "" && hist) {
            printf "%s: %d instructions\n", name, total
            for (op in count) printf "%7d %s\n", count[op], op | "sort -rn"
            close("sort -rn")
        }
        delete count; total = 0
    }
    /Function : / { flush(); name = ($3 ~ re) ? $3 : ""; if (name != "" && !hist) print "== " name; next }
    name != "" && /^[ \t]+\/\*[0-9a-f]+\*\// {
        line = $0
        sub(/^[ \t]+\/\*/, "", line); sub(/\*\/[ \t]+/, " ", line); sub(/[ \t]*\/\*.*/, "", line)
        if (hist) {
            split(line, f, " "); op = f[2]
            if (op ~ /^@/) op = f[3]
            sub(/\..*/, "", op); count[op]++; total++
        } else print line
    }
    END { flush() }'
