// The CUDA backend's CNNs on Fashion-MNIST against PyTorch at its best (torch_cnn_gpu.py: the
// best of eager, CUDA graphs, torch.compile and max-autotune, each with channels_last, bf16
// autocast, the set on the GPU with crops and flips there, a fused optimizer), in one run:
//   1. the trainer's CNN (per stage two conv3x3 + batch norm + ReLU, a 2x2 max pool; a hidden
//      layer of 256) with channels 32,64 and 64,128,256, at batch 256 and 1024, crops (2 pixels)
//      and flips on: our samples/s over the epochs after the first, ours / torch's best
//      (targets: >= 1.5x at batch 256, >= 1.0x at 1024);
//   2. for each, data_wait_s as a share of the training time (target < 2%);
//   3. for each, the share of a training step that cuDNN's convolutions take: every convolution
//      of the model in its three directions at that batch, timed alone with CUDA events, against
//      the measured step;
//   4. for each, batch norm's training pass and backward over all the model's batch norm layers,
//      through cuDNN's graph API and through our kernels, timed alone the same way (the net
//      takes cuDNN's where it has an engine).
// Ours trains in fp32 (TF32 tensor cores) and in bf16, each with CUDA graphs; at batch 256 also
// bf16 with every kernel launched, to show what the graphs bring. The faster of fp32 and bf16 is
// set against torch. Every figure is printed with what it is compared to; the exit status is 1
// when one is missing.
//
// Usage: cnn_gpu_bench [--data DIR] [--epochs N] [--torch SCRIPT] [--python PYTHON]
//                      [--variants LIST] [--skip-torch] [--cases CHANNELS:BATCH,...]
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/cnn_ops.h"
#include "cuda/cuda_backend.h"
#include "cuda/cudnn_conv.h"
#include "cuda/cudnn_norm.h"
#include "cuda/device_buffer.h"
#include "model.h"
#include "trainer/trainer.h"

namespace fs = std::filesystem;
using sweep::Status;
using sweep::trainer::ApplyOption;
using sweep::trainer::EpochReport;
using sweep::trainer::TrainOptions;
namespace cuda = sweep::trainer::cuda;
namespace trainer = sweep::trainer;

namespace {

struct Case {
  std::vector<int> channels;
  int batch = 256;
  std::string Channels() const {
    std::string s;
    for (int c : channels) s += (s.empty() ? "" : ",") + std::to_string(c);
    return s;
  }
};

TrainOptions Options(const std::string& data, const Case& c, int epochs) {
  TrainOptions o;
  if (Status s = ApplyOption(&o, "dataset", data); !s.ok())
    std::printf("  %s\n", s.message().c_str());
  o.backend = "cuda";
  o.model = "cnn";
  o.channels = c.channels;
  o.hidden = {256};
  o.batch_size = c.batch;
  o.epochs = epochs;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 5e-4;
  o.augment_crop = 2;
  o.augment_flip = true;
  o.validation_fraction = 0;  // as torch: every training image, timed steps only
  return o;
}

struct OursRun {
  bool ok = false;
  std::string error;
  double samples_per_s = 0, wait_share = 0, test_acc = -1;
};

OursRun RunOurs(const TrainOptions& o) {
  OursRun run;
  double samples = 0, seconds = 0, wait = 0;
  int64_t steps_before = 0;
  auto r = trainer::Train(o, [&](const EpochReport& e) {
    const int64_t steps = e.step - steps_before;
    steps_before = e.step;
    std::printf("    epoch %d: %.0f samples/s, data_wait %.4f s, epoch %.3f s, train_loss %.4f\n",
                e.epoch, e.samples_per_s, e.data_wait_s, e.epoch_s, e.train_loss);
    std::fflush(stdout);
    if (e.epoch == 1 && o.epochs > 1) return true;  // warm-up: cuDNN's plans are made here
    const double n = static_cast<double>(steps) * o.batch_size;
    samples += n;
    seconds += n / e.samples_per_s;
    wait += e.data_wait_s;
    return true;
  });
  if (!r.ok()) {
    run.error = r.status().message();
    return run;
  }
  run.ok = seconds > 0;
  run.samples_per_s = samples / seconds;
  run.wait_share = wait / seconds;
  run.test_acc = r->test_acc.value_or(-1);
  return run;
}

// Torch's best variant's samples/s, or -1 (its output is printed either way).
double RunTorch(const std::string& python, const std::string& script, const std::string& data,
                const Case& c, const std::string& variants) {
  const fs::path out =
      fs::temp_directory_path() / ("sweep_cnn_bench_torch_" + std::to_string(::getpid()) + ".txt");
  const std::string cmd = python + " '" + script + "' --data '" + data + "' --channels " +
                          c.Channels() + " --fc 256 --batch " + std::to_string(c.batch) +
                          " --variants " + variants + " > '" + out.string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  double best = -1;
  for (std::string line; std::getline(in, line);) {
    std::printf("    %s\n", line.c_str());
    if (line.rfind("best=", 0) == 0) {
      const size_t at = line.find("samples_per_s=");
      if (at != std::string::npos) best = std::atof(line.c_str() + at + 14);
    }
  }
  std::error_code ec;
  fs::remove(out, ec);
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) best = -1;
  return best;
}

