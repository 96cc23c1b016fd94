// libFuzzer target for the config loader: any bytes go through sweep::ParseConfig and
// sweep::ParseSetValue. Besides the sanitizers' findings, it checks the loader's contract: a
// refusal is an InvalidArgument whose message starts with the file name, and an accepted config
// has a valid name, a metric and at least one trial. Built by tests/fuzz/CMakeLists.txt (clang).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "sweep/config.h"

namespace {

[[noreturn]] void Violated(const char* what, const std::string& detail) {
  std::fprintf(stderr, "config_fuzzer: contract violated: %s\n  %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto cfg = sweep::ParseConfig(text, "fuzz.toml");
  if (cfg.ok()) {
    if (!sweep::IsValidSweepName(cfg->sweep.name))
      Violated("accepted an invalid name", cfg->sweep.name);
    if (cfg->sweep.metric.empty()) Violated("accepted a config with no metric", cfg->sweep.name);
    if (cfg->sweep.max_trials < 1) {
      Violated("accepted a config with no trials", std::to_string(cfg->sweep.max_trials));
    }
  } else {
    const std::string& message = cfg.status().message();
    if (cfg.status().code() != sweep::Status::Code::kInvalidArgument) {
      Violated("a refusal that is not InvalidArgument", message);
    }
    if (message.rfind("fuzz.toml", 0) != 0) Violated("a message without the file name", message);
  }

  // `--set KEY=VALUE` reads VALUE with the same TOML parser; it never fails, only falls back to
  // a string.
  (void)sweep::ParseSetValue(text);
  return 0;
}
