// The CPU backend: replicas are threads, GEMMs are OpenBLAS's, the collective is the
// shared-memory all-reduce of cpu/collective.h. Owned by the registry (backend.cc); the
// returned Backend is a stateless singleton, safe from any thread.
#pragma once

#include "backend.h"

namespace sweep::trainer::cpu {

const Backend* GetBackend();

}  // namespace sweep::trainer::cpu