// Milliseconds per call of `step` (true when its calls were queued) on `stream`: 3 untimed
// calls, then 20 between CUDA events; -1 on failure.
template <typename Step>
double TimeMs(cudaStream_t stream, const Step& step) {
  cudaEvent_t a = nullptr, b = nullptr;
  bool ok = cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess;
  for (int i = 0; ok && i < 3; ++i) ok = step();
  ok = ok && cudaEventRecord(a, stream) == cudaSuccess;
  const int iters = 20;
  for (int i = 0; ok && i < iters; ++i) ok = step();
  float ms = 0;
  ok = ok && cudaEventRecord(b, stream) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess &&
       cudaEventElapsedTime(&ms, a, b) == cudaSuccess;
  if (a != nullptr) cudaEventDestroy(a);
  if (b != nullptr) cudaEventDestroy(b);
  return ok ? static_cast<double>(ms) / iters : -1.0;
}

// Milliseconds one training step spends in cuDNN's convolutions: every convolution of the
// model, its three directions at `batch` rows, timed alone (-1 on failure).
double ConvMsPerStep(const TrainOptions& o) {
  sweep::Result<trainer::ModelSpec> model = trainer::BuildModel(o, {1, 28, 28}, 10);
  if (!model.ok()) return -1;
  cudaStream_t stream = nullptr;
  cudnnHandle_t handle = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) return -1;
  double total = 0;
  if (!cuda::CreateCudnnHandle(stream, &handle).ok()) total = -1;
  for (const trainer::Layer& l : model->layers) {
    if (total < 0 || l.kind != trainer::LayerKind::kConv) continue;
    const sweep::trainer::cpu::ConvShape s = trainer::ConvShapeOf(l, o.batch_size);
    auto conv = cuda::CudnnConv::Create(handle, s, cuda::ConvOptions{});
    cuda::DeviceBuffer<float> x, w, y, dx, dw;
    cuda::DeviceBuffer<uint8_t> ws;
    if (!conv.ok() || !cuda::DeviceBuffer<float>::Make(int64_t{s.B} * s.H * s.W * s.C, &x).ok() ||
        !cuda::DeviceBuffer<float>::Make(int64_t{s.B} * s.H * s.W * s.C, &dx).ok() ||
        !cuda::DeviceBuffer<float>::Make(s.OC * s.patch(), &w).ok() ||
        !cuda::DeviceBuffer<float>::Make(s.OC * s.patch(), &dw).ok() ||
        !cuda::DeviceBuffer<float>::Make(int64_t{s.B} * s.OH() * s.OW() * s.OC, &y).ok() ||
        !cuda::DeviceBuffer<uint8_t>::Make(static_cast<int64_t>((*conv)->workspace_bytes()), &ws)
             .ok()) {
      total = -1;
      continue;
    }
    const cuda::CudnnConv& c = **conv;
    auto run = [&] {
      return c.Forward(y.data(), x.data(), w.data(), ws.data()).ok() &&
             c.BackwardData(dx.data(), y.data(), w.data(), ws.data()).ok() &&
             c.BackwardFilter(dw.data(), x.data(), y.data(), ws.data()).ok();
    };
    const double ms = TimeMs(stream, run);
    total = ms < 0 ? -1 : total + ms;
  }
  if (handle != nullptr) cudnnDestroy(handle);
  cudaStreamDestroy(stream);
  return total;
}

