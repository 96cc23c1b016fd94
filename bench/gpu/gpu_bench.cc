// The CUDA backend on Fashion-MNIST against its PyTorch twin (torch_mlp_gpu.py), in one run:
//   1. MLP 784-256-128-10, batch 256, fp32 (TF32 GEMMs on both sides): samples/s, ours / torch
//      (target >= 1.0x), like for like twice: the training set held on the GPU on both sides,
//      and batches gathered in pinned host memory and copied per step on both sides;
//   2. the same at batch 4096 in bf16;
//   3. a GEMM-heavy MLP (784-4096x4-10, batch 4096, bf16): the TFLOP/s our training steps
//      achieve against cuBLAS alone on the same GEMM shapes (target >= 60%);
//   4. for each, data_wait_s as a share of the training time (target < 5%); for the small
//      models also our samples/s with CUDA graphs off, beside the default (on);
//   5. with 2+ GPUs: the all-reduce time one rank spends after backward (per step) and NCCL's bus
//      bandwidth for the GEMM-heavy model's gradients as 4 MiB buckets vs one large all-reduce.
// Our samples/s and torch's both exclude the first epoch (warm-up: cuBLAS heuristics, the
// dataset cache) and evaluation, and both train on all 60,000 images (no validation split).
// Every figure is printed with what it is compared to; the exit status is 1 when one is missing.
//
// Usage: gpu_bench [--data DIR] [--epochs N] [--heavy-epochs N] [--torch SCRIPT] [--skip-torch]
//                  [--python PYTHON]
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#if defined(SWEEP_HAVE_NCCL)
#include <nccl.h>
#endif

#include "batcher.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_buffer.h"
#include "cuda/ops.h"
#include "model.h"
#include "train_internal.h"
#include "trainer/trainer.h"

namespace fs = std::filesystem;
using sweep::Status;
using sweep::trainer::ApplyOption;
using sweep::trainer::CommStats;
using sweep::trainer::EpochReport;
using sweep::trainer::MlpShape;
using sweep::trainer::TrainOptions;
namespace cuda = sweep::trainer::cuda;

