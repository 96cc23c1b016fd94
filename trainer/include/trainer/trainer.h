// The embedded trainer: trains one model on one dataset with one set of hyperparameters,
// data-parallel over options.replicas replicas, and reports each epoch. It knows nothing of
// sweeps: callers fill TrainOptions (from JSON hyperparameters via ApplyOption) and receive
// EpochReports through a callback. Train() is synchronous (the callback runs on the calling
// thread); separate calls may run concurrently, but OpenBLAS's thread count is process-wide.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace sweep::trainer {

struct DatasetSpec {
  // "idx" (MNIST layout, gzipped or not), "csv", or "folder" (torchvision's ImageFolder: one
  // subfolder per class, PNG or JPEG files in it; the sorted class names give the labels).
  std::string format = "idx";
  // idx: image and label files. csv: train_images / test_images hold the CSV files (one row per
  // sample, the label in `label_column`, features in every other column; a first row whose
  // label is not a number is a header, unless `header` says); the *_labels fields stay empty.
  // folder: train_images / test_images hold the class folders (the config's keys `train` and
  // `test`); the *_labels fields stay empty.
  std::string train_images, train_labels, test_images, test_labels;
  int label_column = 0;  // csv only; negative counts from the end (-1: the last column)
  // csv only: whether the first row is a header (column names); unset: it is when its label
  // field is not a number.
  std::optional<bool> header;
  // csv only: each row's features as an image, {channels, height, width} in that order (as
  // PyTorch's tensors); empty: a flat vector. Their product must be the row's width.
  std::vector<int> shape;
  // folder only: {height, width} every image is resized to (bilinear, antialiased when
  // shrinking); empty: every image must have the first image's size.
  std::vector<int> image_size;
  // folder only: "error" (an unreadable, corrupt or odd file fails the load, naming it) or
  // "skip" (such files are left out and counted; an empty class folder keeps its label).
  std::string on_bad_file = "error";
  // folder only: threads that decode the files (and, streamed, each batch's); 0: the trial's
  // threads.
  int decode_threads = 0;
  // "auto": the decoded set goes into the machine-wide cache (TrainOptions::cache_dir) when it
  // can be written; "off": decoded in each process (kept in this process's cache only). A
  // folder set whose pixels would take over half of the machine's memory is streamed either
  // way. "stream" (folder only): never held decoded; each batch is decoded from the files as
  // it is gathered.
  std::string cache = "auto";
  // Training batches gathered (for a streamed set: decoded and augmented) ahead of compute; 0:
  // the default (2). Each holds batch_size samples as floats.
  int prefetch = 0;
};

// Every field is a hyperparameter a sweep may vary (the key ApplyOption takes is the field
// name), except where it says it is the executor's or the machine's choice.
struct TrainOptions {
  DatasetSpec dataset;
  std::string model = "mlp";             // mlp | cnn
  std::vector<int> hidden = {256, 128};  // hidden linear layers' widths (cnn: after the convs)
  std::string activation = "relu";       // relu | tanh | gelu
  std::string init = "auto";  // he | xavier | pytorch | auto (he for relu/gelu, xavier for tanh)
  // Drop probability, [0, 1): mlp, after each hidden activation; cnn, before each linear layer.
  double dropout = 0;

  // cnn: one stage per entry, each `convs_per_stage` convolutions of kernel_size x kernel_size
  // ("same" padding) with that many channels, each followed by batch norm and the activation,
  // then a 2x2 pool.
  std::vector<int> channels = {16, 32};
  int convs_per_stage = 2;
  int kernel_size = 3;  // odd
  bool batch_norm = true;
  bool residual = false;     // a stage's convolutions form ResNet basic blocks
  std::string pool = "max";  // max | avg
  bool global_pool = false;  // global average pooling after the last stage, not a flatten
  double bn_momentum = 0.1;  // running = (1 - m) running + m batch statistic (PyTorch's)
  double bn_eps = 1e-5;

  // Inputs: scale each channel by the training split's mean and standard deviation. Unset:
  // on for cnn, off for mlp.
  std::optional<bool> normalize;
  // Augmentation of training batches (images only): a random crop of the image padded by this
  // many pixels (0: off), a horizontal flip of half the samples, and a random erasing of a
  // rectangle with this probability. Seeded by (seed, epoch, sample).
  int augment_crop = 0;
  bool augment_flip = false;
  double random_erasing = 0;
  double label_smoothing = 0;  // [0, 1): the target puts this mass evenly on every class

