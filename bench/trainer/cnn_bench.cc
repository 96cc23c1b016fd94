// The embedded trainer's CNN on Fashion-MNIST against PyTorch, measured in one run:
//   1. this machine's OpenBLAS SGEMM (2048^3, 2 threads): the GFLOP/s the convolutions could
//      reach through BLAS;
//   2. ours: the peer's CNN (two 3x3 conv + BN + ReLU per stage, 2x2 max pool, hidden [128],
//      batch 128, SGD nesterov momentum 0.9, wd 5e-4, cosine, lr 0.05), channels 16,32 and 32,64,
//      2 replicas on 2 threads, with the direct convolution kernels (the default) and with
//      im2col + SGEMM everywhere; samples/s and the GFLOP/s of its convolutions and GEMMs;
//   3. PyTorch (the peer script torch_cnn_fmnist.py) on 2 threads with --channels-last and
//      without, and the ratios ours / PyTorch.
//
// Usage: cnn_bench [--peers DIR] [--skip-peer] [--epochs N] [--torch-epochs N]
//                  [--max-train N] [--skip-gemm-path]
// The machine may be shared: compare ratios of runs made close in time, not absolute figures.
#include <cblas.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cpu/conv_ops.h"
#include "model.h"
#include "train_internal.h"
#include "trainer/trainer.h"

namespace fs = std::filesystem;
using sweep::trainer::ApplyOption;
using sweep::trainer::EpochReport;
using sweep::trainer::TrainOptions;
namespace cpu = sweep::trainer::cpu;

namespace {

constexpr const char* kDataset = "/usr/share/datasets/fashion-mnist";

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// GFLOP/s of an n x n x n SGEMM on `threads` OpenBLAS threads, the best of a few calls.
double SgemmGflops(int n, int threads) {
  openblas_set_num_threads(threads);
  const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n);
  std::vector<float> a(nn, 0.5f), b(nn, 0.25f), c(nn, 0.0f);
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    const double t0 = Now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    best = std::min(best, Now() - t0);
  }
  return 2.0 * n * n * n / best / 1e9;
}

TrainOptions PeerCnn(const std::vector<int>& channels, int epochs, int64_t max_train) {
  TrainOptions o;
  (void)ApplyOption(&o, "dataset", kDataset);
  o.model = "cnn";
  o.channels = channels;
  o.hidden = {128};
  o.optimizer = "sgd";
  o.lr = 0.05;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 5e-4;
  o.lr_schedule = "cosine";
  o.batch_size = 128;
  o.epochs = epochs;
  o.max_train_samples = max_train;
  o.threads = 2;
  o.replicas = 2;  // what `sweep train --threads 2` runs
  o.backend = "cpu";
  // The peer's layers start as PyTorch's do; from He's larger weights (our default) batch norm
  // learns slower at first, and one epoch's test_acc would not compare.
  o.init = "pytorch";
  return o;
}

// Multiply-adds of one sample's forward pass, convolutions and linear layers apart.
struct Macs {
  double conv = 0, linear = 0;
};

Macs ModelMacs(const TrainOptions& o) {
  Macs m;
  auto model = sweep::trainer::BuildModel(o, sweep::trainer::TensorShape{1, 28, 28}, 10);
  if (!model.ok()) return m;
  const double all = model->ForwardMacs();
  for (const auto& l : model->layers) {
    if (l.kind == sweep::trainer::LayerKind::kLinear) {
      m.linear += static_cast<double>(l.in_shape.size()) * l.out;
    }
  }
  m.conv = all - m.linear;
  return m;
}

struct OursRun {
  double samples_per_s = 0;  // over all epochs' training steps
  double test_acc = -1;
  bool ok = false;
};

