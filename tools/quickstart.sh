#!/usr/bin/env bash
# quickstart.sh — on a fresh Debian 12 machine: install what ploss needs, build it (with the
# CUDA kernels when nvcc is found), and run the main job: examples/fashion_mnist.lua on the
# real Fashion-MNIST data, on the GPU when one is present, else on the CPU.
# Extra arguments go to the example (e.g. --epochs 5 --loss ls-ce).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(luajit libluajit-5.1-dev lua-busted meson ninja-build pkg-config libdlpack-dev
          libopenblas-dev zlib1g-dev dataset-fashion-mnist gnuplot-nox gcc)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "quickstart: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# nvcc is often outside PATH on Debian machines with the CUDA toolkit
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

if [ ! -f build/build.ninja ]; then
  meson setup build -Dcuda=auto >/dev/null
fi
ninja -C build >/dev/null

# shellcheck source=tools/env.sh
source tools/env.sh build
exec luajit examples/fashion_mnist.lua "$@"