  std::string optimizer = "sgd";  // sgd | adamw
  double lr = 0.05;               // peak learning rate (before scale_lr)
  double momentum = 0.9;          // sgd
  bool nesterov = false;          // sgd; needs momentum > 0
  double weight_decay = 0;        // sgd: L2 added to the gradient; adamw: decoupled
  double beta1 = 0.9;             // adamw
  double beta2 = 0.999;           // adamw
  double eps = 1e-8;              // adamw

  std::string lr_schedule = "constant";  // constant | step | cosine (to 0 at the last step)
  double warmup_epochs =
      0;                  // linear warmup from lr/W to lr over this many epochs (may be a fraction)
  int step_size = 30;     // step: multiply the lr by gamma every step_size epochs
  double gamma = 0.1;     // step
  bool scale_lr = false;  // linear scaling rule: lr * batch_size * accum_steps / base_batch
  int base_batch = 128;   // the batch `lr` was tuned for

  int batch_size = 128;  // samples per micro-batch over all replicas (>= replicas)
  int accum_steps = 1;   // micro-batches per optimizer step: the effective batch is their product
  int epochs = 10;
  double validation_fraction = 0.1;  // held out of the training file, deterministic split
  int64_t max_train_samples = 0;     // 0: all; else the first N of the shuffled training set
  // fp32 (GPU: TF32 GEMMs) | bf16 | fp16: the GEMMs' inputs in 16 bits with fp32 accumulation,
  // fp32 master weights and fp32 everything else; fp16 adds dynamic loss scaling. A GPU runs
  // 16-bit GEMMs; the CPU rounds the inputs the same way and runs fp32 ones (same numbers).
  std::string precision = "fp32";
  uint64_t seed = 0;

  // The executor's and the machine's choices: they change speed, not what is learned (replicas
  // change float rounding only), and a checkpoint resumes under other values of them.
  int threads = 1;  // CPU threads for this trial
  int replicas =
      1;  // data-parallel model copies (CPU: threads; GPU: devices); R = 1: no all-reduce
  // auto: the GPU backend when this process sees a GPU (and it was compiled in), else the CPU;
  // cpu | cuda: that one, or an error.
  std::string backend = "auto";
  // CUDA ordinals of the replicas' GPUs, one per replica (the executor passes the trial's slots).
  // Empty: devices 0 .. replicas - 1 on the GPU backend.
  std::vector<int> devices;
  // GPU backend: keep the training set in GPU memory (when it takes at most a quarter of each
  // device's free memory) and gather batches there; false: stream them from pinned host memory.
  bool dataset_on_gpu = true;
  // GPU backend: replay each kind of micro-batch from a CUDA graph once captured (its third
  // launch); false: launch every kernel of every step.
  bool cuda_graphs = true;
  // GPU backend: time cuDNN's first few candidate plans for each convolution and keep the
  // fastest; false: the first its heuristics rank. Timing may pick other engines in another
  // run, whose sums round differently.
  bool cudnn_autotune = false;
  std::string checkpoint_path;  // resume from / write to this file; empty: no checkpoints
  int checkpoint_every = 0;     // epochs between checkpoints; 0: only when stopped and at the end
  // With checkpoint_path: optimizer steps between checkpoints within an epoch (0: none), for
  // epochs long enough that one lost to a crash costs much. Each pauses the replicas (a GPU
  // drains its queue) and writes the whole state; what is learned is the same either way.
  int checkpoint_every_steps = 0;
  // Resuming from a checkpoint: first report its epoch again (EpochReport::replayed), the way it
  // was reported, and stop there if the callback says so. For a caller whose store may not have
  // kept that report: a checkpoint written when told to stop can be ahead of it.
  bool report_resumed_epoch = false;
  // Train no epoch past this one (0: none), without changing what `epochs` means to the
  // schedules: a run that stops there ends stopped, its checkpoint and test set measured there.
  int stop_after_epoch = 0;
  // With checkpoint_path set: polled between optimizer steps (every few milliseconds, from one
  // replica's thread); true stops the run within its epoch, at a step every replica can stop
  // at. The checkpoint then holds that step, and a resume from it goes on as if never stopped
  // (the epoch's report, its figures of time apart, is the one it would have had). So a stop
  // waits for a step, not an epoch. Without a checkpoint path, only on_epoch stops a run.
  std::function<bool()> stop_requested;
  // Decoded-dataset cache shared by the processes of this machine. Empty: $XDG_CACHE_HOME/sweep,
  // else ~/.cache/sweep, else /tmp/sweep-cache-<uid>.
  std::string cache_dir;
};

