// Input transforms, sample shapes and channel statistics (augment.h). Owned by the trainer.
#include "augment.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "image_folder.h"
#include "rng.h"

namespace sweep::trainer {
namespace {

constexpr uint64_t kAugmentStream = 0xA06Dull;  // apart from shuffle, init and dropout draws

std::string ShapeText(const std::vector<int>& s) {
  std::string t;
  for (int d : s) t += (t.empty() ? "" : ", ") + std::to_string(d);
  return "[" + t + "]";
}

Result<TensorShape> CsvShape(const DatasetSpec& spec, int64_t width, const std::string& file) {
  if (spec.shape.empty()) return TensorShape{static_cast<int>(width), 1, 1};
  const int64_t product = int64_t{spec.shape[0]} * spec.shape[1] * spec.shape[2];
  if (product != width) {
    return Status::InvalidArgument("dataset.shape: " + ShapeText(spec.shape) + " holds " +
                                   std::to_string(product) + " values, but the rows of " + file +
                                   " have " + std::to_string(width) + " features");
  }
  return TensorShape{spec.shape[0], spec.shape[1], spec.shape[2]};
}

// torchvision's RandomErasing defaults: 2% to 33% of the image, aspect 0.3 to 3.3, ten tries;
// the rectangle into d (none when every try misses).
void EraseRect(TensorShape s, Rng* rng, AugmentDraw* d) {
  const double area = static_cast<double>(s.h) * s.w;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (0.02 + (0.33 - 0.02) * rng->Uniform());
    const double aspect =
        std::exp(std::log(0.3) + (std::log(3.3) - std::log(0.3)) * rng->Uniform());
    const int h = static_cast<int>(std::lround(std::sqrt(target * aspect)));
    const int w = static_cast<int>(std::lround(std::sqrt(target / aspect)));
    if (h < 1 || w < 1 || h >= s.h || w >= s.w) continue;
    d->ey = static_cast<int>(rng->Below(static_cast<uint64_t>(s.h - h + 1)));
    d->ex = static_cast<int>(rng->Below(static_cast<uint64_t>(s.w - w + 1)));
    d->eh = h;
    d->ew = w;
    return;
  }
}

// The crop and flip of a channels-last image: output pixel (h, w) reads src pixel
// (h + dy, (mirror ? W - 1 - w : w) + dx), zero outside. Each row's pixels that land inside are
// one run: copied whole, or pixel by pixel when mirrored.
void MoveRows(const float* src, float* dst, int H, int W, int C, int dy, int dx, bool mirror) {
  const size_t c = static_cast<size_t>(C);
  // Output columns [w0, w1) read inside the image.
  const int w0 = std::clamp(mirror ? dx : -dx, 0, W),
            w1 = std::clamp(mirror ? W + dx : W - dx, 0, W);
  for (int h = 0; h < H; ++h) {
    float* out = dst + static_cast<size_t>(h) * W * c;
    const int sh = h + dy;
    if (sh < 0 || sh >= H || w0 >= w1) {
      std::fill_n(out, static_cast<size_t>(W) * c, 0.0f);
      continue;
    }
    std::fill_n(out, static_cast<size_t>(w0) * c, 0.0f);
    std::fill_n(out + static_cast<size_t>(w1) * c, static_cast<size_t>(W - w1) * c, 0.0f);
    const float* in = src + static_cast<size_t>(sh) * W * c;
    if (!mirror) {
      std::copy_n(in + static_cast<size_t>(w0 + dx) * c, static_cast<size_t>(w1 - w0) * c,
                  out + static_cast<size_t>(w0) * c);
      continue;
    }
    for (int w = w0; w < w1; ++w) {
      std::copy_n(in + static_cast<size_t>(W - 1 - w + dx) * c, c,
                  out + static_cast<size_t>(w) * c);
    }
  }
}

}  // namespace

