// The emulator's NCCL (include/nccl.h says what it models). A clique is the communicators made
// by one ncclCommInitAll; the k-th collective each rank calls is the clique's collective k,
// done by whichever rank joins it last.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "emu_streams.h"
#include "nccl.h"

namespace {

enum class Kind { kAllReduce, kBroadcast };

struct Op {
  Kind kind;
  const void* send;
  void* recv;
  size_t count;
  ncclDataType_t type;
  int root;
};

struct Clique {
  explicit Clique(int n) : ranks(n) {}
  const int ranks;
  std::mutex mu;
  std::condition_variable cv;
  bool aborted = false;
  std::map<uint64_t, std::vector<std::unique_ptr<Op>>> joined;  // collective -> per rank
  std::map<uint64_t, bool> done;
  // Collective -> per rank, where its part is queued (stream, position), until it runs.
  std::map<uint64_t, std::map<int, std::pair<cudaStream_t, uint64_t>>> queued;
};

}  // namespace

struct ncclComm {
  std::shared_ptr<Clique> clique;
  int rank;
  uint64_t next = 0;  // this rank's next collective
};

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "nccl_emu: %s\n", what.c_str());
  std::abort();
}

const char* Name(const Op& op) { return op.kind == Kind::kAllReduce ? "all-reduce" : "broadcast"; }

std::string Describe(int rank, const Op& op) {
  return "rank " + std::to_string(rank) + " " + Name(op) + "s " + std::to_string(op.count) +
         (op.type == ncclFloat ? " floats" : " doubles") +
         (op.kind == Kind::kBroadcast ? " from rank " + std::to_string(op.root) : "");
}

template <typename T>
void Run(const std::vector<std::unique_ptr<Op>>& ops) {
  const Op& first = *ops[0];
  std::vector<T> result(first.count);
  if (first.kind == Kind::kAllReduce) {
    for (const auto& op : ops) {  // in rank order, so the sum is the same bits on every rank
      const T* in = static_cast<const T*>(op->send);
      for (size_t i = 0; i < first.count; ++i) result[i] += in[i];
    }
  } else {
    std::memcpy(result.data(), ops[static_cast<size_t>(first.root)]->send, first.count * sizeof(T));
  }
  for (const auto& op : ops) std::memcpy(op->recv, result.data(), first.count * sizeof(T));
}

// Called with the clique's lock held, when every rank has joined collective k.
void Complete(Clique& c, uint64_t k) {
  auto& ops = c.joined[k];
  for (int r = 1; r < c.ranks; ++r) {
    const Op& a = *ops[0];
    const Op& b = *ops[static_cast<size_t>(r)];
    if (a.kind != b.kind || a.count != b.count || a.type != b.type || a.root != b.root) {
      Die("collective " + std::to_string(k) + ": " + Describe(0, a) + " but " + Describe(r, b));
    }
  }
  if (ops[0]->type == ncclFloat) {
    Run<float>(ops);
  } else {
    Run<double>(ops);
  }
  c.joined.erase(k);
  c.done[k] = true;
  c.cv.notify_all();
}

// This thread's open groups: collectives on the legacy stream are joined at once and waited for
// at the end; parts queued on streams are remembered, with where they sit.
struct GroupPart {
  std::shared_ptr<Clique> clique;
  uint64_t k;
  int rank;
  cudaStream_t stream;
  uint64_t position;
};
thread_local int group_depth = 0;
thread_local std::vector<std::pair<std::shared_ptr<Clique>, uint64_t>> group_waits;
thread_local std::vector<GroupPart> group_parts;

// Waits for collective k. A rank whose part was queued in a group (one thread queued every
// rank's part) gets that part run from here, unless another thread is running its stream.
ncclResult_t Wait(const std::shared_ptr<Clique>& c, uint64_t k) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  std::unique_lock<std::mutex> lock(c->mu);
  while (!c->aborted && c->done.count(k) == 0) {
    std::vector<std::pair<cudaStream_t, uint64_t>> parts;
    for (const auto& [rank, where] : c->queued[k]) parts.push_back(where);
    lock.unlock();
    bool ran = false;
    for (const auto& [stream, position] : parts) ran = cuda_emu::TryRunTo(stream, position) || ran;
    lock.lock();
    if (c->aborted || c->done.count(k) > 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      Die("collective " + std::to_string(k) + " waited a minute for a rank that never joined");
    }
    if (!ran) c->cv.wait_for(lock, std::chrono::milliseconds(10));
  }
  return c->aborted ? ncclRemoteError : ncclSuccess;
}

