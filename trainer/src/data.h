// Datasets for the trainer: IDX (MNIST layout, gzipped or raw), CSV and image-folder loaders,
// a two-level cache of decoded datasets (in the process, then one file per dataset per machine
// that every process maps read-only), the fixed validation split, and gathering into batches.
// A loaded Dataset is immutable and shared (shared_ptr<const Dataset>) between trials and
// threads; the caches are thread-safe and safe across processes; the rest is pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "trainer/trainer.h"

namespace sweep::trainer {

// Labels above this are taken for a corrupt file rather than a real class count: the output
// layer is sized by the largest label.
inline constexpr int kMaxClasses = 100000;

// Called for each row a gather wrote, on the thread that wrote it: the row's place in the call,
// and its floats.
using RowFn = std::function<void(int64_t i, float* row)>;

// The rows of a set too large to hold decoded (a folder set streamed from its files): they are
// decoded each time they are gathered. Safe from several threads.
class RowStream {
 public:
  virtual ~RowStream() = default;
  // Writes rows idx[0..count) as uint8 pixels into pixels[count, dim] and their labels into y.
  // A file that cannot be decoded leaves zeros and fails the stream (status()), or with
  // on_bad_file = "skip" is replaced by the next good file of its class and counted.
  virtual void Decode(const int32_t* idx, int64_t count, uint8_t* pixels, int32_t* y) const = 0;
  // The same rows as floats (pixels / 255) into x[count, dim]. `each` (may be null) is called
  // for every row on the thread that decoded it: per-row work (augmentation) runs on the
  // decode threads too.
  virtual void DecodeFloats(const int32_t* idx, int64_t count, float* x, int32_t* y,
                            const RowFn* each) const = 0;
  // The first bad file met, when on_bad_file = "error"; OK until then.
  virtual Status status() const = 0;
  // Bad files met so far (on_bad_file = "skip"), and the first few of them ("path: why").
  virtual int64_t skipped_files() const = 0;
  virtual std::vector<std::string> skipped() const = 0;
};

struct Dataset {
  std::string source;          // file name(s), for messages
  int64_t n = 0;               // samples
  int64_t dim = 0;             // features per sample
  int num_classes = 0;         // largest label + 1
  std::vector<int64_t> shape;  // per-sample shape from the file ({28, 28} for MNIST; {dim} csv)
  // Exactly one of these views the [n, dim] features. IDX pixels stay uint8 (a quarter of the
  // memory of floats, in a cache that outlives trials) and are scaled by 1/255 as they are
  // gathered; CSV values are used as they are.
  std::span<const uint8_t> u8;
  std::span<const float> f32;
  std::span<const int32_t> labels;  // [n], each in [0, num_classes)
  // What the views point into: the decoder's arrays, or a read-only mapping of a cache file.
  std::shared_ptr<const void> storage;
  bool mapped = false;  // from the machine-wide cache file
  // folder: the label map (class_names[label], the class folders' names sorted); else empty.
  std::vector<std::string> class_names;
  // folder with on_bad_file = "skip": files left out, and the first few of them ("path: why").
  int64_t skipped_files = 0;
  std::vector<std::string> skipped;
  // Set for a streamed set (u8 and f32 are empty then): rows are decoded as they are gathered.
  std::shared_ptr<const RowStream> stream;

