// The embedded trainer on Fashion-MNIST, measured in one run:
//   1. the dataset cache: decoding the IDX files vs mapping the machine-wide cache file;
//   2. speed: the MLP 784-256-128-10, batch 128, SGD momentum 0.9, lr 0.05 (the peer's model),
//      with one replica on 1 or 2 BLAS threads and with 2 replicas, interleaved with PyTorch
//      running the same model on 2 threads (the peer script), medians over --repeat rounds;
//      ratios to PyTorch, our GEMM GFLOP/s and their share of this CPU's fp32 peak, and the
//      all-reduce time per step with 2 replicas;
//   3. quality: a 10-epoch run of the recommended configuration and its test accuracy.
//
// Usage: trainer_bench [--peers DIR] [--skip-peer] [--epochs N] [--torch-epochs N]
//                      [--repeat N] [--quality-epochs N] [--skip-quality] [--skip-speed]
//                      [--set KEY=VALUE]...   (overrides for the quality run; VALUE is JSON,
//                                              or a bare string)
// The machine is shared: absolute figures move with its load, so compare the ratios, which come
// from runs interleaved in time.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "data.h"
#include "train_internal.h"
#include "trainer/trainer.h"

namespace fs = std::filesystem;
using sweep::trainer::ApplyOption;
using sweep::trainer::CommStats;
using sweep::trainer::EpochReport;
using sweep::trainer::TrainOptions;

namespace {

constexpr const char* kDataset = "/usr/share/datasets/fashion-mnist";
// GEMM FLOPs per training sample of 784-256-128-10: forward 2*sum(in*out), the weight
// gradients as much again, and the input gradients of every layer but the first.
constexpr double kFlopsPerSample =
    2.0 * (784 * 256 + 256 * 128 + 128 * 10) * 2 + 2.0 * (256 * 128 + 128 * 10);

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The CPU's clock as the OS reports it, MHz: cpufreq's maximum when there is one, else the
// highest "cpu MHz" in /proc/cpuinfo (under a hypervisor, often the nominal clock).
double CpuMhz(std::string* how) {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  if (f >> khz && khz > 0) {
    *how = "cpufreq cpuinfo_max_freq";
    return khz / 1000.0;
  }
  std::ifstream info("/proc/cpuinfo");
  double best = 0;
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("cpu MHz", 0) == 0) {
      best = std::max(best, std::atof(line.substr(line.find(':') + 1).c_str()));
    }
  }
  *how = "/proc/cpuinfo cpu MHz";
  return best;
}

TrainOptions PeerModel() {
  TrainOptions o;
  (void)ApplyOption(&o, "dataset", kDataset);
  o.hidden = {256, 128};
  o.batch_size = 128;
  o.optimizer = "sgd";
  o.lr = 0.05;
  o.momentum = 0.9;
  // This bench measures the CPU backend against PyTorch on the CPU; on a machine with a GPU,
  // bench/gpu/gpu_bench measures that one.
  o.backend = "cpu";
  return o;
}

// The configuration we recommend for Fashion-MNIST in 10 epochs (see the quality section).
TrainOptions Recommended() {
  TrainOptions o = PeerModel();
  o.hidden = {512, 256};
  o.lr = 0.05;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 5e-4;
  o.lr_schedule = "cosine";
  o.warmup_epochs = 1;
  o.dropout = 0;  // helps only in longer runs: 10 epochs do not overfit this MLP much
  o.epochs = 10;
  return o;
}

struct OursRun {
  double samples_per_s = 0;  // over all epochs' training steps
  double exposed_ms_per_step = 0, reduce_ms_per_step = 0;
  double data_wait_s = 0;
  double test_acc = -1;
  bool ok = false;
};

