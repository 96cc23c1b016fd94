#include "checkpoint_keeper.h"

namespace sweep {

std::vector<int64_t> CheckpointKeeper::Ended(int64_t number, bool completed,
                                             std::optional<double> objective) {
  if (!completed || !objective) return {number};
  kept_.insert({maximize_ ? *objective : -*objective, -number});
  std::vector<int64_t> drop;
  while (static_cast<int64_t>(kept_.size()) > keep_) {
    drop.push_back(-kept_.begin()->second);
    kept_.erase(kept_.begin());
  }
  return drop;
}

std::vector<int64_t> CheckpointKeeper::Kept() const {
  std::vector<int64_t> out;
  for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) out.push_back(-it->second);
  return out;
}

}  // namespace sweep