AugmentDraw InputTransform::Draw(int epoch, int64_t position) const {
  // The draws in this order: the crop's offsets, the flip, then erasing.
  const uint64_t epoch_key = MixSeed(seed, kAugmentStream, static_cast<uint64_t>(epoch));
  Rng rng(MixSeed(epoch_key, static_cast<uint64_t>(position)));
  AugmentDraw d;
  if (crop > 0) {
    d.dy = static_cast<int>(rng.Below(2 * static_cast<uint64_t>(crop) + 1)) - crop;
    d.dx = static_cast<int>(rng.Below(2 * static_cast<uint64_t>(crop) + 1)) - crop;
  }
  if (flip) d.mirror = rng.Below(2) == 1;
  if (erasing > 0 && rng.Uniform() < erasing) EraseRect(shape, &rng, &d);
  return d;
}

void InputTransform::Apply(float* x, int64_t count, bool augment, int epoch,
                           int64_t first_position) const {
  const int64_t n = shape.size();
  const int C = shape.c, H = shape.h, W = shape.w;
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < n) scratch.resize(static_cast<size_t>(n));
  const bool moves = augment && (crop > 0 || flip);
  for (int64_t i = 0; i < count; ++i) {
    float* row = x + i * n;
    const AugmentDraw d = augment ? Draw(epoch, first_position + i) : AugmentDraw{};
    if (chw || moves) {
      std::copy_n(row, n, scratch.data());
      // Where output pixel (h, w) reads from: the crop's offset into the padded image, then
      // the flip; outside the image is the padding's zero.
      if (!chw) {
        MoveRows(scratch.data(), row, H, W, C, d.dy, d.dx, d.mirror);
      } else {
        for (int h = 0; h < H; ++h) {
          const int sh = h + d.dy;
          for (int w = 0; w < W; ++w) {
            const int sw = (d.mirror ? W - 1 - w : w) + d.dx;
            float* out = row + (int64_t{h} * W + w) * C;
            if (sh < 0 || sh >= H || sw < 0 || sw >= W) {
              std::fill_n(out, C, 0.0f);
              continue;
            }
            for (int c = 0; c < C; ++c) {
              out[c] = scratch[static_cast<size_t>((int64_t{c} * H + sh) * W + sw)];
            }
          }
        }
      }
    }
    if (!mean.empty()) {
      for (int64_t p = 0; p < int64_t{H} * W; ++p) {
        float* px = row + p * C;
        for (int c = 0; c < C; ++c) {
          px[c] = (px[c] - mean[static_cast<size_t>(c)]) * inv_std[static_cast<size_t>(c)];
        }
      }
    }
    for (int yy = d.ey; yy < d.ey + d.eh; ++yy) {
      std::fill_n(row + (int64_t{yy} * W + d.ex) * C, int64_t{d.ew} * C, 0.0f);
    }
  }
}

Result<TensorShape> SampleShape(const Dataset& data, const DatasetSpec& spec) {
  if (spec.format == "csv") return CsvShape(spec, data.dim, data.source);
  if (data.shape.size() == 2) {
    return TensorShape{1, static_cast<int>(data.shape[0]), static_cast<int>(data.shape[1])};
  }
  if (data.shape.size() == 3) {
    return TensorShape{static_cast<int>(data.shape[2]), static_cast<int>(data.shape[0]),
                       static_cast<int>(data.shape[1])};
  }
  return TensorShape{static_cast<int>(data.dim), 1, 1};
}

Result<TensorShape> ProbeInputShape(const DatasetSpec& spec) {
  if (spec.format == "folder") return ProbeFolderShape(spec);
  const std::string& path = spec.train_images;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return Status::NotFound(path + ": cannot be opened");
  Result<TensorShape> shape = Status::NotFound(path + ": no header");
  if (spec.format == "idx") {
    // Magic, then up to four big-endian dimensions: count, then the item's shape.
    unsigned char h[20] = {};
    const int got = gzread(f, h, sizeof h);
    auto be = [&h](int at) {
      return static_cast<int>((uint32_t{h[at]} << 24) | (uint32_t{h[at + 1]} << 16) |
                              (uint32_t{h[at + 2]} << 8) | uint32_t{h[at + 3]});
    };
    if (got >= 4 && h[0] == 0 && h[1] == 0 && h[2] == 0x08) {
      const int dims = h[3];
      if (dims == 2 && got >= 12) shape = TensorShape{be(8), 1, 1};
      if (dims == 3 && got >= 16) shape = TensorShape{1, be(8), be(12)};
      if (dims == 4 && got >= 20) shape = TensorShape{be(16), be(8), be(12)};
    }
  } else {
    // The first line's fields, counted outside quotes; one of them is the label.
    int64_t fields = 1;
    bool quoted = false, any = false;
    for (int ch = gzgetc(f); ch != -1 && ch != '\n'; ch = gzgetc(f)) {
      any = true;
      if (ch == '"') quoted = !quoted;
      if (ch == ',' && !quoted) ++fields;
    }
    if (any && fields > 1) shape = CsvShape(spec, fields - 1, path);
  }
  gzclose(f);
  return shape;
}

