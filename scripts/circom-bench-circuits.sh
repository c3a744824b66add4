#!/usr/bin/env bash
# Builds the circom circuits the GPU benchmarks prove: Bits(K) of
# tests/circom/bits.circom (K 253-bit decompositions, 253·K + 1 constraints,
# a witness of mostly bits), compiled for BLS12-381 with circom2 and their
# witnesses computed with snarkjs, into $1 (default bench-results/circom):
#   K = 256 → 2^16 domain, 1024 → 2^18, 4144 → 2^20, 16578 → 2^22.
# The zkeys are made where they are proved (`provd groth16 setup-test-only`,
# TEST-ONLY), since at 2^20 and up they are gigabytes and snarkjs's own setup
# takes hours. Pack the directory with `tar -cJf` for scripts/gpu-run.sh's
# circom step (CIRCOM_TAR). Needs `npm ci` in tests/circom.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-bench-results/circom}")
mkdir -p "$out"
tools=tests/circom
for k in ${CIRCOM_K:-256 1024 4144 16578}; do
  printf 'pragma circom 2.0.0;\ninclude "bits.circom";\ncomponent main = Bits(%s);\n' "$k" > "$tools/bits_$k.circom"
  python3 -c "import json; print(json.dumps({'x': [str(1000003 * i + 7) for i in range($k)]}))" > "$out/bits_$k.input.json"
  (cd "$tools" && node_modules/.bin/circom2 "bits_$k.circom" --r1cs --wasm --O2 --prime bls12381 -l node_modules -o "$out")
  rm "$tools/bits_$k.circom"
  "$tools/node_modules/.bin/snarkjs" wtns calculate "$out/bits_${k}_js/bits_$k.wasm" "$out/bits_$k.input.json" "$out/bits_$k.wtns"
  rm -rf "$out/bits_${k}_js" "$out/bits_$k.input.json"
done
ls -la "$out"
