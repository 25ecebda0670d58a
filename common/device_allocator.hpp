// common/device_allocator.hpp - the interface every device allocator implements.
//
// Chapters take their activations and caches from a DeviceAllocator chosen by name
// ("caching": PyTorch's default caching allocator; "expandable": PyTorch's
// expandable segments, on CUDA virtual memory management). Both keep the same
// statistics, so the chapters' tables compare directly.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

namespace ladder {

/// What every chapter's table reports, plus the counts the chapters compare.
struct AllocatorStats {
  std::size_t allocated_bytes = 0;       ///< bytes in live blocks (after rounding)
  std::size_t reserved_bytes = 0;        ///< bytes obtained from the driver and not yet released
  std::size_t peak_allocated_bytes = 0;  ///< since the last reset_peak_stats()
  std::size_t peak_reserved_bytes = 0;   ///< since the last reset_peak_stats()
  std::uint64_t allocations = 0;         ///< allocate() calls since the last reset_peak_stats()
  std::uint64_t driver_allocations = 0;  ///< cudaMalloc / cuMemCreate calls since the last reset
  std::uint64_t driver_frees = 0;        ///< cudaFree / cuMemRelease calls since the last reset

  /// (peak reserved - peak allocated) / peak reserved, as the table reports it; 0 if nothing
  /// reserved.
  double fragmentation() const {
    if (peak_reserved_bytes == 0) return 0.0;
    return static_cast<double>(peak_reserved_bytes - peak_allocated_bytes) /
           static_cast<double>(peak_reserved_bytes);
  }
};

/// How an allocator's destructor gives its memory back: every step is attempted, and
/// what goes wrong is one line on stderr, never an exception (a destructor must not
/// throw, and one failed release must not keep the others from running).
class AllocatorTeardown {
 public:
  /// `allocator` names it in the messages, e.g. "caching allocator".
  explicit AllocatorTeardown(const char* allocator) : allocator_(allocator) {}

  /// Warns when blocks are still allocated; `consequence` says what their pointers
  /// point to once the teardown is done (e.g. "freed memory").
  void warn_if_allocated(const AllocatorStats& last, const char* consequence) const;

  /// Runs `step` (a synchronization, a release) and reports what it throws.
  template <typename Step>
  void attempt(const Step& step) const {
    try {
      step();
    } catch (const std::exception& error) {
      report(error);
    }
  }

 private:
  void report(const std::exception& error) const;
  const char* allocator_;
};

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  DeviceAllocator() = default;
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  /// A block of at least `bytes` bytes (256-byte aligned) usable on `stream`.
  /// Throws DeviceOutOfMemory saying how much was asked and how much is reserved.
  virtual void* allocate(std::size_t bytes, cudaStream_t stream) = 0;
  /// Returns a block to the allocator's cache (not to the driver).
  virtual void deallocate(void* pointer) = 0;
  /// Returns every unused cached byte to the driver (synchronizes the device first).
  virtual void empty_cache() = 0;
  virtual AllocatorStats stats() const = 0;
  /// Peak values restart from the current ones; the counters restart from zero.
  virtual void reset_peak_stats() = 0;
  virtual std::string name() const = 0;
};

/// "caching" or "expandable"; throws std::invalid_argument naming the choices otherwise.
std::unique_ptr<DeviceAllocator> make_device_allocator(const std::string& name);

/// A block owned by a DeviceAllocator, given back when this goes out of scope.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceAllocator& allocator, std::size_t bytes, cudaStream_t stream)
      : allocator_(&allocator), pointer_(allocator.allocate(bytes, stream)), bytes_(bytes) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      allocator_ = other.allocator_;
      pointer_ = other.pointer_;
      bytes_ = other.bytes_;
      other.allocator_ = nullptr;
      other.pointer_ = nullptr;
      other.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void reset() {
    if (pointer_ != nullptr) allocator_->deallocate(pointer_);
    pointer_ = nullptr;
    bytes_ = 0;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(pointer_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  DeviceAllocator* allocator_ = nullptr;
  void* pointer_ = nullptr;
  std::size_t bytes_ = 0;
};

/// A DeviceBuffer of `count` elements of T. It converts to T* wherever a launcher takes
/// one, so a chapter passes its buffers as they are, without casting at every call.
template <typename T>
class TypedBuffer {
 public:
  TypedBuffer() = default;
  TypedBuffer(DeviceAllocator& allocator, std::size_t count, cudaStream_t stream)
      : buffer_(allocator, count * sizeof(T), stream) {}

  T* get() const { return buffer_.as<T>(); }
  operator T*() const { return get(); }  // NOLINT(google-explicit-constructor): see above
  std::size_t bytes() const { return buffer_.bytes(); }

 private:
  DeviceBuffer buffer_;
};

}  // namespace ladder
