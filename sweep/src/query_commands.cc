// best, trials, status and list: a sweep's trials and counts as tables, JSON or CSV.
// Each opens the store read-only, so it works while the sweep runs.
#include "query_commands.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "manage_commands.h"
#include "output.h"
#include "report/export.h"
#include "store/store.h"
#include "sweep/config.h"
#include "view_commands.h"

namespace sweep {

namespace {

using nlohmann::json;

struct QueryArgs {
  std::string db = "sweeps.db";
  std::string name;
  bool json = false;
  bool csv = false;
};

Result<std::unique_ptr<store::Store>> OpenForQuery(const QueryArgs& a) { return OpenToRead(a.db); }

int CmdBest(const QueryArgs& a, int64_t top) {
  auto st = OpenForQuery(a);
  if (!st.ok()) return Fail(st.status());
  auto sw = FindSweepOrSuggest(**st, a.name);
  if (!sw.ok()) return Fail(sw.status());
  auto trials = (*st)->BestTrials(sw->id, sw->maximize, top);
  if (!trials.ok()) return Fail(trials.status());
  if (a.json) {
    PrintTrialsJson(std::cout, *trials);
  } else if (a.csv) {
    auto all = (*st)->Trials(sw->id, store::TrialQuery{});
    if (!all.ok()) return Fail(all.status());
    report::WriteCsv(std::cout, report::TrialsTable(*trials, *all));
  } else if (trials->empty()) {
    std::cout << "no completed trial with a value of " << sw->metric;
    const bool live = sw->status == store::SweepStatus::kRunning && !CoordinatorGone(a.db, *sw);
    auto counts = (*st)->CountByStatus(sw->id);
    if (!counts.ok()) return Fail(counts.status());
    // Where the trials went, and where to look: waiting helps only a sweep that runs.
    std::string ended;
    for (const auto& [n, what] : {std::pair{counts->failed, "failed"},
                                  {counts->interrupted, "interrupted"},
                                  {counts->pruned, "pruned"}}) {
      if (n > 0) ended += (ended.empty() ? "" : ", ") + std::to_string(n) + " " + what;
    }
    std::cout << (live ? " yet" : "") << (ended.empty() ? "" : " (" + ended + ")");
    if (counts->failed > 0) {
      std::cout << "; their errors: " << SweepCommand("trials", sw->name, a.db, "--status failed");
    } else if (counts->interrupted > 0) {
      std::cout << "; why: " << SweepCommand("trials", sw->name, a.db, "--status interrupted");
    }
    std::cout << "\n";
  } else {
    PrintTrialsTable(std::cout, *trials, sw->metric);
  }
  return kExitOk;
}

int CmdTrials(const QueryArgs& a, const std::string& status, const std::string& sort) {
  auto st = OpenForQuery(a);
  if (!st.ok()) return Fail(st.status());
  auto sw = FindSweepOrSuggest(**st, a.name);
  if (!sw.ok()) return Fail(sw.status());
  store::TrialQuery q;
  if (!status.empty()) {
    q.status = store::ParseTrialStatus(status);
    if (!q.status) {
      return Fail(Status::InvalidArgument(
          "--status: unknown state '" + status +
          "'; expected pending, running, completed, pruned, failed or interrupted"));
    }
  }
  // The tables, CSV and JSON call the number column "trial".
  const std::string sort_key = sort == "trial" ? "number" : sort == "-trial" ? "-number" : sort;
  q.sort = sort_key;
  auto trials = (*st)->Trials(sw->id, q);
  if (!trials.ok()) return Fail(trials.status());
  // A key that is no column is a metric (metric.NAME, or NAME) or a hyperparameter (param.NAME,
  // or NAME). A bare NAME that is both is the hyperparameter, as the CSV's columns name them
  // (`lr`, the trainer's metric too, and `metric.lr`). One that no trial has would sort nothing:
  // say so, with what would.
  const bool descending = sort_key.starts_with("-");
  std::string key = sort_key.substr(descending ? 1 : 0);
  const std::vector<std::string> columns = {"number",  "status", "objective",
                                            "started", "ended",  "epochs"};
  const bool by_key = std::find(columns.begin(), columns.end(), key) == columns.end();
  // Keys (to sort by, and the CSV's columns) are those of every trial of the sweep, not only
  // of the ones --status lists.
  std::vector<store::TrialRecord> whole;
  if (q.status && (by_key || a.csv)) {
    auto all = (*st)->Trials(sw->id, store::TrialQuery{});
    if (!all.ok()) return Fail(all.status());
    whole = std::move(*all);
  }
  if (by_key) {
    std::vector<std::string> metrics, params;
    const bool as_param = key.starts_with("param."), as_metric = key.starts_with("metric.");
    const std::string bare = as_param ? key.substr(6) : as_metric ? key.substr(7) : key;
    // The sweep's own metric is a key before any trial has reported it.
    bool metric_seen = !as_param && bare == sw->metric, param_seen = false;
    auto add = [](std::vector<std::string>* names, const std::string& k) {
      if (std::find(names->begin(), names->end(), k) == names->end()) names->push_back(k);
    };
    const auto& every = q.status ? whole : *trials;
    for (const auto& t : every) {
      json m = json::parse(t.metrics_json, nullptr, /*allow_exceptions=*/false);
      json p = json::parse(t.params_json, nullptr, /*allow_exceptions=*/false);
      if (m.is_object()) {
        metric_seen = metric_seen || (!as_param && m.contains(bare));
        for (auto& [k, v] : m.items()) add(&metrics, k);
      }
      if (p.is_object()) {
        param_seen = param_seen || (!as_metric && p.contains(bare));
        for (auto& [k, v] : p.items()) add(&params, k);
      }
    }
    if (param_seen && !as_param && !as_metric) {
      q.sort = std::string(descending ? "-" : "") + "param." + key;
      trials = (*st)->Trials(sw->id, q);
      if (!trials.ok()) return Fail(trials.status());
    } else if (!metric_seen && !param_seen && !every.empty()) {
      // (A sweep with no trial yet has no keys to tell a typo by.)
      // Named as the tables name them: "trial", not the store's "number".
      std::vector<std::string> all = {"trial"};
      all.insert(all.end(), columns.begin() + 1, columns.end());
      // A bare name that is also a hyperparameter sorts by that: such a metric is metric.NAME.
      for (const auto& m : metrics) {
        const bool shadowed = std::find(params.begin(), params.end(), m) != params.end();
        all.push_back((shadowed ? "metric." : "") + m);
      }
      for (const auto& p : params) all.push_back("param." + p);
      std::string list;
      for (const auto& k : all) list += (list.empty() ? "" : ", ") + k;
      std::string msg = "--sort " + sort + ": no trial of '" + a.name + "' has '" + key + "'";
      std::vector<std::string> near = all;  // a hyperparameter may be named bare, too
      near.insert(near.end(), params.begin(), params.end());
      std::string hint = DidYouMean(key, near);
      if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
      msg += " (sort keys: " + list + ")";
      return Fail(Status::InvalidArgument(msg));
    }
  }
  if (a.json) {
    PrintTrialsJson(std::cout, *trials);
  } else if (a.csv) {
    // The layout of `export --format csv`: the columns of every trial of the sweep.
    report::WriteCsv(std::cout, report::TrialsTable(*trials, q.status ? whole : *trials));
  } else {
    PrintTrialsTable(std::cout, *trials, sw->metric);
  }
  return kExitOk;
}

int CmdStatus(const QueryArgs& a) {
  auto st = OpenForQuery(a);
  if (!st.ok()) return Fail(st.status());
  auto sw = FindSweepOrSuggest(**st, a.name);
  if (!sw.ok()) return Fail(sw.status());
  auto facts = ReadStatusFacts(**st, *sw);
  if (!facts.ok()) return Fail(facts.status());
  const auto* counts = &facts->counts;
  const auto* running = &facts->running;
  const auto* best = &facts->best;
  const auto& c = *counts;
  const bool gone = CoordinatorGone(a.db, *sw);
  const double elapsed = ElapsedSeconds(*sw, UnixSeconds(), gone);
  if (a.json) {
    json j = {{"name", sw->name},
              {"status", store::ToString(sw->status)},
              {"coordinator_gone", gone},
              {"metric", sw->metric},
              {"mode", sw->maximize ? "max" : "min"},
              {"counts",
               {{"pending", c.pending},
                {"running", c.running},
                {"completed", c.completed},
                {"pruned", c.pruned},
                {"failed", c.failed},
                {"interrupted", c.interrupted},
                {"total", c.total()}}},
              {"elapsed_s", elapsed},
              {"running_s", sw->active_s}};
    json r = json::array();
    for (const auto& t : *running) {
      r.push_back({{"trial", t.number}, {"placement", t.placement}, {"started", *t.started_s}});
    }
    j["running"] = r;
    j["best"] = best->empty() ? json(nullptr) : TrialJson(best->front());
    PrintJson(std::cout, j);
    return kExitOk;
  }
  PrintStatusText(std::cout, *sw, c, *running, *best, UnixSeconds(), gone, a.db);
  return kExitOk;
}

int CmdList(const QueryArgs& a) {
  auto st = OpenForQuery(a);
  std::error_code ec;
  // A database made this instant, or left empty, holds no sweep, which is no error.
  const bool empty_file = !st.ok() && st.status().code() == Status::Code::kNotFound &&
                          std::filesystem::is_regular_file(a.db, ec);
  if (!st.ok() && !empty_file) return Fail(st.status());
  auto list = empty_file
                  ? Result<std::vector<store::SweepSummary>>(std::vector<store::SweepSummary>{})
                  : (*st)->ListSweeps();
  if (!list.ok()) return Fail(list.status());
  // Per sweep, its record read once: a sweep stored as running whose coordinator died says so
  // (the command that resumes it, else ""), and what it holds on this machine's disk
  // (checkpoints, trial folders).
  struct Extra {
    std::string resume;
    int64_t disk_bytes = 0;
  };
  auto extra = [&](const store::SweepSummary& s) {
    Extra e;
    auto sw = (*st)->FindSweep(s.name);
    if (!sw.ok()) return e;
    e.disk_bytes = FootprintOf(*sw, a.db).bytes;
    if (s.status == store::SweepStatus::kRunning && CoordinatorGone(a.db, *sw)) {
      e.resume = ResumeCommand(*sw, a.db);
    }
    return e;
  };
  if (a.json) {
    json arr = json::array();
    for (const auto& s : *list) {
      const Extra e = extra(s);
      arr.push_back({{"name", s.name},
                     {"status", store::ToString(s.status)},
                     {"coordinator_gone", !e.resume.empty()},
                     {"trials", s.trials},
                     {"metric", s.metric},
                     {"mode", s.maximize ? "max" : "min"},
                     {"best", s.best ? json(*s.best) : json(nullptr)},
                     {"disk_bytes", e.disk_bytes}});
    }
    PrintJson(std::cout, arr);
    return kExitOk;
  }
  if (list->empty()) std::cout << "no sweeps in " << a.db << "\n";
  for (const auto& s : *list) {
    const Extra e = extra(s);
    std::cout << s.name << "  " << store::ToString(s.status)
              << (e.resume.empty() ? "" : " (coordinator gone: " + e.resume + ")") << "  "
              << s.trials << " trials  best " << s.metric << " = "
              << (s.best ? FormatNumber(*s.best) : "-") << "  disk " << HumanBytes(e.disk_bytes)
              << "\n";
  }
  return kExitOk;
}

class QueryCommandsImpl final : public CommandGroup {
 public:
  explicit QueryCommandsImpl(CLI::App& app) {
    best_cmd_ = app.add_subcommand("best", "the best trials by the sweep's metric");
    AddQueryOptions(best_cmd_, true, true);
    best_cmd_->add_option("--top", top_, "how many")->capture_default_str()->check(WholeNumber(1));
    best_cmd_->footer("Example: sweep best fashion-mlp --top 3 --json");
    trials_cmd_ = app.add_subcommand("trials", "all trials of a sweep");
    AddQueryOptions(trials_cmd_, true, true);
    trials_cmd_->add_option("--status", status_filter_, "only trials in this state");
    trials_cmd_
        ->add_option(
            "--sort", sort_,
            "number (or trial), status, objective, started, ended, epochs, a metric (NAME or "
            "metric.NAME), or a hyperparameter (NAME or param.NAME); -KEY for "
            "descending")
        ->capture_default_str();
    trials_cmd_->footer("Example: sweep trials fashion-mlp --sort -val_acc --csv > trials.csv");
    status_cmd_ = app.add_subcommand("status", "counts, running trials, best so far");
    AddQueryOptions(status_cmd_, true, false);
    list_cmd_ = app.add_subcommand("list", "the sweeps in the store, with their sizes");
    AddQueryOptions(list_cmd_, false, false);
  }

