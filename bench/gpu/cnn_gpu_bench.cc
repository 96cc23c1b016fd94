// The CUDA backend's CNNs (and MLP) on Fashion-MNIST against PyTorch at its best
// (torch_cnn_gpu.py: the best of eager, CUDA graphs, torch.compile and max-autotune, each with
// channels_last, bf16 autocast, the set on the GPU with crops and flips there, a fused
// optimizer), in one run:
//   1. the trainer's CNN (per stage two conv3x3 + batch norm + ReLU, a 2x2 max pool; a hidden
//      layer of 256) with channels 32,64 and 64,128,256, at batch 256 and 1024, crops (2 pixels)
//      and flips on, and gpu_bench's MLP (784-256-128-10, no augmentation) at the same batches:
//      our samples/s over the epochs after the first, ours / torch's best (targets: >= 1.5x at
//      batch 256, >= 1.0x at 1024);
//   2. for each, data_wait_s as a share of the training time (target < 2%);
//   3. for each CNN, the share of a training step that convolutions take: every convolution
//      of the model in the directions a step runs, in the faster run's precision, timed alone
//      with CUDA events, against the measured step (cuDNN's, but the first: our direct
//      kernels, as the net runs it; both are printed for it);
//   4. for each CNN, batch norm's training pass and backward over all the model's batch norm
//      layers, through cuDNN's graph API and through our kernels, each with the widening, cast,
//      ReLU and pooling passes it brings, as the net times them to choose (cudnn_autotune);
//      and the net's forward and backward alone, in a CUDA graph, with its fused passes, with
//      each pass on its own (cuDNN's batch norm, or ours), and fused with the first
//      convolution through cuDNN.
// Ours trains in fp32 (TF32 tensor cores) and in bf16, each with CUDA graphs and autotuned
// convolution plans (torch runs with cudnn.benchmark); at batch 256 also bf16 with every kernel
// launched, to show what the graphs bring. The faster of fp32 and bf16 is set against torch.
// Every figure is printed with what it is compared to; the exit status is 1 when one is
// missing. --torch-timeout S bounds each torch run: the variants it finished count.
// --deadline S: no case starts with under 30 s of S left (it is skipped and counted as missing),
// and a torch run is cut at what is left less 10 s; our own runs are not cut, so a case that
// starts late may still overrun S. --profile runs our bf16 step alone, for a profiler.
//
// Usage: cnn_gpu_bench [--data DIR] [--epochs N] [--torch SCRIPT] [--python PYTHON]
//                      [--variants LIST] [--torch-timeout S] [--deadline S] [--skip-torch]
//                      [--profile] [--cases 'CHANNELS:BATCH[:V1/V2...] mlp/HIDDEN:BATCH ...']
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/cnn_ops.h"
#include "cuda/cuda_backend.h"
#include "cuda/cudnn_conv.h"
#include "cuda/cudnn_norm.h"
#include "cuda/device_buffer.h"
#include "cuda/net.h"
#include "cuda/ops.h"
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

// "CHANNELS:BATCH[:VARIANTS]" is a CNN (hidden 256, crops and flips); "mlp/HIDDEN:BATCH" the MLP
// of gpu_bench (no augmentation). VARIANTS (torch's, separated by '/') replaces --variants.
struct Case {
  bool mlp = false;
  std::vector<int> channels;  // CNN stages; for the MLP, its hidden layers
  int batch = 256;
  std::string variants;
  std::string Channels() const {
    std::string s;
    for (int c : channels) s += (s.empty() ? "" : ",") + std::to_string(c);
    return s;
  }
  std::string Name() const {
    return (mlp ? "MLP 784-" + Channels() + "-10" : "CNN channels " + Channels() + ", hidden 256") +
           ", batch " + std::to_string(batch) + (mlp ? "" : ", crop 2 + flip");
  }
};

