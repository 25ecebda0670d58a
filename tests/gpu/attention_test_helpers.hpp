// tests/gpu/attention_test_helpers.hpp - what the attention tests share: a KV cache on the
// host (edited position by position, to build expected caches) and on the device, the CPU
// references' expected outputs, the buffers of a decode fed one position per step, and a
// check that a launcher rejects every null pointer.
//
// Typical use:
//   const test::KVCacheShape shape{B, H, C, capacity};    // keys, values [B, H, capacity, D]
//   test::HostKVCache expected = test::random_kv_cache(rng, shape);
//   test::DeviceKVCache cache(expected);
//   launch_append_kv_at_cursor(qkv_device.get(), cache.keys(), cache.values(), ...);
//   expected.store(qkv, position);
//   test::check_same_bits(cache, expected);
#pragma once

#include <cuda_runtime.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <random>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/reference.hpp"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder::test {

/// A model width C split into H heads of D = C / H.
struct HeadShape {
  int C;
  int H;
};

// ---------------------------------------------------------------- queries and outputs

/// The q third of qkv [B, 3C], as its own [B, C] array.
inline std::vector<float> queries_of(const std::vector<float>& qkv, int B, int C) {
  std::vector<float> q(static_cast<std::size_t>(B) * C);
  for (int b = 0; b < B; ++b)
    std::copy_n(qkv.begin() + static_cast<std::ptrdiff_t>(b) * 3 * C, C,
                q.begin() + static_cast<std::ptrdiff_t>(b) * C);
  return q;
}

/// `values` after `count` zeros: uploaded, values start `count` floats past the allocation's
/// aligned start (count = 1: off every 16-byte boundary, so a kernel takes its scalar path).
inline std::vector<float> with_leading_zeros(const std::vector<float>& values, std::size_t count) {
  std::vector<float> shifted(count + values.size(), 0.0f);
  std::copy(values.begin(), values.end(), shifted.begin() + static_cast<std::ptrdiff_t>(count));
  return shifted;
}

/// `count` floats on the device, poisoned: every element a kernel fails to write reads NaN.
inline DeviceArray<float> poisoned_floats(std::size_t count) {
  DeviceArray<float> array(count);
  array.poison();
  return array;
}

/// How many elements of `actual` differ bit for bit from `expected` (NaN equals NaN when the
/// bits agree; a size mismatch counts every element).
inline std::size_t count_bit_mismatches(const std::vector<float>& actual,
                                        const std::vector<float>& expected) {
  if (actual.size() != expected.size()) return std::max(actual.size(), expected.size());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < actual.size(); ++i)
    if (std::memcmp(&actual[i], &expected[i], sizeof(float)) != 0) ++mismatches;
  return mismatches;
}

// ---------------------------------------------------------------- KV cache

/// The dimensions of a KV cache: keys and values are each [B, H, capacity, D], D = C / H.
struct KVCacheShape {
  int B;
  int H;
  int C;
  int capacity;

  int D() const { return C / H; }
  /// Elements of keys (and of values).
  std::size_t elements() const { return static_cast<std::size_t>(B) * capacity * C; }
  /// Index of (b, h, s, d = 0).
  std::size_t index(int b, int h, int s) const {
    return ((static_cast<std::size_t>(b) * H + h) * capacity + s) * D();
  }
};

/// Overwrites position s of every (b, h) of `cache` (keys or values) with `fill`.
inline void fill_position(std::vector<float>& cache, const KVCacheShape& shape, int s, float fill) {
  for (int b = 0; b < shape.B; ++b)
    for (int h = 0; h < shape.H; ++h)
      std::fill_n(cache.begin() + static_cast<std::ptrdiff_t>(shape.index(b, h, s)), shape.D(),
                  fill);
}

/// A KV cache on the host: a kernel's input, or what it should leave on the device.
struct HostKVCache {
  KVCacheShape shape;
  std::vector<float> keys;
  std::vector<float> values;

