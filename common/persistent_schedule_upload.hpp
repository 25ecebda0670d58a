// common/persistent_schedule_upload.hpp - a PersistentSchedule in device memory, with the
// counters its instructions signal, for kernels/persistent_decode.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/persistent_schedule.hpp"
#include "kernels/persistent_decode.cuh"

namespace ladder {

class PersistentScheduleOnDevice {
 public:
  /// Uploads `schedule` (one allocation, outside any chapter allocator: it lives as long
  /// as the decoder keeps it) and waits until the copy is done. Throws ladder::CudaError
  /// or ladder::DeviceOutOfMemory.
  explicit PersistentScheduleOnDevice(PersistentSchedule schedule);
  ~PersistentScheduleOnDevice();
  PersistentScheduleOnDevice(const PersistentScheduleOnDevice&) = delete;
  PersistentScheduleOnDevice& operator=(const PersistentScheduleOnDevice&) = delete;

  const PersistentSchedule& schedule() const { return schedule_; }
  /// The arrays as the kernel reads them.
  PersistentScheduleView view() const { return view_; }
  /// Zeroes the counters on `stream`: every launch starts from them at 0.
  void reset_counters(cudaStream_t stream) const;

 private:
  PersistentSchedule schedule_;
  void* memory_ = nullptr;
  PersistentScheduleView view_;
};

}  // namespace ladder