TrainOptions Options(const std::string& data, const Case& c, int epochs) {
  TrainOptions o;
  if (Status s = ApplyOption(&o, "dataset", data); !s.ok())
    std::printf("  %s\n", s.message().c_str());
  o.backend = "cuda";
  o.model = c.mlp ? "mlp" : "cnn";
  if (!c.mlp) o.channels = c.channels;
  o.hidden = c.mlp ? c.channels : std::vector<int>{256};
  o.batch_size = c.batch;
  o.epochs = epochs;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 5e-4;
  o.augment_crop = c.mlp ? 0 : 2;
  o.augment_flip = !c.mlp;
  o.validation_fraction = 0;  // as torch: every training image, timed steps only
  // As torch's cudnn.benchmark: each convolution's fastest (deterministic) plan, timed.
  o.cudnn_autotune = !c.mlp;
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

// Torch's best variant's samples/s, or -1. Its lines are read as they come, under `timeout_s`
// (0: none), so a variant that compiles for too long costs only itself: the variants done by then
// count. Only its summary lines are shown (max-autotune's tables would bury the figures), and its
// last lines when it fails.
double RunTorch(const std::string& python, const std::string& script, const std::string& data,
                const Case& c, const std::string& variants, int timeout_s) {
  const std::string layers = c.mlp ? " --mlp " + c.Channels() + " --augment 0"
                                   : " --channels " + c.Channels() + " --fc 256";
  const std::string limit =
      timeout_s > 0 ? "timeout -k 10 " + std::to_string(timeout_s) + " " : std::string();
  const std::string cmd = limit + python + " -u '" + script + "' --data '" + data + "'" + layers +
                          " --batch " + std::to_string(c.batch) + " --variants " + variants +
                          " 2>&1";
  std::fflush(stdout);  // ours first, whatever torch prints
  FILE* in = ::popen(cmd.c_str(), "r");
  if (in == nullptr) {
    std::printf("    could not start: %s\n", cmd.c_str());
    return -1;
  }
  double best = -1;
  std::string best_name;
  std::vector<std::string> tail;  // its other lines, the last few
  char buf[4096];
  while (std::fgets(buf, sizeof buf, in) != nullptr) {
    std::string line(buf);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line.rfind("torch ", 0) != 0 && line.rfind("variant=", 0) != 0 &&
        line.rfind("best=", 0) != 0) {
      tail.push_back(line);
      if (tail.size() > 8) tail.erase(tail.begin());
      continue;
    }
    std::printf("    %s\n", line.c_str());
    std::fflush(stdout);
    const size_t at = line.find("samples_per_s=");
    if (line.rfind("variant=", 0) == 0 && at != std::string::npos) {
      const double v = std::atof(line.c_str() + at + 14);
      if (v > best) best = v, best_name = line.substr(8, line.find(' ') - 8);
    }
  }
  const int rc = ::pclose(in);
  const bool ok = WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
  if (!ok) {
    const bool timed_out = WIFEXITED(rc) && (WEXITSTATUS(rc) == 124 || WEXITSTATUS(rc) == 137);
    if (timed_out) {
      std::printf("    torch: cut off after %d s; the variants above are those that finished\n",
                  timeout_s);
    } else {
      for (const std::string& line : tail) std::printf("    | %s\n", line.c_str());
      std::printf("    torch: exit status %d\n", WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
    }
  }
  if (best > 0) std::printf("    torch's best of those that ran: %s\n", best_name.c_str());
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

// Milliseconds one training step spends in convolutions: every convolution of the model in
// `precision`, the directions a step runs (no data gradient for the model's input) at `batch`
// rows, timed alone, through cuDNN, but the first through our direct kernels where the net runs
// it so (cuda/net_layout.h); -1 on failure. *first_cudnn and *first_direct: that first one both
// ways (-1 where the direct kernels do not take it).
double ConvMsPerStep(const TrainOptions& o, trainer::Precision precision, double* first_cudnn,
                     double* first_direct) {
  *first_cudnn = *first_direct = -1;
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
    cuda::ConvOptions co{precision};
    co.backward_data = l.input >= 0;
    co.autotune = o.cudnn_autotune;  // the plans the net trains with
    auto conv = cuda::CudnnConv::Create(handle, s, co);
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
             (l.input < 0 || c.BackwardData(dx.data(), y.data(), w.data(), ws.data()).ok()) &&
             c.BackwardFilter(dw.data(), x.data(), y.data(), ws.data()).ok();
    };
    double ms = TimeMs(stream, run);
    const bool half = precision != trainer::Precision::kFp32;
    if (l.input < 0 && cuda::direct_conv_supported(s)) {
      cuda::DeviceBuffer<uint8_t> partials;
      auto direct = [&] {
        return cuda::direct_conv_forward(y.data(), x.data(), w.data(), s, half,
                                         trainer::cpu::HalfType::kBf16, stream)
                   .ok() &&
               cuda::direct_conv_backward_filter(dw.data(), x.data(), y.data(), s, half,
                                                 trainer::cpu::HalfType::kBf16, false,
                                                 partials.data(), stream)
                   .ok();
      };
      // As the net runs cuDNN's there in bf16: the input cast to 16 bits first, the weight
      // gradient widened after.
      cuda::DeviceBuffer<uint16_t> x16, dw16;
      auto cudnn_stem = [&] {
        return cuda::cast_to_half(x16.data(), x.data(), x16.size(), trainer::cpu::HalfType::kBf16,
                                  stream)
                   .ok() &&
               c.Forward(y.data(), x16.data(), w.data(), ws.data()).ok() &&
               c.BackwardFilter(dw16.data(), x16.data(), y.data(), ws.data()).ok() &&
               cuda::widen_half(dw.data(), dw16.data(), dw16.size(), trainer::cpu::HalfType::kBf16,
                                false, stream)
                   .ok();
      };
      if (half) {
        ms = cuda::DeviceBuffer<uint16_t>::Make(int64_t{s.B} * s.H * s.W * s.C, &x16).ok() &&
                     cuda::DeviceBuffer<uint16_t>::Make(s.OC * s.patch(), &dw16).ok()
                 ? TimeMs(stream, cudnn_stem)
                 : -1;
      }
      *first_cudnn = ms;
      *first_direct =
          cuda::DeviceBuffer<uint8_t>::Make(cuda::direct_conv_scratch_bytes(s), &partials).ok()
              ? TimeMs(stream, direct)
              : -1;
      ms = *first_direct;
    }
    total = ms < 0 ? -1 : total + ms;
  }
  if (handle != nullptr) cudnnDestroy(handle);
  cudaStreamDestroy(stream);
  return total;
}

