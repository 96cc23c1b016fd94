// Image-folder decoding speed (format = "folder"), through the loader a trial uses: the folder
// is listed once (timed apart: one thread stats every file), then decoded into a held set
// (DecodeImageFolder: read, decode, resize, copy into the set), and decoded and augmented as a
// streamed set's batches are (StreamImageFolder, then batches of 256 gathered with a random
// crop and flip, per row on the decode threads):
//   1. PNG, 28x28 gray: Fashion-MNIST's first images when installed, else a noisy pattern;
//   2. JPEG, 256x256 RGB (a pattern with noise, quality 90, so it does not compress to
//      nothing), resized to 224x224;
//   3. the same JPEGs to 112x112, which libjpeg-turbo decodes at 1/2 scale by its DCT.
// Each with decode_threads = 1 and 2: images/s, images/s per core, and the scaling at 2
// threads (rate at 2 / twice the rate at 1). Targets: >= 600 JPEG images/s per core at 224,
// >= 80% scaling. The best of --reps runs, files in the page cache (a first run warms it).
// Then a CNN trial on the PNG folder, held and streamed: the share of its epochs spent waiting
// for batches (target: under 2% held).
//
// Usage: image_decode_bench [--png N] [--jpeg N] [--reps R]
// The machine may be shared: compare runs made close in time.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "augment.h"
#include "data.h"
#include "image_codec.h"
#include "image_folder.h"
#include "rng.h"

namespace fs = std::filesystem;
using sweep::trainer::DatasetSpec;
using sweep::trainer::Image;

namespace {

constexpr const char* kFashion = "/usr/share/datasets/fashion-mnist";

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds of this process, every thread: on a machine whose cores other work shares, the
// wall-clock rate at 2 threads says how much core it got; this says what the decoding cost.
double CpuNow() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Rates {
  double wall = 0;  // images per second
  double cpu = 0;   // images per CPU second
};

void Write(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Smooth structure plus per-pixel noise, in c channels.
Image Pattern(int h, int w, int c, uint64_t seed) {
  Image im{h, w, c, {}};
  sweep::trainer::Rng rng(seed);
  const double fx = 0.02 + 0.05 * rng.Uniform(), fy = 0.02 + 0.05 * rng.Uniform();
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int ch = 0; ch < c; ++ch) {
        const double v = 128 +
                         90 * std::sin(fx * x * (ch + 1) + fy * y) * std::cos(0.03 * (x - y)) +
                         24 * (rng.Uniform() - 0.5);
        im.pixels.push_back(static_cast<uint8_t>(std::clamp(v, 0.0, 255.0)));
      }
    }
  }
  return im;
}

// n files in 10 class folders under root.
void WritePngs(const fs::path& root, int n) {
  sweep::trainer::DatasetPtr fashion;
  const std::string images = std::string(kFashion) + "/train-images-idx3-ubyte.gz";
  if (fs::exists(images)) {
    auto r = sweep::trainer::LoadIdx(images, std::string(kFashion) + "/train-labels-idx1-ubyte.gz");
    if (r.ok()) fashion = *r;
  }
  std::printf("png: %d files of 28x28 gray (%s)\n", n,
              fashion != nullptr ? "Fashion-MNIST" : "a pattern; Fashion-MNIST is not installed");
  for (int i = 0; i < n; ++i) {
    Image im = Pattern(28, 28, 1, static_cast<uint64_t>(i));
    int label = i % 10;
    if (fashion != nullptr && i < fashion->n) {
      const uint8_t* px = fashion->u8.data() + int64_t{i} * 784;
      im.pixels.assign(px, px + 784);
      label = fashion->labels[static_cast<size_t>(i)];
    }
    char name[64];
    std::snprintf(name, sizeof name, "c%d/%06d.png", label, i);
    Write(root / name, *sweep::trainer::EncodePng(im));
  }
}