namespace {

struct Config {
  std::string name;
  std::vector<int> hidden;
  int batch = 256;
  std::string precision = "fp32";
  int epochs = 3;
  double lr = 0.05;  // SGD, momentum 0.9, on both sides
};

// GEMM FLOPs per training sample: forward 2 in out per layer, the weight gradient as much
// again, the input gradient of every layer but the first as much again.
double FlopsPerSample(const MlpShape& s) {
  double f = 0;
  for (int l = 0; l < s.layers(); ++l) {
    const double mn = 2.0 * s.in(l)*s.out(l);
    f += mn * (l == 0 ? 2 : 3);
  }
  return f;
}

struct OursRun {
  bool ok = false;
  std::string error;
  double samples_per_s = 0;
  double wait_share = 0;  // data_wait_s / training time, counted epochs
  double test_acc = -1;
  double exposed_ms_per_step = 0, span_ms_per_step = 0;
};

// dataset_on_gpu: the training set held in GPU memory and gathered there (the default); false:
// batches gathered on the host into pinned memory and copied per micro-batch. cuda_graphs:
// steps replayed from CUDA graphs (the default), or every kernel launched.
OursRun RunOurs(const std::string& data, const Config& c, int replicas, bool dataset_on_gpu = true,
                bool cuda_graphs = true) {
  OursRun run;
  TrainOptions o;
  o.dataset_on_gpu = dataset_on_gpu;
  o.cuda_graphs = cuda_graphs;
  if (Status s = ApplyOption(&o, "dataset", data); !s.ok()) {
    run.error = s.message();
    return run;
  }
  o.backend = "cuda";
  o.hidden = c.hidden;
  o.batch_size = c.batch;
  o.precision = c.precision;
  o.epochs = c.epochs;
  o.lr = c.lr;
  o.momentum = 0.9;
  o.replicas = replicas;
  o.validation_fraction = 0;  // as torch: every training image, timed steps only
  double samples = 0, seconds = 0, wait = 0;
  int64_t steps_before = 0, counted_steps = 0;
  CommStats comm;
  auto r = sweep::trainer::TrainWithState(
      o,
      [&](const EpochReport& e) {
        const int64_t steps = e.step - steps_before;
        steps_before = e.step;
        std::printf(
            "    epoch %d: %.0f samples/s, data_wait %.4f s, epoch %.3f s, train_loss "
            "%.4f, val_acc %.4f, allreduce_s %.5f, skipped %lld\n",
            e.epoch, e.samples_per_s, e.data_wait_s, e.epoch_s, e.train_loss, e.val_acc,
            e.allreduce_s, static_cast<long long>(e.skipped_steps));
        std::fflush(stdout);
        if (e.epoch == 1 && c.epochs > 1) return true;  // warm-up
        const double n = static_cast<double>(steps) * c.batch;
        samples += n;
        seconds += n / e.samples_per_s;
        wait += e.data_wait_s;
        counted_steps += steps;
        return true;
      },
      nullptr, &comm);
  if (!r.ok()) {
    run.error = r.status().message();
    return run;
  }
  run.ok = true;
  run.samples_per_s = samples / seconds;
  run.wait_share = wait / seconds;
  run.test_acc = r->test_acc.value_or(-1);
  // comm sums every epoch, the warm-up's too.
  const double all_steps = static_cast<double>(steps_before);
  run.exposed_ms_per_step = 1e3 * comm.exposed_s / all_steps;
  run.span_ms_per_step = 1e3 * comm.reduce_s / all_steps;
  (void)counted_steps;
  return run;
}

struct TorchRun {
  double samples_per_s = -1;
  double test_acc = -1;
  std::string header;
};

TorchRun RunTorch(const std::string& python, const std::string& script, const std::string& data,
                  const Config& c, const std::string& input) {
  TorchRun run;
  std::string hidden;
  for (int h : c.hidden) hidden += (hidden.empty() ? "" : ",") + std::to_string(h);
  const fs::path out =
      fs::temp_directory_path() / ("sweep_gpu_bench_torch_" + std::to_string(::getpid()) + ".txt");
  const std::string cmd = python + " '" + script + "' --data '" + data + "' --epochs " +
                          std::to_string(c.epochs) + " --batch " + std::to_string(c.batch) +
                          " --hidden " + hidden + " --precision " + c.precision + " --lr " +
                          std::to_string(c.lr) + " --input " + input + " > '" + out.string() +
                          "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  std::string text;
  for (std::string line; std::getline(in, line);) {
    text += line + "\n";
    if (line.rfind("samples_per_s=", 0) == 0) run.samples_per_s = std::atof(line.c_str() + 14);
    if (line.rfind("test_accuracy=", 0) == 0) run.test_acc = std::atof(line.c_str() + 14);
    if (line.rfind("torch ", 0) == 0) run.header = line;
  }
  std::error_code ec;
  fs::remove(out, ec);
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0 || run.samples_per_s <= 0) {
    std::printf("    torch (%s) failed: %s\n%s", input.c_str(), cmd.c_str(), text.c_str());
    run.samples_per_s = -1;
  }
  return run;
}

// ---- timing on a stream ----

// Milliseconds per call of fn (which queues work on `stream` and returns false on failure), over
// `iters` calls after `warmup`, by CUDA events; -1 when fn or an event call fails.
template <typename Fn>
double StreamMs(cudaStream_t stream, int warmup, int iters, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) {
    if (!fn()) return -1;
  }
  cudaEvent_t a = nullptr, b = nullptr;
  bool ok = cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess &&
            cudaEventRecord(a, stream) == cudaSuccess;
  for (int i = 0; ok && i < iters; ++i) ok = fn();
  float ms = 0;
  ok = ok && cudaEventRecord(b, stream) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess &&
       cudaEventElapsedTime(&ms, a, b) == cudaSuccess;
  if (a != nullptr) cudaEventDestroy(a);
  if (b != nullptr) cudaEventDestroy(b);
  return ok ? ms / iters : -1;
}

