// Helpers for the trainer tests: a scratch directory, writers for tiny IDX (raw or gzipped)
// and CSV files, and a small separable dataset with options to train on it. Test-only; not
// thread-safe.
#pragma once

#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rng.h"
#include "trainer/trainer.h"

namespace sweep::trainer::testing {

// n floats uniform in [-scale, scale), from `seed`.
inline std::vector<float> Random(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * (2.0 * rng.Uniform() - 1.0));
  return v;
}

// The number of a process that has ended: a child forked and reaped here.
inline pid_t DeadPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  if (child > 0) ::waitpid(child, nullptr, 0);
  return child;
}

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/sweep_trainer_XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes, bool gz) {
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    if (!bytes.empty()) {
      ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
    }
    ASSERT_EQ(gzclose(f), Z_OK);
  } else {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
  }
}

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// Rewrites a checkpoint's JSON header with `edit` applied (and its 8-byte magic, when given),
// with a checksum that matches again.
inline void EditHeader(const std::string& path, const std::function<void(nlohmann::json&)>& edit,
                       const char* magic = nullptr) {
  std::string bytes = ReadText(path);
  uint32_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data() + 8, 4);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(12, header_bytes));
  edit(header);
  const std::string text = header.dump();
  const uint32_t length = static_cast<uint32_t>(text.size());
  std::string out = (magic != nullptr ? std::string(magic, 8) : bytes.substr(0, 8)) +
                    std::string(reinterpret_cast<const char*>(&length), 4) + text +
                    bytes.substr(12 + header_bytes, bytes.size() - 12 - header_bytes - 4);
  const uint32_t crc =
      static_cast<uint32_t>(crc32(crc32(0, nullptr, 0), reinterpret_cast<const Bytef*>(out.data()),
                                  static_cast<uInt>(out.size())));
  out.append(reinterpret_cast<const char*>(&crc), 4);
  WriteText(path, out);
}

// The bytes of an IDX file: unsigned-byte magic, the given dims, then data (which need not
// match the dims: tests make it not match on purpose).
inline std::vector<uint8_t> IdxBytes(const std::vector<uint32_t>& dims,
                                     const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(d >> shift));
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// n 6x6 images in 4 classes: class k lights up quadrant k (with noise everywhere). Separable.
inline void WriteBlobs(const TempDir& dir, const std::string& prefix, uint32_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> pixels, labels;
  for (uint32_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(rng.Below(4));
    labels.push_back(static_cast<uint8_t>(k));
    for (int r = 0; r < 6; ++r) {
      for (int c = 0; c < 6; ++c) {
        const int quadrant = (r / 3) * 2 + c / 3;
        const double v = (quadrant == k ? 150 : 0) + 100 * rng.Uniform();
        pixels.push_back(static_cast<uint8_t>(v));
      }
    }
  }
  WriteBytes(dir / (prefix + "-images.gz"), IdxBytes({n, 6, 6}, pixels), true);
  WriteBytes(dir / (prefix + "-labels"), IdxBytes({n}, labels), false);
}

inline TrainOptions BlobOptions(const TempDir& dir) {
  WriteBlobs(dir, "train", 480, 1);
  WriteBlobs(dir, "test", 100, 2);
  TrainOptions o;
  o.dataset.train_images = dir / "train-images.gz";
  o.dataset.train_labels = dir / "train-labels";
  o.dataset.test_images = dir / "test-images.gz";
  o.dataset.test_labels = dir / "test-labels";
  o.hidden = {16};
  o.batch_size = 16;
  o.epochs = 4;
  o.lr = 0.05;
  o.validation_fraction = 0.25;
  o.seed = 3;
  o.cache_dir = dir / "cache";  // not the user's
  o.backend = "cpu";            // bit-exact comparisons hold on the CPU; the GPU has its tests
  return o;
}

// BlobOptions through a small CNN: the blobs as 6x6 images, one stage of 4 channels, a hidden
// layer of 8.
inline TrainOptions BlobCnnOptions(const TempDir& dir) {
  TrainOptions o = BlobOptions(dir);
  o.model = "cnn";
  o.channels = {4};
  o.hidden = {8};
  o.batch_size = 24;
  o.lr = 0.05;
  return o;
}

}  // namespace sweep::trainer::testing
