// The table of trial kinds: a new kind is one file in kinds/ and one line here.
#include "trial_kind.h"

#include "kind_config.h"

namespace sweep {
namespace {

struct KindEntry {
  const config_internal::KindConfig* config;
  std::unique_ptr<TrialKindRules> (*rules)(const SweepConfig& config);
};

// One line per kind.
const KindEntry kKinds[] = {{&config_internal::kTrainerConfig, MakeTrainerKind},
                            {&config_internal::kFunctionConfig, MakeFunctionKind},
                            {&config_internal::kCommandConfig, MakeCommandKind}};

const KindEntry& EntryOf(TrialKind kind) {
  for (const KindEntry& e : kKinds) {
    if (e.config->kind == kind) return e;
  }
  return kKinds[0];  // every enum value has its line above
}

}  // namespace

std::unique_ptr<TrialKindRules> MakeTrialKindRules(const SweepConfig& config) {
  return EntryOf(config.trial.kind).rules(config);
}

namespace config_internal {

const KindConfig& KindConfigOf(TrialKind kind) { return *EntryOf(kind).config; }

std::vector<const KindConfig*> AllKindConfigs() {
  std::vector<const KindConfig*> out;
  for (const KindEntry& e : kKinds) out.push_back(e.config);
  return out;
}

}  // namespace config_internal
}  // namespace sweep
