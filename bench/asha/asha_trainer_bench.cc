// ASHA vs random search on the real trainer: the same sampler seed and search space (an MLP on
// a 10,000-image subset of Fashion-MNIST), run through `sweep run`, compared on the best
// val_acc found and the epochs spent. The target: ASHA within 0.005 of random search's best
// (or better) while spending at most one third of its epochs.
//
// Usage: asha_trainer_bench [--trials N] [--asha-trials M] [--epochs E] [--samples S]
//                           [--seeds 1,2,...] [--dataset DIR] [--search random|tpe]
//                           [--space wide|quickstart] [--keep DIR] [--bootstrap N]
// --search tpe: the early-stopping arm proposes its trials by TPE, which learns from the rungs.
// --space wide (the default): a wider space (lr, momentum, batch size, hidden sizes, activation)
// on a --samples subset (10,000). --space quickstart: configs/quickstart.toml's own space and
// trainer section, on the whole training set unless --samples is given; its 6,000 validation
// images make val_acc less noisy than the subset's 1,000.
// --keep DIR: the sweeps' database is left there as bench.db (bench/asha/asha_replay.py reads
// it); by default it is removed.
// --bootstrap N: the ASHA arm's early_stopping.bootstrap_count (the first N trials to reach a
// rung stop there; default 0).
// ASHA may be given more trials than random search (--asha-trials): spending the saved epochs
// on more candidates is what early stopping is for; the epoch ratio is reported either way.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <toml++/toml.h>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Outcome {
  double best = 0;     // best val_acc among completed trials
  double epochs = 0;   // epochs spent by all trials
  double seconds = 0;  // wall time of the sweep
  int trials = 0, pruned = 0;
};

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool RunSweep(const fs::path& dir, const std::string& name, const std::string& config,
              Outcome* out) {
  fs::path cfg = dir / (name + ".toml");
  std::ofstream(cfg) << config;
  std::string run = std::string("'") + SWEEP_BINARY + "' run '" + cfg.string() + "' --db '" +
                    (dir / "bench.db").string() + "' > /dev/null 2> '" +
                    (dir / "log.txt").string() + "'";
  auto t0 = std::chrono::steady_clock::now();
  int rc = std::system(run.c_str());
  out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
    std::fprintf(stderr, "sweep run %s failed:\n%s\n", name.c_str(),
                 Slurp(dir / "log.txt").c_str());
    return false;
  }
  std::string query = std::string("'") + SWEEP_BINARY + "' trials " + name + " --json --db '" +
                      (dir / "bench.db").string() + "' > '" + (dir / "trials.json").string() + "'";
  if (std::system(query.c_str()) != 0) return false;
  json trials = json::parse(Slurp(dir / "trials.json"));
  for (const auto& t : trials) {
    ++out->trials;
    out->epochs += t["epochs"].get<double>();
    if (t["status"] == "pruned") ++out->pruned;
    if (t["status"] == "completed" && t["metrics"].contains("val_acc")) {
      out->best = std::max(out->best, t["metrics"]["val_acc"].get<double>());
    }
  }
  return true;
}

// bootstrap: early_stopping.bootstrap_count (the first trials at each rung stop there).
void AddEarlyStopping(std::ostringstream& c, int bootstrap) {
  c << "[early_stopping]\nalgorithm = \"asha\"\nmin_resource = 1\nreduction_factor = 3\n";
  if (bootstrap > 0) c << "bootstrap_count = " << bootstrap << "\n";
}

std::string Config(const std::string& name, int trials, int epochs, int samples, int seed,
                   const std::string& dataset, bool asha, int bootstrap,
                   const std::string& search = "random") {
  std::ostringstream c;
  c << "[sweep]\nname = \"" << name
    << "\"\nmetric = \"val_acc\"\nmode = \"max\"\nmax_trials = " << trials << "\nseed = " << seed
    << "\n[search]\nalgorithm = \"" << search << "\"\n[parameters]\n"
    << "lr = { distribution = \"log_uniform\", min = 0.002, max = 0.5 }\n"
    << "momentum = { distribution = \"uniform\", min = 0.5, max = 0.98 }\n"
    << "batch_size = { values = [32, 64, 128, 256] }\n"
    << "hidden = { values = [[64], [256], [256, 128], [512, 256]] }\n"
    << "activation = { values = [\"relu\", \"tanh\"] }\n"
    << "epochs = " << epochs << "\n[trainer]\ndataset = \"" << dataset
    << "\"\nmax_train_samples = " << samples << "\nvalidation_fraction = 0.1\n";
  if (asha) AddEarlyStopping(c, bootstrap);
  return c.str();
}

// configs/quickstart.toml with the bench's name, trials, seed, epochs, search and dataset; its
// parameters and trainer keys as they are. samples 0: the whole training set.
std::string QuickstartConfig(const toml::table& quickstart, const std::string& name, int trials,
                             int epochs, int samples, int seed, const std::string& dataset,
                             bool asha, int bootstrap, const std::string& search = "random") {
  toml::table config = quickstart;
  auto* sweep = config["sweep"].as_table();
  sweep->insert_or_assign("name", name);
  sweep->insert_or_assign("max_trials", trials);
  sweep->insert_or_assign("seed", seed);
  config["search"].as_table()->insert_or_assign("algorithm", search);
  config["parameters"].as_table()->insert_or_assign("epochs", epochs);
  auto* trainer = config["trainer"].as_table();
  trainer->insert_or_assign("dataset", dataset);
  if (samples > 0) trainer->insert_or_assign("max_train_samples", samples);
  std::ostringstream c;
  c << config << "\n";
  if (asha) AddEarlyStopping(c, bootstrap);
  return c.str();
}

}  // namespace

