#!/usr/bin/env bash
# Everything a GPU machine should run on a prebuilt tree, all output on stdout:
#   1. which shared libraries the binaries resolve (ldd); when cuBLAS or NCCL are missing, the
#      lib folders of python's nvidia-* packages go on LD_LIBRARY_PATH;
#   2. the GPU tests: ctest -L gpu --output-on-failure;
#   3. one sweep (configs/quickstart.toml) on the GPU(s), into a scratch store;
#   4. the GPU benchmark (bench/gpu/gpu_bench) against the PyTorch twin.
# Run from the repository root: bench/gpu/run_on_gpu.sh [BUILD_DIR] [DATA_DIR]
# (defaults: build, and /usr/share/datasets/fashion-mnist). Exits non-zero if a step failed, after
# running all of them.
set -u
build=${1:-build}
data=${2:-/usr/share/datasets/fashion-mnist}
status=0

step() { printf '\n######## %s\n' "$*"; }

if [[ ! -d "$build" ]]; then
  echo "run_on_gpu.sh: no build directory '$build' (configure and build first)" >&2
  exit 2
fi
binaries=("$build/sweep/sweep" "$build/tests/trainer/sweep_trainer_cuda_tests"
          "$build/bench/gpu/gpu_bench")

step "machine"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv 2>&1 || true
nvidia-smi topo -m 2>&1 || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1 || true

missing() { ldd "$1" 2>/dev/null | grep -E 'not found' ; }

step "shared libraries (ldd)"
need_path=0
for b in "${binaries[@]}"; do
  if [[ ! -x "$b" ]]; then echo "missing binary: $b"; status=1; continue; fi
  echo "$b:"
  ldd "$b" | grep -E 'cublas|cudart|nccl|not found' | sed 's/^/  /'
  [[ -n "$(missing "$b")" ]] && need_path=1
done
if [[ $need_path == 1 ]]; then
  # pip's nvidia-cublas-*, nvidia-nccl-* ... put their libraries in nvidia/<name>/lib.
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
    export LD_LIBRARY_PATH="$extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "LD_LIBRARY_PATH += python's nvidia packages: $extra"
    for b in "${binaries[@]}"; do
      [[ -x "$b" ]] || continue
      if [[ -n "$(missing "$b")" ]]; then
        echo "$b still lacks:"; missing "$b" | sed 's/^/  /'; status=1
      fi
    done
  else
    echo "libraries are missing and python has no nvidia-* packages to take them from"
    status=1
  fi
fi

step "ctest -L gpu --output-on-failure"
ctest --test-dir "$build" -L gpu --output-on-failure || status=1

step "sweep run configs/quickstart.toml (on the GPU)"
scratch=$(mktemp -d)
sed "s|/usr/share/datasets/fashion-mnist|$data|" configs/quickstart.toml > "$scratch/quickstart.toml"
"$build/sweep/sweep" run "$scratch/quickstart.toml" --db "$scratch/sweeps.db" || status=1
"$build/sweep/sweep" trials quickstart --db "$scratch/sweeps.db" || status=1
rm -rf "$scratch"

step "bench/gpu/gpu_bench --data $data"
"$build/bench/gpu/gpu_bench" --data "$data" --torch bench/gpu/torch_mlp_gpu.py || status=1

step "done: exit status $status"
exit $status