  /// Overwrites positions first .. capacity - 1 of keys and values with `fill`.
  void fill_from(int first, float fill) {
    for (int s = first; s < shape.capacity; ++s) {
      fill_position(keys, shape, s, fill);
      fill_position(values, shape, s, fill);
    }
  }

  /// Writes the k and v of qkv [B, 3C] (one row per sequence) at position s.
  void store(const std::vector<float>& qkv, int s) {
    const int C = shape.C;
    const int D = shape.D();
    for (int b = 0; b < shape.B; ++b) {
      for (int h = 0; h < shape.H; ++h) {
        const auto k = qkv.begin() + (static_cast<std::ptrdiff_t>(b) * 3 + 1) * C + h * D;
        std::copy_n(k, D, keys.begin() + static_cast<std::ptrdiff_t>(shape.index(b, h, s)));
        std::copy_n(k + C, D, values.begin() + static_cast<std::ptrdiff_t>(shape.index(b, h, s)));
      }
    }
  }
};

/// A cache of `shape` with keys in [-2, 2) and values in [-1, 1): scores q.k / sqrt(D) as
/// spread as random_qkv's.
inline HostKVCache random_kv_cache(std::mt19937& rng, const KVCacheShape& shape) {
  std::vector<float> keys = random_uniform(rng, shape.elements(), -2.0f, 2.0f);
  std::vector<float> values = random_uniform(rng, shape.elements(), -1.0f, 1.0f);
  return HostKVCache{shape, std::move(keys), std::move(values)};
}

/// A cache of `shape` whose keys all hold `key` and values all hold `value`.
inline HostKVCache constant_kv_cache(const KVCacheShape& shape, float key, float value) {
  return HostKVCache{shape, std::vector<float>(shape.elements(), key),
                     std::vector<float>(shape.elements(), value)};
}

/// A cache of `shape` with every byte 0xFF, as DeviceArray::poison leaves one.
inline HostKVCache poison_pattern(const KVCacheShape& shape) {
  std::vector<float> poison(shape.elements());
  std::memset(poison.data(), 0xFF, poison.size() * sizeof(float));
  return HostKVCache{shape, poison, poison};
}

/// A KV cache on the device.
class DeviceKVCache {
 public:
  /// A device copy of `host` (null pointers for an empty cache).
  explicit DeviceKVCache(const HostKVCache& host)
      : keys_(host.keys), values_(host.values), shape_(host.shape) {}

  /// A cache of `shape`, poisoned: every element no kernel writes reads NaN.
  static DeviceKVCache poisoned(const KVCacheShape& shape) {
    DeviceKVCache cache(shape);
    cache.keys_.poison();
    cache.values_.poison();
    return cache;
  }

  float* keys() const { return keys_.get(); }
  float* values() const { return values_.get(); }
  const KVCacheShape& shape() const { return shape_; }
  HostKVCache download() const { return HostKVCache{shape_, keys_.download(), values_.download()}; }

 private:
  explicit DeviceKVCache(const KVCacheShape& shape)
      : keys_(shape.elements()), values_(shape.elements()), shape_(shape) {}

  DeviceArray<float> keys_;
  DeviceArray<float> values_;
  KVCacheShape shape_;
};

/// Checks that `cache` holds `expected`'s keys and values bit for bit.
inline void check_same_bits(const DeviceKVCache& cache, const HostKVCache& expected) {
  const HostKVCache actual = cache.download();
  CHECK(count_bit_mismatches(actual.keys, expected.keys) == 0);
  CHECK(count_bit_mismatches(actual.values, expected.values) == 0);
}

// ---------------------------------------------------------------- expected outputs

