// An owned, zero-filled device array (cudaMalloc/cudaFree), the CUDA backend's FloatBuffer.
// Made through Make(), which reports a failed allocation as a Status. Move-only; not
// thread-safe. Frees on the current device's context: destroy it where it was made.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <utility>

#include "base/status.h"
#include "cuda/cuda_check.h"

namespace sweep::trainer::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  // n elements (n may be 0: no allocation), zero-filled.
  static Status Make(int64_t n, DeviceBuffer* out) {
    DeviceBuffer b;
    if (n > 0) {
      const size_t bytes = static_cast<size_t>(n) * sizeof(T);
      void* p = nullptr;
      CUDA_CHECK(cudaMalloc(&p, bytes));
      b.data_ = static_cast<T*>(p);
      b.size_ = n;
      CUDA_CHECK(cudaMemset(p, 0, bytes));
      // The zeroing runs on the legacy stream, which the group's non-blocking streams do not
      // wait for: it is done before the buffer is handed out.
      CUDA_CHECK(cudaStreamSynchronize(nullptr));
    }
    *out = std::move(b);
    return Status::Ok();
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t size() const { return size_; }
  size_t bytes() const { return static_cast<size_t>(size_) * sizeof(T); }

 private:
  void Reset() {
    if (data_ != nullptr) cudaFree(data_);  // an error here has nowhere to go
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace sweep::trainer::cuda
