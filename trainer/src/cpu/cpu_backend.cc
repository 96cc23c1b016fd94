// The CPU ReplicaGroup: R Net replicas on R threads of a ThreadTeam, one optimizer state for
// all of them, and the optimizer step fused into the all-reduce: whichever rank reduces a chunk
// of gradients also applies the update to that chunk of rank 0's weights and copies the result
// into the other replicas. That is an all-reduce followed by R identical optimizer steps, done
// once instead of R times, while the chunk is still in cache. fp16 cannot step a chunk before
// it knows whether any gradient overflowed: there the reduced chunks are unscaled into one
// buffer, and the ranks meet at a barrier whose completion steps (or skips) and moves the loss
// scale. bf16 and fp16 round the GEMMs' inputs (cpu/mlp.h). Owned by the trainer.
#include "cpu/cpu_backend.h"

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cpu/collective.h"
#include "cpu/net.h"
#include "cpu/ops.h"
#include "team.h"

namespace sweep::trainer::cpu {
namespace {

// The unit of reduction work: 32 KiB, so a chunk's R sources, the sum and the weights and
// optimizer state it updates stay in L2 while one thread works on it.
constexpr int64_t kChunkFloats = 8192;

class CpuReplicaGroup final : public ReplicaGroup, public ReduceSink {
 public:
  explicit CpuReplicaGroup(const GroupSpec& spec)
      : spec_(spec),
        team_(spec.replicas),
        ranks_(static_cast<size_t>(spec.replicas)),
        step_end_(spec.replicas, StepEnd{this}) {
    const int64_t n = spec.model.num_params;
    const int slots = spec.optimizer.kind == OptimizerSpec::Kind::kAdamw ? 2 : 1;
    for (int s = 0; s < slots; ++s) opt_.emplace_back(n);
    if (fp16()) grad_sum_ = FloatBuffer(n);
    loss_scale_.scale = spec.initial_loss_scale;
    std::vector<const float*> grads;
    for (Rank& r : ranks_) {
      r.model =
          std::make_unique<Net>(spec.model, spec.max_rows, spec.precision, spec.label_smoothing);
      r.scratch = FloatBuffer(kChunkFloats);
      grads.push_back(r.model->grads());
    }
    // Bucket k = the k-th layer with parameters (the unit LayerSink reports).
    std::vector<Bucket> buckets(spec.model.param_layers.size());
    for (const GradBucket& b : MakeGradBuckets(spec.model, 1)) {
      buckets[static_cast<size_t>(b.first_layer)] = {b.begin, b.end};
    }
    comm_ =
        std::make_unique<Communicator>(std::move(grads), std::move(buckets), kChunkFloats, this);
    for (int i = 0; i < spec.replicas; ++i) {
      Rank& r = ranks_[static_cast<size_t>(i)];
      r.group = DeviceGroup{i, spec.replicas, comm_.get(), r.scratch.data()};
      r.sink.group = &r.group;
    }
  }

  int size() const override { return spec_.replicas; }

  void Run(const std::function<void(int rank)>& fn) override { team_.Run(fn); }

  void TrainMicroBatch(int rank, const MicroBatch& mb, const StepArgs& args,
                       std::vector<double>* finished) override {
    Rank& r = ranks_[static_cast<size_t>(rank)];
    r.args = args;
    // Only rank 0's running statistics are ever read (DDP broadcasts rank 0's buffers before
    // each forward): the others need not keep theirs.
    const double loss =
        r.model->ForwardLoss(mb.x, mb.y, mb.rows, args.dloss_scale, args.dropout_key, mb.first_row,
                             fp16() ? loss_scale_.scale : 1.0f, rank == 0);
    r.loss = mb.first ? loss : r.loss + loss;
    if (!mb.last) {
      r.model->Backward(mb.x, mb.rows, !mb.first, nullptr);
      return;
    }
    // Published before the first bucket is marked ready: once the all-reduce is done, every
    // rank reads every rank's loss. Two slots, since a fast rank may already be one step on.
    const size_t slot = static_cast<size_t>(r.steps % 2);
    r.step_loss[slot] = r.loss;
    r.model->Backward(mb.x, mb.rows, !mb.first, &r.sink);
    AllReduceFinish(r.group);
    if (fp16()) step_end_.arrive_and_wait();
    r.model->ParamsChanged();  // every chunk has been stepped: the weights are the new ones
    ++r.steps;
    double total = 0;
    for (const Rank& other : ranks_) total += other.step_loss[slot];
    finished->push_back(total);
  }

