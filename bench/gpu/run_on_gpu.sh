#!/usr/bin/env bash
# Everything a GPU machine should run on a prebuilt tree, all output on stdout:
#   1. which shared libraries the binaries resolve (ldd); a library the machine lacks is taken
#      from BUILD_DIR/gpu-libs (bench/gpu/bundle_libs.sh fills it where the tree was built), and
#      the lib folders of python's nvidia-* packages go on LD_LIBRARY_PATH for cuBLAS, cuDNN and NCCL,
#      which the binaries open at their first call (ldd does not list them); then what the build
#      holds and sees (sweep --version, sweep devices);
#   2. the GPU tests (the gtest binary itself: ctest's files hold the build machine's paths),
#      the Fashion-MNIST training test in a run of its own;
#   3. the GPU benchmark (bench/gpu/gpu_bench) against the PyTorch twin, then the CNNs and the MLP
#      (bench/gpu/cnn_gpu_bench) against PyTorch at its best (bench/gpu/torch_cnn_gpu.py);
#   4. one sweep (configs/quickstart.toml) on the GPU(s), into a scratch store, then the same
#      sweep on the CPU, and bench/gpu/compare_rankings.py on the two (same ranking quality);
#   5. trials that fail on the GPU (out of GPU memory, a diverged loss) beside one that does not
#      (bench/gpu/check_gpu_failures.py), and the quickstart sweep with 4 trials sharing the GPU;
#   6. the GPU tests again under compute-sanitizer's memcheck (out-of-bounds and misaligned
#      accesses, leaks, failed CUDA calls), where the machine has compute-sanitizer;
#   7. only when STEPS names them: our bf16 CNN step's kernels under ncu (profile), and
#      configs/fashion_cnn_gpu.toml, and whether its best trial's
#      test_acc reaches 0.95 within 15 minutes of sweep wall time (bench/gpu/quality_report.py).
# Run from the repository root: bench/gpu/run_on_gpu.sh [BUILD_DIR] [DATA_DIR]
# (defaults: build, and /usr/share/datasets/fashion-mnist). Exits non-zero if a step failed, after
# running all of them. STEPS picks some of steps 2 to 7, by name, separated by commas: tests,
# bench, cnn, sweep, failures, memcheck, profile, quality (default: all but profile and quality;
# STEPS=tests,cnn,memcheck DEADLINE=540 checks the CNN path alone: the tests take a minute or
# two, cnn up to 300 s, and memcheck the rest); the machine and its libraries are always
# shown (STEPS=tests,failures reruns the checks of a fix without the benchmark's minute).
set -u
# The device's reply keeps only the end of the output: where $OUT names a folder that comes back,
# all of it goes to $OUT/run_on_gpu.log as well.
tee_pid=""
if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
  exec > >(tee "$OUT/run_on_gpu.log") 2>&1
  tee_pid=$!
fi
# Each step gets at most STEP_TIMEOUT seconds (default 240), but cnn (CNN_TIMEOUT, default 300)
# and quality (its minutes): a hang in one must not take the others' output with it. The whole
# script ends within DEADLINE seconds (default 450: with a machine's start-up, that leaves time
# to run it again within 15 minutes of device time): a step
# gets what is left, and one with under 30 s left is skipped and counted as failed. The steps
# run in order of what matters most.
step_timeout=${STEP_TIMEOUT:-240}
steps=",${STEPS:-tests,bench,cnn,sweep,failures,memcheck},"
for s in ${STEPS:+${STEPS//,/ }}; do
  case $s in
    tests | bench | cnn | sweep | failures | memcheck | profile | quality) ;;
    *)
      echo "run_on_gpu.sh: STEPS: unknown step '$s' (tests, bench, cnn, sweep, failures, memcheck, profile, quality)" >&2
      exit 2
      ;;
  esac