void WriteJpegs(const fs::path& root, int n) {
  size_t bytes = 0;
  for (int i = 0; i < n; ++i) {
    const std::vector<uint8_t> jpeg =
        *sweep::trainer::EncodeJpeg(Pattern(256, 256, 3, static_cast<uint64_t>(i)), 90);
    bytes += jpeg.size();
    char name[64];
    std::snprintf(name, sizeof name, "c%d/%06d.jpg", i % 10, i);
    Write(root / name, jpeg);
  }
  std::printf("jpeg: %d files of 256x256 RGB, quality 90, %.1f KB each on average\n", n,
              static_cast<double>(bytes) / n / 1024);
}

// Images per second decoding the listed folder with `threads` decode threads, into a held set
// (stream = false) or as a streamed set's augmented batches: the best of `reps`.
Rates Rate(const sweep::trainer::FolderListing& listing, int threads, std::vector<int> image_size,
           int reps, bool stream) {
  DatasetSpec spec;
  spec.format = "folder";
  spec.image_size = std::move(image_size);
  spec.decode_threads = threads;
  const int64_t n = static_cast<int64_t>(listing.files.size());
  double best = 1e30, best_cpu = 1e30;
  // A batch's floats, as a Batcher's slot: made once, so the best rep does not count its pages.
  std::vector<float> x;
  for (int r = 0; r < reps; ++r) {
    const double t0 = Now(), c0 = CpuNow();
    auto d = stream ? sweep::trainer::StreamImageFolder(listing, spec)
                    : sweep::trainer::DecodeImageFolder(listing, spec);
    if (d.ok() && stream) {
      // The batches a trial's Batcher gathers: each row decoded, scaled, cropped and flipped.
      const sweep::trainer::Dataset& set = **d;
      sweep::trainer::InputTransform t;
      t.shape = {set.shape.size() > 2 ? static_cast<int>(set.shape[2]) : 1,
                 static_cast<int>(set.shape[0]), static_cast<int>(set.shape[1])};
      t.crop = std::max(2, t.shape.h / 8);
      t.flip = true;
      constexpr int64_t kBatch = 256;
      std::vector<int32_t> rows(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = static_cast<int32_t>(i);
      x.resize(static_cast<size_t>(kBatch * set.dim));
      std::vector<int32_t> y(kBatch);
      for (int64_t at = 0; at < n; at += kBatch) {
        const int64_t count = std::min(kBatch, n - at);
        set.GatherEach(rows.data() + at, count, x.data(), y.data(), [&](int64_t i, float* row) {
          t.Apply(row, 1, /*augment=*/true, 1, at + i);
        });
      }
      if (!set.stream->status().ok()) d = set.stream->status();
    }
    const double s = Now() - t0;
    best_cpu = std::min(best_cpu, CpuNow() - c0);
    if (!d.ok() || (*d)->n != n) {
      std::fprintf(stderr, "load failed: %s\n",
                   d.ok() ? "wrong count" : d.status().message().c_str());
      std::exit(1);
    }
    best = std::min(best, s);
  }
  return {static_cast<double>(n) / best, static_cast<double>(n) / best_cpu};
}

void Report(const char* what, const fs::path& root, std::vector<int> size, int reps, int64_t n,
            double target_per_core) {
  const double t0 = Now();
  auto listing = sweep::trainer::ListImageFolder(root.string());
  const double list_s = Now() - t0;
  if (!listing.ok() || static_cast<int64_t>(listing->files.size()) != n) {
    std::fprintf(stderr, "listing %s failed\n", root.c_str());
    std::exit(1);
  }
  std::printf("%s: listing %lld files took %.1f ms (once per load, on one thread)\n", what,
              static_cast<long long>(n), 1e3 * list_s);
  Rate(*listing, 2, size, 1, false);  // warms the page cache
  for (const bool stream : {false, true}) {
    const Rates r1 = Rate(*listing, 1, size, reps, stream);
    const Rates r2 = Rate(*listing, 2, size, reps, stream);
    const double one = r1.wall, two = r2.wall;
    const double scaling = two / (2 * one);
    std::printf(
        "  %-18s 1 thread: %6.0f img/s   2 threads: %6.0f img/s = %5.0f img/s per core   "
        "scaling %3.0f%%   (per CPU-second: %5.0f and %5.0f, %3.0f%%)",
        stream ? "streamed+augment" : "decode, held", one, two, two / 2, 100 * scaling, r1.cpu,
        r2.cpu, 100 * r2.cpu / r1.cpu);
    if (target_per_core > 0) {
      std::printf("   [target >= %.0f/core: %s; >= 80%% scaling: %s]", target_per_core,
                  std::min(one, two / 2) >= target_per_core ? "met" : "MISSED",
                  scaling >= 0.8 ? "met" : "MISSED");
    }
    std::printf("\n");
  }
}

// A CNN trial (channels 16,32, batch 128, 2 threads) on the PNG folder, its set held (cache =
// "auto": decoded once, mapped from the cache after) or streamed (cache = "stream": decoded
// batch by batch on decode_threads beside the compute): the share of the epoch's time the
// compute waited for batches (data_wait_s / epoch_s), the mean of epochs 2 and 3.
void TrialOnPngs(const fs::path& root, const std::string& cache, int decode_threads) {
  sweep::trainer::TrainOptions o;
  o.dataset.format = "folder";
  o.dataset.train_images = root.string();
  o.dataset.cache = cache;
  o.dataset.decode_threads = decode_threads;
  o.cache_dir = (root.parent_path() / "cache").string();
  o.model = "cnn";
  o.channels = {16, 32};
  o.hidden = {};
  o.augment_crop = 2;
  o.augment_flip = true;
  o.batch_size = 128;
  o.epochs = 3;
  o.threads = 2;
  o.replicas = 2;
  o.validation_fraction = 0.1;
  o.backend = "cpu";
  double wait = 0, epoch = 0, rate = 0;
  auto r = sweep::trainer::Train(o, [&](const sweep::trainer::EpochReport& e) {
    if (e.epoch >= 2) {
      wait += e.data_wait_s;
      epoch += e.epoch_s;
      rate += e.samples_per_s / 2;
    }
    return true;
  });
  if (!r.ok()) {
    std::fprintf(stderr, "trial failed: %s\n", r.status().message().c_str());
    std::exit(1);
  }
  std::printf(
      "cnn trial, png folder, cache = %-8s decode_threads %d: %6.0f samples/s, "
      "data_wait %.3f s of %.2f s = %4.1f%% of epoch time",
      ("\"" + cache + "\"").c_str(), decode_threads, rate, wait / 2, epoch / 2, 100 * wait / epoch);
  if (cache != "stream")
    std::printf("   [target < 2%%: %s]", wait < 0.02 * epoch ? "met" : "MISSED");
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  int png = 4000, jpeg = 600, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--png") == 0) png = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--jpeg") == 0) jpeg = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  }
  const char* tmp = std::getenv("TMPDIR");
  const fs::path root = fs::path(tmp != nullptr ? tmp : "/tmp") /
                        ("image_decode_bench_" + std::to_string(::getpid()));
  WritePngs(root / "png", png);
  WriteJpegs(root / "jpeg", jpeg);
  Report("png 28x28 gray", root / "png", {}, reps, png, 0);
  Report("jpeg 256x256 -> 224x224", root / "jpeg", {224, 224}, reps, jpeg, 600);
  Report("jpeg 256x256 -> 112x112", root / "jpeg", {112, 112}, reps, jpeg, 0);
  TrialOnPngs(root / "png", "auto", 0);
  TrialOnPngs(root / "png", "stream", 1);
  TrialOnPngs(root / "png", "stream", 2);
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}
