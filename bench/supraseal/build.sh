#!/usr/bin/env bash
# Builds provd-supraseal-bench for sm_90 so that no CUDA toolkit is needed on
# the H200 machine (it has no cargo; its driver is CUDA 13.0, which runs code
# built by any older toolkit). Prints the path of the stripped binary;
# scripts/gpu-bundle.sh calls it with SUPRASEAL=1.
#
# SUPRA_CUDA picks the toolkit:
#   debian-11.8 (default) Debian's nvidia-cuda-toolkit (non-free), with g++-11,
#               the newest host compiler CUDA 11.8 accepts.
#   pypi-13.0   nvcc 13.0 from PyPI. Earlier builds this way never finished a
#               proof on the H200, but they had nvcc's -G (BENCHMARKS.md);
#               without it this route has not been run there yet.
set -euo pipefail
cd "$(dirname "$0")"
toolkit=${SUPRA_CUDA:-debian-11.8}
export CARGO_TARGET_DIR=$PWD/target/$toolkit
# sppark compiles for sm_80 (SASS) and compute_80 (PTX, JIT-compiled on an
# H200); nvcc appends native sm_90 code to every compile with this.
export NVCC_APPEND_FLAGS="-gencode arch=compute_90,code=sm_90"
case "$toolkit" in
  debian-11.8)
    if ! command -v nvcc >/dev/null || ! nvcc --version | grep -q "release 11.8"; then
      grep -q non-free /etc/apt/sources.list.d/debian.sources ||
        sed -i 's/^Components: main$/Components: main contrib non-free/' /etc/apt/sources.list.d/debian.sources
      apt-get update -qq >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nvidia-cuda-toolkit g++-11 >&2
    fi
    # cc passes the C++ compiler to nvcc as its host compiler.
    CXX=g++-11 cargo build --release >&2 ;;
  pypi-13.0)
    venv=${NVCC_VENV:-$PWD/target/nvcc-venv}
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install -q "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-crt==13.0.*" \
      "nvidia-cuda-cccl==13.0.*" "nvidia-nvvm==13.0.*" >&2
    cuda=$(echo "$venv"/lib/python3*/site-packages/nvidia/cu13)
    # sppark's build looks for the runtime library under lib64, the wheel has lib.
    [ -e "$cuda/lib64" ] || ln -s lib "$cuda/lib64"
    PATH=$cuda/bin:$PATH CUDA_PATH=$cuda LIBRARY_PATH=$cuda/lib cargo build --release >&2 ;;
  *) echo "SUPRA_CUDA must be debian-11.8 or pypi-13.0, not $toolkit" >&2; exit 2 ;;
esac
strip -o "$CARGO_TARGET_DIR/release/provd-supraseal-bench.stripped" "$CARGO_TARGET_DIR/release/provd-supraseal-bench"
echo "$CARGO_TARGET_DIR/release/provd-supraseal-bench.stripped"