done
want() { [[ $steps == *",$1,"* ]]; }
deadline=$((SECONDS + ${DEADLINE:-450}))
# Prints the seconds the next step may take (at most $1, default STEP_TIMEOUT), or (failing)
# why it is skipped.
allot() {
  local left=$((deadline - SECONDS - 5)) cap=${1:-$step_timeout}
  if ((left < 30)); then
    echo "run_on_gpu.sh: skipped, ${left} s left of DEADLINE"
    return 1
  fi
  echo $((left < cap ? left : cap))
}
build=${1:-build}
data=${2:-/usr/share/datasets/fashion-mnist}
status=0

step() { printf '\n######## %s\n' "$*"; }

if [[ ! -d "$build" ]]; then
  echo "run_on_gpu.sh: no build directory '$build' (configure and build first)" >&2
  exit 2
fi
if [[ ! -d "$data" ]]; then
  echo "run_on_gpu.sh: no data directory '$data'" >&2
  exit 2
fi
# Absolute: the sweeps' config is copied to a scratch folder, and a relative dataset path in a
# config is read from the config's folder.
build=$(cd "$build" && pwd)
data=$(cd "$data" && pwd)
binaries=("$build/sweep/sweep" "$build/tests/trainer/sweep_trainer_cuda_tests"
          "$build/bench/gpu/gpu_bench" "$build/bench/gpu/cnn_gpu_bench")

step "machine"
nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_mode --format=csv 2>&1 ||
  true
nvidia-smi topo -m 2>&1 || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1 || true

missing() { ldd "$1" 2>/dev/null | grep -E 'not found' ; }

step "shared libraries (ldd)"
# cuBLAS and NCCL are dlopen()ed, so ldd cannot say whether they will be found: always offer
# python's nvidia-* packages (nvidia/<name>/lib), after whatever LD_LIBRARY_PATH already has.
extra=$(python3 - <<'EOF' 2>/dev/null
import glob, os
try:
    import nvidia
except ImportError:
    raise SystemExit(0)
dirs = []
for root in list(nvidia.__path__):
    dirs += sorted(d for d in glob.glob(os.path.join(root, "*", "lib")) if os.path.isdir(d))
print(":".join(dirs))
EOF
)
if [[ -n "$extra" ]]; then
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$extra"
  echo "LD_LIBRARY_PATH += python's nvidia packages: $extra"
fi
# What this machine lacks, from the bundle, alone in a folder of its own: the bundle's other
# libraries must not shadow the system's (python's ssl would load the build machine's libcrypto).
# ldd lists what a library it cannot find needs only once that library is found (OpenBLAS's
# libgfortran, say): link what is missing, put the folder on the path, and look again until a
# pass links nothing new.
libs=$(mktemp -d)
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for _ in 1 2 3 4 5; do
  linked=0
  for b in "${binaries[@]}"; do
    [[ -x "$b" ]] || continue
    for so in $(missing "$b" | awk '{print $1}'); do
      if [[ -e "$build/gpu-libs/$so" && ! -e "$libs/$so" ]]; then
        ln -sf "$(cd "$build/gpu-libs" && pwd)/$so" "$libs/$so"
        linked=1
      fi
    done
  done
  [[ $linked -eq 1 ]] || break
done
if [[ -n "$(ls -A "$libs")" ]]; then
  echo "from $build/gpu-libs: $(ls "$libs" | tr "\n" " ")"
fi
for b in "${binaries[@]}"; do
  if [[ ! -x "$b" ]]; then echo "missing binary: $b"; status=1; continue; fi
  echo "$b:"
  ldd "$b" | grep -E 'openblas|sqlite|toml|not found' | sed 's/^/  /'
  if [[ -n "$(missing "$b")" ]]; then echo "  still lacks libraries"; status=1; fi
done
for so in libcublas.so.13 libcudnn.so.9 libnccl.so.2; do
  found=""
  IFS=: read -r -a dirs <<< "${LD_LIBRARY_PATH:-}"
  for d in "${dirs[@]}" /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    if [[ -n "$d" && -e "$d/$so" ]]; then found="$d/$so"; break; fi
  done
  echo "$so: ${found:-not in LD_LIBRARY_PATH or /usr/local/cuda (ld.so.cache may still have it)}"
