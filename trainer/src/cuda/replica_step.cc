// One micro-batch on one rank of the CUDA ReplicaGroup (replica_group.h): its input copied, its
// forward and backward queued, and at a step's end the optimizer; then the host observes it.
#include "cuda/replica_group.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "augment.h"
#include "cuda/cnn_ops.h"
#include "cuda/cuda_check.h"
#include "cuda/ops.h"

namespace sweep::trainer::cuda {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

void CudaReplicaGroup::TrainMicroBatch(int rank, const MicroBatch& mb, const StepArgs& args,
                                       std::vector<double>* finished) {
  ThrowIfError(Queue(rank, mb, args, finished));
}

void CudaReplicaGroup::FinishSteps(int rank, std::vector<double>* finished) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  if (r.queued > 0) ThrowIfError(Observe(rank, r.queued - 1, finished));
}

double CudaReplicaGroup::TakeDataWait(int rank) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  const double w = r.data_wait_s;
  r.data_wait_s = 0;
  return w;
}

// One training micro-batch m on one rank, as TrainMicroBatch queues it:
//   1. copy stream: wait until compute has finished with input slot m % 2 (micro-batch m - 2),
//      copy the rows from the Batcher's pinned slot into it, record `copied`. When the group
//      holds the training set (HoldDataset), the micro-batch's row numbers go through a pinned
//      staging slot instead and a gather kernel on the copy stream fills the input slot.
//   2. compute stream: wait for `copied`, forward, backward. On the step's last micro-batch with
//      several GPUs, as backward queues the last layer of a gradient bucket it records an event
//      that the comm stream waits on before all-reducing that bucket (ncclSum: the loss is
//      already scaled by the global batch), so reduction overlaps the rest of backward; then the
//      comm stream sums the ranks' losses and records `comm_done`, and the compute stream waits
//      for it. fp16: unscale and check the gradients. The optimizer (skipped on the device when
//      fp16 found inf/nan), fp16's loss-scale update, the loss copied to pinned host memory,
//      and `done` recorded.
//   3. host: wait for micro-batch m - 1's `done` (the GPU now has m queued behind it), report
//      its step's loss if it ended a step, then wait for m's `copied`: the time blocked there is
//      time the GPU waited for input (data_wait_s). The Batcher's slot is free once it returns.
// The host never waits for the step it has just queued, so input copies, kernel launches and the
// Batcher's gathering overlap the GPU's work. One GPU: no comm stream, no NCCL.
Status CudaReplicaGroup::Queue(int rank, const MicroBatch& mb, const StepArgs& args,
                               std::vector<double>* finished) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  ReplicaModel& model = *r.model;
  const int64_t m = r.queued;
  const int slot = static_cast<int>(m % ReplicaModel::kInputSlots);
  const size_t parity = static_cast<size_t>(m % 2);
  SWEEP_RETURN_IF_ERROR(FitsInputSlots(mb.rows, 0, "a micro-batch"));
  const size_t rows = static_cast<size_t>(mb.rows);
  // 1. The input, on the copy stream.
  CUDA_CHECK(cudaStreamWaitEvent(r.copy, r.input_free[slot], 0));
  if (mb.idx != nullptr) {
    if (r.data_labels.data() == nullptr) {
      return Status::Internal(
          "cuda: a micro-batch of row numbers, but the group holds no "
          "training set");
    }
    // The staging slot's last copy (micro-batch m - 2) finished: the host waited for its
    // `copied` at the end of that call.
    int32_t* staged = r.idx_host + static_cast<size_t>(slot) * spec_.max_rows;
    std::memcpy(staged, mb.idx, rows * sizeof(int32_t));
    SWEEP_RETURN_IF_ERROR(CheckHeldRows(r, staged, mb.rows, "of a micro-batch"));
    CUDA_CHECK(cudaMemcpyAsync(r.idx[slot].data(), staged, rows * sizeof(int32_t),
                               cudaMemcpyHostToDevice, r.copy));
    // With a transform the rows are gathered beside the input slot, then transformed into it.
    float* gathered = transform_ != nullptr ? r.raw[slot].data() : model.x(slot);
    SWEEP_RETURN_IF_ERROR(gather_rows(gathered, model.y(slot), r.idx[slot].data(), mb.rows,
                                      r.data_u8.data(), r.data_f32.data(), r.data_labels.data(),
                                      r.data_dim, r.copy));
    if (transform_ != nullptr) SWEEP_RETURN_IF_ERROR(TransformHeld(rank, slot, mb));
  } else if (mb.pixels != nullptr) {
    const int64_t dim = spec_.model.input.size();
    if (r.pixels[slot].data() == nullptr) {
      for (DeviceBuffer<uint8_t>& p : r.pixels) {
        SWEEP_RETURN_IF_ERROR(DeviceBuffer<uint8_t>::Make(spec_.max_rows * dim, &p));
      }
    }
    CUDA_CHECK(cudaMemcpyAsync(r.pixels[slot].data(), mb.pixels, rows * static_cast<size_t>(dim),
                               cudaMemcpyHostToDevice, r.copy));
    CUDA_CHECK(cudaMemcpyAsync(model.y(slot), mb.y, rows * sizeof(int32_t), cudaMemcpyHostToDevice,
                               r.copy));
    SWEEP_RETURN_IF_ERROR(gather_rows(model.x(slot), nullptr, nullptr, mb.rows,
                                      r.pixels[slot].data(), nullptr, nullptr, dim, r.copy));
  } else {
    CUDA_CHECK(cudaMemcpyAsync(model.x(slot), mb.x,
                               rows * static_cast<size_t>(spec_.model.input.size()) * sizeof(float),
                               cudaMemcpyHostToDevice, r.copy));
    CUDA_CHECK(cudaMemcpyAsync(model.y(slot), mb.y, rows * sizeof(int32_t), cudaMemcpyHostToDevice,
                               r.copy));
  }
  CUDA_CHECK(cudaEventRecord(r.copied[slot], r.copy));
  // 2. Compute: the step's scalars to the device, then the work, replayed from a CUDA graph
  // once one is captured, else launched.
  CUDA_CHECK(cudaStreamWaitEvent(r.compute, r.copied[slot], 0));
  const OptimizerSpec& opt = spec_.optimizer;
  r.step_host[parity] =
      StepScalars{args.lr, args.t, args.dropout_key,
                  MakeAdamwScalars(args.lr, opt.beta1, opt.beta2, opt.weight_decay, args.t)};
  CUDA_CHECK(cudaMemcpyAsync(r.step_dev.data(), &r.step_host[parity], sizeof(StepScalars),
                             cudaMemcpyHostToDevice, r.compute));
  bool ran = false;
  SWEEP_RETURN_IF_ERROR(ReplayOrCapture(rank, mb, args, &ran));
  if (!ran) SWEEP_RETURN_IF_ERROR(ComputeMicroBatch(rank, mb, args));
  CUDA_CHECK(cudaEventRecord(r.input_free[slot], r.compute));
  r.ends_step[parity] = mb.last;
  r.stats_stale = rank > 0 && model.stats() != nullptr;
  r.step_of[parity] = r.steps;
  CUDA_CHECK(cudaEventRecord(r.done[parity], r.compute));
  ++r.queued;
  if (mb.last) ++r.steps;
  // 3. The previous micro-batch, then this one's input.
  if (m > 0) SWEEP_RETURN_IF_ERROR(Observe(rank, m - 1, finished));
  // An input already copied kept nobody waiting: only a copy still running is timed, so the
  // synchronising call's own microseconds do not count as waiting (2% of a small MLP's epoch).
  const cudaError_t copied = cudaEventQuery(r.copied[slot]);
  if (copied == cudaErrorNotReady) {
    (void)cudaGetLastError();  // an answer, which the runtime keeps as the last error
    const Clock::time_point wait_start = Clock::now();
    CUDA_CHECK(cudaEventSynchronize(r.copied[slot]));
    r.data_wait_s += Since(wait_start);
  } else {
    CUDA_CHECK(copied);
  }
  return Status::Ok();
}

