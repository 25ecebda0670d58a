// common/cuda_check.hpp - checked CUDA, cuBLAS and driver calls.
//
// Every call into CUDA goes through one of these macros. A failure throws
// ladder::CudaError carrying the call, the file and the line, so a user sees
// one clear line instead of a crash or a silently wrong answer.
#pragma once

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
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

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);
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

/// cudaMalloc of `bytes`; throws DeviceOutOfMemory ("out of device memory: WHAT needs
/// 1.23 GiB") when the device has no room, ladder::CudaError on another failure.
void* allocate_device_memory(std::size_t bytes, const std::string& what);

/// Copies `bytes` from host memory to `device` and waits until the device holds them:
/// cudaMemcpy from pageable memory may return once the bytes are staged, on the legacy
/// default stream, which the decoders' non-blocking streams do not wait for, so the copy
/// is complete only once the device has synchronized. On a failure frees `device` (an
/// allocation of allocate_device_memory) and throws ladder::CudaError.
void upload_and_wait(void* device, const void* host, std::size_t bytes);

}  // namespace ladder

#define CUDA_CHECK(call)                                                     \
  do {                                                                       \
    const cudaError_t ladder_status_ = (call);                               \
    if (ladder_status_ != cudaSuccess)                                       \
      ::ladder::throw_cuda_error(ladder_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                     \
  do {                                                                         \
    const cublasStatus_t ladder_status_ = (call);                              \
    if (ladder_status_ != CUBLAS_STATUS_SUCCESS)                               \
      ::ladder::throw_cublas_error(ladder_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CU_CHECK(call)                                                         \
  do {                                                                         \
    const CUresult ladder_status_ = (call);                                    \
    if (ladder_status_ != CUDA_SUCCESS)                                        \
      ::ladder::throw_driver_error(ladder_status_, #call, __FILE__, __LINE__); \
  } while (0)

namespace ladder {

/// True while `stream` is capturing a CUDA graph (or holds a capture that an illegal
/// call invalidated): work enqueued on it now is recorded, not run.
bool stream_is_capturing(cudaStream_t stream);

/// The stream a kernel was launched on, as CUDA_CHECK_LAUNCH passes it: known when the
/// launcher names it, unknown for a launcher written before launches were checked per
/// stream.
struct LaunchStream {
  LaunchStream() = default;
  LaunchStream(cudaStream_t launched_on) : stream(launched_on), known(true) {}  // NOLINT
  cudaStream_t stream = nullptr;
  bool known = false;
};

/// What CUDA_CHECK_LAUNCH does after a kernel launch. Launch-configuration errors are
/// caught always (cudaGetLastError). Debug builds (NDEBUG unset) also wait, so that a
/// fault is reported at its kernel: for the launch's stream, unless that stream is
/// capturing a graph (the kernel has not run yet, and a wait would invalidate the
/// capture); for the whole device when the stream is unknown, which no launcher that
/// may run inside a capture can afford. Inline, so that NDEBUG is the including file's.
inline void check_launch(LaunchStream launched, const char* file, int line) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw_cuda_error(status, "kernel launch", file, line);
#ifndef NDEBUG
  if (launched.known && stream_is_capturing(launched.stream)) return;
  const cudaError_t ran =
      launched.known ? cudaStreamSynchronize(launched.stream) : cudaDeviceSynchronize();
  if (ran != cudaSuccess) throw_cuda_error(ran, "kernel run (debug synchronization)", file, line);
#else
  static_cast<void>(launched);
#endif
}

}  // namespace ladder

/// After a kernel launch: CUDA_CHECK_LAUNCH(stream), naming the launch's stream (safe
/// inside a graph capture), or CUDA_CHECK_LAUNCH() (waits for the whole device in debug
/// builds); see ladder::check_launch.
#define CUDA_CHECK_LAUNCH(...) \
  ::ladder::check_launch(::ladder::LaunchStream{__VA_ARGS__}, __FILE__, __LINE__)