done

# What the build holds (its CUDA architectures among it) and what it sees here: a GPU its kernels
# do not run on says so.
step "sweep --version and sweep devices"
"$build/sweep/sweep" --version || status=1
"$build/sweep/sweep" devices || status=1

if want tests; then
step "GPU tests (sweep_trainer_cuda_tests)"
# The tests skip without a usable device; where nvidia-smi sees a GPU, skipping is a failure (a
# driver older than the CUDA runtime linked into the binaries says so here, and nowhere else).
tests_out=$(mktemp)
if t=$(allot); then
  timeout "$t" "$build/tests/trainer/sweep_trainer_cuda_tests" "--gtest_filter=-CudaFashionMnist.*" \
    2>&1 | tee "$tests_out"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  if nvidia-smi -L > /dev/null 2>&1 && grep -q "no usable device" "$tests_out"; then
    echo "run_on_gpu.sh: nvidia-smi lists a GPU, but the tests found no usable device (above)"
    status=1
  fi
else
  echo "$t"
  status=1
fi
# Nine trainings of three epochs on Fashion-MNIST, three of them on the CPU: in a run of its own
# (FASHION_TIMEOUT, default 180 s), so that it cannot take the other tests' output with it.
step "GPU test: a CNN on Fashion-MNIST reaches the CPU's accuracy"
if t=$(allot "${FASHION_TIMEOUT:-180}"); then
  SWEEP_FASHION_MNIST="$data" timeout "$t" "$build/tests/trainer/sweep_trainer_cuda_tests" \
    "--gtest_filter=CudaFashionMnist.*"
  [[ $? -eq 0 ]] || status=1
else
  echo "$t"
  status=1
fi
rm -f "$tests_out"
fi

if want bench; then
step "bench/gpu/gpu_bench --data $data"
if t=$(allot); then
  timeout "$t" "$build/bench/gpu/gpu_bench" --data "$data" --torch bench/gpu/torch_mlp_gpu.py ||
    status=1
else
  echo "$t"
  status=1
fi

fi

if want cnn; then
# The CNN and the MLP against PyTorch at its best (bench/gpu/cnn_gpu_bench runs
# torch_cnn_gpu.py itself). CNN_CASES: CHANNELS:BATCH[:VARIANTS] or mlp/HIDDEN:BATCH items;
# CNN_VARIANTS: the torch variants of a case that names none. max-autotune compiles for minutes,
# so by default only the first case (the 1.5x target's smaller CNN) runs it; every torch run is
# cut at CNN_TORCH_TIMEOUT seconds (default 150), keeping the variants it finished. The step
# may take CNN_TIMEOUT seconds (default 300).
step "bench/gpu/cnn_gpu_bench --data $data"
if t=$(allot "${CNN_TIMEOUT:-300}"); then
  timeout "$t" "$build/bench/gpu/cnn_gpu_bench" --data "$data" --torch bench/gpu/torch_cnn_gpu.py \
    --cases "${CNN_CASES:-32,64:256:eager/graph/compile/max-autotune 32,64:1024 64,128,256:256 64,128,256:1024 mlp/256,128:256 mlp/256,128:1024}" \
    --variants "${CNN_VARIANTS:-eager,graph,compile}" --torch-timeout "${CNN_TORCH_TIMEOUT:-150}" \
    --deadline "$((t - 5))" || status=1
else
  echo "$t"
  status=1
fi
fi

scratch=$(mktemp -d)
sed "s|/usr/share/datasets/fashion-mnist|$data|" configs/quickstart.toml > "$scratch/quickstart.toml"
if want sweep; then
step "sweep devices (what trials are placed on)"
timeout 60 "$build/sweep/sweep" devices || status=1

