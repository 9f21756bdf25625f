#!/usr/bin/env bash
# quickstart.sh — on a fresh Debian 12 machine: install what ploss needs, build it in
# build/ (the folder `meson test -C build` uses), and run the main job:
# examples/fashion_mnist.lua on the real Fashion-MNIST data, on the GPU when the build has
# the CUDA kernels and one is visible, else on the CPU.
#
#   tools/quickstart.sh [-Dmeson_option=value …] [example options …]
#
# Arguments of the form -D… go to Meson (e.g. -Dcuda=enabled, -Dgpu_arch=80); the others
# go to the example (e.g. --epochs 5 --loss ls-ce).
#
# Which build: the CUDA kernels take minutes to compile and are of no use without a GPU,
# so they are built only when asked (-Dcuda=enabled) or when, without a -Dcuda option, a
# GPU is visible and nvcc is found; -Dcuda=disabled builds for the CPU only.  A GPU is
# visible when `nvidia-smi -L` lists one; where nvidia-smi is missing or fails (a driver
# half installed, a container without the tools), when a /dev/nvidia<N> device exists.
# A build/ folder set up before keeps its choice unless a -Dcuda option is given (one set
# up with Meson's default, -Dcuda=auto, takes the choice above).  A new CUDA build is for the
# GPU it sees (-Dgpu_arch from nvidia-smi's compute capability, when nvcc knows it; else
# the default sm_90 with its PTX, which the driver compiles for a newer GPU), unless a
# -Dgpu_arch option is given.
set -euo pipefail
cd "$(dirname "$0")/.."

meson_opts=()
example_args=()
cuda_opt=""
for a in "$@"; do
  case "$a" in
    -Dcuda=*) cuda_opt="${a#-Dcuda=}" ;;
    -D?*) meson_opts+=("$a") ;;
    *) example_args+=("$a") ;;
  esac
done

packages=(luajit libluajit-5.1-dev lua-busted meson ninja-build pkg-config libdlpack-dev
          libopenblas-dev libopenblas-openmp-dev zlib1g-dev dataset-fashion-mnist gnuplot-nox gcc)
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

# nvcc is often outside PATH on machines with NVIDIA's CUDA toolkit
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

# The GPU, if any, in words (empty when none is visible).
gpu_seen() {
  local list
  if command -v nvidia-smi >/dev/null && list=$(timeout 30 nvidia-smi -L 2>/dev/null); then
    grep -m1 '^GPU [0-9]' <<<"$list" || true
    return
  fi
  local d
  for d in /dev/nvidia[0-9]*; do
    if [ -c "$d" ]; then echo "$d"; return; fi
  done
}

# -Dgpu_arch for the visible GPU (-Dgpu_ptx=true when nvcc cannot build for it: the driver
# then compiles sm_90's PTX); nothing when the compute capability cannot be read.
gpu_arch_opts() {
  local cc archs
  cc=$(timeout 30 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .') || true
  [[ "$cc" =~ ^[0-9]+$ ]] || return 0
  archs=$(nvcc --list-gpu-arch 2>/dev/null) || true
  if grep -qx "compute_$cc" <<<"$archs"; then
    echo "-Dgpu_arch=$cc"
  else
    echo "-Dgpu_ptx=true"
  fi
}

# The -Dcuda value of an existing build folder (enabled, disabled, auto; empty if unknown).
configured_cuda() {
  grep -o '"name": "cuda", "value": "[a-z]*"' build/meson-info/intro-buildoptions.json 2>/dev/null |
    sed 's/.*"value": "//; s/"$//'
}

existing=""
[ -f build/build.ninja ] && existing=$(configured_cuda)
if [ -z "$cuda_opt" ] && [ -f build/build.ninja ] && [ "$existing" != auto ]; then
  cuda=$existing     # keep the folder's own choice (empty: unknown, left alone)
  why="build/ was set up with -Dcuda=${existing:-?}"
elif [ -n "$cuda_opt" ]; then
  cuda=$cuda_opt
  why="asked for with -Dcuda=$cuda_opt"
else
  gpu=$(gpu_seen)
  if [ -z "$gpu" ]; then
    cuda=disabled why="no GPU visible"
  elif ! command -v nvcc >/dev/null; then
    cuda=disabled why="a GPU is visible ($gpu) but nvcc is not found: install the CUDA toolkit (12 or later) for the kernels"
  else
    cuda=enabled why="a GPU is visible: $gpu"
  fi
fi
if [ "$cuda" = enabled ]; then
  echo "quickstart: building with the CUDA kernels ($why); the first build takes 4-10 minutes"
  # the fused margin GEMM for H100/H200 (optional: without it those losses run unfused);
  # Meson looks for its headers when it configures, so a build/ set up before them is
  # configured again
  had_cutlass=$([ -f subprojects/cutlass/include/cutlass/cutlass.h ] && echo 1 || true)
  bash tools/fetch_cutlass.sh || echo "quickstart: CUTLASS not fetched; the margin losses and InfoNCE run unfused on sm_90"
  if [ -z "$had_cutlass" ] && [ -f subprojects/cutlass/include/cutlass/cutlass.h ] && [ -f build/build.ninja ]; then
    meson setup --reconfigure build >/dev/null
  fi
fi

if [ ! -f build/build.ninja ]; then
  if [ "$cuda" = enabled ] && [[ " ${meson_opts[*]} " != *" -Dgpu_arch="* ]]; then
    arch_opt=$(gpu_arch_opts)
    [ -n "$arch_opt" ] && meson_opts+=("$arch_opt")
  fi
  meson setup build "-Dcuda=${cuda:-auto}" "${meson_opts[@]}" >/dev/null
elif [ -n "$cuda" ] && [ "$cuda" != "$existing" ] || ((${#meson_opts[@]})); then
  meson configure build ${cuda:+"-Dcuda=$cuda"} "${meson_opts[@]}" >/dev/null
fi
ninja -C build >/dev/null

# shellcheck source=tools/env.sh
source tools/env.sh build
if luajit -e 'os.exit(require("ploss").C.ploss_built_with_cuda() ~= 0 and 0 or 1)'; then
  echo "quickstart: build/ has the CUDA kernels ($why); for a CPU-only build: tools/quickstart.sh -Dcuda=disabled"
else
  echo "quickstart: build/ is CPU only ($why); for the CUDA kernels (needs nvcc): tools/quickstart.sh -Dcuda=enabled"
fi
exec luajit examples/fashion_mnist.lua "${example_args[@]}"
