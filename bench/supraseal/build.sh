#!/usr/bin/env bash
# Builds provd-supraseal-bench for sm_90 with nvcc 13.0 from PyPI, so no CUDA
# toolkit is needed here (the H200 machine has no cargo; its driver is CUDA
# 13.0). Prints the path of the stripped binary; scripts/gpu-bundle.sh calls it
# with SUPRASEAL=1.
set -euo pipefail
cd "$(dirname "$0")"
venv=${NVCC_VENV:-$PWD/target/nvcc-venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-crt==13.0.*" \
  "nvidia-cuda-cccl==13.0.*" "nvidia-nvvm==13.0.*" >&2
cuda=$(echo "$venv"/lib/python3*/site-packages/nvidia/cu13)
# sppark's build looks for the runtime library under lib64, the wheel has lib.
[ -e "$cuda/lib64" ] || ln -s lib "$cuda/lib64"
# sppark compiles for sm_80 (SASS) and compute_80 (PTX, JIT-compiled on an
# H200); nvcc appends native sm_90 code to every compile with this.
PATH=$cuda/bin:$PATH CUDA_PATH=$cuda LIBRARY_PATH=$cuda/lib \
  NVCC_APPEND_FLAGS="-gencode arch=compute_90,code=sm_90" cargo build --release >&2
strip -o target/release/provd-supraseal-bench.stripped target/release/provd-supraseal-bench
echo "$PWD/target/release/provd-supraseal-bench.stripped"
