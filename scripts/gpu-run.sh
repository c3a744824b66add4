#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, over .device-bundle/:
#   scripts/gpu-run.sh [tests] [example] [image] [bench-ntt] [bench-link] [bench-msm] [bench-msm-g2] [bench-pipeline] [bench-prove] [supraseal] [supraseal-probe] [circom] [porep] [porep-shape] [soak] [in-flight] [products] [lane] [vanilla] [doors] ...
# TEST_BINS (e.g. "gpu-test msm-test") limits `tests` to those binaries; TESTS_SKIP names ignored tests not
# to run (default "512mib": sealing a 512 MiB sector takes minutes and needs no GPU).
# B_G2=gpu|cpu places B's G2 MSM for bench-prove and bench-pipeline (default: the binary's);
# PROVE_VS=none skips bellperson in bench-prove; PIPE_DEVICES=all spreads bench-pipeline over every GPU.
# MSM_SIZES and MSM_FLAGS (e.g. "--scalars witness --keep-freed 0") pass through to bench-msm.
# circom: CIRCOM_DIR (or CIRCOM_TAR, a tar.xz of it) holds circom circuits (NAME.r1cs + NAME.wtns: a TEST-ONLY zkey is
# made here; or NAME.zkey + NAME.wtns); each is proved on the GPU (proof, public signals and
# verifying key kept for snarkjs to check back home) and benched (CIRCOM_BENCH_BACKENDS, default cuda);
# SNARKJS names a snarkjs to bench beside provd.
# supraseal: for each of SUPRA_CIRCUITS (default "bench-20 dense-20"), the TEST-ONLY key is made, then
# `provd bench prove --backend cuda` and provd-supraseal-bench (bundled with SUPRASEAL=1; SUPRA_BINS names several
# builds of it in the bundle, each with a NAME.toolkit file) prove with that one key file, PROVE_RUNS times each
# after a warm-up; the ratio lands in supraseal.log and the JSON. BASELINE=none skips the recorder's timing in
# `bench prove` (seconds a proof at 2^24).
# The harness runs under `timeout` (SUPRA_TIMEOUT, s): built with nvcc's -G (debug info in its release profile,
# since removed) it never finished a proof in earlier sessions (BENCHMARKS.md). RUST_LOG=bellperson=info (the harness's
# default) prints bellperson's synthesis / prover split per proof.
# supraseal-probe: ncu's device time per kernel of PROBE_CIRCUIT (default bench-14) proved by the harness.
# PIPE_CIRCUITS runs bench-pipeline once per circuit named (default: PIPE_CIRCUIT).
# doors: `provd bench doors`, DOORS_JOBS (300) jobs of DOORS_KIND (filecoin-window-post) per door and round through
# HTTP and the cuzk.v1 gRPC door of one worker on the GPU, DOORS_CONCURRENCY (16) clients, DOORS_ROUNDS (3) rounds.
# bench-link: `provd bench link`, the host-to-device rate out of page-locked memory allocated so and page-locked in
# place, copies of LINK_BYTES (default 4GiB).
# porep-shape: `provd bench porep-shape` at SHAPE_PROOF (default StackedDrg32GiBV1_1), SHAPE_RUNS partitions,
# SHAPE_PROVE_RUNS proofs with a timing key on the GPU, under SHAPE_DEVICE_MEMORY (a ballast) if set; SHAPE_BINS
# (e.g. "provd-base provd") and SHAPE_ROUNDS alternate the bundle's binaries over one store (an A/B on one machine).
# porep: for each of POREP_PROOFS (default "StackedDrg2KiBV1_1 StackedDrg512MiBV1_1"), `provd bench porep` seals a
# sector and makes TEST-ONLY parameters in POREP_WORK (kept while the machine is), then proves it POREP_RUNS times
# with provd's cuda backend and (unless POREP_VS=none) with filecoin-proofs' own seal_commit_phase2 (CPU); the
# ratio lands in porep.log. POREP_STREAM (default 0: none) copies of the sector then go in at once, for the
# steady stream's seconds a sector. POREP_DEVICE_MEMORY (e.g. 4GiB) caps the card with a ballast for the whole
# run: where the key and a resident proof do not fit it streams, and the log says so per device beside verify_seal's word.
# soak: SOAK_PROOFS (default 1000) proofs of SOAK_CIRCUIT (default bench-20) in one process (`provd bench pipeline
# --sample-every SOAK_EVERY`, default 5 s): RSS, device memory and the buffer gauges over time, with nvidia-smi's
# memory.used and utilization.gpu sampled beside them (soak-smi.csv); SOAK_IN_FLIGHT sets --in-flight.
# in-flight: for each of INFLIGHT_CIRCUITS (default "bench-20"), `provd bench pipeline` with 1 and with 2 partitions in
# flight per GPU, alternated INFLIGHT_ROUNDS times (default 2) in one process lifetime each, INFLIGHT_JOBS jobs × 4
# partitions (default 60), nvidia-smi's utilisation sampled beside each run (inflight-CIRCUIT-N-ROUND.csv).
# products: for each of PRODUCTS_CIRCUITS (default "bench-20 bench-22 dense-22"), `bench prove` (PROVE_RUNS) and
# `bench pipeline` (PRODUCTS_JOBS jobs × 4 partitions, default 30) with a, b, c computed on the host (--products cpu)
# and on the device (--products gpu), alternated PRODUCTS_ROUNDS times (default 1), PRODUCTS_PERMITS partition permits
# (default the binary's); logs in products.log, JSON and nvidia-smi samples in products.tgz.
# lane: `provd bench lane --backend cuda`, LANE_CRITICAL (default bench-22, a WinningPoSt's size) arriving into a
# stream of LANE_STREAM (default bench-24), LANE_RUNS urgent jobs (default 5), nvidia-smi sampled beside it (lane-smi.csv);
# LANE_CRITICAL may name a Filecoin kind (filecoin-winning-post: a 2 KiB sector sealed there first).
# vanilla: `provd bench vanilla --backend cuda` for each of VANILLA_KINDS (default filecoin-winning-post
# filecoin-window-post filecoin-snap) at VANILLA_SEAL's sector size (default StackedDrg2KiBV1_1), against
# filecoin-proofs' CPU prover, VANILLA_RUNS jobs each (default 5).
# BALLAST (e.g. 16GiB) caps GPU 0's free memory for every step (see below).
# Logs and JSON go to $OUT (the device tool brings them back).
set -uo pipefail
bundle=.device-bundle
OUT=${OUT:-/tmp/provd-out}
mkdir -p "$OUT"
export PROVD_DATA_DIR=${PROVD_DATA_DIR:-/tmp/provd-data} RUST_BACKTRACE=1
# End-to-end tests start this binary.
export PROVD_BIN=${PROVD_BIN:-$PWD/$bundle/provd}
echo "commit $(cat $bundle/COMMIT)" | tee "$OUT/machine.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee -a "$OUT/machine.txt"
nproc | sed 's/^/cpus: /' | tee -a "$OUT/machine.txt"
# Whether large host vectors get huge pages by default or only when asked (groth16::huge_pages).
sed 's/^/transparent huge pages: /' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null | tee -a "$OUT/machine.txt" || true
status=0
# BALLAST=16GiB: every step runs beside `provd bench ballast`, which takes all of GPU 0's memory but
# that much (a smaller card's, physically: nothing can quietly use more); it ends with this script.
if [ -n "${BALLAST:-}" ]; then
  (sleep 1d | "$bundle/provd" bench ballast --device-memory "$BALLAST" > "$OUT/ballast.log" 2>&1) &
  for _ in $(seq 1200); do grep -q "ballast: holding" "$OUT/ballast.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "ballast: holding" "$OUT/ballast.log" || { cat "$OUT/ballast.log"; echo "the ballast did not start"; exit 1; }
  tee -a "$OUT/machine.txt" < "$OUT/ballast.log"
  trap 'pkill -f "^sleep 1d$"' EXIT
