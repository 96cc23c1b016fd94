#!/usr/bin/env bash
# One entry point for a fresh Debian machine: installs what is missing, builds, and then
#   scripts/dev.sh run [CONFIG]   runs a sweep (default configs/quickstart.toml) into ./sweeps.db
#   scripts/dev.sh test           runs every test (ctest)
#   scripts/dev.sh bench          runs the benchmarks under bench/
#   scripts/dev.sh build          only installs and builds
#   scripts/dev.sh install        installs sweep on PATH (cmake --install; PREFIX, default /usr/local)
#   scripts/dev.sh package        builds the Debian package (cpack) into BUILD_DIR
#   scripts/dev.sh sanitize       the trainer's tests and the CUDA emulator's under ASan and
#                                 UBSan, in BUILD_DIR-sanitize (about 5 minutes on 2 cores; CI
#                                 runs it)
# BUILD_DIR (default: build) and SWEEP_CUDA (AUTO|ON|OFF) may be set in the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

# Debian packages the build, the tests and the default sweep need.
PACKAGES=(build-essential cmake ninja-build pkg-config
          libsqlite3-dev sqlite3 libcli11-dev libtomlplusplus-dev libboost-dev libssl-dev
          libgtest-dev libgmock-dev libopenblas-dev nlohmann-json3-dev zlib1g-dev libpng-dev
          libjpeg62-turbo-dev
          dataset-fashion-mnist python3 chromium)
# The peer comparisons in bench/ need these; the trainer's PyTorch parity test needs torch.
BENCH_PACKAGES=(python3 python3-optuna python3-torch python3-numpy)
# The cluster tests start a local Slurm (without systemd) and read manifests back as YAML.
TEST_PACKAGES=(python3-torch slurmctld slurmd slurm-client python3-yaml)

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

# The Debian package of the build: its path on stdout.
package() {
  install_missing dpkg-dev >&2  # dpkg-shlibdeps, for the package's dependencies
  (cd "$BUILD_DIR" && cpack -G DEB > /dev/null)
  ls "$BUILD_DIR"/sweep_*.deb
}

# Installs the package with apt (which brings its dependencies), runs `sweep --version` and the
# quickstart from what it installed, then removes it.
check_package() {
  local deb dir rc=0
  deb=$(package)
  echo "== the Debian package: $deb"
  dpkg-deb -I "$deb" | grep -E "Depends|Version"
  apt-get install -y -qq --no-install-recommends "./$deb" > /dev/null
  dir=$(mktemp -d)
  (
    cd "$dir"
    /usr/bin/sweep --version
    /usr/bin/sweep run /usr/share/doc/sweep/examples/quickstart.toml --db "$dir/q.db"
    /usr/bin/sweep best quickstart --db "$dir/q.db" --top 1
  ) || rc=$?
  apt-get remove -y -qq sweep > /dev/null
  rm -rf "$dir"
  if [[ $rc -ne 0 ]]; then
    echo "dev.sh: the installed package failed its check (exit $rc)" >&2
    exit 1
  fi
}