// GB/s of one cudaMemcpyAsync of `bytes` from pinned host memory to the device (the streamed
// path's copy of a batch), over 20 copies after 3; -1 on failure.
double PinnedCopyGbps(size_t bytes) {
  if (cudaSetDevice(0) != cudaSuccess) return -1;
  void *host = nullptr, *dev = nullptr;
  cudaStream_t stream = nullptr;
  double ms = -1;
  if (cudaHostAlloc(&host, bytes, cudaHostAllocDefault) == cudaSuccess &&
      cudaMalloc(&dev, bytes) == cudaSuccess && cudaStreamCreate(&stream) == cudaSuccess) {
    std::memset(host, 1, bytes);
    ms = StreamMs(stream, 3, 20, [&] {
      return cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream) == cudaSuccess;
    });
  }
  if (stream != nullptr) cudaStreamDestroy(stream);
  if (dev != nullptr) cudaFree(dev);
  if (host != nullptr) cudaFreeHost(host);
  return ms > 0 ? static_cast<double>(bytes) / (ms * 1e-3) / 1e9 : -1;
}

// ---- cuBLAS alone on one training step's GEMMs ----

#define BENCH_CHECK(stmt)                                                                    \
  do {                                                                                       \
    if (auto e_ = (stmt); e_ != decltype(e_){}) {                                            \
      std::printf("    %s failed (%d) at line %d\n", #stmt, static_cast<int>(e_), __LINE__); \
      return -1;                                                                             \
    }                                                                                        \
  } while (0)

// TFLOP/s of the GEMMs one training step of shape/batch runs, in bf16 with fp32 output, back to
// back on one stream (no other kernel between them): the ceiling our step can approach.
double CublasStepTflops(const MlpShape& s, int batch) {
  BENCH_CHECK(cudaSetDevice(0));
  cudaStream_t stream = nullptr;
  BENCH_CHECK(cudaStreamCreate(&stream));
  cublasHandle_t h = nullptr;
  if (!cuda::CreateBlasHandle(stream, true, &h).ok()) return -1;
  const int64_t widest = *std::max_element(s.widths.begin(), s.widths.end());
  cuda::DeviceBuffer<uint16_t> w16, a16, d16;
  cuda::DeviceBuffer<float> out, dw, din;
  if (!cuda::DeviceBuffer<uint16_t>::Make(s.num_params, &w16).ok() ||
      !cuda::DeviceBuffer<uint16_t>::Make(int64_t{batch} * widest, &a16).ok() ||
      !cuda::DeviceBuffer<uint16_t>::Make(int64_t{batch} * widest, &d16).ok() ||
      !cuda::DeviceBuffer<float>::Make(int64_t{batch} * widest, &out).ok() ||
      !cuda::DeviceBuffer<float>::Make(s.num_params, &dw).ok() ||
      !cuda::DeviceBuffer<float>::Make(int64_t{batch} * widest, &din).ok()) {
    return -1;
  }
  const auto type = cuda::HalfType::kBf16;
  // Random values, not the zeros Make leaves: tensor cores run faster on zeros (less power, higher
  // clocks), which would raise the ceiling our real-data steps are compared against.
  {
    std::vector<float> host(
        static_cast<size_t>(std::max<int64_t>(s.num_params, int64_t{batch} * widest)));
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (float& v : host) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      v = static_cast<float>(x >> 40) / 16777216.0f - 0.5f;
    }
    cuda::DeviceBuffer<float> f32;
    if (!cuda::DeviceBuffer<float>::Make(static_cast<int64_t>(host.size()), &f32).ok()) return -1;
    BENCH_CHECK(
        cudaMemcpy(f32.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    for (cuda::DeviceBuffer<uint16_t>* b : {&w16, &a16, &d16}) {
      if (!cuda::cast_to_half(b->data(), f32.data(), b->size(), type, stream).ok()) return -1;
    }
    BENCH_CHECK(cudaStreamSynchronize(stream));
  }
  auto step = [&]() -> bool {
    for (int l = 0; l < s.layers(); ++l) {
      if (!cuda::matmul_forward_half(h, out.data(), a16.data(), w16.data() + s.weight_offset[l],
                                     batch, s.in(l), s.out(l), type)
               .ok()) {
        return false;
      }
    }
    for (int l = s.layers() - 1; l >= 0; --l) {
      if (!cuda::matmul_backward_half(
               h, l == 0 ? nullptr : din.data(), dw.data() + s.weight_offset[l], d16.data(),
               a16.data(), w16.data() + s.weight_offset[l], batch, s.in(l), s.out(l), type)
               .ok()) {
        return false;
      }
    }
    return true;
  };
  const double ms = StreamMs(stream, 5, 30, step);
  cublasDestroy(h);
  cudaStreamDestroy(stream);
  return ms > 0 ? FlopsPerSample(s) * batch / (ms * 1e-3) / 1e12 : -1;
}

// ---- the step's other kernels, alone ----

// Milliseconds per training step of the kernels that are not GEMMs, each kind timed alone on
// the shapes the bf16 step of shape/batch runs them on (hidden layers without dropout, SGD with
// momentum), with the bytes each moves: where a step's time goes besides cuBLAS, so that a
// missed GEMM-share target says which kernel to look at. -1 entries: a failure (printed).
struct ElementwiseTimes {
  double forward_ms = -1, backward_ms = -1, optimizer_ms = -1;
  double forward_gb = 0, backward_gb = 0, optimizer_gb = 0;
};

ElementwiseTimes ElementwiseStepTimes(const MlpShape& s, int batch) {
  ElementwiseTimes t;
  if (cudaSetDevice(0) != cudaSuccess) return t;
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) return t;
  const int64_t widest = *std::max_element(s.widths.begin(), s.widths.end());
  const int64_t act = int64_t{batch} * widest;
  cuda::DeviceBuffer<float> pre, d, params, grads, velocity, scratch;
  cuda::DeviceBuffer<uint16_t> out16, d16, params16;
  int64_t scratch_floats = 0;
  for (int l = 0; l < s.layers(); ++l) {
    scratch_floats = std::max(scratch_floats, cuda::BiasGradScratchFloats(batch, s.out(l)));
  }
  if (!cuda::DeviceBuffer<float>::Make(act, &pre).ok() ||
      !cuda::DeviceBuffer<float>::Make(act, &d).ok() ||
      !cuda::DeviceBuffer<float>::Make(s.num_params, &params).ok() ||
      !cuda::DeviceBuffer<float>::Make(s.num_params, &grads).ok() ||
      !cuda::DeviceBuffer<float>::Make(s.num_params, &velocity).ok() ||
      !cuda::DeviceBuffer<float>::Make(scratch_floats, &scratch).ok() ||
      !cuda::DeviceBuffer<uint16_t>::Make(act, &out16).ok() ||
      !cuda::DeviceBuffer<uint16_t>::Make(act, &d16).ok() ||
      !cuda::DeviceBuffer<uint16_t>::Make(s.num_params, &params16).ok()) {
    std::printf("    elementwise timing: allocation failed\n");
    cudaStreamDestroy(stream);
    return t;
  }
  const auto type = cuda::HalfType::kBf16;
  const auto relu = cuda::Activation::kRelu;
  const int hidden = s.layers() - 1;
  auto forward = [&]() {
    for (int l = 0; l < hidden; ++l) {
      if (!cuda::bias_act_forward(nullptr, pre.data(), params.data() + s.bias_offset[l], batch,
                                  s.out(l), relu, stream, out16.data(), type, false)
               .ok()) {
        return false;
      }
    }
    return true;
  };
  auto backward = [&]() {
    for (int l = hidden; l >= 0; --l) {
      const bool last = l == hidden;
      const float* bias = params.data() + s.bias_offset[l];
      if (!cuda::bias_act_backward(d.data(), grads.data() + s.bias_offset[l], pre.data(),
                                   last ? pre.data() : nullptr, batch, s.out(l),
                                   last ? cuda::Activation::kNone : relu, stream, false, d16.data(),
                                   type, false, scratch.data(), last ? nullptr : bias)
               .ok()) {
        return false;
      }
    }
    return true;
  };
  auto optimizer = [&]() {
    return cuda::sgd_update(params.data(), velocity.data(), grads.data(), s.num_params, 0.01f, 0.9f,
                            0.0f, false, stream, nullptr, params16.data(), type)
        .ok();
  };
  int64_t hidden_elems = 0;
  for (int l = 0; l < hidden; ++l) hidden_elems += int64_t{batch} * s.out(l);
  const int64_t logits = int64_t{batch} * s.out(hidden);
  t.forward_ms = StreamMs(stream, 3, 20, forward);
  t.backward_ms = StreamMs(stream, 3, 20, backward);
  t.optimizer_ms = StreamMs(stream, 3, 20, optimizer);
  // Bytes: forward reads pre and writes the 16-bit copy; backward reads d and pre and writes the
  // 16-bit gradient (the logits: d in, d16 out); SGD reads p, v, g and writes p, v, p16.
  t.forward_gb = 6.0 * static_cast<double>(hidden_elems) / 1e9;
  t.backward_gb =
      (10.0 * static_cast<double>(hidden_elems) + 6.0 * static_cast<double>(logits)) / 1e9;
  t.optimizer_gb = 22.0 * static_cast<double>(s.num_params) / 1e9;
  cudaStreamDestroy(stream);
  return t;
}

// ---- NCCL: bucketed vs one all-reduce ----

#if defined(SWEEP_HAVE_NCCL)
// Seconds to all-reduce `floats` floats on n GPUs (n may be 1: a one-rank communicator), as the
// given ranges, each range its own all-reduce; -1 on failure.
double AllReduceSeconds(int n, int64_t floats,
                        const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  std::vector<int> devs;
  for (int d = 0; d < n; ++d) devs.push_back(d);
  BENCH_CHECK(ncclCommInitAll(comms.data(), n, devs.data()));
  std::vector<cuda::DeviceBuffer<float>> bufs(static_cast<size_t>(n));
  std::vector<cudaStream_t> streams(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    BENCH_CHECK(cudaSetDevice(d));
    if (!cuda::DeviceBuffer<float>::Make(floats, &bufs[static_cast<size_t>(d)]).ok()) return -1;
    BENCH_CHECK(cudaStreamCreate(&streams[static_cast<size_t>(d)]));
  }
  auto once = [&]() -> ncclResult_t {
    for (const auto& [begin, end] : ranges) {
      if (ncclResult_t r = ncclGroupStart(); r != ncclSuccess) return r;
      for (int d = 0; d < n; ++d) {
        float* p = bufs[static_cast<size_t>(d)].data() + begin;
        if (ncclResult_t r =
                ncclAllReduce(p, p, static_cast<size_t>(end - begin), ncclFloat, ncclSum,
                              comms[static_cast<size_t>(d)], streams[static_cast<size_t>(d)]);
            r != ncclSuccess) {
          return r;
        }
      }
      if (ncclResult_t r = ncclGroupEnd(); r != ncclSuccess) return r;
    }
    return ncclSuccess;
  };
  auto sync = [&]() -> cudaError_t {
    for (int d = 0; d < n; ++d) {
      cudaSetDevice(d);
      if (cudaError_t e = cudaStreamSynchronize(streams[static_cast<size_t>(d)]);
          e != cudaSuccess) {
        return e;
      }
    }
    return cudaSuccess;
  };
  for (int i = 0; i < 3; ++i) BENCH_CHECK(once());
  BENCH_CHECK(sync());
  const int iters = 20;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) BENCH_CHECK(once());
  BENCH_CHECK(sync());
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  for (int d = 0; d < n; ++d) {
    cudaSetDevice(d);
    cudaStreamDestroy(streams[static_cast<size_t>(d)]);
    bufs[static_cast<size_t>(d)] = cuda::DeviceBuffer<float>();
  }
  ncclGroupStart();  // one thread, every rank: as the trainer destroys them
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  ncclGroupEnd();
  return s;
}