fi
# The mean of the nvidia-smi utilization.gpu samples in $1 (timestamp, value[, ...]; 0.5 s apart), from
# the first to the last non-zero one: the run, not the start-up.
smi_mean() {
  awk -F', ' '{ v[NR] = $2 } $2 > 0 { if (!a) a = NR; b = NR } END { for (i = a; i <= b; i++) s += v[i]; if (b) printf "nvidia-smi utilization.gpu over the run: mean %.1f%% (%d samples, 0.5 s apart)\n", s / (b - a + 1), b - a + 1 }' "$1"
}
for step in "${@:-tests}"; do
  case "$step" in
    tests)
      for t in "$bundle"/tests/*; do
        if [ -n "${TEST_BINS:-}" ] && [[ " $TEST_BINS " != *" $(basename "$t") "* ]]; then continue; fi
        echo "== $(basename "$t")" | tee -a "$OUT/tests.log"
        # GPU tests are #[ignore]d with their reason where no GPU is (CI): run them here, but not the
        # other ignored ones that only take long (TESTS_SKIP, default: those sealing a 512 MiB sector).
        "$t" --test-threads=1 --include-ignored --skip "${TESTS_SKIP:-512mib}" 2>&1 | tee -a "$OUT/tests.log" || status=1
      done ;;
    example)
      "$bundle/sha256_preimage" cuda 2>&1 | tee "$OUT/example.log" || status=1 ;;
    image)
      # The container image's own files (bundled with IMAGE=1): its provd and its NVRTC, with the image's
      # LD_LIBRARY_PATH and a fresh data directory, so that the kernels are compiled by the bundled NVRTC;
      # this machine's glibc and driver stand in for the image's base and the NVIDIA toolkit's mounts.
      # Passes when a GPU proof verifies and the kernels were compiled by the image's libnvrtc (provd
      # logs the file whose code the bindings called); this machine's toolkit also has a libnvrtc.so.
      img="$PWD/$bundle/image"
      data=$(mktemp -d)
      env -u PROVD_NVRTC LD_LIBRARY_PATH="$img/usr/local/lib/nvrtc" LD_DEBUG=libs PROVD_DATA_DIR="$data" \
        "$img/usr/local/bin/provd" prove --circuit "${IMAGE_CIRCUIT:-bench-16}" --backend cuda \
        > "$OUT/image.log" 2> "$OUT/image-ld.log" || status=1
      grep -E 'calling init: .*libnvrtc|compiled CUDA kernels' "$OUT/image-ld.log" | sort -u | tee -a "$OUT/image.log"
      grep -q "compiled CUDA kernels with NVRTC.* nvrtc=$img/usr/local/lib/nvrtc/libnvrtc.so.13" "$OUT/image-ld.log" ||
        { echo "image: the kernels were not compiled by the image's NVRTC" | tee -a "$OUT/image.log"; status=1; }
      grep -v '^0x' "$OUT/image.log" | tail -5
      rm -rf "$data" ;;
    bench-ntt)
      "$bundle/provd" bench ntt --sizes "${NTT_SIZES:-20,22,24,26}" --json "$OUT/ntt.json" 2>&1 | tee "$OUT/bench-ntt.log" || status=1 ;;
    bench-link)
      "$bundle/provd" bench link --bytes "${LINK_BYTES:-4GiB}" --json "$OUT/link.json" 2>&1 | tee "$OUT/bench-link.log" || status=1 ;;
    bench-msm)
      "$bundle/provd" bench msm --sizes "${MSM_SIZES:-20,22,24,26}" ${MSM_FLAGS:-} --json "$OUT/msm.json" 2>&1 | tee "$OUT/bench-msm.log" || status=1 ;;
    lane)
      nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 \
        > "$OUT/lane-smi.csv" & smi=$!
      "$bundle/provd" bench lane --backend cuda --critical "${LANE_CRITICAL:-bench-22}" \
        --work-dir "${VANILLA_WORK:-/tmp/provd-vanilla}" --stream "${LANE_STREAM:-bench-24}" --runs "${LANE_RUNS:-5}" --json "$OUT/lane.json" \
        2>&1 | grep -v ' INFO ' | tee "$OUT/lane.log" || status=1
      kill $smi ;;
    vanilla)
      for kind in ${VANILLA_KINDS:-filecoin-winning-post filecoin-window-post filecoin-snap}; do
        "$bundle/provd" bench vanilla --kind "$kind" --seal "${VANILLA_SEAL:-StackedDrg2KiBV1_1}" \
          --runs "${VANILLA_RUNS:-5}" --backend cuda --work-dir "${VANILLA_WORK:-/tmp/provd-vanilla}" \
          --json "$OUT/vanilla-$kind.json" 2>&1 | grep -v ' INFO ' | tee -a "$OUT/vanilla.log" || status=1
      done ;;
    doors)
      # The same Filecoin jobs through HTTP and the cuzk.v1 gRPC door of one worker on the GPU.
      "$bundle/provd" bench doors --kind "${DOORS_KIND:-filecoin-window-post}" --seal "${VANILLA_SEAL:-StackedDrg2KiBV1_1}" \
        --jobs "${DOORS_JOBS:-300}" --concurrency "${DOORS_CONCURRENCY:-16}" --rounds "${DOORS_ROUNDS:-3}" \
        --backend cuda --work-dir "${VANILLA_WORK:-/tmp/provd-vanilla}" --json "$OUT/doors.json" \
        2>&1 | grep -v ' INFO ' | tee "$OUT/doors.log" || status=1 ;;
    porep-shape)
      # The host's pieces of a PoRep partition at SHAPE_PROOF's real shape (a synthetic C1; its matrix
      # store, ~27 GiB at 32 GiB, in SHAPE_WORK on the machine's disk, not in $OUT); peak RSS from time -v.
      # SHAPE_PROVE_RUNS proofs with a timing key follow (default 2); device memory sampled beside.
      # SHAPE_DEVICE_MEMORY (e.g. 16GiB) caps the device with the bench's own ballast (SHAPE_TAG names the files, else the cap); SHAPE_FLAGS adds
      # flags (e.g. --skip-whole-witness --keep-store). Each process's device memory is sampled too, so
      # that provd's own peak shows beside the ballast's.
      # SHAPE_BINS (default "provd") names the bundle's binaries to run, one after the other over the same
      # store, SHAPE_ROUNDS times (default 1) in alternation: an A/B of two commits on one machine
      # (gpu-bundle.sh's BASE=<commit> bundles provd-base); files then carry the binary's name in their tag.
      timed=(); [ -x /usr/bin/time ] && timed=(/usr/bin/time -v)
      cap=(); [ -n "${SHAPE_DEVICE_MEMORY:-}" ] && cap=(--device-memory "$SHAPE_DEVICE_MEMORY")
      # shellcheck disable=SC2206
      bins=(${SHAPE_BINS:-provd})
      named=${SHAPE_TAG:-${SHAPE_DEVICE_MEMORY:-uncapped}}
      for round in $(seq "${SHAPE_ROUNDS:-1}"); do
        for bin in "${bins[@]}"; do
          tag=$named
          if [ "${#bins[@]}" -gt 1 ] || [ "${SHAPE_ROUNDS:-1}" -gt 1 ]; then tag="$named-$bin-$round"; fi
          nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -lms 500 \
            > "$OUT/porep-shape-$tag-smi.csv" & smi=$!
          nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 500 \
            > "$OUT/porep-shape-$tag-apps.csv" & apps=$!
          # shellcheck disable=SC2086
          "${timed[@]}" "$bundle/$bin" bench porep-shape --proof "${SHAPE_PROOF:-StackedDrg32GiBV1_1}" \
            --runs "${SHAPE_RUNS:-2}" --prove-runs "${SHAPE_PROVE_RUNS:-2}" --backend cuda "${cap[@]}" ${SHAPE_FLAGS:-} \
            --work-dir "${SHAPE_WORK:-/tmp/porep-shape}" --json "$OUT/porep-shape-$tag.json" \
            2>&1 | tee "$OUT/porep-shape-$tag.log" || status=1
          kill "$smi" "$apps"
          sort -t, -k2 -n "$OUT/porep-shape-$tag-smi.csv" | tail -1 | sed 's/^/peak device memory, the whole device (nvidia-smi): /' | tee -a "$OUT/porep-shape-$tag.log"
          awk -F', ' '$2 > peak[$1] { peak[$1] = $2 } END { for (p in peak) printf "peak device memory of pid %s (nvidia-smi): %d MiB\n", p, peak[p] }' \
            "$OUT/porep-shape-$tag-apps.csv" | tee -a "$OUT/porep-shape-$tag.log"
        done
      done ;;
    bench-msm-g2)
      sizes=${MSM_G2_SIZES:-16,18,20,22}
      "$bundle/provd" bench msm --g2 --sizes "$sizes" --cpu-sizes "$sizes" --json "$OUT/msm-g2.json" 2>&1 | tee "$OUT/bench-msm-g2.log" || status=1 ;;
    bench-pipeline)
      for circuit in ${PIPE_CIRCUITS:-${PIPE_CIRCUIT:-bench-18}}; do
        # The driver's own utilisation, sampled beside the bench's CUDA-event figure.
        nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 500 > "$OUT/pipeline-smi.csv" &
        smi=$!
        tag="$circuit${B_G2:+-g2-$B_G2}"
        "$bundle/provd" bench pipeline --circuit "$circuit" --jobs "${PIPE_JOBS:-8}" --partitions "${PIPE_PARTS:-4}" \
          --backend cuda ${B_G2:+--b-g2 "$B_G2"} --devices "${PIPE_DEVICES:-0}" --json "$OUT/pipeline-$tag.json" 2>&1 | tee -a "$OUT/bench-pipeline.log" || status=1
        kill $smi
        smi_mean "$OUT/pipeline-smi.csv" | tee -a "$OUT/bench-pipeline.log"
        mv "$OUT/pipeline-smi.csv" "$OUT/smi-$tag.csv"
      done ;;
    in-flight)
      for circuit in ${INFLIGHT_CIRCUITS:-bench-20}; do
        for round in $(seq "${INFLIGHT_ROUNDS:-2}"); do
          for n in 1 2; do
            tag="$circuit-$n-$round"
            nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 > "$OUT/inflight-$tag.csv" &
            smi=$!
            echo "== $circuit, $n in flight, round $round" | tee -a "$OUT/in-flight.log"
            "$bundle/provd" bench pipeline --circuit "$circuit" --jobs "${INFLIGHT_JOBS:-60}" --partitions 4 --backend cuda \
              --in-flight "$n" --json "$OUT/inflight-$tag.json" 2>&1 | grep -v ' INFO ' | tee -a "$OUT/in-flight.log" || status=1
            kill $smi
            smi_mean "$OUT/inflight-$tag.csv" | tee -a "$OUT/in-flight.log"
          done
        done
      done ;;
    products)
      # a, b and c on the host's cores or on the device, alternated in one session: one proof's steps
      # (`bench prove`) and a steady stream (`bench pipeline`, 2 in flight, nvidia-smi beside it). The
      # JSON and samples are packed into products.tgz after each circuit (the device tool brings back
      # a handful of files).
      work=/tmp/provd-products && mkdir -p "$work"
      for circuit in ${PRODUCTS_CIRCUITS:-bench-20 bench-22 dense-22}; do
        "$bundle/provd" params gen --circuit "$circuit" 2>&1 | tail -1 | tee -a "$OUT/products.log" || status=1
        for round in $(seq "${PRODUCTS_ROUNDS:-1}"); do
          for p in cpu gpu; do
            tag="$circuit-$p-$round"
            echo "== $circuit, products on the $p, round $round" | tee -a "$OUT/products.log"
            "$bundle/provd" bench prove --circuit "$circuit" --runs "${PROVE_RUNS:-3}" --backend cuda --products "$p" \
              --baseline none --json "$work/prove-$tag.json" 2>&1 | grep -v ' INFO ' | tee -a "$OUT/products.log" || status=1
            nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 > "$work/smi-$tag.csv" &
            smi=$!
            "$bundle/provd" bench pipeline --circuit "$circuit" --jobs "${PRODUCTS_JOBS:-30}" --partitions 4 --backend cuda \
              --products "$p" ${PRODUCTS_PERMITS:+--permits "$PRODUCTS_PERMITS"} --json "$work/pipeline-$tag.json" 2>&1 | grep -v ' INFO ' | tee -a "$OUT/products.log" || status=1
            kill $smi
            smi_mean "$work/smi-$tag.csv" | tee -a "$OUT/products.log"
          done
        done
        tar -C "$work" -czf "$OUT/products.tgz" .
        rm -f "$PROVD_DATA_DIR/params/$circuit.v1.test-only.params"
      done ;;
    soak)
      circuit=${SOAK_CIRCUIT:-bench-20}
      nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 1000 > "$OUT/soak-smi.csv" &
      smi=$!
      "$bundle/provd" bench pipeline --circuit "$circuit" --jobs $(( ${SOAK_PROOFS:-1000} / 4 )) --partitions 4 --backend cuda \
        --sample-every "${SOAK_EVERY:-5}" ${SOAK_IN_FLIGHT:+--in-flight "$SOAK_IN_FLIGHT"} --json "$OUT/soak-$circuit.json" 2>&1 | grep -v ' INFO ' | tee -a "$OUT/soak.log" || status=1
      kill $smi ;;
    bench-prove)
      for backend in ${PROVE_BACKENDS:-cuda cpu}; do
        vs=(--vs bellperson); [ "${PROVE_VS:-}" = none ] && vs=()
        "$bundle/provd" bench prove --circuit "${PROVE_CIRCUIT:-bench-20}" --runs "${PROVE_RUNS:-3}" --backend "$backend" \
          ${B_G2:+--b-g2 "$B_G2"} "${vs[@]}" --json "$OUT/prove-$backend-${PROVE_CIRCUIT:-bench-20}${B_G2:+-g2-$B_G2}.json" 2>&1 |
          tee -a "$OUT/bench-prove.log" || status=1
      done ;;
    supraseal)
      # The device tool brings back a handful of files: the JSON and samples are packed into one
      # archive (supraseal.tgz), refreshed after each circuit so that a run cut short keeps what ended.
      work=/tmp/provd-supraseal && mkdir -p "$work"
      for circuit in ${SUPRA_CIRCUITS:-bench-20 dense-20}; do
        "$bundle/provd" params gen --circuit "$circuit" 2>&1 | tail -1 | tee -a "$OUT/supraseal.log" || status=1
        "$bundle/provd" bench prove --circuit "$circuit" --runs "${PROVE_RUNS:-5}" --backend cuda ${B_G2:+--b-g2 "$B_G2"} \
          ${BASELINE:+--baseline "$BASELINE"} --json "$work/prove-cuda-$circuit.json" 2>&1 | grep -v ' INFO ' | tee -a "$OUT/supraseal.log" || status=1
        for bin in ${SUPRA_BINS:-provd-supraseal-bench}; do
          tag="$circuit${bin#provd-supraseal-bench}"
          echo "== $bin ($(cat "$bundle/$bin.toolkit" 2>/dev/null || echo "toolkit not recorded")), $circuit" | tee -a "$OUT/supraseal.log"
          nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 500 > "$work/supraseal-smi-$tag.csv" &
          smi=$!
          timeout "${SUPRA_TIMEOUT:-300}" "$bundle/$bin" --circuit "$circuit" --params "$PROVD_DATA_DIR/params/$circuit.v1.test-only.params" \
            --runs "${PROVE_RUNS:-5}" --against "$work/prove-cuda-$circuit.json" --json "$work/supraseal-$tag.json" 2>&1 |
            tee -a "$OUT/supraseal.log" || status=1
          kill $smi
          smi_mean "$work/supraseal-smi-$tag.csv" | tee -a "$OUT/supraseal.log"
        done
        tar -C "$work" -czf "$OUT/supraseal.tgz" .
        # each key is GBs at 2^24; the disk holds a few
        rm -f "$PROVD_DATA_DIR/params/$circuit.v1.test-only.params"
      done ;;
    supraseal-probe)
      # Where supraseal-c2's time goes on a small circuit: every kernel's device time (ncu, clocks
      # left alone) against the proof's wall time, and bellperson's own synthesis / prover split.
      circuit=${PROBE_CIRCUIT:-bench-14}
      params="$PROVD_DATA_DIR/params/$circuit.v1.test-only.params"
      [ -e "$params" ] || "$bundle/provd" params gen --circuit "$circuit" 2>&1 | tail -1 | tee -a "$OUT/supraseal-probe.log"
      timeout "${SUPRA_TIMEOUT:-300}" ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu-$circuit.csv" \
        "$bundle/provd-supraseal-bench" --circuit "$circuit" --params "$params" --runs 1 2>&1 | tee -a "$OUT/supraseal-probe.log" || status=1
      python3 - "$OUT/ncu-$circuit.csv" <<'PY' | tee -a "$OUT/supraseal-probe.log"
import csv, collections, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, rows = rows[0], rows[1:]
name, value, unit = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}
per = collections.defaultdict(lambda: [0, 0.0])
for r in rows:
    k = r[name].split("(")[0].split("<")[0]
    per[k][0] += 1
    per[k][1] += float(r[value].replace(",", "")) * scale[r[unit]]
total = sum(v[1] for v in per.values())
print(f"ncu: {sum(v[0] for v in per.values())} kernels, {total:.1f} ms of device time (two proofs: warm-up and timed)")
for k, (n, ms) in sorted(per.items(), key=lambda kv: -kv[1][1])[:12]:
    print(f"  {ms:10.2f} ms  {n:5d}x  {k}")
PY
      ;;
    porep)
      for proof in ${POREP_PROOFS:-StackedDrg2KiBV1_1 StackedDrg512MiBV1_1}; do
        if [ "${POREP_VS:-}" = none ]; then vs=(); else vs=(--vs filecoin-proofs); fi
        cap=(); [ -n "${POREP_DEVICE_MEMORY:-}" ] && cap=(--device-memory "$POREP_DEVICE_MEMORY")
        "$bundle/provd" bench porep --proof "$proof" --runs "${POREP_RUNS:-2}" --backend cuda "${vs[@]}" "${cap[@]}" \
          --stream "${POREP_STREAM:-0}" --work-dir "${POREP_WORK:-/tmp/provd-porep}" --json "$OUT/porep-$proof.json" 2>&1 | grep -v ' INFO ' |
          tee -a "$OUT/porep.log" || status=1
      done ;;
    circom)
      work=${CIRCOM_DIR:-/tmp/provd-circom} && mkdir -p "$work" "$OUT/circom"
      if [ -n "${CIRCOM_TAR:-}" ]; then tar -C "$work" -xJf "$CIRCOM_TAR" || status=1; fi
      for wtns in "$work"/*.wtns; do
        name=$(basename "$wtns" .wtns)
        if [ ! -e "$work/$name.zkey" ]; then
          "$bundle/provd" groth16 setup-test-only "$work/$name.r1cs" "$work/$name.zkey" 2>&1 | tee -a "$OUT/circom.log" || status=1
        fi
        "$bundle/provd" groth16 export-vk "$work/$name.zkey" "$OUT/circom/$name.vk.json" || status=1
        "$bundle/provd" groth16 prove "$work/$name.zkey" "$wtns" "$OUT/circom/$name.proof.json" "$OUT/circom/$name.public.json" \
          --backend cuda 2>&1 | tee -a "$OUT/circom.log" || status=1
        for backend in ${CIRCOM_BENCH_BACKENDS:-cuda}; do
          "$bundle/provd" bench circom --zkey "$work/$name.zkey" --wtns "$wtns" --runs "${CIRCOM_RUNS:-5}" --backend "$backend" \
            ${SNARKJS:+--snarkjs "$SNARKJS"} --json "$OUT/circom/bench-$name-$backend.json" 2>&1 | grep -v ' INFO ' |
            tee -a "$OUT/circom.log" || status=1
        done
      done
      tar -C "$OUT" -czf "$OUT/circom.tgz" circom && rm -rf "$OUT/circom" ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
done
exit $status
