// common/device_info.hpp - what GPU this is, and how fast its memory really is.
#pragma once

#include <cstddef>
#include <string>

namespace ladder {

struct DeviceInfo {
  std::string name;
  int device = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int multiprocessors = 0;
  std::size_t total_memory = 0;
  std::size_t l2_cache_bytes = 0;
  int driver_version = 0;   ///< e.g. 13000
  int runtime_version = 0;  ///< e.g. 13000
};

/// Queries the current device. Throws NoCudaDevice when there is none.
DeviceInfo query_device_info();

/// One line: "NVIDIA H200 | sm_90 | 132 SMs | 139.80 GiB | driver 13.0 | runtime 13.0".
std::string device_banner(const DeviceInfo& info);

/// "13.0" from 13000.
std::string cuda_version_string(int version);

/// The practical memory ceiling: a device-to-device copy of `bytes`, repeated, timed
/// with CUDA events; returns bytes moved per second counting the bytes read plus the
/// bytes written (the median of the repeats).
double measure_copy_bandwidth(std::size_t bytes = std::size_t{1} << 30, int repeats = 20);

}  // namespace ladder