// Milliseconds a training step spends in batch norm (training pass and backward of every batch
// norm layer at `batch` rows, timed alone): through cuDNN in *cudnn (-1 where it has no engine
// for a layer, with the reason in *why) and through our kernels in *ours.
void BatchNormMsPerStep(const TrainOptions& o, double* cudnn, double* ours, std::string* why) {
  *cudnn = *ours = -1;
  sweep::Result<trainer::ModelSpec> model = trainer::BuildModel(o, {1, 28, 28}, 10);
  if (!model.ok()) return;
  cudaStream_t stream = nullptr;
  cudnnHandle_t handle = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) return;
  if (cuda::CreateCudnnHandle(stream, &handle).ok()) {
    double with_cudnn = 0, with_ours = 0;
    for (const trainer::Layer& l : model->layers) {
      if (l.kind != trainer::LayerKind::kBatchNorm || with_ours < 0) continue;
      const int C = l.in_shape.c;
      const int64_t N = int64_t{o.batch_size} * l.in_shape.h * l.in_shape.w;
      std::string none;
      auto bn = cuda::CudnnBatchNorm::Create(handle, N, C, l.eps, l.momentum, &none);
      if (!bn.ok()) none = bn.status().message();
      if ((!bn.ok() || *bn == nullptr) && why->empty()) *why = none;
      // Parameters, statistics and cuDNN's gradients: four arrays of C each, at 16-byte
      // boundaries, as cuDNN's tensors are declared.
      const int64_t A = (C + 3) / 4 * 4;
      cuda::DeviceBuffer<float> x, y, d, dx, params, stats, tmp;
      cuda::DeviceBuffer<uint8_t> ws, scratch;
      const size_t ws_bytes = bn.ok() && *bn != nullptr ? (*bn)->workspace_bytes() : 0;
      if (!cuda::DeviceBuffer<float>::Make(N * C, &x).ok() ||
          !cuda::DeviceBuffer<float>::Make(N * C, &y).ok() ||
          !cuda::DeviceBuffer<float>::Make(N * C, &d).ok() ||
          !cuda::DeviceBuffer<float>::Make(N * C, &dx).ok() ||
          !cuda::DeviceBuffer<float>::Make(4 * A, &params).ok() ||
          !cuda::DeviceBuffer<float>::Make(4 * A, &stats).ok() ||
          !cuda::DeviceBuffer<float>::Make(4 * A, &tmp).ok() ||
          !cuda::DeviceBuffer<uint8_t>::Make(static_cast<int64_t>(ws_bytes), &ws).ok() ||
          !cuda::DeviceBuffer<uint8_t>::Make(cuda::batchnorm_scratch_bytes(N, C), &scratch).ok() ||
          cudaMemset(x.data(), 0, N * C * sizeof(float)) != cudaSuccess ||
          cudaMemset(d.data(), 0, N * C * sizeof(float)) != cudaSuccess) {
        with_ours = -1;
        continue;
      }
      float* p = params.data();
      float* s = stats.data();
      auto time = [&](const auto& step) { return TimeMs(stream, step); };
      const double mine = time([&] {
        return cuda::batchnorm_forward(y.data(), nullptr, s + 2 * A, s + 3 * A, x.data(), p, p + A,
                                       s, s + A, N, C, l.momentum, l.eps,
                                       sweep::trainer::cpu::Activation::kNone, scratch.data(),
                                       stream)
                   .ok() &&
               cuda::batchnorm_backward(dx.data(), p + 2 * A, p + 3 * A, d.data(), x.data(),
                                        nullptr, y.data(), s + 2 * A, s + 3 * A, p, N, C,
                                        sweep::trainer::cpu::Activation::kNone, false, false,
                                        scratch.data(), stream)
                   .ok();
      });
      with_ours = mine < 0 ? -1 : with_ours + mine;
      if (!bn.ok() || *bn == nullptr || with_cudnn < 0) {
        with_cudnn = -1;
        continue;
      }
      const cuda::CudnnBatchNorm& n = **bn;
      const double theirs = time([&] {
        return n.Forward(y.data(), s + 2 * A, s + 3 * A, x.data(), p, p + A, ws.data()).ok() &&
               cuda::batchnorm_running_update(s, s + A, s + 2 * A, s + 3 * A, N, C, l.momentum,
                                              l.eps, stream)
                   .ok() &&
               n.Backward(dx.data(), tmp.data() + 2 * A, tmp.data() + 3 * A, d.data(), x.data(), p,
                          s + 2 * A, s + 3 * A, ws.data())
                   .ok();
      });
      with_cudnn = theirs < 0 ? -1 : with_cudnn + theirs;
    }
    *cudnn = with_cudnn;
    *ours = with_ours;
  }
  if (handle != nullptr) cudnnDestroy(handle);
  cudaStreamDestroy(stream);
}

