// tests/kernel_report/occupancy.cpp - theoretical occupancy of a kernel on the preset
// architectures, from the CUDA toolkit's header-only calculator (cuda_occupancy.h).
//
//   echo "90 112 1280 256 0" | build/ci/tests/kernel_occupancy
//
// Reads one kernel per line: architecture (80, 86, 89 or 90), registers per thread,
// static shared bytes per block, threads per block, dynamic shared bytes per block.
// Writes one line per input line: resident blocks per SM, resident warps per SM, the
// SM's maximum warps, and what limits the blocks (warps, registers, shared, blocks).
// Needs no GPU: the SM limits of each architecture are in occupancy_calculator.hpp.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "occupancy_calculator.hpp"

namespace {

std::string limiter(unsigned int factors) {
  std::string names;
  const auto add = [&](unsigned int bit, const char* name) {
    if ((factors & bit) == 0) return;
    if (!names.empty()) names += "+";
    names += name;
  };
  add(OCC_LIMIT_WARPS, "warps");
  add(OCC_LIMIT_REGISTERS, "registers");
  add(OCC_LIMIT_SHARED_MEMORY, "shared");
  add(OCC_LIMIT_BLOCKS, "blocks");
  add(OCC_LIMIT_BARRIERS, "barriers");
  return names.empty() ? "-" : names;
}

}  // namespace

int main() {
  std::string line;
  int line_number = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    std::istringstream fields(line);
    int code = 0;
    int registers = 0;
    std::size_t static_shared = 0;
    int threads = 0;
    std::size_t dynamic_shared = 0;
    if (!(fields >> code >> registers >> static_shared >> threads >> dynamic_shared)) {
      std::fprintf(stderr, "kernel_occupancy: error: line %d: expected 5 numbers\n", line_number);
      return 2;
    }
    const kernel_report::Architecture* architecture = kernel_report::find_architecture(code);
    if (architecture == nullptr) {
      std::fprintf(stderr, "kernel_occupancy: error: line %d: unknown architecture %d\n",
                   line_number, code);
      return 2;
    }
    cudaOccResult result;
    if (!kernel_report::occupancy(*architecture, registers, static_shared, threads, dynamic_shared,
                                  &result)) {
      std::fprintf(stderr, "kernel_occupancy: error: line %d: the calculator rejected it\n",
                   line_number);
      return 2;
    }
    const int warps_per_block = (threads + 31) / 32;
    std::printf("%d %d %d %s\n", result.activeBlocksPerMultiprocessor,
                result.activeBlocksPerMultiprocessor * warps_per_block,
                architecture->threads_per_sm / 32, limiter(result.limitingFactors).c_str());
  }
  return 0;
}