int main(int argc, char** argv) {
  int trials = 27, asha_trials = 27, epochs = 27, samples = -1, bootstrap = 0;
  std::vector<int> seeds = {1};
  std::string dataset = "/usr/share/datasets/fashion-mnist";
  std::string search = "random", space = "wide", keep;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--trials") {
      trials = std::stoi(v);
    } else if (a == "--asha-trials") {
      asha_trials = std::stoi(v);
    } else if (a == "--epochs") {
      epochs = std::stoi(v);
    } else if (a == "--samples") {
      samples = std::stoi(v);
    } else if (a == "--search" && (v == "random" || v == "tpe")) {
      search = v;
    } else if (a == "--space" && (v == "wide" || v == "quickstart")) {
      space = v;
    } else if (a == "--bootstrap") {
      bootstrap = std::stoi(v);
    } else if (a == "--keep") {
      keep = v;
    } else if (a == "--dataset") {
      dataset = v;
    } else if (a == "--seeds") {
      seeds.clear();
      std::stringstream ss(v);
      for (std::string s; std::getline(ss, s, ',');) seeds.push_back(std::stoi(s));
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (!fs::exists(dataset)) {
    std::fprintf(stderr, "%s not found (Debian's dataset-fashion-mnist)\n", dataset.c_str());
    return 1;
  }
  const bool quickstart = space == "quickstart";
  if (samples < 0) samples = quickstart ? 0 : 10000;
  toml::table quickstart_config;
  if (quickstart) {
    const fs::path path = fs::path(SWEEP_SOURCE_DIR) / "configs" / "quickstart.toml";
    try {
      quickstart_config = toml::parse_file(path.string());
    } catch (const toml::parse_error& e) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), e.what());
      return 1;
    }
  }
  auto config = [&](const std::string& name, int n, int seed, bool asha) {
    const std::string algorithm = asha ? search : "random";
    return quickstart ? QuickstartConfig(quickstart_config, name, n, epochs, samples, seed, dataset,
                                         asha, bootstrap, algorithm)
                      : Config(name, n, epochs, samples, seed, dataset, asha, bootstrap, algorithm);
  };
  char tmpl[] = "/tmp/sweep-asha-bench-XXXXXX";
  fs::path dir = ::mkdtemp(tmpl);
  const std::string images = samples > 0 ? std::to_string(samples) : std::string("all");
  std::string rungs;  // 1, 3, 9, ... below the last epoch
  for (int r = 1; r < epochs; r *= 3) rungs += (rungs.empty() ? "" : ", ") + std::to_string(r);
  std::printf(
      "ASHA vs random search: Fashion-MNIST MLP, %s space, %s training images, up to %d "
      "epochs, random %d trials, ASHA %d trials proposed by %s search (eta 3, rungs at %s, "
      "bootstrap_count %d)\n",
      space.c_str(), images.c_str(), epochs, trials, asha_trials, search.c_str(), rungs.c_str(),
      bootstrap);
  std::printf("%-5s %-10s %7s %7s %9s %8s %8s\n", "seed", "search", "trials", "pruned", "epochs",
              "best", "seconds");
  int met = 0;
  for (int seed : seeds) {
    Outcome random, asha;
    std::string r = "random" + std::to_string(seed), s = "asha" + std::to_string(seed);
    if (!RunSweep(dir, r, config(r, trials, seed, false), &random) ||
        !RunSweep(dir, s, config(s, asha_trials, seed, true), &asha)) {
      return 1;
    }
    for (auto [label, o] : {std::pair<const char*, Outcome*>{"random", &random}, {"asha", &asha}}) {
      std::printf("%-5d %-10s %7d %7d %9.0f %8.4f %8.1f\n", seed, label, o->trials, o->pruned,
                  o->epochs, o->best, o->seconds);
    }
    double gap = random.best - asha.best;
    double ratio = asha.epochs / random.epochs;
    bool ok = gap <= 0.005 && ratio <= 1.0 / 3.0;
    met += ok;
    std::printf(
        "      asha - random best = %+.4f (target >= -0.005), epochs ratio = %.3f "
        "(target <= 0.333): %s\n",
        -gap, ratio, ok ? "met" : "NOT met");
    std::fflush(stdout);
  }
  std::printf("summary: target met on %d of %zu seed(s)\n", met, seeds.size());
  if (!keep.empty()) {
    std::error_code ec;
    fs::create_directories(keep, ec);
    fs::copy_file(dir / "bench.db", fs::path(keep) / "bench.db",
                  fs::copy_options::overwrite_existing, ec);
    if (ec) {
      std::fprintf(stderr, "cannot keep the database in %s: %s\n", keep.c_str(),
                   ec.message().c_str());
    } else {
      std::printf("kept %s\n", (fs::path(keep) / "bench.db").c_str());
    }
  }
  fs::remove_all(dir);
  return 0;
}