Status CudaReplicaGroup::ComputeMicroBatch(int rank, const MicroBatch& mb, const StepArgs& args) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  ReplicaModel& model = *r.model;
  const int slot = static_cast<int>(r.queued % ReplicaModel::kInputSlots);
  SWEEP_RETURN_IF_ERROR(model.ForwardLoss(slot, mb.rows, args.dloss_scale,
                                          fp16() ? &r.loss_scale.data()->scale : nullptr,
                                          args.dropout_key, mb.first_row, !mb.first));
  const bool reduce = mb.last && size() > 1;
  if (reduce) r.hook->Reset();
  SWEEP_RETURN_IF_ERROR(model.Backward(slot, mb.rows, !mb.first, reduce ? r.hook.get() : nullptr));
  if (mb.last) SWEEP_RETURN_IF_ERROR(FinishStep(rank, args));
  return Status::Ok();
}

// A micro-batch's kernels get the same arguments whenever its GraphKey is the same: the rest
// (learning rate, AdamW's step, the dropout key) they read from the StepScalars, and fp16's
// skip and loss scale from the device too. So once captured, its graph is replayed in its
// place. The first kGraphWarmup launches of a key run as before, so that cuBLAS, cuDNN (the
// plans for its rows) and NCCL have set themselves up before a capture: an epoch's last,
// smaller micro-batch is captured in the third epoch. A capture that fails
// (a library that cannot be captured) turns graphs off for the group's rank, which then
// launches every micro-batch, as with cuda_graphs = false.
Status CudaReplicaGroup::ReplayOrCapture(int rank, const MicroBatch& mb, const StepArgs& args,
                                         bool* ran) {
  constexpr int kGraphWarmup = 2;
  Rank& r = ranks_[static_cast<size_t>(rank)];
  *ran = false;
  if (!spec_.cuda_graphs || r.graphs_off) return Status::Ok();
  std::lock_guard<std::mutex> lock(graphs_mu_);
  if (aborting_) return Aborted();  // a replay would skip the NCCL calls' own check
  // Memory the graphs point at was replaced (a cuDNN plan for a new batch size needed a larger
  // workspace): capture them again.
  if (r.model->memory_epoch() != r.graphs_epoch) {
    DropRankGraphs(r);
    r.graphs_epoch = r.model->memory_epoch();
  }
  uint32_t dloss_bits = 0;
  std::memcpy(&dloss_bits, &args.dloss_scale, sizeof dloss_bits);
  const GraphKey key{static_cast<int>(r.queued % ReplicaModel::kInputSlots),
                     static_cast<int>(r.steps % 2),
                     mb.rows,
                     mb.first_row,
                     mb.first,
                     mb.last,
                     dloss_bits};
  StepGraph& g = r.graphs[key];
  if (g.exec == nullptr) {
    if (++g.seen <= kGraphWarmup) return Status::Ok();
    CUDA_CHECK(cudaStreamBeginCapture(r.compute, cudaStreamCaptureModeThreadLocal));
    r.capturing = true;
    const Status captured = ComputeMicroBatch(rank, mb, args);
    r.capturing = false;
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(r.compute, &graph);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = captured.ok() && ended == cudaSuccess
                                 ? cudaGraphInstantiate(&exec, graph, 0)
                                 : cudaErrorIllegalState;
    if (made != cudaSuccess) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      (void)cudaGetLastError();  // the capture's error: the launched path goes on without it
      if (captured.code() == Status::Code::kAborted) return captured;  // another GPU failed
      r.graphs_off = true;
      std::fprintf(stderr,
                   "sweep: cuda: GPU %d: capturing a training step as a CUDA graph failed "
                   "(%s); its steps are launched one kernel at a time instead\n",
                   r.device,
                   !captured.ok() ? captured.message().c_str()
                                  : cudaGetErrorString(ended != cudaSuccess ? ended : made));
      return Status::Ok();
    }
    g.graph = graph;
    g.exec = exec;
  }
  CUDA_CHECK(cudaGraphLaunch(g.exec, r.compute));
  ++r.graph_launches;
  *ran = true;
  return Status::Ok();
}

