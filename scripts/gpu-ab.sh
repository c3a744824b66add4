#!/usr/bin/env bash
# Two provd binaries compared on the GPU machine in one session, alternated
# round by round, so that the machine, its clocks and its neighbours are the
# same for both (a comparison across two machines cannot tell the code from
# the machine). Runs there, from the repository root:
#   scripts/gpu-ab.sh PROVD_A PROVD_B
# Each round runs, for each binary in turn: `bench prove` of every circuit in
# AB_CIRCUITS (default "bench-20 bench-22"), AB_RUNS proofs each (default 9,
# after the bench's own warm-up), and `bench pipeline` of AB_PIPE_CIRCUIT
# (default bench-20; AB_PIPE_JOBS jobs × 4 partitions, default 8) with
# nvidia-smi's utilisation sampled beside it. AB_ROUNDS rounds (default 3).
# Both binaries use one data directory: the same TEST-ONLY key files (made
# first, by PROVD_A) and each its own cached kernels (keyed by source hash).
# Logs and the JSON (packed into ab.tgz) go to $OUT; the log ends with a
# table: each timing the benches wrote, its median over the rounds and range
# per binary, and B's median over A's.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 PROVD_A PROVD_B" >&2; exit 2; }
OUT=${OUT:-/tmp/provd-out}
work=$(mktemp -d /tmp/provd-ab.XXXXXX)
mkdir -p "$OUT" "$work/json"
export PROVD_DATA_DIR=${PROVD_DATA_DIR:-$work/data} RUST_BACKTRACE=1
log="$OUT/ab.log"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee -a "$log"
status=0
for bin in "$@"; do echo "$(basename "$bin"): $("$bin" --version)" | tee -a "$log"; done
for circuit in ${AB_CIRCUITS:-bench-20 bench-22} ${AB_PIPE_CIRCUIT:-bench-20}; do
  "$1" params gen --circuit "$circuit" 2>&1 | tail -1 | tee -a "$log" || status=1
done
for round in $(seq "${AB_ROUNDS:-3}"); do
  for bin in "$@"; do
    tag=$(basename "$bin")
    for circuit in ${AB_CIRCUITS:-bench-20 bench-22}; do
      echo "== round $round, $tag, bench prove $circuit" | tee -a "$log"
      "$bin" bench prove --circuit "$circuit" --runs "${AB_RUNS:-9}" --baseline none --backend cuda \
        --json "$work/json/prove-$tag-$circuit-$round.json" 2>&1 | grep -v ' INFO ' | tee -a "$log" || status=1
    done
    pipe=${AB_PIPE_CIRCUIT:-bench-20}
    echo "== round $round, $tag, bench pipeline $pipe" | tee -a "$log"
    nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 500 \
      > "$work/json/smi-$tag-$round.csv" & smi=$!
    "$bin" bench pipeline --circuit "$pipe" --jobs "${AB_PIPE_JOBS:-8}" --partitions 4 --backend cuda \
      --json "$work/json/pipeline-$tag-$pipe-$round.json" 2>&1 | grep -v ' INFO ' | tee -a "$log" || status=1
    kill "$smi"
  done
done
tar -C "$work/json" -czf "$OUT/ab.tgz" .
# Medians over the rounds, per binary: every JSON number a bench wrote whose
# key names a time or a rate, so that whatever the two versions' JSON holds
# is compared key by key.
python3 - "$work/json" "$@" <<'PY' | tee -a "$log"
import glob, json, os, statistics, sys
d, bins = sys.argv[1], [os.path.basename(b) for b in sys.argv[2:]]
def numbers(v, path=""):
    if isinstance(v, dict):
        for k, x in v.items():
            yield from numbers(x, f"{path}.{k}" if path else k)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            # a step list's entries by their names, so that two versions' lists line up
            name = x.get("stage", "") + " " + x["step"] if isinstance(x, dict) and "step" in x else str(i)
            yield from numbers(x, f"{path}[{name}]")
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        yield path, float(v)
    elif isinstance(v, str):
        # the benches write fixed-point figures as strings ("86.5")
        try:
            yield path, float(v)
        except ValueError:
            pass
rows = {}
for f in sorted(glob.glob(os.path.join(d, "*.json"))):
    name = os.path.basename(f)[:-5]
    kind, rest = name.split("-", 1)
    for b in bins:
        if rest.startswith(b + "-"):
            bench = kind + " " + rest[len(b) + 1:].rsplit("-", 1)[0]
            for key, x in numbers(json.load(open(f))):
                if any(w in key for w in ("median", "seconds", "_ms", "per_second", "busy")):
                    rows.setdefault((bench, key), {}).setdefault(b, []).append(x)
print(f"{'bench':24} {'value':52} " + " ".join(f"{b:>22}" for b in bins) + "   B/A")
for (bench, key), by in sorted(rows.items()):
    if not all(b in by for b in bins):
        continue
    med = [statistics.median(by[b]) for b in bins]
    spread = [f"{statistics.median(by[b]):.4g} [{min(by[b]):.3g}-{max(by[b]):.3g}]" for b in bins]
    ratio = f"{med[1] / med[0]:.3f}" if med[0] else "-"
    print(f"{bench:24} {key[:52]:52} " + " ".join(f"{s:>22}" for s in spread) + f"   {ratio}")
PY
exit $status
