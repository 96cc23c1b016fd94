// Datasets for the trainer: IDX (MNIST layout, gzipped or raw) and CSV loaders, a process-wide
// cache of decoded datasets, the fixed validation split, and row gathering into batches.
// A loaded Dataset is immutable and shared (shared_ptr<const Dataset>) between trials and
// threads; the cache is thread-safe; everything else here is a pure function.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "trainer/trainer.h"

namespace sweep::trainer {

// Labels above this are taken for a corrupt file rather than a real class count: the output
// layer is sized by the largest label.
inline constexpr int kMaxClasses = 100000;

struct Dataset {
  std::string source;          // file name(s), for messages
  int64_t n = 0;               // samples
  int64_t dim = 0;             // features per sample
  int num_classes = 0;         // largest label + 1
  std::vector<int64_t> shape;  // per-sample shape from the file ({28, 28} for MNIST; {dim} csv)
  // Exactly one of these holds the [n, dim] features. IDX pixels stay uint8 (a quarter of the
  // memory of floats in a cache that lives as long as the worker process) and are scaled by
  // 1/255 as they are gathered; CSV values are used as they are.
  std::vector<uint8_t> u8;
  std::vector<float> f32;
  std::vector<int32_t> labels;  // [n], each in [0, num_classes)

  // Writes rows idx[0..count) as floats into x[count, dim] and their labels into y[count].
  void Gather(const int32_t* idx, int64_t count, float* x, int32_t* y) const;
};

using DatasetPtr = std::shared_ptr<const Dataset>;

// Decoders, uncached. Errors name the file ("labels.gz: expected 60000 labels, found 59999").
Result<DatasetPtr> LoadIdx(const std::string& images_path, const std::string& labels_path);
// label_column counts from 0; a negative one counts from the end (-1: the last column).
Result<DatasetPtr> LoadCsv(const std::string& path, int label_column);

// Loads the training (test = false) or test set of `spec` through the process-wide cache, keyed
// by format, label column and each file's (canonical path, size, mtime): a worker reused across
// trials decodes a file once, and a rewritten file is decoded again. Concurrent callers asking
// for the same key wait for one decode.
Result<DatasetPtr> LoadCached(const DatasetSpec& spec, bool test);
// Drops every cached dataset (ones still held by callers live on until released).
void ClearDatasetCache();
// Number of decodes LoadCached has started since the process began (for tests).
int64_t DatasetDecodeCount();

struct Split {
  std::vector<int32_t> train;  // in the fixed permutation's order
  std::vector<int32_t> val;    // sorted ascending
};

// The train/validation split of a training file of n samples: a permutation from a fixed seed
// (never the trial's, so every trial of a sweep is scored on the same samples); the last
// floor(n * validation_fraction) of it are held out.
Split MakeSplit(int64_t n, double validation_fraction);

}  // namespace sweep::trainer
