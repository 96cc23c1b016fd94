#!/usr/bin/env bash
# Copies the shared libraries that the GPU binaries link (OpenBLAS, SQLite, toml++, zlib ...;
# not glibc, libstdc++ or libgcc_s, which every Linux has) into BUILD/gpu-libs, so that a
# prebuilt tree runs on a GPU machine that lacks them. run_on_gpu.sh uses only those the
# machine is missing. Usage: bench/gpu/bundle_libs.sh [BUILD_DIR]  (default: build)
set -eu
build=${1:-build}
out="$build/gpu-libs"
mkdir -p "$out"
for b in "$build/sweep/sweep" "$build/tests/trainer/sweep_trainer_cuda_tests" \
         "$build/bench/gpu/gpu_bench" "$build/bench/gpu/cnn_gpu_bench"; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|libstdc++.so.*|libgcc_s.so.*) ;;
    *) cp -L "$lib" "$out/" && echo "bundled $(basename "$lib")" ;;
  esac
done
