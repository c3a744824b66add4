#!/usr/bin/env bash
# Every test provd has, on any machine: installs what the tests need, checks
# formatting, lints and doc links, builds the binary the end-to-end tests start, runs the
# whole workspace's tests, then shows what the GPU tests did (ran, or were
# skipped and why). GPU tests run for real with scripts/gpu-run.sh on a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's wall time, printed as it ends and again, all together, at the
# end (CI shows only the tail of the log): where the minutes go.
timings=()
running="" running_since=0
# (Called plainly, not in a condition, so that `set -e` holds inside.)
step() {
  running=$1 running_since=$SECONDS
  shift
  "$@"
  timings+=("$(printf '%5d s  %s' $((SECONDS - running_since)) "$running")")
  echo "test-all: $running took $((SECONDS - running_since)) s" >&2
  running=""
}
report() {
  local rc=$?
  [ -z "$running" ] || timings+=("$(printf '%5d s  %s (failed)' $((SECONDS - running_since)) "$running")")
  printf 'test-all: step times (exit %d after %d s):\n' "$rc" "$SECONDS" >&2
  printf '  %s\n' "${timings[@]}" >&2
}
trap report EXIT

# NVRTC from PyPI: CI has no GPU but compiles every kernel with it.
nvrtc_dir() {
  python3 - <<'PY' 2>/dev/null
import importlib.util, os
spec = importlib.util.find_spec("nvidia")
for root in (spec.submodule_search_locations if spec else []):
    d = os.path.join(root, "cu13", "lib")
    if os.path.exists(os.path.join(d, "libnvrtc.so.13")):
        print(d); break
PY
}
if [ -z "$(nvrtc_dir)" ]; then
  step "NVRTC from PyPI" python3 -m pip install --quiet --disable-pip-version-check "nvidia-cuda-nvrtc==13.0.*"
fi
dir=$(nvrtc_dir)
[ -n "$dir" ] || { echo "NVRTC install failed" >&2; exit 1; }
export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PROVD_REQUIRE_NVRTC=1