step "sweep run configs/quickstart.toml (on the GPU)"
if t=$(allot); then
  timeout "$t" "$build/sweep/sweep" run "$scratch/quickstart.toml" --db "$scratch/gpu.db" ||
    status=1
  "$build/sweep/sweep" trials quickstart --db "$scratch/gpu.db" || status=1
else
  echo "$t"
  status=1
fi

step "the same sweep on the CPU (CUDA_VISIBLE_DEVICES=''), and the two rankings compared"
if t=$(allot); then
  CUDA_VISIBLE_DEVICES='' timeout "$t" "$build/sweep/sweep" run "$scratch/quickstart.toml" \
    --db "$scratch/cpu.db" > /dev/null || status=1
  for run in gpu cpu; do
    "$build/sweep/sweep" trials quickstart --db "$scratch/$run.db" --json > "$scratch/$run.json" ||
      status=1
  done
  expect=()
  nvidia-smi -L > /dev/null 2>&1 && expect=(--expect-gpu)
  python3 bench/gpu/compare_rankings.py "$scratch/gpu.json" "$scratch/cpu.json" "${expect[@]}" ||
    status=1
else
  echo "$t"
  status=1
fi

fi

if want failures; then
step "trials that fail on the GPU, and 4 trials sharing it"
if t=$(allot); then
  cat > "$scratch/failures.toml" <<EOF
[sweep]
name = "gpu_failures"
metric = "val_acc"
mode = "max"
[search]
algorithm = "grid"
[parameters]
hidden = { values = [[256], [74000, 74000, 74000]] }
lr = { values = [0.001, 1e30] }
optimizer = "adamw"
batch_size = 256
epochs = 2
[trial]
kind = "trainer"
gpus = 1
max_retries = 0
[trainer]
model = "mlp"
dataset = "$data"
validation_fraction = 0.1
EOF
  # Some trials fail, one completes: the sweep itself succeeds (exit status 0).
  timeout "$t" "$build/sweep/sweep" run "$scratch/failures.toml" --db "$scratch/failures.db" ||
    status=1
  "$build/sweep/sweep" trials gpu_failures --db "$scratch/failures.db" --json \
    > "$scratch/failures.json" || status=1
  python3 bench/gpu/check_gpu_failures.py "$scratch/failures.json" || status=1
else
  echo "$t"
  status=1
fi
if t=$(allot); then
  sed 's/^gpus = 1$/gpus = 1\ngpu_share = 4/' "$scratch/quickstart.toml" > "$scratch/shared.toml"
  grep -q '^gpu_share = 4$' "$scratch/shared.toml" || { echo "no gpu_share in the config"; status=1; }
  timeout "$t" "$build/sweep/sweep" run "$scratch/shared.toml" --db "$scratch/shared.db" ||
    status=1
  "$build/sweep/sweep" status quickstart --db "$scratch/shared.db" || status=1
else
  echo "$t"
  status=1
fi
fi
rm -rf "$scratch"

if want memcheck; then
step "GPU tests under compute-sanitizer (memcheck)"
# In two runs, so that the slower multi-step training tests (CudaGroup) cannot take the layers'
# and the nets' checks with them when time runs short; not the Fashion-MNIST training, whose
# three epochs would take memcheck far longer than the step. MEMCHECK_FILTER replaces both.
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [[ ! -x "$sanitizer" ]]; then
  echo "no compute-sanitizer on this machine: not run"
