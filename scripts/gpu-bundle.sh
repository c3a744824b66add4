#!/usr/bin/env bash
# Builds, here, everything a GPU run needs and puts it in .device-bundle/
# (git-ignored; name it in the device tool's `carry`): the provd binary and
# every test binary, stripped to fit the transfer limit. The GPU machine has no
# cargo; these binaries run there as built here. IMAGE=1 adds the container
# image's provd and NVRTC (gpu-run.sh's `image` step). SUPRASEAL=1 adds
# provd-supraseal-bench (bench/supraseal: bellperson + supraseal-c2, built by
# its build.sh with the toolkit SUPRA_CUDA names) for gpu-run.sh's `supraseal` step. BASE=<commit> adds
# provd-base, provd at that commit, for an A/B on one machine (gpu-run.sh's SHAPE_BINS).
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=.device-bundle
# The commit each binary reports, named to the build (worker/build.rs reruns when it changes): left
# to build.rs, a BASE build from a worktree (whose .git is a file) left its commit in this tree's provd.
commit_of() {
  local dirty=
  [ -z "$(git -C "$1" status --porcelain --untracked-files=no)" ] || dirty=-dirty
  echo "$(git -C "$1" rev-parse --short=12 HEAD)$dirty"
}
rm -rf "$bundle" && mkdir -p "$bundle/tests"
if [ -n "${BASE:-}" ]; then
  # provd at commit BASE as provd-base, for an A/B on one machine (gpu-run.sh's SHAPE_BINS): built
  # first, from a worktree into this target directory (the dependencies shared), so that this
  # tree's provd, built next, is the one left in target/release. Cargo names both trees' crates
  # alike, so each build recompiles the workspace's crates (3m43s and 3m37s on 2 cores at 719a925,
  # and the test binaries relinked after: the bundle took 16 min).
  base_tree="$PWD/target/base-worktree"
  # one an interrupted run left
  git worktree remove --force "$base_tree" 2>/dev/null || rm -rf "$base_tree"
  git worktree prune
  git worktree add --detach "$base_tree" "$BASE" >/dev/null
  base_commit=$(commit_of "$base_tree")
  (cd "$base_tree" && PROVD_COMMIT=$base_commit cargo build --release --bin provd --target-dir "$OLDPWD/target")
  cp target/release/provd "$bundle/provd-base"
  echo "$base_commit" > "$bundle/provd-base.commit"
  git worktree remove --force "$base_tree"
fi
PROVD_COMMIT=$(commit_of .)
export PROVD_COMMIT
cargo build --release --bin provd
cp target/release/provd "$bundle/provd"
cargo build --release -p provd --example sha256_preimage
cp target/release/examples/sha256_preimage "$bundle/sha256_preimage"
cargo test --release --workspace --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"] + "-" + m["target"]["kind"][0], m["executable"])
' | while read -r name exe; do cp "$exe" "$bundle/tests/$name"; done
if [ "${IMAGE:-0}" = 1 ]; then
  # The container image's provd and NVRTC, from deploy/Dockerfile built by podman around this
  # binary (CONTAINER_BASE: a local bookworm base, as scripts/container-base.sh makes), for
  # gpu-run.sh's `image` step.
  mkdir -p target/container && strip -o target/container/provd target/release/provd
  base=()
  [ -z "${CONTAINER_BASE:-}" ] || base=(--build-arg "PYTHON_IMAGE=$CONTAINER_BASE" --build-arg "RUNTIME_IMAGE=$CONTAINER_BASE")
  podman build --quiet --network host -f deploy/Dockerfile --build-arg PROVD_BINARY=prebuilt "${base[@]}" \
    -t localhost/provd:bundle . >/dev/null
  made=$(podman create localhost/provd:bundle)
  mkdir -p "$bundle/image/usr/local/bin" "$bundle/image/usr/local/lib"
  podman cp "$made:/usr/local/bin/provd" "$bundle/image/usr/local/bin/provd"
  podman cp "$made:/usr/local/lib/nvrtc" "$bundle/image/usr/local/lib/nvrtc"
  podman rm "$made" >/dev/null
fi
if [ "${SUPRASEAL:-0}" = 1 ]; then
  cp "$(bench/supraseal/build.sh)" "$bundle/provd-supraseal-bench"
  echo "${SUPRA_CUDA:-debian-11.8}" > "$bundle/provd-supraseal-bench.toolkit"
fi
strip "$bundle/provd" "$bundle/sha256_preimage" "$bundle"/tests/*
[ ! -e "$bundle/provd-base" ] || strip "$bundle/provd-base"
echo "$PROVD_COMMIT" > "$bundle/COMMIT"
du -sh "$bundle"