// A stream with its cuBLAS and cuDNN handles, for the Nets the probes below make.
struct Handles {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cudnnHandle_t dnn = nullptr;
  Status status = Status::Internal("cudaStreamCreate failed");
  Handles() {
    if (cudaStreamCreate(&stream) != cudaSuccess) return;
    status = cuda::CreateBlasHandle(stream, /*tf32=*/true, &blas);
    if (status.ok()) status = cuda::CreateCudnnHandle(stream, &dnn);
  }
  ~Handles() {
    if (dnn != nullptr) cudnnDestroy(dnn);
    if (blas != nullptr) cublasDestroy(blas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  Handles(const Handles&) = delete;
  Handles& operator=(const Handles&) = delete;
};

// Batch norm as the net runs it: a Net of the model in `precision` at `batch` rows with
// cudnn_autotune times each layer's training pass and backward through cuDNN and through our
// kernels, each with the widening, cast, ReLU and pooling passes it brings (Net::TimeNorm).
// Sums of the two over the layers, and how many layers run ours, of how many were timed (none
// timed: *why says why).
struct NormTimes {
  double cudnn = -1, ours = -1;
  int ours_layers = 0, timed = 0, layers = 0;
  std::string why;
};

NormTimes NetNormTimes(const trainer::ModelSpec& model, int batch, trainer::Precision precision,
                       Handles& h) {
  NormTimes t;
  cuda::NetOptions options;
  options.cudnn_autotune = true;
  auto net = cuda::Net::Create(model, batch, precision, 0.0f, /*tf32=*/true, h.stream, h.blas,
                               h.dnn, options);
  if (!net.ok()) {
    t.why = net.status().message();
    return t;
  }
  double cudnn = 0, ours = 0;
  for (size_t i = 0; i < model.layers.size(); ++i) {
    if (model.layers[i].kind != trainer::LayerKind::kBatchNorm) continue;
    ++t.layers;
    double a = 0, b = 0;
    bool ours_runs = false;
    if (!(*net)->NormTimes(static_cast<int>(i), &a, &b, &ours_runs)) continue;
    ++t.timed;
    cudnn += a;
    ours += b;
    t.ours_layers += ours_runs;
  }
  if (t.timed > 0) {
    t.cudnn = cudnn;
    t.ours = ours;
  } else {
    t.why = (*net)->batch_norm_note().empty() ? "no layer timed" : (*net)->batch_norm_note();
  }
  return t;
}

// Milliseconds of the model's forward and backward alone at `batch` rows (no optimizer, no
// input pipeline; zeros in), captured once in a CUDA graph and replayed, for a Net made with
// `options`; -1 on failure. Set side by side, they show what the fused passes bring.
double NetStepMs(const trainer::ModelSpec& model, int batch, trainer::Precision precision,
                 const cuda::NetOptions& options, Handles& h) {
  auto made = cuda::Net::Create(model, batch, precision, 0.0f, /*tf32=*/true, h.stream, h.blas,
                                h.dnn, options);
  if (!made.ok()) return -1;
  cuda::Net& net = **made;
  const size_t in_bytes = static_cast<size_t>(batch) * model.input.size() * sizeof(float);
  if (cudaMemsetAsync(net.x(0), 0, in_bytes, h.stream) != cudaSuccess ||
      cudaMemsetAsync(net.y(0), 0, static_cast<size_t>(batch) * sizeof(int32_t), h.stream) !=
          cudaSuccess) {
    return -1;
  }
  auto step = [&] {
    return net.ForwardLoss(0, batch, 1.0f / batch, nullptr, 0, 0, false).ok() &&
           net.Backward(0, batch, false, nullptr).ok();
  };
  if (!step() || cudaStreamSynchronize(h.stream) != cudaSuccess) return -1;  // plans made here
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool ok = cudaStreamBeginCapture(h.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  const bool stepped = ok && step();
  ok = ok && cudaStreamEndCapture(h.stream, &graph) == cudaSuccess && stepped &&
       cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  const double ms =
      ok ? TimeMs(h.stream, [&] { return cudaGraphLaunch(exec, h.stream) == cudaSuccess; }) : -1;
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  // A failed capture leaves its error as the thread's last: clear it, or the next check of a
  // launch (in the next probe or case) would report it.
  if (ms < 0) (void)cudaGetLastError();
  return ms;
}

// Prints the share of a `step_ms` step that the CNN's convolutions take (in `precision`, the
// faster run's), batch norm's through cuDNN and through our kernels (NetNormTimes), and the
// net's step with and without its fused passes (NetStepMs); the count of figures missing.
int PrintCnnShares(const TrainOptions& o, trainer::Precision precision, double step_ms) {
  int missing = 0;
  double first_cudnn = -1, first_direct = -1;
  const double conv_ms = ConvMsPerStep(o, precision, &first_cudnn, &first_direct);
  if (conv_ms > 0) {
    std::printf("  convolutions (%s): %.3f ms of a %.3f ms step, %.0f%%\n",
                precision == trainer::Precision::kBf16 ? "bf16" : "fp32, TF32", conv_ms, step_ms,
                100 * conv_ms / step_ms);
  } else {
    std::printf("  convolutions: could not be timed\n");
    ++missing;
  }
  if (first_direct > 0) {
    std::printf(
        "  the first convolution (forward + weight gradient): ours, direct, %.3f ms; cuDNN's "
        "%.3f ms (%.2fx ours)\n",
        first_direct, first_cudnn, first_cudnn / first_direct);
  }
  sweep::Result<trainer::ModelSpec> model = trainer::BuildModel(o, {1, 28, 28}, 10);
  Handles h;
  if (!model.ok() || !h.status.ok()) {
    std::printf("  batch norm and the net's step: not timed: %s\n",
                model.ok() ? h.status.message().c_str() : model.status().message().c_str());
    return missing + 2;
  }
  const char* name = precision == trainer::Precision::kBf16 ? "bf16" : "fp32";
  const NormTimes bn = NetNormTimes(*model, o.batch_size, precision, h);
  if (bn.timed > 0) {
    std::printf(
        "  batch norm as the net runs it (%s, training pass + backward, %d of %d layers "
        "timed): ours %.3f ms, cuDNN %.3f ms (%.2fx ours); ours runs %d of them\n",
        name, bn.timed, bn.layers, bn.ours, bn.cudnn, bn.ours / bn.cudnn, bn.ours_layers);
  } else {
    std::printf("  batch norm: not timed: %s\n", bn.why.empty() ? "a call failed" : bn.why.c_str());
    ++missing;
  }
  // The same model's step three ways, each with the convolution plans cuDNN's heuristics rank
  // first (no cudnn_autotune, so that the plans are the same in all three): as the trainer runs
  // it without autotune (fused passes, our batch norm after a convolution in bf16 / fp16,
  // cuDNN's elsewhere), with every pass on its own and cuDNN's batch norm where it has an
  // engine (as before the fusions), and with every pass on its own but our batch norm (the
  // fusions' share alone).
  // And fused, with the first convolution through cuDNN (what the direct kernels bring).
  cuda::NetOptions fused, apart, apart_ours, stem_cudnn;
  apart.fuse = apart_ours.fuse = false;
  apart_ours.ours_norm_only = true;
  stem_cudnn.direct_conv = false;
  const double a = NetStepMs(*model, o.batch_size, precision, fused, h);
  const double b = NetStepMs(*model, o.batch_size, precision, apart, h);
  const double c = NetStepMs(*model, o.batch_size, precision, apart_ours, h);
  const double d = NetStepMs(*model, o.batch_size, precision, stem_cudnn, h);
  if (a > 0 && b > 0 && c > 0 && d > 0) {
    std::printf(
        "  the net's step alone (%s, forward + backward, one CUDA graph): fused %.3f ms; passes "
        "apart with cuDNN's batch norm %.3f ms (%.2fx fused), with ours %.3f ms (%.2fx); fused "
        "with the first convolution through cuDNN %.3f ms (%.2fx)\n",
        name, a, b, b / a, c, c / a, d, d / a);
  } else {
    std::printf("  the net's step alone: could not be timed\n");
    ++missing;
  }
  return missing;
}

std::vector<Case> ParseCases(const std::string& text) {
  std::vector<Case> cases;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ' ');) {
    Case c;
    if (item.rfind("mlp/", 0) == 0) {
      c.mlp = true;
      item = item.substr(4);
    }
    const size_t colon = item.find(':');
    if (colon == std::string::npos) continue;
    std::stringstream ch(item.substr(0, colon));
    for (std::string v; std::getline(ch, v, ',');) c.channels.push_back(std::atoi(v.c_str()));
    c.batch = std::atoi(item.c_str() + colon + 1);
    if (const size_t more = item.find(':', colon + 1); more != std::string::npos) {
      c.variants = item.substr(more + 1);
      std::replace(c.variants.begin(), c.variants.end(), '/', ',');
    }
    if (!c.channels.empty() && c.batch > 0) cases.push_back(c);
  }
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string script = fs::path(SWEEP_SOURCE_DIR) / "bench/gpu/torch_cnn_gpu.py";
  std::string python = "python3", variants = "eager,graph,compile,max-autotune";
  std::string cases_text =
      "32,64:256 32,64:1024 64,128,256:256 64,128,256:1024 mlp/256,128:256 mlp/256,128:1024";
  int epochs = 3, torch_timeout = 0, deadline = 0;
  bool skip_torch = false, profile = false;
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
    } else if (a == "--deadline") {
      deadline = std::max(0, std::atoi(next().c_str()));
    } else if (a == "--torch-timeout") {
      torch_timeout = std::max(0, std::atoi(next().c_str()));
    } else if (a == "--skip-torch") {
      skip_torch = true;
    } else if (a == "--profile") {
      profile = true;
    } else {
      std::fprintf(stderr,
                   "usage: cnn_gpu_bench [--data DIR] [--epochs N] [--torch SCRIPT] "
                   "[--python PYTHON] [--variants LIST] [--torch-timeout S] [--deadline S] "
                   "[--skip-torch] [--profile] "
                   "[--cases 'CHANNELS:BATCH[:V1/V2] mlp/HIDDEN:BATCH ...']\n");
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
  const auto start = std::chrono::steady_clock::now();
  // Seconds left of --deadline (a large number without one).
  const auto left = [&] {
    const double spent =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return deadline > 0 ? static_cast<int>(deadline - spent) : 1 << 30;
  };
  for (const Case& c : ParseCases(cases_text)) {
    if (left() < 30) {
      std::printf("\n== %s: skipped, %d s left of --deadline ==\n", c.Name().c_str(), left());
      ++missing;
      continue;
    }
    std::printf("\n== %s, %d epochs (the first is warm-up) ==\n", c.Name().c_str(), epochs);
    std::fflush(stdout);
    const TrainOptions o = Options(data, c, epochs);
    TrainOptions o16 = o;
    o16.precision = "bf16";
    // Under a profiler: our bf16 step with CUDA graphs alone, so that its kernels are easy to
    // pick out of the launches (no fp32 run, no run without graphs, no shares, no torch).
    if (profile) {
      const OursRun run = RunOurs(o16);
      std::printf("  ours (bf16): %s\n", run.ok ? "ran" : run.error.c_str());
      missing += !run.ok;
      continue;
    }
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
    if (!c.mlp) {
      missing +=
          PrintCnnShares(o, &ours == &bf16 ? trainer::Precision::kBf16 : trainer::Precision::kFp32,
                         1e3 * c.batch / ours.samples_per_s);
    }
    if (skip_torch) continue;
    // Torch gets what is left, less a margin for the cases after it to be reported.
    int limit = torch_timeout;
    if (deadline > 0) limit = std::max(1, limit > 0 ? std::min(limit, left() - 10) : left() - 10);
    const double torch =
        RunTorch(python, script, data, c, c.variants.empty() ? variants : c.variants, limit);
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
