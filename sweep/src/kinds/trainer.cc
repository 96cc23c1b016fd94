// Trainer trials: the embedded trainer (trainer/trainer.h), checkpointing every epoch.
#include <filesystem>

#include "sweep/coordinator.h"
#include "trainer/trainer.h"
#include "trial_kind.h"

namespace sweep {
namespace {

class TrainerKind final : public TrialKindRules {
 public:
  explicit TrainerKind(const SweepConfig& config) : config_(config) {}
  TrialKind kind() const override { return TrialKind::kTrainer; }
  std::optional<double> Length(const nlohmann::json& params) override {
    std::optional<trainer::TrainOptions> options = Options(params);
    if (!options) return std::nullopt;
    return static_cast<double>(options->epochs);
  }
  // Multiply-adds a trial will do (0 when its parameters are unreadable: it will fail at its
  // start, which may as well come late).
  double Work(const nlohmann::json& params) override {
    std::optional<trainer::TrainOptions> options = Options(params);
    return options ? trainer::EstimatedWork(*options) : 0;
  }
  nlohmann::json Settings(const TrialPlace& place) const override {
    nlohmann::json settings = config_.trainer;
    settings["checkpoint_path"] = place.checkpoint;
    if (!settings.contains("checkpoint_every")) settings["checkpoint_every"] = 1;
    return settings;
  }
  bool checkpoints() const override { return true; }
  // A cache folder the trials here cannot use costs every one of them the dataset's decoding
  // (they go on without it).
  void WarnHere(std::ostream& log) const override {
    const auto set = config_.trainer.find("cache_dir");
    const std::string dir =
        set != config_.trainer.end() && set->is_string() ? set->get<std::string>() : "";
    if (const std::string why = UnusableCacheDir(dir); !why.empty()) {
      log << "sweep: " << config_.path << ": trainer.cache_dir '" << dir
          << "' cannot be used here (" << why << "): each trial decodes the dataset itself\n";
    }
  }

 private:
  // A trial's options: [trainer], then its parameters; none when they do not apply.
  std::optional<trainer::TrainOptions> Options(const nlohmann::json& params) {
    if (!base_) {  // [trainer] once (a dataset directory is resolved on disk), not per trial
      base_.emplace();
      for (const auto& [key, value] : config_.trainer.items()) {
        (void)trainer::ApplyOption(&*base_, key, value);
      }
    }
    trainer::TrainOptions options = *base_;
    for (const auto& [key, value] : params.items()) {
      if (!trainer::ApplyOption(&options, key, value).ok()) return std::nullopt;
    }
    return options;
  }

  const SweepConfig& config_;
  std::optional<trainer::TrainOptions> base_;
};

}  // namespace

std::unique_ptr<TrialKindRules> MakeTrainerKind(const SweepConfig& config) {
  return std::make_unique<TrainerKind>(config);
}

}  // namespace sweep
