// Grid search: every distinct assignment of the active parameters' values, decoded from the trial
// index so trial i costs O(#parameters * log #values) and nothing is enumerated up front.
// A GridSampler is immutable after construction and safe to call from several threads.
//
// Counting with conditions. Parameters form a forest: a conditional parameter hangs under its
// parent (declared earlier). For a parameter p, let
//   branches(p, v) = product of count(c) over the children c of p that are active when p = v
//   count(p)       = sum over p's values v of branches(p, v)
// so count(p) is the number of distinct assignments of p's subtree, and the grid's size is the
// product of count(r) over the unconditional parameters r. Decoding walks the parameters in
// declaration order: at each active parameter the index range of what is still undecided is
// split into one block per value, of size branches(p, v) times the count of everything else
// still undecided, which makes the order lexicographic in declaration order, exactly the mixed
// radix of the unconditional grid when there are no conditions.
#include <algorithm>
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
    std::vector<nlohmann::json> values;  // the choices; empty for a stepped range
    Distribution stepped;                // a stepped range's distribution, when values is empty
    int64_t size = 0;                    // how many values: values.size() or StepCount(stepped)
    int parent = -1;                     // index of the parent axis; -1 when unconditional
    std::vector<bool> active_for;        // by the parent's value index, when parent >= 0
    std::vector<int> children;           // axes whose parent this is
    int64_t count = 0;                   // distinct assignments of this axis's subtree
    // cumulative[v] = branches(0) + ... + branches(v); empty for an axis without children,
    // whose every value has one branch (cumulative[v] would be v + 1).
    std::vector<int64_t> cumulative;

    nlohmann::json Value(int64_t v) const {
      return values.empty() ? StepValue(stepped, v) : values[static_cast<size_t>(v)];
    }
  };

  GridSampler(std::vector<Axis> axes, int64_t size) : axes_(std::move(axes)), size_(size) {}

  std::optional<nlohmann::json> Sample(int64_t index) const override {
    if (index < 0 || index >= size_) return std::nullopt;
    nlohmann::json trial = nlohmann::json::object();
    std::vector<int64_t> chosen(axes_.size(), -1);  // value index per axis; -1 while inactive
    int64_t undecided = size_;                      // assignments of everything not yet decided
    int64_t rest = index;                           // position within them
    for (size_t j = 0; j < axes_.size(); ++j) {
      const Axis& axis = axes_[j];
      if (axis.parent >= 0) {
        const int64_t parent_value = chosen[static_cast<size_t>(axis.parent)];
        if (parent_value < 0 || !axis.active_for[static_cast<size_t>(parent_value)]) continue;
      }
      // Everything undecided besides this axis's subtree; its count divides `undecided`.
      const int64_t others = undecided / axis.count;
      const int64_t block = rest / others;
      int64_t v = block;  // without children, value v is block v
      int64_t before = v, branches = 1;
      if (!axis.cumulative.empty()) {
        v = std::upper_bound(axis.cumulative.begin(), axis.cumulative.end(), block) -
            axis.cumulative.begin();
        before = v == 0 ? 0 : axis.cumulative[static_cast<size_t>(v - 1)];
        branches = axis.cumulative[static_cast<size_t>(v)] - before;
      }
      rest -= others * before;
      undecided = others * branches;
      chosen[j] = v;
      trial[axis.name] = axis.Value(v);
    }
    return trial;
  }

  std::optional<int64_t> size() const override { return size_; }

 private:
  std::vector<Axis> axes_;
  int64_t size_;
};

Status TooLarge(const std::string& name) {
  return Status::InvalidArgument("grid search space is too large: more than 2^63 points at '" +
                                 name + "'");
}

}  // namespace

Result<std::unique_ptr<Sampler>> MakeGridSampler(const SearchSpace& space) {
  const std::vector<Parameter>& parameters = space.parameters();
  std::vector<GridSampler::Axis> axes;
  for (const Parameter& parameter : parameters) {
    const Distribution& d = parameter.distribution;
    GridSampler::Axis axis;
    axis.name = parameter.name;
    if (d.kind == Distribution::Kind::kCategorical || d.kind == Distribution::Kind::kConstant) {
      axis.values = d.values;
      axis.size = static_cast<int64_t>(d.values.size());
    } else if (StepCount(d) > 0) {
      axis.stepped = d;
      axis.size = StepCount(d);
    } else {
      const bool steppable =
          d.kind == Distribution::Kind::kUniform || d.kind == Distribution::Kind::kIntUniform;
      return Status::InvalidArgument("grid search cannot enumerate '" + parameter.name + "' (" +
                                     std::string(KindName(d.kind)) +
                                     (steppable
                                          ? " without a step); give it `values = [...]` or a `step`"
                                          : "); give it `values = [...]`"));
    }
    // Parameters reach a SearchSpace only through Add, which validates, but a sampler must
    // never divide by an empty axis even if that ever changes.
    if (axis.size <= 0) {
      return Status::InvalidArgument(parameter.name + ": no values to enumerate");
    }
    if (parameter.condition) {
      for (size_t p = 0; p < axes.size(); ++p) {
        if (axes[p].name == parameter.condition->parent) axis.parent = static_cast<int>(p);
      }
      if (axis.parent < 0) {
        return Status::InvalidArgument(parameter.name + ": condition on '" +
                                       parameter.condition->parent +
                                       "', which is not a parameter declared before it");
      }
      const GridSampler::Axis& parent = axes[static_cast<size_t>(axis.parent)];
      if (parent.values.empty()) {  // SearchSpace::Add refuses a parent that is a range
        return Status::InvalidArgument(parameter.name + ": condition on '" + parent.name +
                                       "', which is a range; a parent must list its values");
      }
      for (const nlohmann::json& value : parent.values) {
        const auto& allowed = parameter.condition->values;
        axis.active_for.push_back(std::find(allowed.begin(), allowed.end(), value) !=
                                  allowed.end());
      }
      axes[static_cast<size_t>(axis.parent)].children.push_back(static_cast<int>(axes.size()));
    }
    axes.push_back(std::move(axis));
  }

  // Children come after their parents, so counting backwards sees every child first.
  for (size_t j = axes.size(); j-- > 0;) {
    GridSampler::Axis& axis = axes[j];
    if (axis.children.empty()) {
      axis.count = axis.size;
      continue;
    }
    int64_t total = 0;
    for (size_t v = 0; v < axis.values.size(); ++v) {
      int64_t branches = 1;
      for (int c : axis.children) {
        const GridSampler::Axis& child = axes[static_cast<size_t>(c)];
        if (child.active_for[v] && __builtin_mul_overflow(branches, child.count, &branches)) {
          return TooLarge(axis.name);
        }
      }
      if (__builtin_add_overflow(total, branches, &total)) return TooLarge(axis.name);
      axis.cumulative.push_back(total);
    }
    axis.count = total;
  }
  // An empty space is one trial with no parameters: the product over nothing is 1.
  int64_t size = 1;
  for (const GridSampler::Axis& axis : axes) {
    if (axis.parent < 0 && __builtin_mul_overflow(size, axis.count, &size)) {
      return TooLarge(axis.name);
    }
  }
  return std::unique_ptr<Sampler>(std::make_unique<GridSampler>(std::move(axes), size));
}

}  // namespace sweep::search