std::vector<Case> ParseCases(const std::string& text) {
  std::vector<Case> cases;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ' ');) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) continue;
    Case c;
    std::stringstream ch(item.substr(0, colon));
    for (std::string v; std::getline(ch, v, ',');) c.channels.push_back(std::atoi(v.c_str()));
    c.batch = std::atoi(item.c_str() + colon + 1);
    if (!c.channels.empty() && c.batch > 0) cases.push_back(c);
  }
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string script = fs::path(SWEEP_SOURCE_DIR) / "bench/gpu/torch_cnn_gpu.py";
  std::string python = "python3", variants = "eager,graph,compile,max-autotune";
  std::string cases_text = "32,64:256 32,64:1024 64,128,256:256 64,128,256:1024";
  int epochs = 3;
  bool skip_torch = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--data") {
      data = next();
    } else if (a == "--epochs") {
      epochs = std::max(2, std::atoi(next().c_str()));
    } else if (a == "--torch") {
      script = next();
    } else if (a == "--python") {
      python = next();
    } else if (a == "--variants") {
      variants = next();
    } else if (a == "--cases") {
      cases_text = next();
    } else if (a == "--skip-torch") {
      skip_torch = true;
    } else {
      std::fprintf(stderr,
                   "usage: cnn_gpu_bench [--data DIR] [--epochs N] [--torch SCRIPT] "
                   "[--python PYTHON] [--variants LIST] [--skip-torch] "
                   "[--cases 'CHANNELS:BATCH ...']\n");
      return 2;
    }
  }
  const sweep::Result<int> gpus = cuda::DeviceCount();
  if (!gpus.ok()) {
    std::printf("cnn_gpu_bench: %s; nothing to measure (skipped)\n",
                gpus.status().message().c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("cnn_gpu_bench: %s (sm_%d%d), cuDNN %s; dataset %s\n", prop.name, prop.major,
              prop.minor, cuda::CudnnVersion().c_str(), data.c_str());
  int missing = 0;
  for (const Case& c : ParseCases(cases_text)) {
    std::printf(
        "\n== CNN channels %s, hidden 256, batch %d, crop 2 + flip, %d epochs (the first "
        "is warm-up) ==\n",
        c.Channels().c_str(), c.batch, epochs);
    std::fflush(stdout);
    const TrainOptions o = Options(data, c, epochs);
    TrainOptions o16 = o;
    o16.precision = "bf16";
    const OursRun fp32 = RunOurs(o);
    const OursRun bf16 = RunOurs(o16);
    for (const auto& [name, run] : {std::pair{"fp32, TF32", &fp32}, std::pair{"bf16", &bf16}}) {
      if (run->ok) {
        std::printf("  ours (%s): %.0f samples/s, test_acc %.4f, data_wait %.2f%% (target < 2%%)\n",
                    name, run->samples_per_s, run->test_acc, 100 * run->wait_share);
      } else {
        std::printf("  ours (%s): FAILED: %s\n", name, run->error.c_str());
        ++missing;
      }
    }
    if (c.batch <= 256 && bf16.ok) {
      TrainOptions launched = o16;
      launched.cuda_graphs = false;
      const OursRun without = RunOurs(launched);
      if (without.ok) {
        std::printf("  ours (bf16) without CUDA graphs: %.0f samples/s; with them %.2fx\n",
                    without.samples_per_s, bf16.samples_per_s / without.samples_per_s);
      } else {
        std::printf("  ours (bf16) without CUDA graphs: FAILED: %s\n", without.error.c_str());
        ++missing;
      }
    }
    const OursRun& ours =
        bf16.ok && (!fp32.ok || bf16.samples_per_s > fp32.samples_per_s) ? bf16 : fp32;
    if (!ours.ok) continue;
    const double conv_ms = ConvMsPerStep(o);
    const double step_ms = 1e3 * c.batch / ours.samples_per_s;
    if (conv_ms > 0) {
      std::printf("  cuDNN convolutions: %.3f ms of a %.3f ms step, %.0f%%\n", conv_ms, step_ms,
                  100 * conv_ms / step_ms);
    } else {
      std::printf("  cuDNN convolutions: could not be timed\n");
      ++missing;
    }
    double bn_cudnn = -1, bn_ours = -1;
    std::string bn_why;
    BatchNormMsPerStep(o, &bn_cudnn, &bn_ours, &bn_why);
    if (bn_ours > 0) {
      std::printf("  batch norm (training pass + backward, all layers): ours %.3f ms, ", bn_ours);
      if (bn_cudnn > 0) {
        std::printf("cuDNN %.3f ms (%.2fx ours)\n", bn_cudnn, bn_ours / bn_cudnn);
      } else {
        std::printf("cuDNN not timed: %s\n", bn_why.empty() ? "a call failed" : bn_why.c_str());
      }
    } else {
      std::printf("  batch norm: could not be timed\n");
      ++missing;
    }
    if (skip_torch) continue;
    const double torch = RunTorch(python, script, data, c, variants);
    if (torch <= 0) {
      std::printf("  torch: FAILED (above)\n");
      ++missing;
      continue;
    }
    std::printf("  ours / torch's best: %.2fx (target >= %.1fx)\n", ours.samples_per_s / torch,
                c.batch <= 256 ? 1.5 : 1.0);
  }
  return missing == 0 ? 0 : 1;
}
