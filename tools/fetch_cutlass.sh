#!/usr/bin/env bash
# tools/fetch_cutlass.sh — puts CUTLASS's headers (NVIDIA's nvidia-cutlass wheel from PyPI,
# pinned below with its SHA-256) under subprojects/cutlass/include, where meson.build looks
# for them (option -Dcutlass).  Optional: with them a CUDA build for sm_90 (H100/H200)
# fuses the margin losses' and InfoNCE's exponential into their product GEMMs
# (kernels/margin/margin_exp_gemm.cu, kernels/pairs/infonce_exp_gemm.cu); without them those
# losses take their unfused path.
# Needs the network (pip, else Python's urllib on PyPI's simple index); exits non-zero,
# changing nothing, when it cannot fetch or the checksum differs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VERSION=4.2.0.0
WHEEL=nvidia_cutlass-$VERSION-py3-none-any.whl
SHA256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
DEST=subprojects/cutlass
[ -f "$DEST/include/cutlass/cutlass.h" ] && [ "$(cat "$DEST/VERSION" 2>/dev/null)" = "$VERSION" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "nvidia-cutlass==$VERSION" 2>/dev/null; then
    python3 - "$tmp" "$WHEEL" <<'PY'
import re, sys, urllib.request
d, wheel = sys.argv[1], sys.argv[2]
page = urllib.request.urlopen("https://pypi.org/simple/nvidia-cutlass/", timeout=60).read().decode()
url = next(u for u in re.findall(r'href="([^"]+)"', page) if wheel in u)
urllib.request.urlretrieve(url.split("#")[0], f"{d}/{wheel}")
PY
fi
echo "$SHA256  $tmp/$WHEEL" | sha256sum -c --quiet
python3 - "$tmp/$WHEEL" "$tmp/x" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("cutlass_library/source/include/")])
PY
rm -rf "$DEST"
mkdir -p "$DEST"
mv "$tmp/x/cutlass_library/source/include" "$DEST/include"
echo "$VERSION" > "$DEST/VERSION"
echo "fetch_cutlass.sh: CUTLASS $VERSION headers in $DEST/include"
