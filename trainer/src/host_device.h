// SWEEP_HOST_DEVICE marks a function that nvcc compiles for the device as well as the host (the
// optimizer's step rules, the seed mixing): one definition for both backends.
#pragma once

#if defined(__CUDACC__)
#define SWEEP_HOST_DEVICE __host__ __device__
#else
#define SWEEP_HOST_DEVICE
#endif
