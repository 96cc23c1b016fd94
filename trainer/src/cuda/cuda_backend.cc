// The CUDA backend (cuda_backend.h): which devices this process has, which groups it takes and
// on which GPUs, making them (replica_group.h), and the health of the devices it has used.
#include "cuda/cuda_backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/device_arch.h"
#include "cuda/net_layout.h"
#include "cuda/replica_group.h"
#include "cuda/replica_model.h"
#include "model.h"

namespace sweep::trainer::cuda {
namespace {

// The devices this process has built groups on, for ContextFault.
std::mutex used_mu;
std::set<int> used_devices;

void NoteDevicesUsed(const std::vector<int>& devices) {
  std::lock_guard<std::mutex> lock(used_mu);
  used_devices.insert(devices.begin(), devices.end());
}

bool HaveNccl() {
#if defined(SWEEP_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

bool HaveCudnn() {
#if defined(SWEEP_HAVE_CUDNN)
  return true;
#else
  return false;
#endif
}

// The ordinals the group will use: spec.devices, or 0 .. replicas - 1.
Result<std::vector<int>> GroupDevices(const GroupSpec& spec, int count) {
  std::vector<int> devices = spec.devices;
  if (devices.empty()) {
    if (spec.replicas > count) {
      return Status::InvalidArgument("cuda: replicas = " + std::to_string(spec.replicas) +
                                     " needs as many GPUs; this " + "process sees " +
                                     std::to_string(count) + " (set replicas, or devices = [...])");
    }
    for (int d = 0; d < spec.replicas; ++d) devices.push_back(d);
  }
  if (static_cast<int>(devices.size()) != spec.replicas) {
    return Status::InvalidArgument("cuda: " + std::to_string(devices.size()) +
                                   " devices for replicas = " + std::to_string(spec.replicas));
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    const int d = devices[i];
    if (d < 0 || d >= count) {
      return Status::InvalidArgument("cuda: device " + std::to_string(d) +
                                     " is not present; this process sees " + std::to_string(count) +
                                     " GPU(s)");
    }
    // NCCL takes one rank per GPU: the same one twice fails its init or hangs.
    if (std::find(devices.begin(), devices.begin() + static_cast<ptrdiff_t>(i), d) !=
        devices.begin() + static_cast<ptrdiff_t>(i)) {
      return Status::InvalidArgument("cuda: device " + std::to_string(d) +
                                     " is listed twice; each replica needs a GPU of its own");
    }
  }
  return devices;
}

// Bytes of activations a replica holds for batches of `rows` rows, as it allocates them. A model
// of linear layers (cuda/mlp.h, `mlp`): the input's slots, each layer's pre-activation, a hidden
// layer's output in fp32 (fp32, or with dropout) and in 16 bits (bf16 / fp16), dropout's mask and
// output, and the gradients' buffers. Any other model: the buffers cuda/net.h allocates, as its
// layout says (cuda/net_layout.h).
double ActivationBytes(const GroupSpec& spec, const MlpView* mlp) {
  const double r = spec.max_rows;
  const bool half = spec.precision != Precision::kFp32;
  if (mlp == nullptr) {
    return NetLayout::Make(spec.model, spec.max_rows, spec.precision, NetOptionsOf(spec))
        .ActivationBytes();
  }
  double bytes = 0;
  const MlpShape& s = mlp->shape;
  const bool keeps_out = !half || mlp->dropout > 0;
  bytes += ReplicaModel::kInputSlots * sizeof(float) * r * s.in(0);
  for (int l = 0; l < s.layers(); ++l) {
    const double n = r * s.out(l);
    const bool hidden = l < s.layers() - 1;
    bytes += sizeof(float) * n;  // pre-activation
    if (hidden && keeps_out) bytes += sizeof(float) * n;
    if (hidden && mlp->dropout > 0) bytes += 2 * sizeof(float) * n;
    if (hidden && half) bytes += sizeof(uint16_t) * n;
  }
  bytes += 2 * sizeof(float) * r * s.max_width();  // the gradients' ping-pong
  if (half) bytes += sizeof(uint16_t) * r * (s.in(0) + s.max_width());
  return bytes;
}

// What to make smaller when the model does not fit: its widths, or the batch where the
// activations are most of it.
std::string WhatToShrink(const ModelSpec& model, bool activations_dominate) {
  const bool conv = std::any_of(model.layers.begin(), model.layers.end(),
                                [](const Layer& l) { return l.kind == LayerKind::kConv; });
  if (activations_dominate) return conv ? "batch_size or channels" : "batch_size or hidden";
  return conv ? "channels or hidden" : "hidden";
}

// What every GPU of the group must hold for the model: weights and gradients in fp32, the
// optimizer's state, the 16-bit copy of the weights in bf16/fp16, and the activations above. A
// lower bound (cuDNN's and cuBLAS's workspaces come on top, checked as their plans are made at
// the first step), so a model refused here could never have been trained, and the user learns
// why in words rather than from a failed cudaMalloc.
double ActivationBytes(const GroupSpec& spec) {
  MlpView mlp;
  const bool as_mlp = AsMlp(spec.model, &mlp) && spec.label_smoothing == 0;
  return ActivationBytes(spec, as_mlp ? &mlp : nullptr);
}

// Weights and gradients in fp32, the optimizer's state, and the 16-bit weights in bf16 / fp16.
double StateBytes(const GroupSpec& spec) {
  const int states = spec.optimizer.kind == OptimizerSpec::Kind::kAdamw ? 2 : 1;
  return static_cast<double>(spec.model.num_params) *
         (sizeof(float) * (2.0 + states) +
          (spec.precision != Precision::kFp32 ? sizeof(uint16_t) : 0));
}

Status CheckDeviceMemory(const GroupSpec& spec, const std::vector<int>& devices) {
  const double params = static_cast<double>(spec.model.num_params);
  const double activations = ActivationBytes(spec);
  const double need = StateBytes(spec) + activations;
  for (int d : devices) {
    CUDA_CHECK(cudaSetDevice(d));
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    if (need > static_cast<double>(free)) {
      char msg[400];
      std::snprintf(msg, sizeof msg,
                    "cuda: the model does not fit in GPU %d's memory: %.0f parameters need at "
                    "least %.1f GiB (weights, gradients, optimizer state, and %.1f GiB of "
                    "activations for %d rows), it has %.1f GiB free of %.1f; make %s smaller",
                    d, params, need / 1073741824.0, activations / 1073741824.0, spec.max_rows,
                    static_cast<double>(free) / 1073741824.0,
                    static_cast<double>(total) / 1073741824.0,
                    WhatToShrink(spec.model, activations > 0.5 * need).c_str());
      return Status::InvalidArgument(msg);
    }
  }
  return Status::Ok();
}

class CudaBackend final : public Backend {
 public:
  std::string_view name() const override { return "cuda"; }
  Status Supports(const GroupSpec& spec) const override {
    const Result<int> count = DeviceCount();
    if (!count.ok()) return count.status();  // NotFound: the CPU may take it
    if (spec.replicas < 1) return Status::InvalidArgument("cuda: replicas must be >= 1");
    MlpView mlp;
    if (!AsMlp(spec.model, &mlp) || spec.label_smoothing != 0) {
      // Any other model trains as cuda/net.h: convolutions need cuDNN in the build.
      if (!HaveCudnn()) {
        // NotFound: the CPU backend trains it (and with backend = "cuda" this is the error).
        return Status::NotFound(
            "cuda: this build has no cuDNN, so models with convolution, pooling or batch norm "
            "layers, or label_smoothing, train on the CPU");
      }
    }
    if (spec.replicas > 1 && !HaveNccl()) {
      return Status::InvalidArgument(
          "cuda: replicas = " + std::to_string(spec.replicas) +
          " needs NCCL for the gradient all-reduce, and this build has none (install NCCL and "
          "rebuild, or run the trial with gpus = 1)");
    }
    SWEEP_ASSIGN_OR_RETURN(const std::vector<int> devices, GroupDevices(spec, *count));
    // A GPU the kernels were not built for fails every launch: refused here with the fix.
    for (int d : devices) {
      SWEEP_RETURN_IF_ERROR(CheckDeviceArchitecture(d, spec.precision, BuiltArchitectures()));
    }
    return Status::Ok();
  }
  Result<std::unique_ptr<ReplicaGroup>> CreateGroup(const GroupSpec& spec) const override {
    SWEEP_RETURN_IF_ERROR(Supports(spec));
    SWEEP_ASSIGN_OR_RETURN(const int count, DeviceCount());
    SWEEP_ASSIGN_OR_RETURN(std::vector<int> devices, GroupDevices(spec, count));
    SWEEP_RETURN_IF_ERROR(CheckDeviceMemory(spec, devices));
    NoteDevicesUsed(devices);
    Result<std::unique_ptr<ReplicaGroup>> group = CudaReplicaGroup::Create(spec, devices);
    if (!group.ok() &&
        group.status().message().find("cudaErrorMemoryAllocation") != std::string::npos) {
      // The weights fit (above), so the activations, another trial sharing the GPU, or
      // another program took the rest.
      return group.status().WithMessage(
          group.status().message() + " (making the model, " +
          std::to_string(spec.model.num_params) + " parameters, for batches of " +
          std::to_string(spec.max_rows) + " rows: make " + WhatToShrink(spec.model, true) +
          " smaller, or leave the GPU to one trial)");
    }
    return group;
  }
};

Result<int> ProbeDevices() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it: the CPU path must not trip over it later
    // The runtime says "insufficient driver" also where there is no driver at all: say which.
    if (err == cudaErrorInsufficientDriver) {
      void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
      if (driver == nullptr) {
        return Status::NotFound(
            "cuda: no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded)");
      }
      ::dlclose(driver);
    }
    return Status::NotFound(std::string("cuda: no usable device (") + cudaGetErrorName(err) + ": " +
                            cudaGetErrorString(err) + ")");
  }
  if (count < 1) return Status::NotFound("cuda: no device");
  return count;
}

}  // namespace

Result<int> DeviceCount() {
  static const Result<int> count = ProbeDevices();
  return count;
}

const Backend* GetBackend() {
  static const CudaBackend backend;
  return &backend;
}

std::string ContextFault() {
  std::set<int> devices;
  {
    std::lock_guard<std::mutex> lock(used_mu);
    devices = used_devices;
  }
  if (devices.empty()) return "";
  int current = 0;
  const bool restore = cudaGetDevice(&current) == cudaSuccess;
  std::string fault;
  for (const int d : devices) {
    // A broken context fails these with its sticky error; a healthy idle one returns at once.
    cudaError_t err = cudaSetDevice(d);
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      fault = "GPU " + std::to_string(d) + ": " + cudaGetErrorName(err) + " (" +
              cudaGetErrorString(err) + ")";
      break;
    }
  }
  if (restore) cudaSetDevice(current);
  (void)cudaGetLastError();  // said in `fault`; not the next launch's error
  return fault;
}

double DeviceBytesNeeded(const GroupSpec& spec) { return StateBytes(spec) + ActivationBytes(spec); }

}  // namespace sweep::trainer::cuda
