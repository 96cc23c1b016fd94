// Function trials in a worker: an analytic test function (functions.h), reported once, or as
// a curve over `steps` reports that descends towards the function's minimum.
#include <chrono>
#include <thread>

#include "executor/functions.h"
#include "worker_kinds.h"

namespace sweep::executor {

using nlohmann::json;

namespace {

TrialOutcome RunFunctionTrial(const TrialTask& task, const ReportSink& sink,
                              const std::atomic<bool>& stop, const TrialHooks&) {
  std::string name = task.settings.value("name", "");
  const FunctionInfo* info = FindFunction(name);
  if (info == nullptr) return Failed("unknown function '" + name + "'");
  Result<double> value = EvaluateFunction(name, task.params);
  if (!value.ok()) return Failed(value.status().message());
  int64_t steps = task.settings.value("steps", int64_t{0});
  int64_t step_ms = task.settings.value("step_ms", int64_t{0});
  // The curve descends towards the function's minimum in this many inputs (Styblinski-Tang's
  // grows with them).
  const double minimum = MinimumOf(*info, static_cast<int>(task.params.size()));
  TrialOutcome out;
  out.end_metrics = json::object();
  if (steps <= 0) {
    sink(1, 1, json{{"value", *value}});
    return out;
  }
  for (int64_t t = 1; t <= steps; ++t) {
    if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    double v = CurveValue(*value, minimum, task.params, t, steps);
    sink(t, static_cast<double>(t), json{{"value", v}});
    if (t < steps && stop.load(std::memory_order_relaxed)) {
      out.kind = TrialOutcome::Kind::kStopped;
      return out;
    }
  }
  return out;
}

std::vector<std::string> FunctionMetrics() { return {"value"}; }

}  // namespace

const WorkerKind kFunctionKind{TrialKind::kFunction, RunFunctionTrial, FunctionMetrics};

}  // namespace sweep::executor
