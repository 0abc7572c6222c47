// What the kernels run on, so that every speed figure can say it: the CPU's model name, the SIMD
// target the run-time dispatch chose for this CPU, and the int8 dot instruction of the quantised
// prompt kernels on that target.
#pragma once

#include <string>

namespace squeezekv {

struct CpuInfo {
  std::string model;        // e.g. "AMD EPYC 9R14 96-Core Processor" ("unknown" if not found)
  std::string simd_target;  // Highway's name of the dispatched target, e.g. "AVX3_DL", "AVX2"
  std::string int8_dot;     // e.g. "vpdpbusd (AVX512-VNNI) tiles", "vpmaddubsw half-group tiles"
  double mhz = 0;           // the clock the OS reports for core 0 (0 if not found; may be nominal)
};

// Thread-safe; reads /proc/cpuinfo once per call.
CpuInfo cpu_info();

}  // namespace squeezekv
