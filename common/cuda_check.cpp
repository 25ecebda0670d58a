// common/cuda_check.cpp - error formatting for the checked-call macros.
#include "common/cuda_check.hpp"

#include <cstdio>
#include <sstream>

namespace ladder {

namespace {

std::string where(const char* call, const char* file, int line) {
  std::ostringstream text;
  text << file << ":" << line << ": " << call;
  return text.str();
}

// cuGetErrorName lives in the driver library, which is never linked (see
// CMakeLists.txt); ask the runtime for its entry point instead.
const char* driver_error_name(CUresult status) {
  using GetErrorName = CUresult (*)(CUresult, const char**);
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuGetErrorName", &function, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || function == nullptr) {
    return "unknown driver error";
  }
  const char* name = nullptr;
  if (reinterpret_cast<GetErrorName>(function)(status, &name) != CUDA_SUCCESS || name == nullptr)
    return "unknown driver error";
  return name;
}

}  // namespace

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  const std::string message = where(call, file, line) + " failed: " + cudaGetErrorName(status) +
                              " (" + cudaGetErrorString(status) + ")";
  if (status == cudaErrorMemoryAllocation) throw DeviceOutOfMemory(message);
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver)
    throw NoCudaDevice("no CUDA device found: " + message);
  throw CudaError(message);
}

const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cuBLAS status";
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  const std::string message = where(call, file, line) + " failed: " + cublas_status_name(status);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw DeviceOutOfMemory(message);
  throw CudaError(message);
}

void throw_driver_error(CUresult status, const char* call, const char* file, int line) {
  const std::string message = where(call, file, line) + " failed: " + driver_error_name(status) +
                              " (" + std::to_string(static_cast<int>(status)) + ")";
  if (status == CUDA_ERROR_OUT_OF_MEMORY) throw DeviceOutOfMemory(message);
  throw CudaError(message);
}

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

DeviceAvailability classify_device_count(cudaError_t status, int count, std::string* reason) {
  if (status == cudaSuccess && count > 0) return DeviceAvailability::usable;
  const bool absent =
      status == cudaSuccess || status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver;
  if (reason != nullptr)
    *reason = absent ? std::string("no CUDA device found (no NVIDIA GPU or driver on this machine)")
                     : std::string("the CUDA device cannot be used: cudaGetDeviceCount failed: ") +
                           cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
  return absent ? DeviceAvailability::absent : DeviceAvailability::broken;
}

DeviceAvailability query_device_availability(std::string* reason) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  cudaGetLastError();  // clear this (non-sticky) error so that later calls start clean
  return classify_device_count(status, count, reason);
}

void require_cuda_device() {
  std::string reason;
  switch (query_device_availability(&reason)) {
    case DeviceAvailability::usable:
      return;
    case DeviceAvailability::absent:
      throw NoCudaDevice(reason);
    case DeviceAvailability::broken:
      throw CudaError(reason);
  }
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", bytes, units[unit]);
  return text;
}

void* allocate_device_memory(std::size_t bytes, const std::string& what) {
  void* memory = nullptr;
  const cudaError_t status = cudaMalloc(&memory, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw DeviceOutOfMemory("out of device memory: " + what + " needs " +
                            format_bytes(static_cast<double>(bytes)));
  }
  CUDA_CHECK(status);
  return memory;
}

void upload_and_wait(void* device, const void* host, std::size_t bytes) {
  cudaError_t uploaded = cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice);
  if (uploaded == cudaSuccess) uploaded = cudaDeviceSynchronize();
  if (uploaded != cudaSuccess) {
    cudaFree(device);
    CUDA_CHECK(uploaded);
  }
}

}  // namespace ladder
