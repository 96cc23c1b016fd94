// Grid search: the Cartesian product of every parameter's listed values, decoded from the trial
// index in mixed radix so trial i costs O(#parameters) and nothing is enumerated up front.
// A GridSampler is immutable after construction and safe to call from several threads.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "search/space.h"

namespace sweep::search {
namespace {

class GridSampler final : public Sampler {
 public:
  struct Axis {
    std::string name;
    std::vector<nlohmann::json> values;
  };

  GridSampler(std::vector<Axis> axes, int64_t size) : axes_(std::move(axes)), size_(size) {}

  std::optional<nlohmann::json> Sample(int64_t index) const override {
    if (index < 0 || index >= size_) return std::nullopt;
    nlohmann::json trial = nlohmann::json::object();
    // The last declared axis is the least significant digit, so the first varies slowest.
    int64_t rest = index;
    for (auto axis = axes_.rbegin(); axis != axes_.rend(); ++axis) {
      const auto radix = static_cast<int64_t>(axis->values.size());
      trial[axis->name] = axis->values[static_cast<size_t>(rest % radix)];
      rest /= radix;
    }
    return trial;
  }

  std::optional<int64_t> size() const override { return size_; }

 private:
  std::vector<Axis> axes_;
  int64_t size_;
};

}  // namespace

Result<std::unique_ptr<Sampler>> MakeGridSampler(const SearchSpace& space) {
  std::vector<GridSampler::Axis> axes;
  // An empty space is one trial with no parameters: the product over nothing is 1.
  int64_t size = 1;
  for (const Parameter& parameter : space.parameters()) {
    const Distribution& d = parameter.distribution;
    if (d.kind != Distribution::Kind::kCategorical && d.kind != Distribution::Kind::kConstant) {
      return Status::InvalidArgument("grid search cannot enumerate '" + parameter.name + "' (" +
                                     std::string(KindName(d.kind)) + "); give it `values = [...]`");
    }
    // Parameters reach a SearchSpace only through Add, which validates, but a sampler must
    // never divide by an empty axis even if that ever changes.
    if (d.values.empty()) {
      return Status::InvalidArgument(parameter.name + ": no values to enumerate");
    }
    const auto radix = static_cast<int64_t>(d.values.size());
    if (size > std::numeric_limits<int64_t>::max() / radix) {
      return Status::InvalidArgument("grid search space is too large: more than 2^63 points at '" +
                                     parameter.name + "'");
    }
    size *= radix;
    axes.push_back({parameter.name, d.values});
  }
  return std::unique_ptr<Sampler>(std::make_unique<GridSampler>(std::move(axes), size));
}

}  // namespace sweep::search