# The trainer's tests and the CUDA emulator's, built with ASan and UBSan in BUILD_DIR-sanitize
# and run. The emulator runs the CUDA kernels' own source on the CPU, so the sanitizers see their
# index arithmetic and alignment too; they rarely run on a GPU. Not UBSan's null checks: the
# emulator's thread_local block indices read through TLS wrappers it flags wrongly. No CUDA:
# the emulator needs none. -O1 and line tables only: half the compile time of -O2 -g, and
# reports still name file and line.
SANITIZE_DIR="$BUILD_DIR-sanitize"
sanitize_configure() {
  local flags="-fsanitize=address,undefined -fno-sanitize=null,vptr -fno-sanitize-recover=all"
  cmake -S . -B "$SANITIZE_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DSWEEP_CUDA=OFF \
    -DSWEEP_BUILD_BENCH=OFF "-DCMAKE_CXX_FLAGS_SANITIZE=-O1 -g1 -fno-omit-frame-pointer $flags" \
    "-DCMAKE_EXE_LINKER_FLAGS_SANITIZE=-fsanitize=address,undefined" > /dev/null
}
sanitize_build() {
  cmake --build "$SANITIZE_DIR" -j "$JOBS" --target sweep_trainer_tests sweep_trainer_cuda_emu_tests
}
# ASan leaves SIGSEGV alone (a death test expects the emulator's guard page to kill), and
# LeakSanitizer the emulator's streams and events (never freed on purpose). The three longest
# emulator tests run beside the rest: each binary runs on one core.
sanitize_run() {
  local dir="$SANITIZE_DIR/tests/trainer"
  local long="CudaGroup.TrainLearnsOnTheGpu:CudaGroup.AStopWithinAnEpochResumesAsIfNeverStopped"
  long+=":CudaGroup.AStepReplayedFromACudaGraphIsTheLaunchedStep"
  local log="$SANITIZE_DIR/long-tests.log" rc=0 rc_long=0 pid
  export ASAN_OPTIONS=handle_segv=0
  export LSAN_OPTIONS="suppressions=$PWD/tests/trainer/cuda_emu/lsan.supp"
  "$dir/sweep_trainer_cuda_emu_tests" --gtest_brief=1 --gtest_filter="$long" > "$log" 2>&1 &
  pid=$!
  "$dir/sweep_trainer_tests" --gtest_brief=1 || rc=$?
  "$dir/sweep_trainer_cuda_emu_tests" --gtest_brief=1 --gtest_filter="-$long" || rc=$?
  wait "$pid" || rc_long=$?
  cat "$log"
  if [[ $rc -ne 0 || $rc_long -ne 0 ]]; then
    echo "dev.sh: the tests under ASan and UBSan failed" >&2
    exit 1
  fi
}

# A mark in the log with the seconds since the start: where the time goes, in CI's.
step() { echo "== dev.sh, ${SECONDS} s: $*"; }

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
  install)
    build
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo cmake --install "$BUILD_DIR" --prefix "${PREFIX:-/usr/local}"
    echo "installed: $(command -v sweep || echo "${PREFIX:-/usr/local}/bin/sweep (not on PATH)")"
    ;;
  package)
    build
    package
    ;;
  test)
    install_missing "${TEST_PACKAGES[@]}"
    build
    step "built"
    # In CI (a throwaway machine), the Debian package is installed as a user would, and run;
    # and the trainer's tests run again under ASan and UBSan (`sanitize`). That build and run
    # go at the lowest priority beside ctest, on the CPU time its tests leave while they wait
    # on processes. The sanitized emulator tests run in the greedy-reverse order, so ctest
    # leaves out its own run of that order: each order still runs once.
    san_pid=""
    ctest_args=()
    if [[ "${CI:-}" == "true" ]]; then
      # Job control gives the job a process group of its own (in this session, so that nice
      # still ranks it below the tests), which a failed step stops whole.
      set -m
      CUDA_EMU_SCHEDULE=greedy-reverse nice -n 19 "$PWD/scripts/dev.sh" sanitize \
        > "$SANITIZE_DIR.log" 2>&1 &
      san_pid=$!
      set +m
      trap 'kill -- -"$san_pid" 2> /dev/null || true' EXIT
      ctest_args=(-E '^emu-greedy-reverse$')
    fi
    ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" --timeout 600 "${ctest_args[@]}"
    step "ctest passed"
    if [[ -n "$san_pid" ]]; then
      check_package
      step "the package passed"
      rc=0
      wait "$san_pid" || rc=$?
      trap - EXIT
      step "the sanitizer step ended (exit $rc)"
      echo "== the trainer's tests under ASan and UBSan (emulator order greedy-reverse)"
      cat "$SANITIZE_DIR.log"
      if [[ $rc -ne 0 ]]; then
        echo "dev.sh: the build or tests under ASan and UBSan failed (exit $rc)" >&2
        exit 1
      fi
    fi
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
  sanitize)
    install_missing "${PACKAGES[@]}"
    sanitize_configure
    sanitize_build
    step "built under ASan and UBSan"
    sanitize_run
    step "the tests under ASan and UBSan passed"
    ;;
  *)
    echo "usage: scripts/dev.sh [run [CONFIG]|test|bench|build|install|package|sanitize]" >&2
    exit 2
    ;;
esac
