#include "progress.h"

#include <cstdio>

namespace sweep {

std::string FormatElapsed(double s) {
  int total = static_cast<int>(s);
  char buf[32];
  if (total >= 3600) {
    std::snprintf(buf, sizeof buf, "%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%02d:%02d", total / 60, total % 60);
  }
  return buf;
}

std::string FormatMetric(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void Progress::Announce(const SweepConfig& config, const executor::Packer& packer,
                        const std::string& store_path, const std::string& extra) {
  if (log_ == nullptr) return;
  *log_ << "sweep '" << config.sweep.name << "': ";
  if (config.sweep.unbounded_trials) {
    *log_ << "trials until "
          << (config.sweep.time_budget_s && config.sweep.stop_when ? "its time budget or target"
              : config.sweep.time_budget_s                         ? "its time budget"
                                                                   : "its target")
          << ", ";
  } else {
    *log_ << config.sweep.max_trials << " trial(s), ";
  }
  *log_ << config.search.algorithm << " search, " << (config.sweep.maximize ? "max " : "min ")
        << config.sweep.metric << "; ";
  if (packer.total_slots() == 0) {
    *log_ << "no local slots (trials run on agents), ";
  } else {
    *log_ << packer.total_slots() << " " << (packer.gpu() ? "GPU" : "CPU") << " slot(s), ";
  }
  *log_ << config.trial.slots << " per trial";
  if (config.trial.gpu_share > 1 && packer.gpu())
    *log_ << ", up to " << config.trial.gpu_share << " per GPU";
  *log_ << "; store " << store_path << extra << "\n";
}

void Progress::TrialEnded(int64_t number, store::TrialStatus status, const std::string& metric,
                          std::optional<double> objective, double seconds,
                          const std::string& note) {
  if (log_ == nullptr) return;
  if (!live_) {
    *log_ << "trial " << number << " " << store::ToString(status);
    if (objective) *log_ << " " << metric << "=" << FormatMetric(*objective);
    *log_ << " (" << FormatMetric(seconds) << " s)";
    if (!note.empty()) *log_ << ": " << note;
    *log_ << "\n";
  } else if (status == store::TrialStatus::kFailed) {
    *log_ << "\r\033[Ktrial " << number << " failed: " << note << "\n";
  }
}

void Progress::Stopping(const std::string& why, size_t running_after_epoch) {
  if (log_ == nullptr) return;
  *log_ << (live_ ? "\n" : "") << "sweep: stopping";
  if (running_after_epoch > 0) {
    *log_ << " " << running_after_epoch << " running trial(s) after their epoch";
  }
  *log_ << ": " << why << "\n";
}

void Progress::Interrupted(size_t running, const std::string& how) {
  if (log_ == nullptr || running == 0) return;
  *log_ << "\nsweep: stopping " << running << " running trial(s)" << how << "\n";
}

void Progress::Show(const std::string& name, const std::string& metric, const Line& l, double now,
                    bool final) {
  if (log_ == nullptr || !live_) return;
  if (!final && now - last_s_ < 0.1) return;
  last_s_ = now;
  std::string line = "\r\033[K" + name + ": " +
                     std::to_string(l.counts.completed + l.counts.pruned + l.counts.failed) +
                     (l.limit ? "/" + std::to_string(*l.limit) : std::string()) + " done, " +
                     std::to_string(l.counts.running) + " running, " +
                     std::to_string(l.counts.pruned) + " pruned, " +
                     std::to_string(l.counts.failed) + " failed";
  if (l.best) {
    line += ", best " + metric + " " + FormatMetric(*l.best) + " (trial " +
            std::to_string(l.best_trial) + ")";
  }
  line += ", " + FormatElapsed(l.active_s);
  *log_ << line << (final ? "\n" : "") << std::flush;
}

}  // namespace sweep