OursRun RunOurs(const TrainOptions& o) {
  OursRun run;
  double samples = 0, seconds = 0;
  int64_t steps = 0;
  auto r = sweep::trainer::Train(o, [&](const EpochReport& e) {
    if (e.samples_per_s > 0) {
      const double n = static_cast<double>(e.step - steps) * o.batch_size;
      samples += n;
      seconds += n / e.samples_per_s;
    }
    steps = e.step;
    return true;
  });
  if (!r.ok()) {
    std::printf("  ours: %s\n", r.status().message().c_str());
    return run;
  }
  run.ok = seconds > 0;
  run.samples_per_s = run.ok ? samples / seconds : 0;
  run.test_acc = r->test_acc.value_or(-1);
  return run;
}

struct TorchRun {
  double samples_per_s = -1;
  double test_acc = -1;
  std::string version;
};

TorchRun RunTorch(const fs::path& script, const std::string& channels, int epochs,
                  int64_t max_train, bool channels_last) {
  TorchRun run;
  const std::string cmd = "/usr/bin/python3 '" + script.string() + "' " + std::to_string(epochs) +
                          " 128 " + channels + " 128 0.05 2 --max-train " +
                          std::to_string(max_train) + (channels_last ? " --channels-last" : "") +
                          " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return run;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), pipe.get()) != nullptr) {
    const std::string line = buf.data();
    if (line.rfind("samples_per_s=", 0) == 0) run.samples_per_s = std::atof(line.c_str() + 14);
    if (line.rfind("test_accuracy=", 0) == 0) run.test_acc = std::atof(line.c_str() + 14);
    if (line.rfind("torch ", 0) == 0) run.version = line.substr(0, line.find(' ', 6));
  }
  return run;
}

