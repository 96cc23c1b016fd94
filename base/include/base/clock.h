// The wall clock as the store records times: Unix seconds, with fractions.
#pragma once

#include <chrono>

namespace sweep {

inline double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace sweep
