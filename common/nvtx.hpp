// common/nvtx.hpp - NVTX ranges, so every stage of a step shows by name in a profiler
// (Nsight Systems' timeline, Nsight Compute's --nvtx filters).
#pragma once

#include <nvtx3/nvToolsExt.h>

namespace ladder {

/// Pushes a named range for the lifetime of the object.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace ladder