OursRun RunOurs(TrainOptions o, bool print_epochs) {
  OursRun run;
  double samples = 0, seconds = 0;
  int64_t steps = 0;
  CommStats comm;
  auto r = sweep::trainer::TrainWithState(
      o,
      [&](const EpochReport& e) {
        const double n = e.samples_per_s > 0
                             ? static_cast<double>(e.step - steps) * o.batch_size * o.accum_steps
                             : 0;
        samples += n;
        seconds += n / e.samples_per_s;
        steps = e.step;
        run.data_wait_s += e.data_wait_s;
        if (print_epochs) {
          std::printf(
              "  epoch %2d  train_loss %.4f  val_acc %.4f  samples_per_s %.0f  lr %.4g  "
              "data_wait_s %.4f  epoch_s %.2f\n",
              e.epoch, e.train_loss, e.val_acc, e.samples_per_s, e.lr, e.data_wait_s, e.epoch_s);
          std::fflush(stdout);
        }
        return true;
      },
      nullptr, &comm);
  if (!r.ok()) {
    std::printf("  ours: %s\n", r.status().message().c_str());
    return run;
  }
  run.ok = true;
  run.samples_per_s = samples / seconds;
  run.exposed_ms_per_step = 1e3 * comm.exposed_s / static_cast<double>(steps);
  run.reduce_ms_per_step = 1e3 * comm.reduce_s / static_cast<double>(steps);
  run.test_acc = r->test_acc.value_or(-1);
  return run;
}

struct TorchRun {
  double samples_per_s = -1;
  double test_acc = -1;
  std::string version;
};

TorchRun RunTorch(const fs::path& peers, const fs::path& dir, int epochs) {
  TorchRun run;
  const fs::path out = dir / "torch.txt";
  const std::string cmd = "/usr/bin/python3 '" + (peers / "torch_mlp_fmnist.py").string() + "' " +
                          std::to_string(epochs) + " 128 256,128 0.05 2 > '" + out.string() +
                          "' 2>&1";
  const int rc = std::system(cmd.c_str());
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) return run;
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("samples_per_s=", 0) == 0) run.samples_per_s = std::atof(line.c_str() + 14);
    if (line.rfind("test_accuracy=", 0) == 0) run.test_acc = std::atof(line.c_str() + 14);
    if (line.rfind("torch ", 0) == 0) run.version = line.substr(0, line.find(' ', 6));
  }
  return run;
}

void DatasetCache(const fs::path& dir) {
  sweep::trainer::DatasetSpec spec;
  TrainOptions o = PeerModel();
  spec = o.dataset;
  const std::string cache = (dir / "cache").string();
  fs::create_directories(cache);
  sweep::trainer::ClearDatasetCache();
  double t0 = Now();
  auto decoded = sweep::trainer::LoadCached(spec, false, cache);
  const double decode_s = Now() - t0;
  sweep::trainer::ClearDatasetCache();  // as a second process would start
  t0 = Now();
  auto mapped = sweep::trainer::LoadCached(spec, false, cache);
  const double map_s = Now() - t0;
  if (!decoded.ok() || !mapped.ok()) {
    std::printf("dataset cache: failed: %s\n",
                (decoded.ok() ? mapped : decoded).status().message().c_str());
    return;
  }
  std::printf(
      "dataset cache (training set, %lld x %lld): first use decodes and publishes in %.3f s; "
      "a later trial maps it in %.4f s (%.0fx); mapped=%s\n",
      static_cast<long long>((*mapped)->n), static_cast<long long>((*mapped)->dim), decode_s, map_s,
      decode_s / std::max(map_s, 1e-6), (*mapped)->mapped ? "yes" : "no");
}

}  // namespace

