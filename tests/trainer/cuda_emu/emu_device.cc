// The backend's device query, as the emulator answers it: one device.
#include "cuda/cuda_backend.h"

namespace sweep::trainer::cuda {

Result<int> DeviceCount() { return 1; }

}  // namespace sweep::trainer::cuda
