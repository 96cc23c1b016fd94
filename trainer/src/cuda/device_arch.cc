// The architecture checks of device_arch.h: parsing CMake's list, and the device's capability.
#include "cuda/device_arch.h"

#include <cuda_runtime_api.h>

#include <cctype>
#include <string>
#include <vector>

#include "cuda/cuda_check.h"

#ifndef SWEEP_CUDA_ARCHITECTURES_LIST
#error "SWEEP_CUDA_ARCHITECTURES_LIST: CMake defines it from SWEEP_CUDA_ARCHITECTURES"
#endif

namespace sweep::trainer::cuda {
namespace {

// One entry of the list: "86", "90-real", "90a-virtual", "100f".
struct Arch {
  bool parsed = false;  // false: a name CMake resolves ("all", "native", ...)
  int major = 0, minor = 0;
  char suffix = 0;  // 'a': this capability alone; 'f': its family, as plain
  bool real = true, virt = true;
};

Arch ParseArch(std::string_view s) {
  Arch a;
  size_t i = 0;
  int n = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) != 0) {
    n = n * 10 + (s[i] - '0');
    if (n > 9999) return a;  // no capability is that large (and n stays an int)
    ++i;
  }
  if (i == 0 || n < 10) return a;
  if (i < s.size() && std::isalpha(static_cast<unsigned char>(s[i])) != 0) a.suffix = s[i++];
  const std::string_view rest = s.substr(i);
  if (rest == "-real") {
    a.virt = false;
  } else if (rest == "-virtual") {
    a.real = false;
  } else if (!rest.empty()) {
    return a;
  }
  a.parsed = true;
  a.major = n / 10;
  a.minor = n % 10;
  return a;
}

std::vector<std::string_view> Split(std::string_view archs) {
  std::vector<std::string_view> out;
  while (!archs.empty()) {
    const size_t semi = archs.find_first_of(";,");
    const std::string_view item = archs.substr(0, semi);
    if (!item.empty()) out.push_back(item);
    if (semi == std::string_view::npos) break;
    archs.remove_prefix(semi + 1);
  }
  return out;
}

std::string Capability(int major, int minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

// "a", "a and b", "a, b and c".
std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? " and " : ", ";
    out += items[i];
  }
  return out;
}

}  // namespace

bool ArchitecturesRun(std::string_view archs, int major, int minor) {
  for (std::string_view item : Split(archs)) {
    const Arch a = ParseArch(item);
    if (!a.parsed) return true;
    const bool exact = a.major == major && a.minor == minor;
    if (a.suffix == 'a') {
      if (exact) return true;
      continue;
    }
    if (a.real && a.major == major && a.minor <= minor) return true;
    if (a.virt && (a.major < major || (a.major == major && a.minor <= minor))) return true;
  }
  return false;
}

std::string DescribeArchitectures(std::string_view archs) {
  std::vector<std::string> real, ptx, other;
  for (std::string_view item : Split(archs)) {
    const Arch a = ParseArch(item);
    if (!a.parsed) {
      other.emplace_back(item);
      continue;
    }
    const std::string cap =
        Capability(a.major, a.minor) + (a.suffix != 0 ? std::string(1, a.suffix) : "");
    if (a.real) real.push_back(cap);
    if (a.virt) ptx.push_back(cap + (a.suffix == 'a' ? "" : " and later"));
  }
  std::vector<std::string> parts;
  if (!real.empty()) parts.push_back("machine code for " + Join(real));
  if (!ptx.empty()) parts.push_back("PTX for " + Join(ptx));
  if (!other.empty()) parts.push_back(Join(other));
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out.empty() ? std::string("nothing") : out;
}

std::string ArchitectureGap(std::string_view archs, int major, int minor) {
  if (ArchitecturesRun(archs, major, minor)) return "";
  std::string list = std::to_string(major * 10 + minor) + "-real";
  for (std::string_view item : Split(archs)) list += ";" + std::string(item);
  return "compute capability " + Capability(major, minor) +
         ": this build's kernels do not run on it (" + DescribeArchitectures(archs) +
         "); rebuild with -DSWEEP_CUDA_ARCHITECTURES=\"" + list + "\"";
}

Status CheckDeviceArchitecture(int device, Precision precision, std::string_view archs) {
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (const std::string gap = ArchitectureGap(archs, major, minor); !gap.empty()) {
    return Status::InvalidArgument("cuda: GPU " + std::to_string(device) + ", " + gap +
                                   ", or set backend = \"cpu\"");
  }
  if (precision == Precision::kBf16 && major < 8) {
    return Status::InvalidArgument(
        "cuda: precision = \"bf16\" needs a GPU of compute capability "
        "8.0 or later, and GPU " +
        std::to_string(device) + " is " + Capability(major, minor) +
        ": use precision = \"fp16\" or \"fp32\"");
  }
  return Status::Ok();
}

std::string_view BuiltArchitectures() { return SWEEP_CUDA_ARCHITECTURES_LIST; }

}  // namespace sweep::trainer::cuda