Status CudaReplicaGroup::RecordTiming(const Rank& r, cudaEvent_t event, cudaStream_t s) {
  if (r.capturing) {
    CUDA_CHECK(cudaEventRecordWithFlags(event, s, cudaEventRecordExternal));
  } else {
    CUDA_CHECK(cudaEventRecord(event, s));
  }
  return Status::Ok();
}

Status CudaReplicaGroup::FinishStep(int rank, const StepArgs& args) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  ReplicaModel& model = *r.model;
  const size_t sp = static_cast<size_t>(r.steps % 2);
  const double* loss = model.summed_loss();
  if (size() > 1) {
    SWEEP_RETURN_IF_ERROR(SumStepLoss(r, sp));
    loss = r.loss_total.data();
  }
  const int64_t n = spec_.model.num_params;
  const int* skip = nullptr;
  if (fp16()) {
    SWEEP_RETURN_IF_ERROR(unscale_check(model.grads(), n, &r.loss_scale.data()->scale,
                                        r.found_inf.data(), r.compute));
    skip = r.found_inf.data();
  }
  const OptimizerSpec& o = spec_.optimizer;
  if (o.kind == OptimizerSpec::Kind::kSgd) {
    SWEEP_RETURN_IF_ERROR(sgd_update(model.params(), r.opt[0].data(), model.grads(), n, args.lr,
                                     o.momentum, o.weight_decay, o.nesterov, r.compute, skip,
                                     model.params16(), model.half_type(), r.step_dev.data()));
  } else {
    SWEEP_RETURN_IF_ERROR(adamw_update(model.params(), r.opt[0].data(), r.opt[1].data(),
                                       model.grads(), n, args.lr, o.beta1, o.beta2, o.eps,
                                       o.weight_decay, args.t, r.compute, skip,
                                       fp16() ? r.loss_scale.data() : nullptr, model.params16(),
                                       model.half_type(), r.step_dev.data()));
  }
  if (fp16()) {
    SWEEP_RETURN_IF_ERROR(update_loss_scale(r.loss_scale.data(), r.found_inf.data(),
                                            spec_.loss_scale_window, r.compute));
  }
  // The optimizer wrote the 16-bit copy of the weights too (bf16 / fp16): it stays current.
  CUDA_CHECK(
      cudaMemcpyAsync(&r.loss_host[sp], loss, sizeof(double), cudaMemcpyDeviceToHost, r.compute));
  return Status::Ok();
}

Status CudaReplicaGroup::Observe(int rank, int64_t m, std::vector<double>* finished) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  if (m < r.observed) return Status::Ok();
  const size_t parity = static_cast<size_t>(m % 2);
  SWEEP_RETURN_IF_ERROR(WaitPastCollectives(r, r.done[parity]));
  r.observed = m + 1;
  if (!r.ends_step[parity]) return Status::Ok();
  const size_t sp = static_cast<size_t>(r.step_of[parity] % 2);
  finished->push_back(r.loss_host[sp]);
  if (size() > 1) {
    float exposed_ms = 0, span_ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&exposed_ms, r.backward_end[sp], r.comm_done[sp]));
    CUDA_CHECK(cudaEventElapsedTime(&span_ms, r.comm_start[sp], r.comm_done[sp]));
    r.comm_stats.exposed_s += exposed_ms > 0 ? exposed_ms * 1e-3 : 0.0;
    r.comm_stats.reduce_s += span_ms > 0 ? span_ms * 1e-3 : 0.0;
  }
  return Status::Ok();
}

}  // namespace sweep::trainer::cuda
