// The CUDA ReplicaGroup with several GPUs (replica_group.h): one NCCL communicator per rank, the
// start-up broadcast, bucketed gradient all-reduce, the step's loss sum, and aborting on failure.
#include "cuda/replica_group.h"

#include <mutex>
#include <shared_mutex>
#include <thread>
#include <utility>
#include <vector>

#include "cuda/cuda_check.h"

namespace sweep::trainer::cuda {

// Several GPUs and a rank that fails (a CUDA error on its device): the others would wait for
// ever in all-reduces it never joins. The failing rank aborts every communicator
// (ncclCommAbort ends the NCCL kernels they wait behind); the others then fail at their next
// NCCL call, and Run rethrows the first failure, so the trial fails with its cause. NCCL calls
// hold nccl_mu_ shared and the abort holds it exclusively, so no call uses a freed
// communicator; after an abort the group only reports errors.
// One GPU: no communicators and no comm stream, and NCCL is never loaded.

Status CudaReplicaGroup::InitCommunicators() {
#if defined(SWEEP_HAVE_NCCL)
  const int R = size();
  // One communicator per rank, made together from this thread, kept for the whole trial.
  // A process that trains sets NCCL_RUNTIME_CONNECT=0 at its start (ConnectNcclAtInit), so
  // that every connection is made here rather than at a collective's first call.
  std::vector<ncclComm_t> comms(static_cast<size_t>(R), nullptr);
  std::vector<int> devices;
  for (const Rank& r : ranks_) devices.push_back(r.device);
  const ncclResult_t made = ncclCommInitAll(comms.data(), R, devices.data());
  NCCL_CHECK(made);
  for (int i = 0; i < R; ++i) ranks_[static_cast<size_t>(i)].nccl = comms[static_cast<size_t>(i)];
  return Status::Ok();
#else
  return Status::InvalidArgument("cuda: several GPUs need NCCL, which this build lacks");
#endif
}

void CudaReplicaGroup::AbortFaultedCommunicators() {
#if defined(SWEEP_HAVE_NCCL)
  bool faulted = false;
  for (Rank& r : ranks_) {
    ncclResult_t async = ncclSuccess;
    if (r.nccl != nullptr && ncclCommGetAsyncError(r.nccl, &async) == ncclSuccess &&
        async != ncclSuccess && async != ncclInProgress) {
      faulted = true;
    }
  }
  if (faulted) AbortCommunicators();
#endif
}

void CudaReplicaGroup::DestroyCommunicators() {
#if defined(SWEEP_HAVE_NCCL)
  // One thread destroys every rank's communicator: as a group, since a destroy may wait for
  // the other ranks' (it finalizes the communicator, an intra-node collective). None with one
  // GPU (or once aborted): then NCCL is not even loaded.
  bool any = false;
  for (const Rank& r : ranks_) any = any || r.nccl != nullptr;
  if (any) {
    ncclGroupStart();
    for (Rank& r : ranks_) {
      if (r.nccl != nullptr) ncclCommDestroy(r.nccl);
    }
    ncclGroupEnd();
  }
#endif
}

void CudaReplicaGroup::AbortCommunicators() {
#if defined(SWEEP_HAVE_NCCL)
  if (size() == 1) return;
  // No graph is captured or launched from here on, and those made go: NCCL's abort waits for
  // the graphs that hold its collectives.
  {
    std::lock_guard<std::mutex> lock(graphs_mu_);
    aborting_ = true;
  }
  DropGraphs();
  std::unique_lock<std::shared_mutex> lock(nccl_mu_);
  if (aborted_) return;
  aborted_ = true;
  for (Rank& r : ranks_) {
    if (r.nccl != nullptr) ncclCommAbort(r.nccl);  // an error here has nowhere to go
    r.nccl = nullptr;
  }
#endif
}

Status CudaReplicaGroup::Aborted() const {
  return Status::Aborted("cuda: another GPU of this trial failed; its all-reduce was aborted");
}

Status CudaReplicaGroup::BroadcastFromRank0() {
#if defined(SWEEP_HAVE_NCCL)
  std::shared_lock<std::shared_mutex> lock(nccl_mu_);
  if (aborted_) return Aborted();
  // One thread drives every communicator here, so the calls form one NCCL group.
  const size_t n = static_cast<size_t>(spec_.model.num_params);
  NCCL_CHECK(ncclGroupStart());
  Status first = Status::Ok();
  auto keep = [&first](Status s) {
    if (first.ok()) first = std::move(s);
  };
  for (Rank& r : ranks_) {
    keep([&]() -> Status {
      NCCL_CHECK(
          ncclBroadcast(r.model->params(), r.model->params(), n, ncclFloat, 0, r.nccl, r.compute));
      for (DeviceBuffer<float>& o : r.opt) {
        NCCL_CHECK(ncclBroadcast(o.data(), o.data(), n, ncclFloat, 0, r.nccl, r.compute));
      }
      return Status::Ok();
    }());
  }
  keep([]() -> Status {
    NCCL_CHECK(ncclGroupEnd());
    return Status::Ok();
  }());
  return first;
#else
  return Status::InvalidArgument("cuda: several GPUs need NCCL, which this build lacks");
#endif
}

Status BucketHook::LayerDone(int layer) {
  // Buckets complete in order, each when backward has queued its lowest layer.
  if (next_ < group_->buckets_.size() && group_->buckets_[next_].first_layer == layer) {
    SWEEP_RETURN_IF_ERROR(group_->StartBucket(rank_, next_));
    ++next_;
  }
  return Status::Ok();
}

Status CudaReplicaGroup::StartBucket(int rank, size_t b) {
#if defined(SWEEP_HAVE_NCCL)
  Rank& r = ranks_[static_cast<size_t>(rank)];
  const GradBucket& bucket = buckets_[b];
  CUDA_CHECK(cudaEventRecord(r.bucket_ready[b], r.compute));
  CUDA_CHECK(cudaStreamWaitEvent(r.comm, r.bucket_ready[b], 0));
  if (b == 0) {
    SWEEP_RETURN_IF_ERROR(RecordTiming(r, r.comm_start[static_cast<size_t>(r.steps % 2)], r.comm));
  }
  float* g = r.model->grads() + bucket.begin;
  std::shared_lock<std::shared_mutex> lock(nccl_mu_);
  if (aborted_) return Aborted();
  NCCL_CHECK(ncclAllReduce(g, g, static_cast<size_t>(bucket.end - bucket.begin), ncclFloat, ncclSum,
                           r.nccl, r.comm));
  return Status::Ok();
#else
  (void)rank;
  (void)b;
  return Status::InvalidArgument("cuda: several GPUs need NCCL, which this build lacks");
#endif
}

Status CudaReplicaGroup::SumStepLoss(Rank& r, size_t sp) {
#if defined(SWEEP_HAVE_NCCL)
  ReplicaModel& model = *r.model;
  // Every bucket's all-reduce is queued on the comm stream, which has waited for the last
  // bucket (recorded after the loss was summed): add the ranks' losses there too.
  // The timing events are external in a capture: a CUDA graph still records them at each
  // replay. comm_joined, an ordinary record, is what compute waits for.
  SWEEP_RETURN_IF_ERROR(RecordTiming(r, r.backward_end[sp], r.compute));
  {
    std::shared_lock<std::shared_mutex> lock(nccl_mu_);
    if (aborted_) return Aborted();
    NCCL_CHECK(ncclAllReduce(model.summed_loss(), r.loss_total.data(), 1, ncclDouble, ncclSum,
                             r.nccl, r.comm));
  }
  SWEEP_RETURN_IF_ERROR(RecordTiming(r, r.comm_done[sp], r.comm));
  CUDA_CHECK(cudaEventRecord(r.comm_joined[sp], r.comm));
  CUDA_CHECK(cudaStreamWaitEvent(r.compute, r.comm_joined[sp], 0));
  return Status::Ok();
#else
  (void)r;
  (void)sp;
  return Status::InvalidArgument("cuda: several GPUs need NCCL, which this build lacks");
#endif
}

Status CudaReplicaGroup::WaitPastCollectives(Rank& r, cudaEvent_t event) {
  if (size() == 1) {
    CUDA_CHECK(cudaEventSynchronize(event));
    return Status::Ok();
  }
  for (unsigned spins = 1;; ++spins) {
    const cudaError_t ready = cudaEventQuery(event);
    if (ready == cudaSuccess) return Status::Ok();
    if (ready != cudaErrorNotReady) CUDA_CHECK(ready);
    // Not ready is an answer, not a fault, but the runtime keeps it as the thread's last error
    // all the same: the next launch's check would fail on it.
    (void)cudaGetLastError();
    if (spins % 64 == 0) SWEEP_RETURN_IF_ERROR(CheckAsyncError(r));
    std::this_thread::yield();
  }
}

Status CudaReplicaGroup::CheckAsyncError(Rank& r) {
#if defined(SWEEP_HAVE_NCCL)
  std::shared_lock<std::shared_mutex> lock(nccl_mu_);
  if (aborted_) return Aborted();
  ncclResult_t async = ncclSuccess;
  NCCL_CHECK(ncclCommGetAsyncError(r.nccl, &async));
  if (async != ncclSuccess && async != ncclInProgress) {
    return NcclStatus(static_cast<int>(async), ncclGetErrorString(async),
                      "an all-reduce (ncclCommGetAsyncError)", __FILE__, __LINE__);
  }
#else
  (void)r;
#endif
  return Status::Ok();
}

CommStats CudaReplicaGroup::TakeCommStats() {
  const CommStats s = ranks_[0].comm_stats;
  ranks_[0].comm_stats = CommStats{};
  return s;
}

}  // namespace sweep::trainer::cuda
