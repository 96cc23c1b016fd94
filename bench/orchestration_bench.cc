// Orchestration overhead: function trials per second through the whole path (the `sweep run`
// process, its worker processes, SQLite), at 1,000 and 10,000 trials, beside Optuna's rate on a
// no-op objective with SQLite storage (the peer script), measured in the same run.
//
// Usage: orchestration_bench [--peers DIR] [--skip-peer] [--peer-all-sizes] [--sizes 1000,10000]
//                            [--repeat N] [--baseline SWEEP]
// --baseline: another build's sweep binary, run in turn with this one (round by round), so
// that a change to the coordinator is measured against what it replaced in one run.
// Optuna runs at the first size only unless --peer-all-sizes (10,000 Optuna trials take minutes).
// Prints one line per measurement and a summary with the ratios the targets are about:
//   ours_vs_optuna = our trials/s at 1,000 / Optuna's trials/s at 1,000   (target >= 100)
//   growth = our per-trial cost at 10,000 / at 1,000                      (target <= 1.5)
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

namespace fs = std::filesystem;

namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int Shell(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// One `sweep run` of n no-op-like function trials; returns wall seconds, or -1.
double RunOurs(const fs::path& dir, int64_t n, int round,
               const std::string& binary = SWEEP_BINARY) {
  std::string name = "noop" + std::to_string(n) + "_" + std::to_string(round) +
                     (binary == SWEEP_BINARY ? "" : "_baseline");
  fs::path cfg = dir / (name + ".toml");
  std::ofstream(cfg) << "[sweep]\nname = \"" << name << "\"\nmax_trials = " << n
                     << "\nseed = 1\n[trial]\nkind = \"function\"\n[function]\nname = "
                        "\"branin\"\n[parameters]\nx1 = { distribution = \"uniform\", min = -5, "
                        "max = 10 }\nx2 = { distribution = \"uniform\", min = 0, max = 15 }\n";
  fs::path db = dir / (name + ".db");
  std::string cmd = "'" + binary + "' run '" + cfg.string() + "' --db '" + db.string() +
                    "' > /dev/null 2> '" + (dir / "log.txt").string() + "'";
  double t0 = Seconds();
  int rc = Shell(cmd);
  double t1 = Seconds();
  if (rc != 0) {
    std::fprintf(stderr, "sweep run failed (exit %d); see %s\n", rc, (dir / "log.txt").c_str());
    return -1;
  }
  return t1 - t0;
}

// Runs the peer script; returns its trials_per_s, or -1.
double RunOptuna(const fs::path& peers, const fs::path& dir, int64_t n, std::string* version) {
  fs::path out = dir / "optuna.txt";
  std::string cmd = "/usr/bin/python3 '" + (peers / "optuna_noop.py").string() + "' " +
                    std::to_string(n) + " sqlite random > '" + out.string() + "' 2>&1";
  if (Shell(cmd) != 0) return -1;
  std::ifstream in(out);
  double rate = -1;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("trials_per_s=", 0) == 0) rate = std::stod(line.substr(13));
    if (line.rfind("optuna ", 0) == 0) *version = line.substr(0, line.find(' ', 7));
  }
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  fs::path peers = fs::path(SWEEP_SOURCE_DIR) / ".." / "shared" / "peers";
  bool skip_peer = false;
  bool peer_all_sizes = false;
  std::vector<int64_t> sizes = {1000, 10000};
  int repeat = 3;
  std::string baseline;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--peers" && i + 1 < argc) {
      peers = argv[++i];
    } else if (a == "--skip-peer") {
      skip_peer = true;
    } else if (a == "--peer-all-sizes") {
      peer_all_sizes = true;
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--baseline" && i + 1 < argc) {
      baseline = argv[++i];
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      std::stringstream ss(argv[++i]);
      for (std::string s; std::getline(ss, s, ',');) sizes.push_back(std::stoll(s));
    } else {
      std::fprintf(stderr,
                   "usage: %s [--peers DIR] [--skip-peer] [--peer-all-sizes] [--sizes 1000,10000] "
                   "[--repeat N] [--baseline SWEEP]\n",
                   argv[0]);
      return 2;
    }
  }
  char tmpl[] = "/tmp/sweep-bench-XXXXXX";
  fs::path dir = ::mkdtemp(tmpl);
  std::printf("orchestration overhead: function trials (branin) through sweep run, %ld cores\n",
              sysconf(_SC_NPROCESSORS_ONLN));

  std::map<int64_t, double> per_trial_ms;
  for (int64_t n : sizes) {
    std::vector<double> times, base_times;
    for (int r = 0; r < repeat; ++r) {
      double s = RunOurs(dir, n, r);
      if (s < 0) return 1;
      times.push_back(s);
      if (baseline.empty()) continue;
      s = RunOurs(dir, n, r, baseline);
      if (s < 0) return 1;
      base_times.push_back(s);
    }
    std::sort(times.begin(), times.end());
    double median = times[times.size() / 2];
    per_trial_ms[n] = median * 1000.0 / static_cast<double>(n);
    std::printf(
        "sweep  trials=%-6ld seconds=%.3f (median of %d)  trials_per_s=%.0f  "
        "ms_per_trial=%.4f\n",
        static_cast<long>(n), median, repeat, static_cast<double>(n) / median, per_trial_ms[n]);
    if (!baseline.empty()) {
      std::sort(base_times.begin(), base_times.end());
      const double base = base_times[base_times.size() / 2];
      std::printf(
          "baseline trials=%-6ld seconds=%.3f (median of %d)  trials_per_s=%.0f  "
          "this build / baseline time=%.3f\n",
          static_cast<long>(n), base, repeat, static_cast<double>(n) / base, median / base);
    }
    std::fflush(stdout);
  }

  std::map<int64_t, double> optuna_rate;
  std::string version = "optuna";
  if (!skip_peer) {
    for (int64_t n : sizes) {
      double rate = RunOptuna(peers, dir, n, &version);
      if (rate < 0) {
        std::printf("optuna: could not run %s (python3-optuna installed?)\n",
                    (peers / "optuna_noop.py").c_str());
        break;
      }
      optuna_rate[n] = rate;
      std::printf("%s storage=sqlite trials=%-6ld trials_per_s=%.1f  ms_per_trial=%.3f\n",
                  version.c_str(), static_cast<long>(n), rate, 1000.0 / rate);
      std::fflush(stdout);
      if (!peer_all_sizes) break;
    }
  }
  std::printf("summary:\n");
  for (auto [n, rate] : optuna_rate) {
    double ours = 1000.0 / per_trial_ms[n];
    std::printf("  ours_vs_optuna=%.0fx at %ld trials (target >= 100x)\n", ours / rate,
                static_cast<long>(n));
  }
  if (sizes.size() >= 2) {
    std::printf("  per_trial_cost_growth=%.2f (%ld vs %ld trials; target <= 1.5)\n",
                per_trial_ms[sizes.back()] / per_trial_ms[sizes.front()],
                static_cast<long>(sizes.back()), static_cast<long>(sizes.front()));
  }
  fs::remove_all(dir);
  return 0;
}
