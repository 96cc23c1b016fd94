// The Dataset itself (data.h): building one from decoded arrays, gathering its rows into
// batches, checking a training set's labels, and the fixed validation split. Pure functions.
#include "data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "rng.h"

namespace sweep::trainer {
namespace {

// Fixed so every trial, whatever its seed, holds out the same validation samples. Changing it
// changes every score a stored sweep was compared on: don't.
constexpr uint64_t kSplitSeed = 0x5EEDC0DE5A17ull;

}  // namespace

void Dataset::Gather(const int32_t* idx, int64_t count, float* __restrict x,
                     int32_t* __restrict y) const {
  const int64_t d = dim;
  if (stream != nullptr) return stream->DecodeFloats(idx, count, x, y, nullptr);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t row = idx[i];
    float* __restrict dst = x + i * d;
    if (!u8.empty()) {
      const uint8_t* __restrict src = u8.data() + row * d;
      // Division, not a multiply by 1/255: 255 must map to exactly 1.
      for (int64_t j = 0; j < d; ++j) dst[j] = static_cast<float>(src[j]) / 255.0f;
    } else {
      std::memcpy(dst, f32.data() + row * d, static_cast<size_t>(d) * sizeof(float));
    }
    y[i] = labels[static_cast<size_t>(row)];
  }
}

void Dataset::GatherEach(const int32_t* idx, int64_t count, float* x, int32_t* y,
                         const RowFn& each) const {
  if (stream != nullptr) return stream->DecodeFloats(idx, count, x, y, &each);
  Gather(idx, count, x, y);
  for (int64_t i = 0; i < count; ++i) each(i, x + i * dim);
}

void Dataset::GatherPixels(const int32_t* idx, int64_t count, uint8_t* __restrict pixels,
                           int32_t* __restrict y) const {
  if (stream != nullptr) return stream->Decode(idx, count, pixels, y);
  const size_t d = static_cast<size_t>(dim);
  for (int64_t i = 0; i < count; ++i) {
    const size_t row = static_cast<size_t>(idx[i]);
    std::memcpy(pixels + static_cast<size_t>(i) * d, u8.data() + row * d, d);
    y[i] = labels[row];
  }
}

DatasetPtr MakeDataset(Dataset meta, std::vector<uint8_t> u8, std::vector<float> f32,
                       std::vector<int32_t> labels) {
  struct Arrays {
    std::vector<uint8_t> u8;
    std::vector<float> f32;
    std::vector<int32_t> labels;
  };
  auto arrays = std::make_shared<Arrays>(Arrays{std::move(u8), std::move(f32), std::move(labels)});
  auto ds = std::make_shared<Dataset>(std::move(meta));
  ds->u8 = arrays->u8;
  ds->f32 = arrays->f32;
  ds->labels = arrays->labels;
  ds->storage = std::move(arrays);
  ds->mapped = false;
  return ds;
}

Status CheckTrainingLabels(const Dataset& data) {
  // For a CSV (one-dimensional samples): where the label may be instead, and `more` about why.
  auto other_column = [&](const std::string& more) -> std::string {
    if (data.shape.size() != 1) return "";
    return " (is the label in another column? label_column picks it: 0 by default, -1 for the "
           "last" +
           more + ")";
  };
  // One class is no classification: every prediction is right, and every trial would score 1.
  if (!data.labels.empty() && std::all_of(data.labels.begin(), data.labels.end(),
                                          [&](int32_t l) { return l == data.labels.front(); })) {
    return Status::Corruption(
        data.source + ": every label is " + std::to_string(data.labels.front()) +
        (data.class_names.empty()
             ? ""
             : " (class '" + data.class_names[static_cast<size_t>(data.labels.front())] + "')") +
        "; a classifier needs samples of at least two classes" + other_column("") +
        // on_bad_file = "skip" may have left the other classes' files out.
        (data.skipped_files > 0 ? "; " + std::to_string(data.skipped_files) +
                                      " bad file(s) were left out, the first: " +
                                      (data.skipped.empty() ? "" : data.skipped.front())
                                : ""));
  }
  // A folder set's labels are its class folders: they cannot be misnumbered.
  if (data.num_classes <= 2 || !data.class_names.empty()) return Status::Ok();
  std::vector<bool> seen(static_cast<size_t>(data.num_classes), false);
  for (int32_t l : data.labels) seen[static_cast<size_t>(l)] = true;
  const int64_t empty = std::count(seen.begin(), seen.end(), false);
  // A set with several samples per class misses few by chance: more than half empty is wrong
  // numbering. A small one may miss many, but not three quarters (a stray 255 among 0..2).
  const bool small = data.n < 4 * static_cast<int64_t>(data.num_classes);
  if (small ? empty * 4 >= 3 * data.num_classes : empty * 2 > data.num_classes) {
    return Status::Corruption(
        data.source + ": labels go up to " + std::to_string(data.num_classes - 1) + ", but " +
        std::to_string(empty) + " of the classes 0 to " + std::to_string(data.num_classes - 1) +
        " have no sample; labels must be numbered 0 to C-1");
  }
  // Nearly every sample in a class of its own: the column read as the label numbers the rows
  // (an index pandas wrote) or identifies them; nothing can be learnt from it. (A small set of
  // many classes, a few-shot one, has a few samples per class: well under 90% distinct.)
  const int64_t distinct = data.num_classes - empty;
  if (data.n >= 20 && distinct * 10 > data.n * 9) {
    return Status::Corruption(
        data.source + ": " + std::to_string(data.n) + " samples hold " + std::to_string(distinct) +
        " distinct labels; a label that nearly every sample has alone numbers or names the "
        "samples, it is not a class" +
        other_column("; pandas' to_csv writes its row index first unless given index=False"));
  }
  return Status::Ok();
}

int64_t ValidationCount(int64_t n, double validation_fraction) {
  const double f = std::clamp(validation_fraction, 0.0, 1.0);
  // The epsilon keeps 0.1 * 60000 at 6000 whatever the rounding of the product.
  return std::min<int64_t>(n, static_cast<int64_t>(std::floor(n * f + 1e-9)));
}

Split MakeSplit(int64_t n, double validation_fraction) {
  std::vector<int32_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  Rng rng(kSplitSeed);
  rng.Shuffle(perm.data(), n);
  const int64_t n_val = ValidationCount(n, validation_fraction);
  Split split;
  split.train.assign(perm.begin(), perm.end() - n_val);
  split.val.assign(perm.end() - n_val, perm.end());
  std::sort(split.val.begin(), split.val.end());
  return split;
}

}  // namespace sweep::trainer