// common/cuda_check.hpp - checked CUDA, cuBLAS and driver calls.
//
// Every call into CUDA goes through one of these macros. A failure throws
// ladder::CudaError carrying the call, the file and the line, so a user sees
// one clear line instead of a crash or a silently wrong answer.
#pragma once

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace ladder {

/// Thrown by the check macros; what() is one line: where, what was called, what went wrong.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Thrown when no usable CUDA device exists (no driver, no GPU, or a driver too old).
class NoCudaDevice : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Thrown when a device allocation cannot be satisfied; says how much was asked.
class DeviceOutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);
[[noreturn]] void throw_driver_error(CUresult status, const char* call, const char* file, int line);

/// Human-readable name of a cuBLAS status.
const char* cublas_status_name(cublasStatus_t status);

/// What cudaGetDeviceCount's answer says about this machine.
enum class DeviceAvailability {
  usable,  ///< at least one device
  absent,  ///< no GPU or no driver: the only answer that lets GPU work be skipped
  broken,  ///< a GPU and driver that fail (driver/runtime mismatch, failed initialisation)
};

/// Classifies an answer of cudaGetDeviceCount: absent for cudaErrorNoDevice,
/// cudaErrorInsufficientDriver (what the runtime says on a machine with no driver at
/// all) or a count of 0; broken for every other error. Otherwise `reason` receives one
/// line saying why no device can be used.
DeviceAvailability classify_device_count(cudaError_t status, int count, std::string* reason);

/// Asks cudaGetDeviceCount and classifies its answer (clearing the error it leaves).
DeviceAvailability query_device_availability(std::string* reason = nullptr);

/// Throws NoCudaDevice when there is no device or no driver ("no CUDA device found"),
/// CudaError when the device is there but fails, and returns when one can be used.
void require_cuda_device();

/// Formats a byte count as "1.23 GiB" / "512 KiB".
std::string format_bytes(double bytes);

}  // namespace ladder

#define CUDA_CHECK(call)                                                        \
  do {                                                                          \
    const cudaError_t ladder_status_ = (call);                                  \
    if (ladder_status_ != cudaSuccess)                                          \
      ::ladder::throw_cuda_error(ladder_status_, #call, __FILE__, __LINE__);    \
  } while (0)

#define CUBLAS_CHECK(call)                                                      \
  do {                                                                          \
    const cublasStatus_t ladder_status_ = (call);                               \
    if (ladder_status_ != CUBLAS_STATUS_SUCCESS)                                \
      ::ladder::throw_cublas_error(ladder_status_, #call, __FILE__, __LINE__);  \
  } while (0)

#define CU_CHECK(call)                                                          \
  do {                                                                          \
    const CUresult ladder_status_ = (call);                                     \
    if (ladder_status_ != CUDA_SUCCESS)                                         \
      ::ladder::throw_driver_error(ladder_status_, #call, __FILE__, __LINE__);  \
  } while (0)

namespace ladder {

/// True while `stream` is capturing a CUDA graph (or holds a capture that an illegal
/// call invalidated): work enqueued on it now is recorded, not run.
bool stream_is_capturing(cudaStream_t stream);

/// What CUDA_CHECK_LAUNCH does after a kernel launch on `stream`. Launch-configuration
/// errors are caught always (cudaGetLastError). Debug builds (NDEBUG unset) also wait
/// for the stream, so a fault is reported at its kernel - except while the stream
/// captures a graph: the kernel has not run yet, and a synchronization would invalidate
/// the capture. Inline, so that NDEBUG is the including file's.
inline void check_launch(cudaStream_t stream, const char* file, int line) {
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) throw_cuda_error(launched, "kernel launch", file, line);
#ifndef NDEBUG
  if (stream_is_capturing(stream)) return;
  const cudaError_t ran = cudaStreamSynchronize(stream);
  if (ran != cudaSuccess) throw_cuda_error(ran, "kernel run (debug synchronization)", file, line);
#else
  static_cast<void>(stream);
#endif
}

}  // namespace ladder

/// After a kernel launch on `stream`: see ladder::check_launch.
#define CUDA_CHECK_LAUNCH(stream) ::ladder::check_launch((stream), __FILE__, __LINE__)