// Sets one option from a JSON value: `key` is a TrainOptions field name ("lr", "hidden",
// "batch_size", "dataset", ...). InvalidArgument names the key and what was expected.
Status ApplyOption(TrainOptions* options, std::string_view key, const nlohmann::json& value);
// Every key ApplyOption accepts.
const std::vector<std::string>& OptionKeys();
// Metrics Train() reports: train_loss, val_loss, val_acc, samples_per_s, data_wait_s, epoch_s,
// allreduce_s, lr, skipped_steps, and test_acc (at the end, when a test set is given).
const std::vector<std::string>& MetricNames();
// What Validate checks: every rule, or only each option's own (its type and range, not how it
// goes with the others: batch_size >= replicas, nesterov with momentum, one device per
// replica), for checking one option alone against defaults it will not run with.
enum class ValidateScope { kAll, kEachOption };
// Checks values that need no data: positive sizes, known names, lr > 0, fraction in [0, 1),
// batch_size >= replicas, one device per replica, and what the chosen backend can train.
Status Validate(const TrainOptions& options, ValidateScope scope = ValidateScope::kAll);

// The options that decide what training computes, as canonical JSON (sorted keys, shortest
// round-trip numbers): not threads, replicas, checkpointing or cache_dir, which change speed
// only, and not the test set. `epochs` counts only under the cosine schedule, whose shape
// depends on it; elsewhere a resumed trial may be given more epochs.
// A checkpoint resumes only under the same; `sweep run --from` carries a trial over only to
// the same.
std::string TrainingConfig(const TrainOptions& o);

// The work a run of these options does, in multiply-adds (forward and backward over every
// training sample, every epoch), to rank trials by how long they will take: it counts the
// layers' GEMMs on the training split (max_train_samples when set) and does not open the
// dataset, so it takes the input width and split of Fashion-MNIST (784 features, 10 classes,
// 60,000 images). Trials of one sweep share their dataset, so the ranking holds when the dataset
// differs; the absolute figure does not.
double EstimatedWork(const TrainOptions& options);

struct EpochReport {
  int epoch = 0;             // 1-based
  int64_t step = 0;          // optimizer steps so far
  double train_loss = 0;     // mean over the epoch
  double val_loss = 0;       // NaN when validation_fraction == 0
  double val_acc = 0;        // NaN when validation_fraction == 0
  double samples_per_s = 0;  // training samples per second of this epoch's training steps
  double data_wait_s =
      0;               // time the compute waited for batches this epoch (the most any replica did)
  double epoch_s = 0;  // wall time of the epoch
  // Time rank 0 spent in the gradient all-reduce this epoch after its backward had ended: what
  // overlapping with backward did not hide (summing and waiting for the other replicas; the
  // optimizer update fused into the reduction is not counted). 0 with one replica.
  double allreduce_s = 0;
  double lr = 0;  // the learning rate of the epoch's last step
  // fp16: optimizer steps skipped this epoch because the scaled gradients overflowed (inf/nan);
  // each halves the loss scale. 0 in fp32 and bf16.
  int64_t skipped_steps = 0;
  // The checkpoint's epoch reported again on a resume (TrainOptions::report_resumed_epoch), not
  // trained again: its figures are the ones it had when it was trained.
  bool replayed = false;
  // folder with on_bad_file = "skip": bad files left out (held) or met and replaced (streamed)
  // so far, training and test sets together; -1 for other formats.
  int64_t skipped_files = -1;
};

struct TrainResult {
  int epochs_done = 0;              // including those done before a resume
  int resumed_from_epoch = 0;       // the checkpoint's epoch, 0 when training started fresh
  int64_t resumed_epoch_steps = 0;  // and the steps of the next epoch it held (else 0)
  bool stopped = false;             // the callback asked to stop before the last epoch
  bool checkpointed = false;        // a checkpoint was written (at the end, or when stopped)
  // Stopped within an epoch (stop_requested): that epoch and the steps of it done; 0 otherwise.
  // Such a run measures no test set.
  int stopped_in_epoch = 0;
  int64_t epoch_steps_done = 0;
  int64_t steps_per_epoch = 0;     // the run's
  std::optional<double> test_acc;  // when a test set is given, unless stopped within an epoch
  // folder with on_bad_file = "skip": files left out of the training and test sets.
  int64_t skipped_files = 0;
  std::vector<std::string> skipped;  // the first few of them, "path: why"
  // folder: the label map, class_names[label] (the class folders' names, sorted); else empty.
  std::vector<std::string> class_names;
};