/// reference::decode_attention [B, C] of qkv's queries [B, 3C] over positions 0 .. L - 1 of
/// `cache`.
inline std::vector<float> expected_decode_attention(const std::vector<float>& qkv,
                                                    const HostKVCache& cache, int L) {
  const auto [B, H, C, capacity] = cache.shape;
  const std::vector<float> q = queries_of(qkv, B, C);
  std::vector<float> out(static_cast<std::size_t>(B) * C);
  reference::decode_attention(q.data(), cache.keys.data(), cache.values.data(), out.data(), B, L,
                              capacity, H, C);
  return out;
}

/// reference::causal_attention [B, T, C] of qkv [B, T, 3C].
inline std::vector<float> expected_causal_attention(const std::vector<float>& qkv, int B, int T,
                                                    int H, int C) {
  std::vector<float> out(static_cast<std::size_t>(B) * T * C);
  reference::causal_attention(qkv.data(), out.data(), B, T, H, C);
  return out;
}

// ---------------------------------------------------------------- step by step

/// The device buffers of B sequences qkv [B, T, 3C] decoded one position per step, as a
/// decode loop feeds them: step t's qkv rows [B, 3C] and its output [B, C]. Keeps a
/// reference to `sequences`, which must outlive it.
class DecodeSteps {
 public:
  DecodeSteps(const std::vector<float>& sequences, int B, int T, int C)
      : sequences_(sequences),
        B_(B),
        T_(T),
        C_(C),
        qkv_(static_cast<std::size_t>(B) * 3 * C),
        out_(static_cast<std::size_t>(B) * C) {}

  /// Uploads step t's qkv rows and poisons the output.
  void begin(int t) {
    qkv_.upload(rows_at_step(sequences_, B_, T_, t, 3 * C_));
    out_.poison();
  }

  const float* qkv() const { return qkv_.get(); }
  float* out() const { return out_.get(); }

  /// checked_relative_error of step t's output against row t of `expected` [B, T, C].
  double relative_error(const std::vector<float>& expected, int t) const {
    return checked_relative_error(out_.download(), rows_at_step(expected, B_, T_, t, C_));
  }

 private:
  const std::vector<float>& sequences_;
  int B_;
  int T_;
  int C_;
  DeviceArray<float> qkv_;
  DeviceArray<float> out_;
};

// ---------------------------------------------------------------- bad arguments

/// `launcher` with its stream argument bound to the default stream (and the arguments
/// after the stream, if it takes any, to `after_stream`), so that a bad-argument check
/// lists only the arguments it is about.
template <typename Launcher, typename... AfterStream>
auto on_default_stream(Launcher* launcher, AfterStream... after_stream) {
  return [=](auto... arguments) { launcher(arguments..., cudaStream_t{}, after_stream...); };
}

namespace detail {

/// Checks that `launch` rejects `arguments` with the one at kPosition made null, when that
/// one is a pointer.
template <std::size_t kPosition, typename Launch, typename Arguments>
void check_rejects_null_at(const Launch& launch, Arguments arguments) {
  if constexpr (std::is_pointer_v<std::tuple_element_t<kPosition, Arguments>>) {
    INFO("argument " << kPosition << " (counted from 0) is null");
    std::get<kPosition>(arguments) = nullptr;
    CHECK_THROWS_AS(std::apply(launch, arguments), std::invalid_argument);
  }
}

template <typename Launch, typename Arguments, std::size_t... kPositions>
void check_rejects_each_null_pointer(const Launch& launch, const Arguments& valid,
                                     std::index_sequence<kPositions...>) {
  (check_rejects_null_at<kPositions>(launch, valid), ...);
}

}  // namespace detail

/// Checks that `launch(arguments...)` throws std::invalid_argument whenever one of its
/// pointer arguments is null and every other argument keeps its (valid) value.
template <typename Launch, typename... Arguments>
void check_rejects_each_null_pointer(const Launch& launch, Arguments... arguments) {
  detail::check_rejects_each_null_pointer(launch, std::tuple<Arguments...>(arguments...),
                                          std::index_sequence_for<Arguments...>{});
}

}  // namespace ladder::test