  // Writes rows idx[0..count) as floats into x[count, dim] and their labels into y[count].
  void Gather(const int32_t* idx, int64_t count, float* x, int32_t* y) const;
  // Gather, then each(i, row) for every row: on the threads that decode a streamed set's rows,
  // in order on this one for a held set.
  void GatherEach(const int32_t* idx, int64_t count, float* x, int32_t* y, const RowFn& each) const;
  // The same rows as they are stored, uint8 pixels into pixels[count, dim] (a set of pixels:
  // u8 is not empty, or it is streamed), for a device that scales them itself: a quarter of the
  // bytes.
  void GatherPixels(const int32_t* idx, int64_t count, uint8_t* pixels, int32_t* y) const;
};

using DatasetPtr = std::shared_ptr<const Dataset>;

// A Dataset owning decoded arrays (one of u8, f32 empty); `meta` gives the other fields.
DatasetPtr MakeDataset(Dataset meta, std::vector<uint8_t> u8, std::vector<float> f32,
                       std::vector<int32_t> labels);

// The model has one output per class 0..max label. A training set whose labels leave most of
// those classes without a sample is not numbered 0..C-1 (a stray 255 among the digits 0-9, a
// file of other data): refused, rather than a model trained whose outputs are mostly for
// nothing. A set with fewer than 4 samples per class is not judged (it may miss classes by
// chance). A set whose samples are all of one class is refused too.
Status CheckTrainingLabels(const Dataset& data);

// Decoders, uncached. Errors name the file ("labels.gz: expected 60000 labels, found 59999").
Result<DatasetPtr> LoadIdx(const std::string& images_path, const std::string& labels_path);
// An IDX image and label file pair, from their headers only, checked as LoadIdx checks them;
// an uncompressed file's size is checked against its header too (a gzipped one's data is not
// read).
struct IdxPair {
  int64_t count = 0;
  std::string shape;  // of an image: "28x28"
};
Result<IdxPair> ReadIdxPairHeaders(const std::string& images_path, const std::string& labels_path);
// label_column counts from 0; a negative one counts from the end (-1: the last column).
// `header`: whether the first row is column names; unset: it is when its label field is not a
// number (a first row with a bad feature value is data, and its error is reported).
Result<DatasetPtr> LoadCsv(const std::string& path, int label_column,
                           std::optional<bool> header = std::nullopt);

// A folder of class folders (DatasetSpec::format "folder"), decoded with decode_threads threads:
// classes sorted by name give the labels; within a class, files sorted by their path under it
// give the order. Pixels are uint8, channels last. Errors name the file or folder.
Result<DatasetPtr> LoadImageFolder(const std::string& dir, const DatasetSpec& spec);

// Loads the training (test = false) or test set of `spec`, keyed by format, label column and
// each file's (canonical path, size, mtime), through two caches: this process's (a worker
// reused across trials decodes a file once; concurrent callers wait for one load), then, when
// cache_dir is not empty, a file per dataset there that every process on the machine maps
// read-only. A miss in both decodes and publishes the file (temp file, fsync, link: when
// processes race, the first published wins and the rest map it). A rewritten dataset file has
// a new key; publishing its cache file removes the stale ones. A cache that cannot be written
// (read-only, full) costs speed, not correctness: the decoded arrays are used directly.
Result<DatasetPtr> LoadCached(const DatasetSpec& spec, bool test, const std::string& cache_dir);
// Drops every dataset cached in this process (ones still held by callers live on until
// released; cache files stay).
void ClearDatasetCache();
// A folder set's key is its reading options and every file's (path, size, mtime).
// Decodes (of IDX or CSV text, or of image folders) and cache-file maps this process has done
// (for tests).
int64_t DatasetDecodeCount();
int64_t DatasetMapCount();

// Where the machine-wide cache lives when TrainOptions::cache_dir is empty: $XDG_CACHE_HOME/sweep,
// else $HOME/.cache/sweep, else /tmp/sweep-cache-<uid> (made 0700 and checked to be ours); the
// first that exists or can be made and is writable. "" when none is (then no file cache).
std::string DefaultCacheDir();

struct Split {
  std::vector<int32_t> train;  // in the fixed permutation's order
  std::vector<int32_t> val;    // sorted ascending
};

// The train/validation split of a training file of n samples: a permutation from a fixed seed
// (never the trial's, so every trial of a sweep is scored on the same samples); the last
// floor(n * validation_fraction) of it are held out.
Split MakeSplit(int64_t n, double validation_fraction);
// How many of n samples that split holds out for validation.
int64_t ValidationCount(int64_t n, double validation_fraction);

}  // namespace sweep::trainer