int main(int argc, char** argv) {
  fs::path peers = fs::path(SWEEP_SOURCE_DIR) / ".." / "shared" / "peers";
  bool skip_peer = false, skip_quality = false, skip_speed = false;
  int epochs = 3, torch_epochs = 2, repeat = 3, quality_epochs = 10;
  std::vector<std::pair<std::string, std::string>> sets;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--peers") {
      peers = next();
    } else if (a == "--skip-peer") {
      skip_peer = true;
    } else if (a == "--skip-quality") {
      skip_quality = true;
    } else if (a == "--skip-speed") {
      skip_speed = true;
    } else if (a == "--epochs") {
      epochs = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--torch-epochs") {
      torch_epochs = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--repeat") {
      repeat = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--quality-epochs") {
      quality_epochs = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--set") {
      const std::string kv = next();
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "--set %s: expected KEY=VALUE\n", kv.c_str());
        return 2;
      }
      sets.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    } else {
      std::fprintf(stderr,
                   "usage: %s [--peers DIR] [--skip-peer] [--epochs N] [--torch-epochs N] "
                   "[--repeat N] [--quality-epochs N] [--skip-quality] [--skip-speed] "
                   "[--set KEY=VALUE]...\n",
                   argv[0]);
      return 2;
    }
  }
  if (!fs::exists(fs::path(kDataset) / "train-images-idx3-ubyte.gz")) {
    std::fprintf(stderr, "Fashion-MNIST is not installed at %s\n", kDataset);
    return 1;
  }
  char tmpl[] = "/tmp/sweep-trainer-bench-XXXXXX";
  const fs::path dir = ::mkdtemp(tmpl);
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  std::string mhz_how;
  const double mhz = CpuMhz(&mhz_how);
  // Zen/Haswell and later: 2 FMA pipes x 8 fp32 lanes (AVX2) x 2 FLOPs per FMA = 32 per cycle.
  const double peak_gflops = static_cast<double>(cores) * mhz / 1000.0 * 32.0;
  std::printf(
      "machine: %ld cores, %.0f MHz (%s); fp32 peak = %ld cores x %.3f GHz x 32 FLOP/cycle "
      "(AVX2: 2 FMA pipes x 8 lanes x 2) = %.1f GFLOP/s\n",
      cores, mhz, mhz_how.c_str(), cores, mhz / 1000.0, peak_gflops);
  std::printf("load average at start: ");
  std::fflush(stdout);
  std::system("cut -d' ' -f1-3 /proc/loadavg");

  DatasetCache(dir);
  std::fflush(stdout);

  if (!skip_speed) {
    struct Config {
      const char* name;
      int replicas, threads;
      std::vector<OursRun> runs;
    };
    std::vector<Config> configs = {{"R=1, 1 BLAS thread ", 1, 1, {}},
                                   {"R=1, 2 BLAS threads", 1, 2, {}},
                                   {"R=2 replicas       ", 2, 2, {}}};
    std::vector<TorchRun> torch;
    std::printf(
        "\nspeed: MLP 784-256-128-10, batch 128, SGD momentum 0.9, lr 0.05; ours %d epochs, "
        "PyTorch %d, interleaved, %d rounds\n",
        epochs, torch_epochs, repeat);
    for (int round = 0; round < repeat; ++round) {
      for (Config& c : configs) {
        TrainOptions o = PeerModel();
        o.epochs = epochs;
        o.replicas = c.replicas;
        o.threads = c.threads;
        o.cache_dir = (dir / "cache").string();
        c.runs.push_back(RunOurs(o, false));
        std::printf("  round %d  ours %s  samples_per_s %.0f  allreduce exposed %.3f ms/step\n",
                    round + 1, c.name, c.runs.back().samples_per_s,
                    c.runs.back().exposed_ms_per_step);
        std::fflush(stdout);
      }
      if (!skip_peer) {
        torch.push_back(RunTorch(peers, dir, torch_epochs));
        if (torch.back().samples_per_s < 0) {
          std::printf("  PyTorch: could not run %s (python3-torch installed?)\n",
                      (peers / "torch_mlp_fmnist.py").c_str());
          skip_peer = true;
          torch.clear();
        } else {
          std::printf("  round %d  %s threads=2  samples_per_s %.0f\n", round + 1,
                      torch.back().version.c_str(), torch.back().samples_per_s);
        }
        std::fflush(stdout);
      }
    }
    std::vector<double> torch_sps;
    for (const TorchRun& t : torch) torch_sps.push_back(t.samples_per_s);
    const double torch_median = Median(torch_sps);
    std::printf("\nsummary (medians of %d rounds):\n", repeat);
    if (!torch.empty()) {
      std::printf("  %-22s samples_per_s %7.0f  (%d epochs; test_acc %.4f)\n",
                  (torch.front().version + " 2 thr").c_str(), torch_median, torch_epochs,
                  torch.back().test_acc);
    }
    double one_replica = 0;
    bool above_peak = false;
    for (const Config& c : configs) {
      std::vector<double> sps, exposed, reduce;
      for (const OursRun& r : c.runs) {
        if (!r.ok) continue;
        sps.push_back(r.samples_per_s);
        exposed.push_back(r.exposed_ms_per_step);
        reduce.push_back(r.reduce_ms_per_step);
      }
      const double s = Median(sps);
      if (c.replicas == 1 && c.threads == 1) one_replica = s;
      const double gflops = s * kFlopsPerSample / 1e9;
      // Past what the cores it used can do at the reported clock (one thread: 1/cores of it).
      const long used = std::min<long>(cores, std::max(c.replicas, c.threads));
      above_peak = above_peak ||
                   gflops > peak_gflops * static_cast<double>(used) / static_cast<double>(cores);
      std::printf("  ours %s  samples_per_s %7.0f  GFLOP/s %5.1f = %4.1f%% of peak", c.name, s,
                  gflops, 100.0 * gflops / peak_gflops);
      if (torch_median > 0) std::printf("  vs PyTorch %.2fx", s / torch_median);
      if (c.replicas > 1) {
        std::printf("  all-reduce/step: %.3f ms exposed, %.3f ms summing in all; vs R=1 %.2fx",
                    Median(exposed), Median(reduce), s / std::max(one_replica, 1.0));
      }
      std::printf("\n");
    }
    std::printf(
        "  (GFLOP/s counts the GEMMs only: %.3f MFLOP per sample; the peak is for all %ld cores, "
        "so one thread can reach at most %.0f%% of it)\n",
        kFlopsPerSample / 1e6, cores, 100.0 / static_cast<double>(cores));
    if (above_peak && mhz > 0) {
      std::printf(
          "  (a share above what its cores can reach: they ran faster than the %.0f MHz the OS "
          "reports, as a "
          "boost clock under a hypervisor does: the shares overstate how near the true peak it "
          "runs)\n",
          mhz);
    }
    std::fflush(stdout);
  }

  if (!skip_quality) {
    TrainOptions o = Recommended();
    o.epochs = quality_epochs;
    o.replicas = 2;
    o.threads = 2;
    o.cache_dir = (dir / "cache").string();
    for (const auto& [key, text] : sets) {
      nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
      if (value.is_discarded()) value = text;
      const auto s = ApplyOption(&o, key, value);
      if (!s.ok()) {
        std::fprintf(stderr, "--set %s=%s: %s\n", key.c_str(), text.c_str(), s.message().c_str());
        return 2;
      }
    }
    std::printf("\nquality: %d epochs, hidden [", o.epochs);
    for (size_t i = 0; i < o.hidden.size(); ++i) std::printf("%s%d", i ? ", " : "", o.hidden[i]);
    std::printf(
        "], %s lr %g momentum %g nesterov %s weight_decay %g, %s schedule, warmup_epochs %g, "
        "dropout %g, batch %d, replicas %d, seed %llu\n",
        o.optimizer.c_str(), o.lr, o.momentum, o.nesterov ? "true" : "false", o.weight_decay,
        o.lr_schedule.c_str(), o.warmup_epochs, o.dropout, o.batch_size, o.replicas,
        static_cast<unsigned long long>(o.seed));
    std::fflush(stdout);
    const double t0 = Now();
    const OursRun q = RunOurs(o, true);
    if (q.ok) {
      std::printf("  test_acc %.4f (target >= 0.88) in %.1f s\n", q.test_acc, Now() - t0);
    }
  }
  fs::remove_all(dir);
  return 0;
}