bool HaveTorch() { return std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0; }

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  fs::path peers = fs::path(SWEEP_SOURCE_DIR) / ".." / "shared" / "peers";
  bool skip_peer = false, skip_gemm_path = false;
  int epochs = 1, torch_epochs = 1;
  int64_t max_train = 12800;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--peers") {
      peers = next();
    } else if (a == "--skip-peer") {
      skip_peer = true;
    } else if (a == "--skip-gemm-path") {
      skip_gemm_path = true;
    } else if (a == "--epochs") {
      epochs = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--torch-epochs") {
      torch_epochs = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--max-train") {
      max_train = std::max(128, std::atoi(next().c_str()));
    } else {
      std::fprintf(stderr,
                   "usage: %s [--peers DIR] [--skip-peer] [--epochs N] [--torch-epochs N] "
                   "[--max-train N] [--skip-gemm-path]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!fs::exists(fs::path(kDataset) / "train-images-idx3-ubyte.gz")) {
    std::fprintf(stderr, "Fashion-MNIST is not installed at %s\n", kDataset);
    return 1;
  }
  const fs::path script = peers / "torch_cnn_fmnist.py";
  if (!skip_peer && (!fs::exists(script) || !HaveTorch())) {
    std::printf("PyTorch: skipped (%s missing or /usr/bin/python3 lacks torch)\n", script.c_str());
    skip_peer = true;
  }
  const double t_start = Now();
  std::printf("load average at start: ");
  std::fflush(stdout);
  (void)std::system("cut -d' ' -f1-3 /proc/loadavg");

  const double sgemm = SgemmGflops(2048, 2);
  std::printf("OpenBLAS SGEMM 2048x2048x2048, 2 threads: %.1f GFLOP/s\n", sgemm);
  std::printf(
      "CNN: 2x(conv3x3+BN+ReLU) + maxpool 2x2 per stage, hidden [128], batch 128, SGD nesterov "
      "0.9 wd 5e-4 cosine, lr 0.05, %lld samples; ours %d epoch(s), 2 replicas x 1 thread; "
      "PyTorch %d epoch(s), 2 threads\n\n",
      static_cast<long long>(max_train), epochs, torch_epochs);
  std::fflush(stdout);

  struct Row {
    std::string what;
    double sps = -1, acc = -1, gflops = -1;
  };
  std::vector<std::vector<Row>> tables;
  const std::vector<std::vector<int>> configs = {{16, 32}, {32, 64}};
  for (const auto& channels : configs) {
    std::vector<Row> rows;
    const TrainOptions o = PeerCnn(channels, epochs, max_train);
    const Macs macs = ModelMacs(o);
    // Forward, input gradients and weight gradients: three times the forward's multiply-adds
    // (the first convolution has no input gradient: a slight overcount), 2 FLOPs each.
    const double flops_per_sample = 6.0 * (macs.conv + macs.linear);
    std::printf("channels %s: %.2f MMAC forward per sample (conv %.2f, linear %.2f)\n",
                Join(channels).c_str(), (macs.conv + macs.linear) / 1e6, macs.conv / 1e6,
                macs.linear / 1e6);
    std::vector<std::pair<std::string, cpu::ConvImpl>> impls = {
        {"ours, direct conv kernels", cpu::ConvImpl::kAuto}};
    if (!skip_gemm_path) impls.emplace_back("ours, im2col + SGEMM", cpu::ConvImpl::kGemm);
    for (const auto& [name, impl] : impls) {
      cpu::set_conv_impl(impl);
      const OursRun r = RunOurs(o);
      if (r.ok)
        rows.push_back(
            {name, r.samples_per_s, r.test_acc, r.samples_per_s * flops_per_sample / 1e9});
      std::printf("  %-28s samples_per_s %7.0f\n", name.c_str(), r.samples_per_s);
      std::fflush(stdout);
    }
    cpu::set_conv_impl(cpu::ConvImpl::kAuto);
    if (!skip_peer) {
      for (const bool cl : {true, false}) {
        const TorchRun t = RunTorch(script, Join(channels), torch_epochs, max_train, cl);
        const std::string name = (t.version.empty() ? std::string("torch") : t.version) +
                                 (cl ? " channels-last" : " NCHW");
        rows.push_back({name, t.samples_per_s, t.test_acc, -1});
        std::printf("  %-28s samples_per_s %7.0f\n", name.c_str(), t.samples_per_s);
        std::fflush(stdout);
      }
    }
    tables.push_back(rows);
  }

  std::printf("\n%-10s %-28s %10s %9s %9s %8s %12s %12s\n", "channels", "run", "samples/s",
              "test_acc", "GFLOP/s", "%SGEMM", "vs torch CL", "vs torch NCHW");
  for (size_t t = 0; t < tables.size(); ++t) {
    double torch_cl = -1, torch_nchw = -1;
    for (const Row& r : tables[t]) {
      if (r.what.find("channels-last") != std::string::npos) torch_cl = r.sps;
      if (r.what.find("NCHW") != std::string::npos) torch_nchw = r.sps;
    }
    for (const Row& r : tables[t]) {
      std::printf("%-10s %-28s %10.0f %9.4f", Join(configs[t]).c_str(), r.what.c_str(), r.sps,
                  r.acc);
      if (r.gflops > 0) {
        std::printf(" %9.1f %7.1f%%", r.gflops, 100.0 * r.gflops / sgemm);
      } else {
        std::printf(" %9s %8s", "-", "-");
      }
      if (r.gflops > 0 && torch_cl > 0) {
        std::printf(" %11.2fx %11.2fx", r.sps / torch_cl, r.sps / torch_nchw);
      }
      std::printf("\n");
    }
  }
  std::printf(
      "(GFLOP/s: 6 x forward multiply-adds of the convolutions and linear layers per sample; "
      "batch norm, pooling and activations are not counted. %%SGEMM: of the 2-thread SGEMM "
      "above. Ours trains %d epoch(s) of %lld samples, seed 0, from PyTorch's initialisation; "
      "after one epoch test_acc moves with the seed by about a point; total run %.0f s)\n",
      epochs, static_cast<long long>(max_train), Now() - t_start);
  return 0;
}
