// tests/gpu/device_test_helpers.hpp - small tools for GPU tests: an RAII device array
// (upload, download, poison) and its deliberately unaligned twin, an RAII stream, a launch
// into a poisoned output, fresh random inputs with a reproducible seed, and a comparison
// that cannot be fooled by NaN.
//
// Typical use:
//   LADDER_SEEDED_RNG(rng);             // std::mt19937 rng, its seed reported on failure
//   test::DeviceArray<float> x(test::random_uniform(rng, n, -1.0f, 1.0f));
//   test::DeviceArray<float> out(n);
//   out.poison();                       // every unwritten element reads NaN (or -1)
//   launch_something(x.get(), out.get(), ..., stream.get());
//   stream.synchronize();
//   REQUIRE(test::checked_relative_error(out.download(), expected) <= 1e-5);
// or, the same in one call:
//   const std::vector<float> result = test::launch_into_poisoned(n, stream, [&](float* out) {
//     launch_something(x.get(), out, ..., stream.get());
//   });
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
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
#include "kernels/decode_position.cuh"

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

/// `count` elements of T that start one element past cudaMalloc's 256-byte alignment, so
/// they are only sizeof(T)-aligned: a kernel must take its scalar path (float4 reads would
/// fault). The element in front is allocated too, so a write before the array shows.
template <typename T>
class UnalignedDeviceArray {
 public:
  explicit UnalignedDeviceArray(std::size_t count) : storage_(count + 1) {}
  /// A device copy of `host`, with T{} in the element in front.
  explicit UnalignedDeviceArray(const std::vector<T>& host) : storage_(behind_one_element(host)) {}

  T* get() const { return storage_.get() + 1; }

  /// The array's contents, the element in front left out (synchronizes like DeviceArray).
  std::vector<T> download() const {
    std::vector<T> host = storage_.download();
    host.erase(host.begin());
    return host;
  }

  /// The element just before get(): what construction or poison() put there, unless a
  /// kernel wrote out of bounds.
  T element_in_front() const { return storage_.download().front(); }

  /// Poisons the array and the element in front (see DeviceArray::poison).
  void poison() { storage_.poison(); }

 private:
  static std::vector<T> behind_one_element(const std::vector<T>& host) {
    std::vector<T> padded(host.size() + 1);
    std::copy(host.begin(), host.end(), padded.begin() + 1);
    return padded;
  }

  DeviceArray<T> storage_;
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

/// Runs `launch(out)` with `out` a fresh device array of `count` floats, poisoned first,
/// waits for `stream` (reporting an asynchronous kernel error) and returns what `out` holds:
/// every element the launch failed to write reads NaN, which checked_relative_error rejects.
template <typename Launch>
std::vector<float> launch_into_poisoned(std::size_t count, const DeviceStream& stream,
                                        Launch&& launch) {
  DeviceArray<float> out(count);
  out.poison();
  launch(out.get());
  stream.synchronize();
  return out.download();
}

/// A device-resident decode cursor {step, position}, as the decode loop keeps it.
inline DeviceArray<DecodePosition> device_cursor(int step, int position) {
  return DeviceArray<DecodePosition>(std::vector<DecodePosition>{DecodePosition{step, position}});
}

/// A fresh seed from std::random_device, or the value of the LADDER_TEST_SEED
/// environment variable when it is set, so that a failing run can be repeated.
inline std::uint32_t fresh_seed() {
  if (const char* fixed = std::getenv("LADDER_TEST_SEED"); fixed != nullptr && *fixed != '\0')
    return static_cast<std::uint32_t>(std::stoul(fixed));
  return std::random_device{}();
}

/// Declares `std::mt19937 rng` seeded by fresh_seed() and reports the seed with every
/// failure in the enclosing scope ("seed S (rerun with LADDER_TEST_SEED=S)"). A macro
/// because Catch's INFO holds only in the scope it is written in.
#define LADDER_SEEDED_RNG(rng)                                                          \
  const std::uint32_t rng##_seed = ::ladder::test::fresh_seed();                        \
  INFO("seed " << rng##_seed << " (rerun with LADDER_TEST_SEED=" << rng##_seed << ")"); \
  std::mt19937 rng(rng##_seed)

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

/// rows x C floats for a LayerNorm test: each row is noise of spread 1 around its own
/// offset in [-4, 4), large against the spread, which breaks a one-pass E[x^2] - E[x]^2
/// variance. Each row's noise is rescaled to exactly the standard deviation of uniform
/// noise on [-1, 1) (1 / sqrt(3)): fp32's error in (x - mean) / std grows with
/// |mean| / std, and a short row (C = 3) whose values fall close together by chance
/// would otherwise ask fp32 for more digits than it has (a one-in-200 failure at 1e-5).
inline std::vector<float> offset_rows(std::mt19937& rng, int rows, int C) {
  std::vector<float> x = random_uniform(rng, static_cast<std::size_t>(rows) * C, -1.0f, 1.0f);
  const std::vector<float> offsets =
      random_uniform(rng, static_cast<std::size_t>(rows), -4.0f, 4.0f);
  for (int r = 0; r < rows; ++r) {
    float* const row = x.data() + static_cast<std::size_t>(r) * C;
    double sum = 0.0;
    for (int c = 0; c < C; ++c) sum += row[c];
    const double mean = sum / C;
    double squares = 0.0;
    for (int c = 0; c < C; ++c) squares += (row[c] - mean) * (row[c] - mean);
    const double spread = std::sqrt(squares / C);
    const double scale = C > 1 && spread > 0.0 ? 1.0 / (std::sqrt(3.0) * spread) : 1.0;
    for (int c = 0; c < C; ++c)
      row[c] = static_cast<float>(offsets[r] + mean + (row[c] - mean) * scale);
  }
  return x;
}

/// rows * columns floats drawn uniformly from [low, high): a row-major matrix.
inline std::vector<float> random_matrix(std::mt19937& rng, int rows, int columns, float low,
                                        float high) {
  return random_uniform(rng, static_cast<std::size_t>(rows) * columns, low, high);
}

/// qkv [rows, 3C] for attention tests: q and k in [-2, 2), spread so that the softmax is
/// neither flat nor one-hot (scores q.k / sqrt(D) with a standard deviation of about 1.3
/// for every D); v in [-1, 1).
inline std::vector<float> random_qkv(std::mt19937& rng, std::size_t rows, int C) {
  std::vector<float> qkv = random_uniform(rng, rows * 3 * C, -2.0f, 2.0f);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (std::size_t r = 0; r < rows; ++r)
    for (int c = 2 * C; c < 3 * C; ++c) qkv[r * 3 * C + c] = value(rng);
  return qkv;
}

/// Row t of every sequence of `sequences` [B, T, width], as one [B, width] array: what
/// a decode loop feeds (or expects) at step t.
inline std::vector<float> rows_at_step(const std::vector<float>& sequences, int B, int T, int t,
                                       int width) {
  std::vector<float> rows(static_cast<std::size_t>(B) * width);
  for (int b = 0; b < B; ++b) {
    const std::size_t row = static_cast<std::size_t>(b) * T + t;
    std::copy_n(sequences.begin() + static_cast<std::ptrdiff_t>(row * width), width,
                rows.begin() + static_cast<std::ptrdiff_t>(b) * width);
  }
  return rows;
}

/// True when every value is NaN (an empty vector included), as a poisoned or
/// NaN-answering output reads.
inline bool all_nan(const std::vector<float>& values) {
  return std::all_of(values.begin(), values.end(), [](float v) { return std::isnan(v); });
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
