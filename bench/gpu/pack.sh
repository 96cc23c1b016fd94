#!/usr/bin/env bash
# Packs what run_on_gpu.sh needs on a GPU machine that has neither our Debian libraries nor the
# dataset, small enough to carry there (well under 64 MiB): the four GPU binaries, stripped, in
# BUILD_DIR's layout; the libraries they link (bundle_libs.sh; run_on_gpu.sh uses only those the
# machine lacks); and the Fashion-MNIST files. One gzip tarball, OUT_DIR/pack.tar.gz (55 MB;
# gzip rather than xz, which saves 9 MB, because every machine can unpack gzip).
# Usage: bench/gpu/pack.sh [BUILD_DIR] [OUT_DIR] [DATA_DIR]
#   (defaults: build, build-gpu-pack, /usr/share/datasets/fashion-mnist)
# Then, from the repository root on the GPU machine:
#   tar -xzf OUT_DIR/pack.tar.gz -C OUT_DIR && bench/gpu/run_on_gpu.sh OUT_DIR/build OUT_DIR/data
set -eu
build=${1:-build}
out=${2:-build-gpu-pack}
data=${3:-/usr/share/datasets/fashion-mnist}
binaries=(sweep/sweep tests/trainer/sweep_trainer_cuda_tests bench/gpu/gpu_bench
          bench/gpu/cnn_gpu_bench)

# Built here, so that the pack never carries binaries older than the tree.
cmake --build "$build" --target sweep sweep_trainer_cuda_tests gpu_bench cnn_gpu_bench > /dev/null || {
  echo "pack.sh: building sweep, sweep_trainer_cuda_tests, gpu_bench and cnn_gpu_bench in $build failed" >&2
  exit 2
}
for b in "${binaries[@]}"; do
  if [[ ! -x "$build/$b" ]]; then
    echo "pack.sh: $build/$b is missing: configure $build with CUDA and build sweep," \
         "sweep_trainer_cuda_tests and gpu_bench first" >&2
    exit 2
  fi
done
if ! ls "$data"/*-ubyte.gz > /dev/null 2>&1; then
  echo "pack.sh: no Fashion-MNIST files (*-ubyte.gz) in $data" >&2
  exit 2
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for b in "${binaries[@]}"; do
  mkdir -p "$stage/build/$(dirname "$b")"
  strip -o "$stage/build/$b" "$build/$b"
done
bash "$(dirname "$0")/bundle_libs.sh" "$build" > /dev/null
mkdir -p "$stage/build/gpu-libs"
cp "$build/gpu-libs/"* "$stage/build/gpu-libs/"
mkdir -p "$stage/data"
cp "$data"/*-ubyte.gz "$stage/data/"

mkdir -p "$out"
rm -rf "${out:?}/build" "${out:?}/data"
tar -czf "$out/pack.tar.gz" -C "$stage" build data
echo "packed $(du -h "$out/pack.tar.gz" | cut -f1) into $out/pack.tar.gz:"
tar -tzvf "$out/pack.tar.gz" | awk '{printf "  %10s %s\n", $3, $6}'