// Rank's part of collective k arrives; the last one to arrive does the collective.
void Arrive(Clique& c, uint64_t k, int rank, const Op& op) {
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.aborted) return;
  c.queued[k].erase(rank);
  auto& ops = c.joined[k];
  ops.resize(static_cast<size_t>(c.ranks));
  ops[static_cast<size_t>(rank)] = std::make_unique<Op>(op);
  bool all = true;
  for (const auto& o : ops) all = all && o != nullptr;
  if (all) {
    c.queued.erase(k);
    Complete(c, k);
  }
}

// A collective's part, queued on the stream as CUDA would queue NCCL's kernel: it arrives when
// the stream gets there, and the stream goes on once the collective is done. On the legacy
// stream it arrives now, and is waited for now, or at the group's end.
ncclResult_t Join(ncclComm_t comm, const Op& op, cudaStream_t stream) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (op.type != ncclFloat && op.type != ncclDouble) return ncclInvalidArgument;
  if (op.count > 0 && (op.send == nullptr || op.recv == nullptr)) return ncclInvalidArgument;
  // In a stream capture: joined afresh, as the next collective, at each launch of the graph.
  if (stream != nullptr &&
      cuda_emu::Capture(stream, [comm, op](cudaStream_t s) { Join(comm, op, s); })) {
    return ncclSuccess;
  }
  const std::shared_ptr<Clique> c = comm->clique;
  const uint64_t k = comm->next++;
  const int rank = comm->rank;
  if (stream == nullptr) {
    Arrive(*c, k, rank, op);
    if (group_depth > 0) {
      group_waits.emplace_back(c, k);
      return ncclSuccess;
    }
    return Wait(c, k);
  }
  const uint64_t position = cuda_emu::NextPosition(stream);
  const bool queued = cuda_emu::Enqueue(stream, [c, k, rank, op] {
    Arrive(*c, k, rank, op);
    Wait(c, k);
  });
  if (!queued) return ncclInvalidArgument;
  if (group_depth > 0) group_parts.push_back({c, k, rank, stream, position});
  return ncclSuccess;
}

}  // namespace

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1) return ncclInvalidArgument;
  int count = 0;
  cudaGetDeviceCount(&count);
  auto clique = std::make_shared<Clique>(ndev);
  for (int r = 0; r < ndev; ++r) {
    const int device = devlist != nullptr ? devlist[r] : r;
    if (device < 0 || device >= count) return ncclInvalidArgument;
    comms[r] = new ncclComm{clique, r};
  }
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  {
    std::lock_guard<std::mutex> lock(comm->clique->mu);
    comm->clique->aborted = true;
    comm->clique->cv.notify_all();
  }
  delete comm;
  return ncclSuccess;
}

namespace {
std::atomic<int> injected_async_error{ncclSuccess};
}  // namespace

void nccl_emu::InjectAsyncError(ncclResult_t error) { injected_async_error = error; }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || asyncError == nullptr) return ncclInvalidArgument;
  *asyncError = static_cast<ncclResult_t>(injected_async_error.load());
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  // A group in which this thread queued several ranks' parts of a clique's collectives: only
  // this thread will wait for them, so a wait may run them (Wait). Where each rank's own thread
  // queues its own part, nobody else runs its streams: two threads each running the other's
  // streams could wait on each other for ever.
  auto parts = std::move(group_parts);
  group_parts.clear();
  std::map<Clique*, std::set<int>> ranks_of;
  for (const GroupPart& p : parts) ranks_of[p.clique.get()].insert(p.rank);
  for (const GroupPart& p : parts) {
    if (ranks_of[p.clique.get()].size() < 2) continue;
    std::lock_guard<std::mutex> lock(p.clique->mu);
    if (p.clique->done.count(p.k) == 0) p.clique->queued[p.k][p.rank] = {p.stream, p.position};
  }
  ncclResult_t result = ncclSuccess;
  auto waits = std::move(group_waits);
  group_waits.clear();
  for (const auto& [clique, k] : waits) {
    const ncclResult_t r = Wait(clique, k);
    if (result == ncclSuccess) result = r;
  }
  return result;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  if (op != ncclSum) return ncclInvalidArgument;
  return Join(comm, Op{Kind::kAllReduce, sendbuff, recvbuff, count, datatype, 0}, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  if (comm == nullptr || root < 0 || root >= comm->clique->ranks) return ncclInvalidArgument;
  return Join(comm, Op{Kind::kBroadcast, sendbuff, recvbuff, count, datatype, root}, stream);
}