// Where within an epoch a run stopped, or went on from: "within epoch 2, after step 361 of its
// 1125".
std::string WithinEpoch(int epoch, int64_t steps, int64_t steps_per_epoch);

// Return false to stop training after this epoch (a checkpoint is written first when
// checkpoint_path is set, so the trial can resume there).
using EpochCallback = std::function<bool(const EpochReport&)>;

// Trains and reports. With checkpoint_path set, resumes from that file when it exists (it must
// come from the same training options: a different one, or a corrupt one, is an error naming
// the file), and writes it atomically every checkpoint_every epochs, when stopped and after the
// last epoch. Errors: a missing or malformed dataset (names the file), a NaN or infinite loss
// ("diverged at epoch E, step S"), bad options, a bad checkpoint.
Result<TrainResult> Train(const TrainOptions& options, const EpochCallback& on_epoch);

// ---- datasets ----

// What a dataset holds, for showing it: its samples, shape and label map.
struct DatasetSummary {
  std::string source;  // the file(s) or folder
  int64_t samples = 0;
  std::vector<int64_t> shape;  // per sample: {H, W} (one channel), {H, W, C}, or {features}
  int num_classes = 0;
  std::vector<std::string> class_names;  // folder: class_names[label]; else empty
  std::vector<int64_t> class_counts;     // samples per label
  int64_t skipped_files = 0;             // folder, on_bad_file = "skip"
  std::vector<std::string> skipped;      // the first few of them: "path: why"
};

// Loads the training (test = false) or test set of `spec` as Train() does (through the same
// caches; cache_dir as TrainOptions::cache_dir, empty: the default) and describes it.
Result<DatasetSummary> DescribeDataset(const DatasetSpec& spec, bool test,
                                       const std::string& cache_dir = "");

// What Train() refuses of a training set of `samples` before it trains, with its messages: a
// validation_fraction that leaves no sample to validate on, or fewer samples after the split
// (and max_train_samples) than one optimizer step takes.
Status CheckTrainingSetSize(const TrainOptions& options, int64_t samples);

// The samples in the training set of `spec` where its files say, without reading their data:
// an IDX pair's headers (the test pair's are checked too, as a load checks them: the type byte,
// the dimensions, images and labels of the same count, the test images' shape), or an image
// folder's files (with on_bad_file = "error"). nullopt for CSV, and for a folder that may skip
// files.
Result<std::optional<int64_t>> TrainingSamples(const DatasetSpec& spec);

// format = "folder", checked without decoding anything: each folder exists and holds class
// folders and at least one PNG or JPEG file; with on_bad_file = "error" no class folder is
// empty; the test folder's classes are the training folder's. On failure *field names the
// dataset key at fault ("train" or "test").
Status CheckImageFolders(const DatasetSpec& spec, std::string* field);

// Whether every GPU this process has trained on can still be used. A fault inside a kernel (an
// illegal address, an uncorrectable ECC error) breaks that GPU's CUDA context for the rest of the
// process: every later call fails, so a process that reuses itself across trials must be replaced
// rather than fail each GPU trial after it. Empty when healthy, else why not. Cheap: one
// synchronisation per GPU used. Always empty without a GPU.
std::string GpuContextFault();

// Why this build cannot train on a GPU of compute capability major * 10 + minor (its kernels
// have no code the GPU runs: SWEEP_CUDA_ARCHITECTURES), naming the rebuild; empty where it can,
// or where the build has no GPU backend. For `sweep devices`; trials are refused the same way.
std::string GpuArchitectureGap(int compute_capability);

// Has multi-GPU trials make every NCCL connection when their communicator is made, not at a
// collective's first call (NCCL 2.22+ connects lazily, which needs every rank inside the same
// call: a rank that fails before its first all-reduce would leave the others blocked in it):
// sets NCCL_RUNTIME_CONNECT=0 unless the environment has it already (a value the user set wins).
// NCCL reads it once, at the first communicator. Call at the start of a process that trains,
// before any thread starts: setenv beside threads that read the environment is unsafe.
void ConnectNcclAtInit();
// Whether ConnectNcclAtInit set the variable: a program this process starts (a command trial)
// then should not inherit it.
bool NcclEnvironmentIsOurs();

}  // namespace sweep::trainer
