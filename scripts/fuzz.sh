#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser a client or file reaches, under
# libFuzzer (through bolero's libFuzzer engine), on stable Rust: each target
# of worker/tests/fuzz.rs for SECONDS (default 300). Each input libFuzzer
# makes is turned by bolero into edits of the target's real seed files (see
# the top of worker/tests/fuzz.rs); its corpus grows under
# target/fuzz/corpus/<target>, and a crash's input lands in
# target/fuzz/crashes/<target>. CI runs the same targets for a bounded number
# of random inputs instead (`cargo test`; PROVD_FUZZ_ITERATIONS, 3000 by
# default).
#
#   scripts/fuzz.sh                   # every target, 300 s each
#   scripts/fuzz.sh 3600 fuzz_zkey    # one target for an hour
#
# This is what `cargo bolero test` does, limited to the fuzz test binary
# (cargo-bolero builds every test target of the package, and those without
# bolero do not link with coverage instrumentation), built without the
# service feature for the same reason (an integration test builds the
# package's `provd` binary too): fuzz_http_requests, which needs the HTTP
# stack, runs in `cargo test` only. No sanitizer: address
# sanitizing needs a nightly compiler, and safe Rust's panics, which the
# targets look for, need none. The first build takes a while (everything is
# compiled again with instrumentation, into target/fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-300}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(fuzz_zkey fuzz_wtns fuzz_r1cs fuzz_bellperson_key fuzz_verifying_key_and_proof
             fuzz_request_witnesses fuzz_porep_input fuzz_journal_rows)
fi
host="$(rustc -vV | sed -n 's/^host: //p')"
flags="--cfg fuzzing --cfg fuzzing_libfuzzer -Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares \
-Cllvm-args=-sanitizer-coverage-stack-depth"
# --target keeps the instrumentation off build scripts and proc macros.
build=(cargo test -p provd --test fuzz --no-default-features --features filecoin --profile fuzz
       --target "$host" --target-dir target/fuzz)
RUSTFLAGS="$flags" "${build[@]}" --no-run
exe="$(RUSTFLAGS="$flags" "${build[@]}" --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)"
[ -x "$exe" ] || { echo "fuzz: the test binary was not found" >&2; exit 1; }
for t in "${targets[@]}"; do
    corpus="target/fuzz/corpus/$t" crashes="target/fuzz/crashes/$t"
    mkdir -p "$corpus" "$crashes"
    echo "== $t for ${seconds} s (corpus $corpus)"
    BOLERO_TEST_NAME="$t" BOLERO_LIBTEST_HARNESS=1 \
    BOLERO_LIBFUZZER_ARGS="$corpus $crashes -artifact_prefix=$crashes/ -timeout=60 -max_total_time=$seconds" \
        "$exe" "$t" --exact --nocapture --quiet --test-threads 1
done
