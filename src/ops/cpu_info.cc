// CPU facts for reports (see cpu_info.h).
#include "squeezekv/ops/cpu_info.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "hwy/targets.h"

namespace squeezekv {
namespace {

// The value after "key<spaces>:" on the first line of /proc/cpuinfo that starts with key.
std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return {};
}

}  // namespace

CpuInfo cpu_info() {
  CpuInfo info;
  info.model = cpuinfo_field("model name");
  if (info.model.empty()) info.model = "unknown";
  const std::string mhz = cpuinfo_field("cpu MHz");
  if (!mhz.empty()) info.mhz = std::strtod(mhz.c_str(), nullptr);
  // The dispatch picks the best (lowest-bit) target that is both compiled in and supported.
  const int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  const int64_t best = usable & -usable;
  info.simd_target = best != 0 ? hwy::TargetName(best) : "none";
#if HWY_ARCH_X86
  const bool vnni = (best == HWY_AVX3 || best == HWY_AVX3_DL) && __builtin_cpu_supports("avx512vnni");
  const bool byte_dot = best == HWY_AVX2 || best == HWY_AVX3 || best == HWY_AVX3_DL;
  info.int8_dot = vnni ? "vpdpbusd (AVX512-VNNI) tiles" : byte_dot ? "vpmaddubsw rows" : "int16 rows";
#else
  info.int8_dot = "int16 rows";
#endif
  return info;
}

}  // namespace squeezekv
