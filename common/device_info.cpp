// common/device_info.cpp - device banner and the measured copy bandwidth.
#include "common/device_info.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "common/cuda_check.hpp"

namespace ladder {

DeviceInfo query_device_info() {
  require_cuda_device();
  DeviceInfo info;
  CUDA_CHECK(cudaGetDevice(&info.device));
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, info.device));
  info.name = properties.name;
  info.compute_capability_major = properties.major;
  info.compute_capability_minor = properties.minor;
  info.multiprocessors = properties.multiProcessorCount;
  info.total_memory = properties.totalGlobalMem;
  info.l2_cache_bytes = static_cast<std::size_t>(properties.l2CacheSize);
  CUDA_CHECK(cudaDriverGetVersion(&info.driver_version));
  CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
  return info;
}

std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string device_banner(const DeviceInfo& info) {
  char text[256];
  std::snprintf(text, sizeof text, "%s | sm_%d%d | %d SMs | %s | driver %s | runtime %s",
                info.name.c_str(), info.compute_capability_major, info.compute_capability_minor,
                info.multiprocessors, format_bytes(static_cast<double>(info.total_memory)).c_str(),
                cuda_version_string(info.driver_version).c_str(),
                cuda_version_string(info.runtime_version).c_str());
  return text;
}

double measure_copy_bandwidth(std::size_t bytes, int repeats) {
  void* source = nullptr;
  void* destination = nullptr;
  CUDA_CHECK(cudaMalloc(&source, bytes));
  CUDA_CHECK(cudaMalloc(&destination, bytes));
  CUDA_CHECK(cudaMemset(source, 1, bytes));
  cudaEvent_t start{};
  cudaEvent_t stop{};
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> milliseconds;
  for (int i = 0; i < repeats + 2; ++i) {  // two warm-up copies
    CUDA_CHECK(cudaEventRecord(start));
    CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float elapsed = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    if (i >= 2) milliseconds.push_back(elapsed);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  CUDA_CHECK(cudaFree(source));
  CUDA_CHECK(cudaFree(destination));
  std::nth_element(milliseconds.begin(), milliseconds.begin() + repeats / 2, milliseconds.end());
  const double median_seconds = milliseconds[static_cast<std::size_t>(repeats / 2)] * 1e-3;
  return 2.0 * static_cast<double>(bytes) / median_seconds;
}

}  // namespace ladder
