// The wall clock as the store records times: Unix seconds, with fractions.
#pragma once

#include <chrono>

namespace sweep {

inline double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The time as the coordinator sees it: the wall clock, or a test's clock that moves only when
// told to (so a test of time budgets and timings runs in milliseconds).
class Clock {
 public:
  virtual ~Clock() = default;
  virtual double Now() const = 0;  // Unix seconds
};

class SystemClock final : public Clock {
 public:
  double Now() const override { return UnixSeconds(); }
};

}  // namespace sweep