// NCCL's bus bandwidth convention, GB/s: 2 (n - 1) / n x bytes / time.
double BusGbps(int n, int64_t floats, double seconds) {
  if (seconds <= 0) return -1;
  return 2.0 * (n - 1) / n * static_cast<double>(floats) * sizeof(float) / seconds / 1e9;
}
#endif

std::string Ratio(double ours, double theirs) {
  if (ours <= 0 || theirs <= 0) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", ours / theirs);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  sweep::trainer::ConnectNcclAtInit();  // as a sweep worker does, before any thread
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string torch_script = fs::path(SWEEP_SOURCE_DIR) / "bench/gpu/torch_mlp_gpu.py";
  std::string python = "python3";
  int epochs = 3, heavy_epochs = 8;
  bool skip_torch = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--data") {
      data = next();
    } else if (a == "--epochs") {
      epochs = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--heavy-epochs") {
      heavy_epochs = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--torch") {
      torch_script = next();
    } else if (a == "--python") {
      python = next();
    } else if (a == "--skip-torch") {
      skip_torch = true;
    } else {
      std::fprintf(stderr,
                   "usage: gpu_bench [--data DIR] [--epochs N] [--heavy-epochs N] "
                   "[--torch SCRIPT] [--python PYTHON] [--skip-torch]\n");
      return 2;
    }
  }
  const sweep::Result<int> gpus = cuda::DeviceCount();
  if (!gpus.ok()) {
    // 77: skipped (not failed), for scripts that run every benchmark on any machine.
    std::printf("gpu_bench: %s; nothing to measure (skipped)\n", gpus.status().message().c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("gpu_bench: %d GPU(s), device 0: %s (sm_%d%d, %.0f GiB); dataset %s\n", *gpus,
              prop.name, prop.major, prop.minor, prop.totalGlobalMem / 1073741824.0, data.c_str());

  // A figure that could not be measured (a failed run, a failed cuBLAS or NCCL call) is printed
  // as such and makes the exit status 1.
  int missing = 0;
  // The small models take a fraction of a millisecond a step, so a figure must rest on many
  // steps for the fixed costs of an epoch (pipeline fill and drain, the sync at its end) to stay
  // small beside them: 234 steps an epoch at batch 256, only 14 at 4096.
  const std::vector<Config> configs = {
      {"MLP 784-256-128-10, batch 256, fp32 (TF32)", {256, 128}, 256, "fp32", std::max(epochs, 6)},
      {"MLP 784-256-128-10, batch 4096, bf16", {256, 128}, 4096, "bf16", std::max(epochs, 40)},
      // lr 0.01: 0.05 with momentum 0.9 is near the edge of stability for this model, and a
      // diverged run measures nothing (the rate does not change the work).
      {"GEMM-heavy MLP 784-4096x4-10, batch 4096, bf16",
       {4096, 4096, 4096, 4096},
       4096,
       "bf16",
       heavy_epochs,
       0.01},
  };
  for (const Config& c : configs) {
    std::printf("\n== %s, %d epochs (the first is warm-up) ==\n", c.name.c_str(), c.epochs);
    std::fflush(stdout);
    const OursRun ours = RunOurs(data, c, 1);
    if (ours.ok) {
      std::printf("  ours, training set on the GPU: %.0f samples/s, test_acc %.4f\n",
                  ours.samples_per_s, ours.test_acc);
      std::printf("  data_wait_s / training time: %.2f%% (target < 5%%)\n", 100 * ours.wait_share);
    } else {
      std::printf("  ours: FAILED: %s\n", ours.error.c_str());
      ++missing;
    }
    const MlpShape shape = MlpShape::Make(784, c.hidden, 10);
    if (c.hidden.size() <= 2) {
      // What CUDA graphs bring: the same run with every kernel launched.
      const OursRun launched = RunOurs(data, c, 1, /*dataset_on_gpu=*/true, /*cuda_graphs=*/false);
      if (launched.ok && ours.ok) {
        std::printf("  ours without CUDA graphs: %.0f samples/s; with them %s as fast\n",
                    launched.samples_per_s,
                    Ratio(ours.samples_per_s, launched.samples_per_s).c_str());
      } else {
        std::printf("  ours without CUDA graphs: FAILED: %s\n", launched.error.c_str());
        ++missing;
      }
      // The small models also with batches streamed from pinned host memory (the path a set
      // too large for the GPU takes), against torch doing the same.
      const OursRun streamed = RunOurs(data, c, 1, /*dataset_on_gpu=*/false);
      if (streamed.ok) {
        std::printf("  ours, batches streamed from the host: %.0f samples/s, data_wait %.2f%%\n",
                    streamed.samples_per_s, 100 * streamed.wait_share);
        // What bounds that path: the copy of a batch of pixels (the GPU scales them), and the
        // host's gathering.
        const size_t batch_bytes = static_cast<size_t>(c.batch) * 784;
        const double h2d = PinnedCopyGbps(batch_bytes);
        std::printf(
            "  its ceilings: copying a batch (%.1f MB of uint8 pixels) from pinned memory %.1f "
            "GB/s, %.0f samples/s; gathering on the host with up to %d thread(s)\n",
            batch_bytes / 1e6, h2d, h2d > 0 ? h2d * 1e9 / 784 : 0.0,
            sweep::trainer::GpuGatherThreads());
      } else {
        std::printf("  ours, streamed: FAILED: %s\n", streamed.error.c_str());
        ++missing;
      }
      if (!skip_torch) {
        const TorchRun resident = RunTorch(python, torch_script, data, c, "resident");
        const TorchRun host = RunTorch(python, torch_script, data, c, "host");
        if (!resident.header.empty()) std::printf("  %s\n", resident.header.c_str());
        missing += (resident.samples_per_s <= 0) + (host.samples_per_s <= 0);
        std::printf(
            "  torch, dataset on the GPU: %.0f samples/s, test_acc %.4f\n"
            "  torch, batches from pinned host memory: %.0f samples/s, test_acc %.4f\n",
            resident.samples_per_s, resident.test_acc, host.samples_per_s, host.test_acc);
        std::printf("  ours / torch, both with the set on the GPU: %s (target >= 1.0x)\n",
                    Ratio(ours.samples_per_s, resident.samples_per_s).c_str());
        std::printf("  ours / torch, both streaming from the host: %s (target >= 1.0x)\n",
                    Ratio(streamed.samples_per_s, host.samples_per_s).c_str());
      }
      if (ours.ok) {
        std::printf("  GEMM TFLOP/s: ours %.2f (this model is launch- and input-bound)\n",
                    ours.samples_per_s * FlopsPerSample(shape) / 1e12);
      }
    } else {
      // cuBLAS alone is measured whether or not our run worked: it is half the figure.
      const double blas = CublasStepTflops(shape, c.batch);
      if (blas <= 0) ++missing;
      const double ours_tflops = ours.ok ? ours.samples_per_s * FlopsPerSample(shape) / 1e12 : -1;
      char share[32] = "n/a";
      if (ours.ok && blas > 0)
        std::snprintf(share, sizeof share, "%.0f%%", 100 * ours_tflops / blas);
      std::printf(
          "  GEMM TFLOP/s: ours %.1f (whole training steps), cuBLAS alone on the same GEMM "
          "shapes %.1f: %s (target >= 60%%)\n",
          ours_tflops, blas, share);
      // Where the rest of a step goes: one step's GEMMs at cuBLAS's rate, then each kind of
      // other kernel alone, with the bandwidth it reached.
      const double gemm_ms = blas > 0 ? FlopsPerSample(shape) * c.batch / (blas * 1e12) * 1e3 : -1;
      const double step_ms = ours.ok ? c.batch / ours.samples_per_s * 1e3 : -1;
      const ElementwiseTimes e = ElementwiseStepTimes(shape, c.batch);
      auto rate = [](double gb, double ms) { return ms > 0 ? gb / (ms * 1e-3) : 0.0; };
      std::printf(
          "  one step: %.3f ms measured; GEMMs at cuBLAS's rate %.3f ms; bias+activation "
          "forward %.3f ms (%.2f GB, %.0f GB/s), its backward with the bias gradient %.3f ms "
          "(%.2f GB, %.0f GB/s), SGD update %.3f ms (%.2f GB, %.0f GB/s)\n",
          step_ms, gemm_ms, e.forward_ms, e.forward_gb, rate(e.forward_gb, e.forward_ms),
          e.backward_ms, e.backward_gb, rate(e.backward_gb, e.backward_ms), e.optimizer_ms,
          e.optimizer_gb, rate(e.optimizer_gb, e.optimizer_ms));
    }
    std::fflush(stdout);
  }

  std::printf("\n== all-reduce ==\n");
  std::printf("  1 GPU: the trainer makes no communicator and no NCCL call (allreduce_s is 0)\n");
#if defined(SWEEP_HAVE_NCCL)
  const Config& heavy_config = configs[2];
  const MlpShape heavy_shape = MlpShape::Make(784, heavy_config.hidden, 10);
  // The gradient buckets the trainer uses (GroupSpec::bucket_floats: 4 MiB), and one range.
  std::vector<std::pair<int64_t, int64_t>> one = {{0, heavy_shape.num_params}}, buckets;
  for (const auto& b : sweep::trainer::MakeGradBuckets(heavy_shape, int64_t{1} << 20)) {
    buckets.emplace_back(b.begin, b.end);
  }
  const double mib = heavy_shape.num_params * 4.0 / 1048576;
  if (*gpus >= 2) {
    Config heavy = heavy_config;
    heavy.epochs = heavy_epochs;
    std::vector<int> counts = {2};
    if (*gpus > 2) counts.push_back(*gpus);
    for (int n : counts) {
      std::printf("  %d GPUs, %s:\n", n, heavy.name.c_str());
      const OursRun dp = RunOurs(data, heavy, n);
      if (!dp.ok) {
        std::printf("    FAILED: %s\n", dp.error.c_str());
        ++missing;
      } else {
        std::printf(
            "    %.0f samples/s; rank 0 all-reduce after backward %.3f ms/step, comm "
            "stream busy from first bucket to last %.3f ms/step\n",
            dp.samples_per_s, dp.exposed_ms_per_step, dp.span_ms_per_step);
      }
    }
    const double single = BusGbps(*gpus, heavy_shape.num_params,
                                  AllReduceSeconds(*gpus, heavy_shape.num_params, one));
    const double bucketed = BusGbps(*gpus, heavy_shape.num_params,
                                    AllReduceSeconds(*gpus, heavy_shape.num_params, buckets));
    missing += (single <= 0) + (bucketed <= 0);
    std::printf(
        "  NCCL bus bandwidth on %d GPUs, %.0f MiB of gradients: one all-reduce %.1f GB/s, "
        "%zu buckets %.1f GB/s (%s of one)\n",
        *gpus, mib, single, buckets.size(), bucketed, Ratio(bucketed, single).c_str());
  } else {
    // What the bucketed path would cost per step through a one-rank communicator (a local
    // copy at most): the overhead that skipping NCCL on one GPU saves.
    const double single = AllReduceSeconds(1, heavy_shape.num_params, one);
    const double bucketed = AllReduceSeconds(1, heavy_shape.num_params, buckets);
    missing += (single <= 0) + (bucketed <= 0);
    auto ms = [](double seconds) {
      char buf[32] = "n/a";
      if (seconds > 0) std::snprintf(buf, sizeof buf, "%.3f ms", 1e3 * seconds);
      return std::string(buf);
    };
    std::printf(
        "  one-rank NCCL communicator, %.0f MiB of gradients (the GEMM-heavy model): one "
        "all-reduce %s, %zu buckets %s; the multi-GPU figures need 2 or more GPUs\n",
        mib, ms(single).c_str(), buckets.size(), ms(bucketed).c_str());
  }
#else
  std::printf("  built without NCCL: no multi-GPU figures\n");
#endif
  if (missing > 0)
    std::printf("\ngpu_bench: %d figure(s) could not be measured (above)\n", missing);
  return missing > 0 ? 1 : 0;
}
