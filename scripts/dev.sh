#!/usr/bin/env bash
# One entry point for a fresh Debian machine: installs what is missing, builds, and then
#   scripts/dev.sh run [CONFIG]   runs a sweep (default configs/quickstart.toml) into ./sweeps.db
#   scripts/dev.sh test           runs every test (ctest)
#   scripts/dev.sh bench          runs the benchmarks under bench/
#   scripts/dev.sh build          only installs and builds
# BUILD_DIR (default: build) and SWEEP_CUDA (AUTO|ON|OFF) may be set in the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

# Debian packages the build, the tests and the default sweep need.
PACKAGES=(build-essential cmake ninja-build pkg-config
          libsqlite3-dev sqlite3 libcli11-dev libtomlplusplus-dev libboost-dev libssl-dev
          libgtest-dev libgmock-dev libopenblas-dev nlohmann-json3-dev zlib1g-dev
          dataset-fashion-mnist python3 chromium)
# The peer comparisons in bench/ need these; the trainer's PyTorch parity test needs torch.
BENCH_PACKAGES=(python3 python3-optuna python3-torch python3-numpy)
TEST_PACKAGES=(python3-torch)

install_missing() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

build() {
  install_missing "${PACKAGES[@]}"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSWEEP_CUDA="${SWEEP_CUDA:-AUTO}"
  cmake --build "$BUILD_DIR" -j "$JOBS"
}

cmd=${1:-run}
shift || true
case "$cmd" in
  build)
    build
    ;;
  run)
    build
    config=${1:-configs/quickstart.toml}
    name=$(sed -n 's/^name *= *"\(.*\)".*/\1/p' "$config" | head -n 1)
    extra=()
    # A second run of the same config gets a fresh name instead of refusing (see `sweep resume`).
    if "$BUILD_DIR/sweep/sweep" list --json --db sweeps.db 2>/dev/null | grep -q "\"name\": \"$name\""; then
      extra=(--name "$name-$(date +%Y%m%d-%H%M%S)")
      echo "a sweep named '$name' is already in sweeps.db; this one is ${extra[1]}"
    fi
    "$BUILD_DIR/sweep/sweep" run "$config" --db sweeps.db "${extra[@]}"
    ;;
  test)
    install_missing "${TEST_PACKAGES[@]}"
    build
    ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" --timeout 600
    ;;
  bench)
    install_missing "${BENCH_PACKAGES[@]}"
    build
    # A benchmark that cannot measure on this machine (gpu_bench without a GPU) exits 77: it is
    # skipped and the others still run; any other failure fails the whole run, at its end.
    failed=()
    for b in $(find "$BUILD_DIR/bench" -maxdepth 2 -type f -name "*_bench" -perm -u+x | sort); do
      echo "== $(basename "$b")"
      rc=0
      "$b" "$@" || rc=$?
      if [[ $rc -ne 0 && $rc -ne 77 ]]; then failed+=("$(basename "$b") (exit $rc)"); fi
    done
    if [[ ${#failed[@]} -gt 0 ]]; then
      echo "dev.sh: benchmarks failed: ${failed[*]}" >&2
      exit 1
    fi
    ;;
  *)
    echo "usage: scripts/dev.sh [run [CONFIG]|test|bench|build]" >&2
    exit 2
    ;;
esac