  void Evaluate(int rank, const float* x, const int32_t* y, int rows, double* loss_sum,
                int64_t* correct) override {
    ranks_[static_cast<size_t>(rank)].model->Evaluate(x, y, rows, loss_sum, correct,
                                                      ranks_[0].model->stats());
  }

  Status SetState(const ModelState& state) override {
    const size_t n = static_cast<size_t>(spec_.model.num_params);
    const size_t stats = static_cast<size_t>(spec_.model.num_buffers);
    SWEEP_RETURN_IF_ERROR(CheckModelState(state, n, opt_.size(), stats));
    std::vector<float> initial;
    if (state.stats.empty() && stats > 0) {
      initial.resize(stats);
      InitStats(spec_.model, initial.data());
    }
    for (Rank& r : ranks_) {
      std::memcpy(r.model->params(), state.params.data(), n * sizeof(float));
      if (stats > 0) {
        std::memcpy(r.model->stats(), state.stats.empty() ? initial.data() : state.stats.data(),
                    stats * sizeof(float));
      }
      r.model->ParamsChanged();
    }
    for (size_t s = 0; s < opt_.size(); ++s) {
      if (state.optimizer.empty()) {
        std::memset(opt_[s].data(), 0, n * sizeof(float));
      } else {
        std::memcpy(opt_[s].data(), state.optimizer[s].data(), n * sizeof(float));
      }
    }
    if (fp16()) {
      loss_scale_ = state.loss_scale.value_or(LossScaleState{spec_.initial_loss_scale, 0, 0});
      skipped_reported_ = loss_scale_.skipped;
    }
    return Status::Ok();
  }

  ModelState GetState() const override {
    ModelState s;
    const float* p = ranks_[0].model->params();
    s.params.assign(p, p + spec_.model.num_params);
    const float* st = ranks_[0].model->stats();
    s.stats.assign(st, st + spec_.model.num_buffers);
    for (const FloatBuffer& o : opt_) s.optimizer.emplace_back(o.data(), o.data() + o.size());
    if (fp16()) s.loss_scale = loss_scale_;
    return s;
  }

  CommStats TakeCommStats() override {
    const CommTimes t = comm_->TakeTimes(0);
    return CommStats{t.exposed_s, t.reduce_s};
  }

  int64_t TakeSkippedSteps() override {
    const int64_t delta = static_cast<int64_t>(loss_scale_.skipped - skipped_reported_);
    skipped_reported_ = loss_scale_.skipped;
    return delta;
  }

 private:
  // fp16's step end: runs once per step, on the last rank to reach the barrier, while the others
  // wait there (so it may touch every replica).
  struct StepEnd {
    CpuReplicaGroup* group;
    void operator()() noexcept { group->EndFp16Step(); }
  };

  // Tells the communicator as each layer's gradients are final.
  struct BucketSink final : LayerSink {
    DeviceGroup* group = nullptr;
    void LayerDone(int layer) override { AllReduceBucketReady(*group, layer); }
  };

  struct alignas(64) Rank {
    std::unique_ptr<Net> model;
    FloatBuffer scratch;
    DeviceGroup group;
    BucketSink sink;
    StepArgs args;  // of the step in progress: read by the sink on this rank's thread
    double loss = 0;
    double step_loss[2] = {0, 0};
    int64_t steps = 0;
  };

