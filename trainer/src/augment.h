// What happens to a sample between the dataset and the model: channels reordered to the model's
// HWC layout (csv rows come C, H, W), per-channel normalization, and for training batches the
// augmentations (random crop of the padded image, horizontal flip, random erasing). Applied by
// the Batcher's threads as they gather, ahead of compute, and to evaluation batches (no
// augmentation there). Every random choice is a pure function of (seed, epoch, the sample's
// place in the epoch), so the same seed gives the same batches on any number of replicas.
// An InputTransform is immutable once made: safe from several threads.
#pragma once

#include <cstdint>
#include <vector>

#include "data.h"
#include "model.h"

namespace sweep::trainer {

// The random choices of one training row's augmentation: the crop's offset, the flip, and the
// erased rectangle (eh == 0: none).
struct AugmentDraw {
  int dy = 0, dx = 0;
  bool mirror = false;
  int ey = 0, ex = 0, eh = 0, ew = 0;
};

struct InputTransform {
  TensorShape shape;  // as the model reads a sample (channels last)
  bool chw = false;   // the dataset's rows are channels first (csv with more than one channel)
  std::vector<float> mean, inv_std;  // per channel; empty: no normalization
  int crop = 0;                      // pixels of zero padding the crop moves within
  bool flip = false;                 // horizontal, half the samples
  float erasing = 0;                 // probability of erasing one rectangle (to 0, normalized)
  uint64_t seed = 0;

  bool augments() const { return crop > 0 || flip || erasing > 0; }
  bool active() const { return chw || !mean.empty() || augments(); }
  // Prepares rows x[count, shape.size()] in place. Training rows (augment) draw from
  // (seed, epoch, first_position + i), i the row's index in x.
  void Apply(float* x, int64_t count, bool augment, int epoch, int64_t first_position) const;
  // The choices Apply makes for the training row at `position` of `epoch`: a GPU holding the
  // set applies the same ones there.
  AugmentDraw Draw(int epoch, int64_t position) const;
};

// The shape of one sample as the model reads it: an IDX item of H x W is {1, H, W}, one of
// H x W x C is {C, H, W} (already channels last); csv rows take dataset.shape, else they are
// flat vectors {dim, 1, 1}. InvalidArgument names dataset.shape when its product is not the
// row's width.
Result<TensorShape> SampleShape(const Dataset& data, const DatasetSpec& spec);

// The same from the files' headers alone (IDX: the image file's header; csv: the first row's
// width), without decoding the data. NotFound when a file cannot be read (the dataset's own
// checks say why).
Result<TensorShape> ProbeInputShape(const DatasetSpec& spec);

// Rows of a streamed set that ChannelStats decodes: enough for the mean and deviation to three
// digits, and a few seconds of decoding for large images.
inline constexpr int64_t kStreamStatsRows = 4096;

// Per-channel mean and standard deviation (population) of rows[0..n) of `data` (of a streamed
// set: of its first kStreamStatsRows), after scaling pixels by 1/255. Memoised in this process per
// (dataset, rows' count and first rows), since every trial of a sweep asks for the same split's.
void ChannelStats(const Dataset& data, const int32_t* rows, int64_t n, TensorShape shape, bool chw,
                  std::vector<float>* mean, std::vector<float>* stddev);

}  // namespace sweep::trainer