else
  filters=("-CudaGroup.*:CudaFashionMnist.*" "CudaGroup.*")
  [[ -n "${MEMCHECK_FILTER:-}" ]] && filters=("$MEMCHECK_FILTER")
  for filter in "${filters[@]}"; do
    if t=$(allot); then
      echo "--gtest_filter=$filter"
      timeout "$t" "$sanitizer" --tool memcheck --leak-check full --error-exitcode 3 \
        "$build/tests/trainer/sweep_trainer_cuda_tests" --gtest_brief=1 "--gtest_filter=$filter" \
        2>&1 | tail -40
      [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
    else
      echo "$t"
      status=1
    fi
  done
fi

fi

if want profile; then
# Our bf16 step's kernels under Nsight Compute (ncu): each kernel's time, summed by name over
# PROFILE_COUNT launches (default 400, a few steps) after PROFILE_SKIP (default 30000, into the
# second epoch) of cnn_gpu_bench --profile on PROFILE_CASE (default 32,64:256). The raw CSV goes
# to $OUT/profile.csv where $OUT is set.
step "profile: our bf16 step's kernels (ncu)"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [[ ! -x "$ncu" ]]; then
  echo "no ncu on this machine: not run"
elif t=$(allot "${PROFILE_TIMEOUT:-90}"); then
  csv=${OUT:-$(mktemp -d)}/profile.csv
  timeout "$t" "$ncu" --graph-profiling node --clock-control none --csv \
    --metrics gpu__time_duration.sum --launch-skip "${PROFILE_SKIP:-30000}" \
    --launch-count "${PROFILE_COUNT:-400}" "$build/bench/gpu/cnn_gpu_bench" --data "$data" \
    --cases "${PROFILE_CASE:-32,64:256}" --profile --epochs 3 > "$csv" 2>&1 || status=1
  python3 bench/gpu/kernel_times.py "$csv" || status=1
else
  echo "$t"
  status=1
fi
fi

if want quality; then
# configs/fashion_cnn_gpu.toml for at most QUALITY_MINUTES (default 15) of sweep wall time, less
# where less of DEADLINE is left (STEP_TIMEOUT does not cap it): STEPS=quality DEADLINE=570
# gives the sweep about 9 minutes. QUALITY_CONFIG names another config
# (configs/fashion_cnn.toml rehearses the step on a CPU).
minutes=${QUALITY_MINUTES:-15}
step "quality: the best trial's test_acc within $minutes minutes"
if t=$(allot $((minutes * 60 + 60))); then
  # The sweep stops its trials at its budget and records them; the report needs ~20 s more.
  budget=$((t - 20 < minutes * 60 ? t - 20 : minutes * 60))
  qscratch=$(mktemp -d)
  sed -e "s|/usr/share/datasets/fashion-mnist|$data|" \
    -e "s|^time_budget = .*|time_budget = \"${budget}s\"|" \
    "${QUALITY_CONFIG:-configs/fashion_cnn_gpu.toml}" > "$qscratch/quality.toml"
  grep -q "^time_budget = \"${budget}s\"" "$qscratch/quality.toml" ||
    { echo "run_on_gpu.sh: the quality config has no time_budget line to set"; status=1; }
  name=$(sed -n 's/^name = "\(.*\)"$/\1/p' "$qscratch/quality.toml" | head -1)
  echo "sweep $name, time_budget ${budget} s"
  start=$(date +%s.%N)
  timeout "$t" "$build/sweep/sweep" run "$qscratch/quality.toml" --db "$qscratch/quality.db" \
    > /dev/null || status=1
  if [[ -e "$qscratch/quality.db" ]]; then
    "$build/sweep/sweep" status "$name" --db "$qscratch/quality.db" || status=1
    "$build/sweep/sweep" trials "$name" --db "$qscratch/quality.db" --json \
      > "$qscratch/quality.json" || status=1
    python3 bench/gpu/quality_report.py "$qscratch/quality.json" --start "$start" \
      --minutes "$minutes" --ran-minutes "$(awk -v b="$budget" 'BEGIN { print b / 60 }')" ||
      status=1
  fi
  rm -rf "$qscratch"
else
  echo "$t"
  status=1
fi
fi

step "done: exit status $status"
# The log is whole only once tee has read the last line: close our side, then wait for it.
if [[ -n "$tee_pid" ]]; then
  exec >&- 2>&-
  wait "$tee_pid"
fi
exit $status
