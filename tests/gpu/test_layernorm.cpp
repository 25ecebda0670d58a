// tests/gpu/test_layernorm.cpp - kernels/layernorm against reference::layernorm.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/reference.hpp"
#include "kernels/layernorm.cuh"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

constexpr float kEps = 1e-5f;
constexpr double kTolerance = 1e-5;

// Rows with their own offset (up to +-4, large against a spread of 1, which breaks a
// one-pass E[x^2] - E[x]^2 variance) plus uniform noise.
std::vector<float> offset_rows(std::mt19937& rng, int rows, int C) {
  std::vector<float> x = test::random_uniform(rng, static_cast<std::size_t>(rows) * C, -1.0f, 1.0f);
  const std::vector<float> offsets = test::random_uniform(rng, rows, -4.0f, 4.0f);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < C; ++c) x[static_cast<std::size_t>(r) * C + c] += offsets[r];
  return x;
}

TEST_CASE("launch_layernorm matches the reference", "[kernels]") {
  const std::uint32_t seed = test::fresh_seed();
  INFO("seed " << seed << " (rerun with LADDER_TEST_SEED=" << seed << ")");
  std::mt19937 rng(seed);
  test::DeviceStream stream;

  for (const int C : {64, 100, 768, 3}) {
    const std::vector<float> weight = test::random_uniform(rng, C, 0.5f, 1.5f);
    const std::vector<float> bias = test::random_uniform(rng, C, -0.5f, 0.5f);
    const test::DeviceArray<float> weight_device(weight);
    const test::DeviceArray<float> bias_device(bias);
    for (const int rows : {1, 3, 37}) {
      CAPTURE(rows, C);
      const std::vector<float> x = offset_rows(rng, rows, C);
      const test::DeviceArray<float> x_device(x);
      test::DeviceArray<float> out(x.size());
      out.poison();

      launch_layernorm(x_device.get(), weight_device.get(), bias_device.get(), out.get(), rows, C,
                       kEps, stream.get());
      stream.synchronize();

      std::vector<float> expected(x.size());
      reference::layernorm(x.data(), weight.data(), bias.data(), expected.data(), rows, C, kEps);
      CHECK(test::checked_relative_error(out.download(), expected) <= kTolerance);
    }
  }
}

TEST_CASE("launch_layernorm works in place and on unaligned rows", "[kernels]") {
  const std::uint32_t seed = test::fresh_seed();
  INFO("seed " << seed << " (rerun with LADDER_TEST_SEED=" << seed << ")");
  std::mt19937 rng(seed);
  test::DeviceStream stream;
  const int rows = 37;
  const int C = 768;
  const std::vector<float> weight = test::random_uniform(rng, C, 0.5f, 1.5f);
  const std::vector<float> bias = test::random_uniform(rng, C, -0.5f, 0.5f);
  const test::DeviceArray<float> weight_device(weight);
  const test::DeviceArray<float> bias_device(bias);
  const std::vector<float> x = offset_rows(rng, rows, C);
  std::vector<float> expected(x.size());
  reference::layernorm(x.data(), weight.data(), bias.data(), expected.data(), rows, C, kEps);

  SECTION("in place") {
    test::DeviceArray<float> x_device(x);
    launch_layernorm(x_device.get(), weight_device.get(), bias_device.get(), x_device.get(), rows,
                     C, kEps, stream.get());
    stream.synchronize();
    CHECK(test::checked_relative_error(x_device.download(), expected) <= kTolerance);
  }
  SECTION("input and output one float past a 16-byte boundary (scalar path)") {
    std::vector<float> shifted(x.size() + 1, 0.0f);
    std::copy(x.begin(), x.end(), shifted.begin() + 1);
    const test::DeviceArray<float> x_device(shifted);
    test::DeviceArray<float> out(shifted.size());
    out.poison();
    launch_layernorm(x_device.get() + 1, weight_device.get(), bias_device.get(), out.get() + 1,
                     rows, C, kEps, stream.get());
    stream.synchronize();
    std::vector<float> result = out.download();
    CHECK(std::isnan(result[0]));  // the float before the output was not touched
    result.erase(result.begin());
    CHECK(test::checked_relative_error(result, expected) <= kTolerance);
  }
}

TEST_CASE("launch_layernorm rejects bad arguments", "[kernels]") {
  test::DeviceArray<float> buffer(std::size_t{64} * 4);
  const float* x = buffer.get();
  float* out = buffer.get();
  CHECK_THROWS_AS(launch_layernorm(x, x, x, out, 0, 64, kEps, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_layernorm(x, x, x, out, -1, 64, kEps, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_layernorm(x, x, x, out, 4, 0, kEps, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_layernorm(x, x, x, out, 4, 64, -1.0f, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(
      launch_layernorm(x, x, x, out, 4, 64, std::numeric_limits<float>::quiet_NaN(), nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(launch_layernorm(nullptr, x, x, out, 4, 64, kEps, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_layernorm(x, nullptr, x, out, 4, 64, kEps, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_layernorm(x, x, nullptr, out, 4, 64, kEps, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_layernorm(x, x, x, nullptr, 4, 64, kEps, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace ladder
