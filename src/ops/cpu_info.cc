// CPU facts for reports (see cpu_info.h).
#include "squeezekv/ops/cpu_info.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "hwy/targets.h"

namespace squeezekv {
namespace {

// When `line` starts with `key` and `value` is still empty: value = the text after its colon.
bool field(const std::string& line, const char* key, std::string& value) {
  if (line.rfind(key, 0) != 0 || !value.empty()) return false;
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return false;
  const size_t start = line.find_first_not_of(' ', colon + 1);
  value = start == std::string::npos ? std::string() : line.substr(start);
  return true;
}

}  // namespace

CpuInfo cpu_info() {
  CpuInfo info;
  std::string mhz;
  std::ifstream in("/proc/cpuinfo");  // core 0's lines come first; one pass
  for (std::string line; std::getline(in, line) && (info.model.empty() || mhz.empty());) {
    if (!field(line, "model name", info.model)) field(line, "cpu MHz", mhz);
  }
  if (info.model.empty()) info.model = "unknown";
  if (!mhz.empty()) info.mhz = std::strtod(mhz.c_str(), nullptr);
  // The dispatch picks the best (lowest-bit) target that is both compiled in and supported.
  const int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  const int64_t best = usable & -usable;
  info.simd_target = best != 0 ? hwy::TargetName(best) : "none";
#if HWY_ARCH_X86
  const bool vnni = (best == HWY_AVX3 || best == HWY_AVX3_DL) && __builtin_cpu_supports("avx512vnni");
  const bool byte_dot = best == HWY_AVX2 || best == HWY_AVX3 || best == HWY_AVX3_DL;
  // Without VNNI repacked matrices take the half-group tiles, the rest (--no-repack) rows.
  info.int8_dot = vnni ? "vpdpbusd (AVX512-VNNI) tiles" : byte_dot ? "vpmaddubsw half-group tiles" : "int16 rows";
#else
  info.int8_dot = "int16 rows";
#endif
  return info;
}

}  // namespace squeezekv
