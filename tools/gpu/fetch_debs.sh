#!/usr/bin/env bash
# tools/gpu/fetch_debs.sh [--no-gnuplot] [DEST]  — run HERE (a Debian 12 machine with apt).
#
# Downloads into DEST (default .debs/, git-ignored) the Debian .deb files that the GPU
# machine lacks: it has CUDA, a C toolchain and Python but no LuaJIT, busted, OpenBLAS or
# the Fashion-MNIST data, and it cannot reach any package registry.  tools/gpu/run.sh
# unpacks them there under /tmp/ploss-root with `dpkg-deb -x` (never over /).
#
# The list is the dependency closure (Depends and Pre-Depends, no Recommends) of the
# packages below, less what every Linux image with CUDA has (glibc, libstdc++, the
# package tools) and less data the runs do not read (fonts, X11 data, other Lua
# interpreters):
#   luajit lua-busted         the Lua runtime and the spec runner with its Lua modules
#                             (lua-cliargs lua-dkjson lua-filesystem lua-luassert
#                             lua-mediator lua-penlight lua-say lua-system lua-term …)
#   libopenblas0-pthread      CPU GEMM (libgfortran5, libquadmath0 come with it)
#   libgomp1                  OpenMP runtime the library was linked against
#   libdlpack-dev             the DLTensor header (for anyone compiling against ploss.h)
#   dataset-fashion-mnist     the real data of examples/fashion_mnist.lua
#   gnuplot-nox (optional)    the example's plot; --no-gnuplot leaves it out (about 10 MB),
#                             and the example then says that it skipped the plot.
# Prints the total size; the tree that travels to the GPU machine must stay under 64 MiB.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
gnuplot=1
if [ "${1:-}" = "--no-gnuplot" ]; then
    gnuplot=0
    shift
fi
DEST=${1:-.debs}

ROOTS=(luajit lua-busted libopenblas0-pthread libgomp1 libdlpack-dev dataset-fashion-mnist)
[ "$gnuplot" = 1 ] && ROOTS+=(gnuplot-nox)

# Present on the GPU image, or never read by our runs.
EXCLUDE='^(libc6|libc-bin|libgcc-s1|libstdc\+\+6|gcc-12-base|dpkg|tar|debconf|cdebconf|install-info|lsb-base|sysvinit-utils|readline-common|base-files|debianutils|x11-common|fonts-.*|ttf-.*|xfonts-.*|fontconfig|aglfn|libdebian-installer4|libnewt0\.52|libslang2|libtextwrap1|lua5\.[1-4]|liblua5\.[1-3]-.*|libyaml-dev|libselinux1|libpcre2-8-0|libacl1|libmd0|libzstd1|liblzma5|libbz2-1\.0|zlib1g|libtinfo6|libcrypt1|perl-base)$'

if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -E '^(lock|partial|auxfiles)$' || true)" ]; then
    apt-get update -qq
fi

mapfile -t PKGS < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
        --no-breaks --no-replaces --no-enhances "${ROOTS[@]}" |
    grep -v '^ ' | grep -v '^<' | sort -u | grep -v -E "$EXCLUDE")

mkdir -p "$DEST"
# drop debs of an earlier fetch that are no longer wanted (e.g. after --no-gnuplot)
for f in "$DEST"/*.deb; do
    [ -e "$f" ] || continue
    name=$(dpkg-deb -f "$f" Package)
    printf '%s\n' "${PKGS[@]}" | grep -qx "$name" || rm -f "$f"
done
missing=()
for p in "${PKGS[@]}"; do
    ls "$DEST/${p}_"*.deb >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    (cd "$DEST" && apt-get download -qq "${missing[@]}")
fi
echo "fetch_debs: ${#PKGS[@]} packages in $DEST ($(du -sh "$DEST" | cut -f1)):"
printf '  %s\n' "${PKGS[@]}" | column -c 100