void ChannelStats(const Dataset& data, const int32_t* rows, int64_t n, TensorShape shape, bool chw,
                  std::vector<float>* mean, std::vector<float>* stddev) {
  using Key = std::tuple<const void*, int64_t, int64_t, int32_t, int32_t>;
  static std::mutex mu;
  static std::map<Key, std::pair<std::vector<float>, std::vector<float>>> memo;
  const Key key{data.storage.get(), data.n, n, n > 0 ? rows[0] : -1, n > 0 ? rows[n - 1] : -1};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = memo.find(key); it != memo.end()) {
      *mean = it->second.first;
      *stddev = it->second.second;
      return;
    }
  }
  const int C = shape.c;
  const int64_t pixels = int64_t{shape.h} * shape.w, dim = shape.size();
  std::vector<double> sum(static_cast<size_t>(C), 0.0), sq(static_cast<size_t>(C), 0.0);
  auto channel = [&](int64_t j) { return static_cast<size_t>(chw ? j / pixels : j % C); };
  if (!data.u8.empty() || data.stream != nullptr) {
    // Pixel values are bytes: a histogram per channel, then exact sums. A streamed set is
    // decoded for this: its first kStreamStatsRows rows (the split's order is a fixed random
    // permutation, so they are a fixed random sample).
    std::vector<int64_t> hist(static_cast<size_t>(C) * 256, 0);
    std::vector<uint8_t> chunk;
    std::vector<int32_t> labels;
    if (data.stream != nullptr) n = std::min(n, kStreamStatsRows);
    constexpr int64_t kChunk = 256;
    for (int64_t at = 0; at < n; at += kChunk) {
      const int64_t count = std::min(kChunk, n - at);
      const uint8_t* src = nullptr;
      if (data.stream != nullptr) {
        chunk.resize(static_cast<size_t>(count * dim));
        labels.resize(static_cast<size_t>(count));
        data.GatherPixels(rows + at, count, chunk.data(), labels.data());
      }
      for (int64_t i = 0; i < count; ++i) {
        src = data.stream != nullptr ? chunk.data() + i * dim
                                     : data.u8.data() + int64_t{rows[at + i]} * dim;
        for (int64_t j = 0; j < dim; ++j) ++hist[channel(j) * 256 + src[j]];
      }
    }
    for (size_t c = 0; c < static_cast<size_t>(C); ++c) {
      for (int v = 0; v < 256; ++v) {
        const double x = v / 255.0, k = static_cast<double>(hist[c * 256 + static_cast<size_t>(v)]);
        sum[c] += k * x;
        sq[c] += k * x * x;
      }
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float* src = data.f32.data() + int64_t{rows[i]} * dim;
      for (int64_t j = 0; j < dim; ++j) {
        sum[channel(j)] += src[j];
        sq[channel(j)] += double{src[j]} * src[j];
      }
    }
  }
  mean->assign(static_cast<size_t>(C), 0.0f);
  stddev->assign(static_cast<size_t>(C), 1.0f);
  const double count = static_cast<double>(n) * static_cast<double>(pixels);
  for (size_t c = 0; c < static_cast<size_t>(C); ++c) {
    const double m = count > 0 ? sum[c] / count : 0.0;
    const double var = count > 0 ? std::max(0.0, sq[c] / count - m * m) : 1.0;
    (*mean)[c] = static_cast<float>(m);
    // A constant channel keeps its scale rather than dividing by zero.
    (*stddev)[c] = var > 1e-12 ? static_cast<float>(std::sqrt(var)) : 1.0f;
  }
  std::lock_guard<std::mutex> lock(mu);
  memo.emplace(key, std::make_pair(*mean, *stddev));
}

}  // namespace sweep::trainer