# From Debian: promtool and Prometheus (package `prometheus`) check the
# metrics exposition, the alert rules and the dashboard's queries; PostgreSQL
# holds fleet mode's queue; Alertmanager
# delivers an alert to a webhook; headless Chromium and chromedriver run the
# live view's browser test.
need=()
command -v promtool >/dev/null || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null || need+=(prometheus-alertmanager)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
# The container image's test: podman builds deploy/Dockerfile and runs it
# (with runc: see deploy/test/containers.conf), on a base debootstrap makes.
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v debootstrap >/dev/null || need+=(debootstrap)
# PostgreSQL for fleet mode's tests (each test starts its own server on a
# loopback port, its data in a temporary directory).
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || need+=(postgresql)
# nginx: the proxy docs/curio.md gives for Curio on another host, run as the
# doc writes it between the Python client and provd.
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx)
if [ ${#need[@]} -gt 0 ]; then
  apt_install() {
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@") >/dev/null
  }
  step "Debian packages" apt_install "${need[@]}"
fi
export PROVD_REQUIRE_PROMTOOL=1 PROVD_REQUIRE_PROMETHEUS=1 PROVD_REQUIRE_BROWSER=1 PROVD_REQUIRE_POSTGRES=1 PROVD_REQUIRE_NGINX=1

# The deployment files against their schemas: Kubernetes manifests
# (kubernetes-validate, schemas bundled), the compose file (check-jsonschema's
# vendored compose spec), the ServiceMonitor (the Prometheus Operator's
# models, from npm) and every pod against Pod Security "restricted"
# (deploy/test/podsecurity.test.js), the systemd unit (systemd-analyze, which warns without
# failing: any output fails here).
deployment_files() {
  python3 -m pip install --quiet --disable-pip-version-check "kubernetes-validate==1.37.*" "check-jsonschema==0.39.*"
  python3 -m kubernetes_validate --strict --quiet deploy/kubernetes/provd.yaml deploy/kubernetes/fleet/provd-fleet.yaml
  # compose resolves its secret from deploy/provd-token: a generated one here.
  made_token=""
  [ -e deploy/provd-token ] || { head -c 32 /dev/urandom | base64 > deploy/provd-token; made_token=1; }
  python3 -m check_jsonschema --builtin-schema vendor.compose-spec deploy/compose.yaml
  [ -z "$made_token" ] || rm -f deploy/provd-token
  (cd deploy/test && npm ci --no-audit --no-fund --silent)
  node --test deploy/test/
}
step "deployment files" deployment_files

# The container image (tests/container.rs): no registry is reachable from CI,
# so the Dockerfile's Debian bases are stood in for by debootstrap's bookworm.
export CONTAINERS_CONF="$PWD/deploy/test/containers.conf"
export PROVD_CONTAINER_BASE=localhost/provd-base:bookworm PROVD_REQUIRE_CONTAINER=1
step "container base image" scripts/container-base.sh "$PROVD_CONTAINER_BASE"

# The cuzk.v1 gRPC door's client in another language: Python's grpcio, its
# stubs generated from provd's .proto by grpcio-tools (tests/cuzk/client.py).
if ! python3 -c "import grpc, grpc_tools" 2>/dev/null; then
  step "grpcio from PyPI" python3 -m pip install --quiet --disable-pip-version-check "grpcio==1.85.*" "grpcio-tools==1.85.*"
fi
export PROVD_REQUIRE_GRPC_CLIENT=1

# circom's compiler, snarkjs and circomlib for the circom end-to-end tests.
step "circom and snarkjs from npm" npm ci --prefix tests/circom --no-audit --no-fund --silent
export PROVD_REQUIRE_CIRCOM=1

# The dashboard's chart code, with Node's own test runner.
step "dashboard JS tests" node --test dashboard/test/

step "cargo fmt" cargo fmt --all -- --check
step "clippy" cargo clippy --release --workspace --all-targets -- -D warnings
step "clippy, library alone" cargo clippy --release -p provd --no-default-features --all-targets -- -D warnings
# --release: it reuses the dependencies clippy checked above (the dev profile would check them all again).
RUSTDOCFLAGS="-D warnings" step "rustdoc" cargo doc --release --workspace --no-deps --quiet
# One build for every test, the provd binary the end-to-end tests start
# among it (cargo builds a package's binaries for its integration tests).
# A separate `cargo build --bins` would build provd a second time: its
# dev-dependencies (tokio's test-util) change features, so tokio, hyper,
# axum, tonic and provd itself would be compiled once for each.
step "build the tests" cargo test --release --workspace --no-run
systemd_verify() {
  local unit analysis
  unit=$(mktemp --suffix=.service)
  sed "s#/usr/local/bin/provd#$PWD/target/release/provd#" deploy/systemd/provd.service > "$unit"
  analysis=$(systemd-analyze verify "$unit" 2>&1 || true)
  rm -f "$unit"
  [ -z "$analysis" ] || { echo "systemd-analyze verify deploy/systemd/provd.service: $analysis" >&2; return 1; }
}
step "systemd-analyze verify" systemd_verify
step "cargo test" cargo test --release --workspace --no-fail-fast

# The proving library without the service stack: no HTTP server, CLI or
# client in its dependencies (the second clippy above compiled it, its tests
# and its examples that way), and the example of a Rust caller with its own
# bellperson circuit proves and verifies on the CPU. It runs as built for the
# tests above: building the library once more without its default features
# would cost CI minutes and prove nothing that clippy has not.
service_deps=$(cargo tree -p provd --no-default-features -e normal --prefix none 2>/dev/null |
  grep -E '^(axum|clap|tokio|tower-http|ureq|rust-embed) ' || true)
[ -z "$service_deps" ] || { echo "the library pulls in the service stack: $service_deps" >&2; exit 1; }
step "library example" cargo run --release -q -p provd --example sha256_preimage -- cpu

echo "GPU tests here, ignored with their reason (on a GPU machine they run for real: scripts/gpu-run.sh):"
{
  cargo test --release -q -p provd-kernels --test gpu --test msm -- --nocapture --test-threads=1
  cargo test --release -q -p provd --lib backend::cuda:: -- --nocapture --test-threads=1
  cargo test --release -q -p provd-e2e --test gpu_service -- --nocapture
} 2>&1 | grep -E "skipped|test result"