  // ReduceSink (public only so the communicator can hold it): the optimizer, on a reduced chunk.
  // Runs on the reducing rank's thread, with that rank's StepArgs (every rank has the same). Every
  // replica has finished with these weights for this step (their bucket was ready) and reads them
  // next after Finish.
  void Reduced(int rank, int64_t begin, int64_t end, const float* sum) override {
    if (fp16()) {
      // Unscaled into the step's gradient; stepped at the barrier once all are known finite.
      const float inv = 1.0f / loss_scale_.scale;
      float* g = grad_sum_.data();
      bool finite = true;
      for (int64_t i = begin; i < end; ++i) {
        g[i] = sum[i - begin] * inv;
        finite = finite && std::isfinite(g[i]);
      }
      if (!finite) found_inf_.store(true, std::memory_order_relaxed);
      return;
    }
    Step(ranks_[static_cast<size_t>(rank)].args, begin, end, sum);
  }

  // The optimizer on [begin, end) of rank 0's weights, then copied into the other replicas.
  void Step(const StepArgs& a, int64_t begin, int64_t end, const float* grad) {
    const OptimizerSpec& o = spec_.optimizer;
    const int64_t n = end - begin;
    float* p0 = ranks_[0].model->params() + begin;
    if (o.kind == OptimizerSpec::Kind::kSgd) {
      sgd_update(p0, opt_[0].data() + begin, grad, n, a.lr, o.momentum, o.weight_decay, o.nesterov);
    } else {
      adamw_update(p0, opt_[0].data() + begin, opt_[1].data() + begin, grad, n, a.lr, o.beta1,
                   o.beta2, o.eps, o.weight_decay, a.t - static_cast<int64_t>(loss_scale_.skipped));
    }
    for (size_t r = 1; r < ranks_.size(); ++r) {
      std::memcpy(ranks_[r].model->params() + begin, p0, static_cast<size_t>(n) * sizeof(float));
    }
  }

  void EndFp16Step() {
    const bool skip = found_inf_.exchange(false, std::memory_order_relaxed);
    if (!skip) Step(ranks_[0].args, 0, spec_.model.num_params, grad_sum_.data());
    AdvanceLossScale(&loss_scale_, skip, spec_.loss_scale_window);
  }

  bool fp16() const { return spec_.precision == Precision::kFp16; }

  const GroupSpec spec_;
  ThreadTeam team_;
  std::vector<Rank> ranks_;
  std::vector<FloatBuffer> opt_;  // sgd: velocity; adamw: m, v
  std::unique_ptr<Communicator> comm_;
  // fp16. Ranks read loss_scale_ only between barriers; StepEnd alone writes it.
  std::barrier<StepEnd> step_end_;
  LossScaleState loss_scale_;
  uint64_t skipped_reported_ = 0;
  FloatBuffer grad_sum_;  // the step's reduced, unscaled gradient
  std::atomic<bool> found_inf_{false};
};

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  Status Supports(const GroupSpec& spec) const override {
    if (spec.replicas < 1) return Status::InvalidArgument("cpu: replicas must be >= 1");
    // NotFound: the registry then lists every backend's reason (the GPU one's among them).
    if (!spec.devices.empty()) {
      return Status::NotFound(
          "cpu: the trial names GPUs (devices), which the CPU cannot use (leave devices unset "
          "to train on the CPU)");
    }
    return Status::Ok();
  }
  Result<std::unique_ptr<ReplicaGroup>> CreateGroup(const GroupSpec& spec) const override {
    SWEEP_RETURN_IF_ERROR(Supports(spec));
    // OpenBLAS's thread count is process-wide. Replicas are the parallelism when there are
    // several, each GEMM on its own thread; a lone replica may spread its GEMMs instead.
    set_blas_threads(spec.replicas > 1 ? 1 : spec.threads);
    return std::unique_ptr<ReplicaGroup>(new CpuReplicaGroup(spec));
  }
};

}  // namespace

const Backend* GetBackend() {
  static const CpuBackend backend;
  return &backend;
}

}  // namespace sweep::trainer::cpu