  std::optional<int> Run() override {
    if (best_cmd_->parsed()) return CmdBest(args_, top_);
    if (trials_cmd_->parsed()) return CmdTrials(args_, status_filter_, sort_);
    if (status_cmd_->parsed()) return CmdStatus(args_);
    if (list_cmd_->parsed()) return CmdList(args_);
    return std::nullopt;
  }

 private:
  void AddQueryOptions(CLI::App* sub, bool with_name, bool with_csv) {
    if (with_name) sub->add_option("NAME", args_.name, "sweep name")->required();
    AddDbOption(*sub, args_.db, "SQLite file", true);
    auto* j = sub->add_flag("--json", args_.json, "JSON output");
    if (with_csv) sub->add_flag("--csv", args_.csv, "CSV output")->excludes(j);
  }

  CLI::App* best_cmd_ = nullptr;
  CLI::App* trials_cmd_ = nullptr;
  CLI::App* status_cmd_ = nullptr;
  CLI::App* list_cmd_ = nullptr;
  QueryArgs args_;
  int64_t top_ = 10;
  std::string status_filter_;
  std::string sort_ = "number";
};

}  // namespace

std::unique_ptr<CommandGroup> AddQueryCommands(CLI::App& app) {
  return std::make_unique<QueryCommandsImpl>(app);
}

}  // namespace sweep
