// tests/gpu/device_test_helpers.hpp - small tools for GPU tests: an RAII device array
// (upload, download, poison), an RAII stream, fresh random inputs with a reproducible
// seed, and a comparison that cannot be fooled by NaN.
//
// Typical use:
//   const std::uint32_t seed = test::fresh_seed();
//   INFO("seed " << seed << " (rerun with LADDER_TEST_SEED=" << seed << ")");
//   std::mt19937 rng(seed);
//   test::DeviceArray<float> x(test::random_uniform(rng, n, -1.0f, 1.0f));
//   test::DeviceArray<float> out(n);
//   out.poison();                       // every unwritten element reads NaN (or -1)
//   launch_something(x.get(), out.get(), ..., stream.get());
//   stream.synchronize();
//   REQUIRE(test::checked_relative_error(out.download(), expected) <= 1e-5);
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/reference.hpp"

namespace ladder::test {

/// `count` elements of T in device memory, freed when this goes out of scope.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t count) : count_(count) {
    if (count_ > 0) CUDA_CHECK(cudaMalloc(&data_, bytes()));
  }
  /// A device copy of `host`.
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);  // a destructor must not throw
  }
  DeviceArray(DeviceArray&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    if (this != &other) {
      if (data_ != nullptr) cudaFree(data_);
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }

  /// Copies `host` (exactly size() elements) to the device.
  void upload(const std::vector<T>& host) {
    if (host.size() != count_)
      throw std::invalid_argument("DeviceArray::upload: " + std::to_string(host.size()) +
                                  " elements for an array of " + std::to_string(count_));
    if (count_ > 0) CUDA_CHECK(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }

  /// The array's contents. Synchronizes the whole device first, so work queued on any
  /// stream is finished (and its errors are reported here).
  std::vector<T> download() const {
    std::vector<T> host(count_);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (count_ > 0) CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

  /// Fills every byte with 0xFF: a float reads NaN, an int32 reads -1. Poisoning an
  /// output before a kernel runs makes every element it fails to write stand out.
  void poison() {
    if (count_ > 0) {
      CUDA_CHECK(cudaMemset(data_, 0xFF, bytes()));
      CUDA_CHECK(cudaDeviceSynchronize());
    }
  }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

/// A CUDA stream (blocking with respect to the legacy default stream), destroyed
/// when this goes out of scope.
class DeviceStream {
 public:
  DeviceStream() { CUDA_CHECK(cudaStreamCreate(&stream_)); }
  ~DeviceStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;

  cudaStream_t get() const { return stream_; }
  /// Waits for the stream and reports an asynchronous kernel error as ladder::CudaError.
  void synchronize() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

/// A fresh seed from std::random_device, or the value of the LADDER_TEST_SEED
/// environment variable when it is set, so that a failing run can be repeated.
inline std::uint32_t fresh_seed() {
  if (const char* fixed = std::getenv("LADDER_TEST_SEED"); fixed != nullptr && *fixed != '\0')
    return static_cast<std::uint32_t>(std::stoul(fixed));
  return std::random_device{}();
}

/// n floats drawn uniformly from [low, high).
inline std::vector<float> random_uniform(std::mt19937& rng, std::size_t n, float low, float high) {
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(n);
  for (float& value : values) value = distribution(rng);
  return values;
}

/// n integers drawn uniformly from [low, high] (both included).
inline std::vector<std::int32_t> random_ints(std::mt19937& rng, std::size_t n, std::int32_t low,
                                             std::int32_t high) {
  std::uniform_int_distribution<std::int32_t> distribution(low, high);
  std::vector<std::int32_t> values(n);
  for (std::int32_t& value : values) value = distribution(rng);
  return values;
}

/// reference::relative_error (max |a - e| / max |e|), except that a size mismatch or a
/// non-finite value on either side gives +infinity: a NaN left by an unwritten
/// (poisoned) element can never pass.
inline double checked_relative_error(const std::vector<float>& actual,
                                     const std::vector<float>& expected) {
  if (actual.size() != expected.size() || actual.empty())
    return std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (!std::isfinite(actual[i]) || !std::isfinite(expected[i]))
      return std::numeric_limits<double>::infinity();
  }
  return reference::relative_error(actual.data(), expected.data(), actual.size());
}

}  // namespace ladder::test
