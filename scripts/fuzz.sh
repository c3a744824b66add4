#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser a client or file reaches, under
# libFuzzer through cargo-bolero, on stable Rust: each target of
# worker/tests/fuzz.rs for SECONDS (default 300) from the corpus of real
# files in worker/tests/fuzz-corpus/ (libFuzzer's own corpus grows under
# target/fuzz/). CI runs the same targets for a bounded number of random
# inputs instead (cargo test; PROVD_FUZZ_ITERATIONS, 3000 by default).
#
#   scripts/fuzz.sh                   # every target, 300 s each
#   scripts/fuzz.sh 3600 fuzz_zkey    # one target for an hour
#
# A crash leaves its input under the crashes directory cargo-bolero names;
# add it to the corpus once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-300}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(fuzz_zkey fuzz_wtns fuzz_r1cs fuzz_bellperson_key fuzz_verifying_key_and_proof
             fuzz_request_witnesses fuzz_porep_input fuzz_journal_rows fuzz_http_requests)
fi
if ! cargo bolero --version >/dev/null 2>&1; then
    # Without libbfd and libunwind (binutils-dev, libunwind-dev) it still builds.
    cargo install cargo-bolero --locked --no-default-features
fi
for t in "${targets[@]}"; do
    echo "== $t for ${seconds} s"
    # No sanitizer: address sanitizing needs a nightly compiler; safe Rust's
    # panics, which the targets look for, need none.
    cargo bolero test -p provd --profile fuzz --sanitizer NONE \
        --target-dir target/fuzz -T "${seconds}s" "$t"
done
