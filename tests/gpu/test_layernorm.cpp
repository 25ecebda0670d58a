// tests/gpu/test_layernorm.cpp - kernels/layernorm against reference::layernorm (and
// reference::add + reference::layernorm for the fused residual variant).
#include <catch2/catch.hpp>

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

/// LayerNorm's weight [C] in [0.5, 1.5) and bias [C] in [-0.5, 0.5), on the host and on the
/// device, and what the CPU reference makes of them.
struct LayernormParameters {
  LayernormParameters(std::mt19937& rng, int channels)
      : C(channels),
        weight(test::random_uniform(rng, C, 0.5f, 1.5f)),
        bias(test::random_uniform(rng, C, -0.5f, 0.5f)),
        weight_device(weight),
        bias_device(bias) {}

  /// reference::layernorm of x [rows, C].
  std::vector<float> expected(const std::vector<float>& x) const {
    std::vector<float> out(x.size());
    reference::layernorm(x.data(), weight.data(), bias.data(), out.data(),
                         static_cast<int>(x.size()) / C, C, kEps);
    return out;
  }

  /// The unfused pair on the CPU: residual += x (fp32, as the kernel), then LayerNorm of
  /// the new residual.
  std::vector<float> expected_after_residual_add(std::vector<float>& residual,
                                                 const std::vector<float>& x) const {
    reference::add(residual.data(), x.data(), residual.data(), residual.size());
    return expected(residual);
  }

  int C;
  std::vector<float> weight;
  std::vector<float> bias;
  test::DeviceArray<float> weight_device;
  test::DeviceArray<float> bias_device;
};

TEST_CASE("launch_layernorm matches the reference", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  // Every instantiation: packed rows of 1 and 2 packs a thread, scalar rows of 1 to 8.
  for (const int C : {64, 100, 768, 3, 515, 1025, 1600, kMaxLayernormC}) {
    const LayernormParameters parameters(rng, C);
    for (const int rows : {1, 3, 37}) {
      CAPTURE(rows, C);
      const std::vector<float> x = test::offset_rows(rng, rows, C);
      const test::DeviceArray<float> x_device(x);
      const std::vector<float> out =
          test::launch_into_poisoned(x.size(), stream, [&](float* normalized) {
            launch_layernorm(x_device.get(), parameters.weight_device.get(),
                             parameters.bias_device.get(), normalized, rows, C, kEps, stream.get());
          });
      CHECK(test::checked_relative_error(out, parameters.expected(x)) <= kTolerance);
    }
  }
}

TEST_CASE("launch_layernorm works in place and on unaligned rows", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int rows = 37;
  const int C = 768;
  const LayernormParameters parameters(rng, C);
  const std::vector<float> x = test::offset_rows(rng, rows, C);
  const std::vector<float> expected = parameters.expected(x);

  SECTION("in place") {
    test::DeviceArray<float> x_device(x);
    launch_layernorm(x_device.get(), parameters.weight_device.get(), parameters.bias_device.get(),
                     x_device.get(), rows, C, kEps, stream.get());
    stream.synchronize();
    CHECK(test::checked_relative_error(x_device.download(), expected) <= kTolerance);
  }
  SECTION("input and output one float past a 16-byte boundary (scalar path)") {
    const test::UnalignedDeviceArray<float> x_device(x);
    test::UnalignedDeviceArray<float> out(x.size());
    out.poison();
    launch_layernorm(x_device.get(), parameters.weight_device.get(), parameters.bias_device.get(),
                     out.get(), rows, C, kEps, stream.get());
    stream.synchronize();
    CHECK(std::isnan(out.element_in_front()));  // the float before the output was not touched
    CHECK(test::checked_relative_error(out.download(), expected) <= kTolerance);
  }
}

// ---------------------------------------------------------------- residual + LayerNorm

TEST_CASE("launch_residual_layernorm matches residual add + LayerNorm", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  // 3, 100: scalar path; 64, 768, 1024: packed, 8 packs per lane or fewer; 1600 (GPT-2 XL)
  // and 2048 (the largest accepted): packed, 16 packs per lane; 1000: packed with
  // a partly filled last pack per lane.
  for (const int C : {3, 64, 100, 515, 768, 1000, 1024, 1025, 1600, kMaxLayernormC}) {
    const LayernormParameters parameters(rng, C);
    for (const int rows : {1, 3, 32, 37}) {
      CAPTURE(rows, C);
      std::vector<float> residual = test::offset_rows(rng, rows, C);
      const std::vector<float> x = test::random_uniform(rng, residual.size(), -1.0f, 1.0f);
      test::DeviceArray<float> residual_device(residual);
      const test::DeviceArray<float> x_device(x);
      const std::vector<float> out =
          test::launch_into_poisoned(x.size(), stream, [&](float* normalized) {
            launch_residual_layernorm(residual_device.get(), x_device.get(),
                                      parameters.weight_device.get(), parameters.bias_device.get(),
                                      normalized, rows, C, kEps, stream.get());
          });

      const std::vector<float> expected = parameters.expected_after_residual_add(residual, x);
      CHECK(residual_device.download() == residual);  // one fp32 add on both sides
      CHECK(test::checked_relative_error(out, expected) <= kTolerance);
    }
  }
}

TEST_CASE("launch_residual_layernorm writes into x and handles unaligned rows", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int rows = 37;
  const int C = 768;
  const LayernormParameters parameters(rng, C);
  std::vector<float> residual = test::offset_rows(rng, rows, C);
  const std::vector<float> x = test::random_uniform(rng, residual.size(), -1.0f, 1.0f);
  const std::vector<float> residual_before = residual;
  const std::vector<float> expected = parameters.expected_after_residual_add(residual, x);

  SECTION("out == x") {
    test::DeviceArray<float> residual_device(residual_before);
    test::DeviceArray<float> x_device(x);
    launch_residual_layernorm(residual_device.get(), x_device.get(), parameters.weight_device.get(),
                              parameters.bias_device.get(), x_device.get(), rows, C, kEps,
                              stream.get());
    stream.synchronize();
    CHECK(residual_device.download() == residual);
    CHECK(test::checked_relative_error(x_device.download(), expected) <= kTolerance);
  }
  SECTION("every row one float past a 16-byte boundary (scalar path)") {
    test::UnalignedDeviceArray<float> residual_device(residual_before);
    const test::UnalignedDeviceArray<float> x_device(x);
    test::UnalignedDeviceArray<float> out(x.size());
    out.poison();
    launch_residual_layernorm(residual_device.get(), x_device.get(), parameters.weight_device.get(),
                              parameters.bias_device.get(), out.get(), rows, C, kEps, stream.get());
    stream.synchronize();
    CHECK(std::isnan(out.element_in_front()));  // the float before the output was not touched
    CHECK(residual_device.element_in_front() == 0.0f);
    CHECK(residual_device.download() == residual);
    CHECK(test::checked_relative_error(out.download(), expected) <= kTolerance);
  }
}

TEST_CASE("launch_residual_layernorm rejects bad arguments", "[kernels]") {
  test::DeviceArray<float> buffer(std::size_t{64} * 4);
  test::DeviceArray<float> other(std::size_t{64} * 4);
  float* residual = buffer.get();
  const float* x = other.get();
  float* out = other.get();
  CHECK_THROWS_AS(launch_residual_layernorm(residual, x, x, x, out, 0, 64, kEps, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_residual_layernorm(residual, x, x, x, out, 4, 0, kEps, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(
      launch_residual_layernorm(residual, x, x, x, out, 1, kMaxLayernormC + 1, kEps, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(launch_residual_layernorm(residual, x, x, x, out, 4, 64, -1.0f, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_residual_layernorm(residual, x, x, x, out, 4, 64,
                                            std::numeric_limits<float>::infinity(), nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_residual_layernorm(residual, x, x, x, residual, 4, 64, kEps, nullptr),
                  std::invalid_argument);  // out == residual
  CHECK_THROWS_AS(launch_residual_layernorm(nullptr, x, x, x, out, 4, 64, kEps, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_residual_layernorm(residual, nullptr, x, x, out, 4, 64, kEps, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_residual_layernorm(residual, x, nullptr, x, out, 4, 64, kEps, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_residual_layernorm(residual, x, x, nullptr, out, 4, 64, kEps, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_residual_layernorm(residual, x, x, x, nullptr, 4, 64, kEps, nullptr),
                  std::invalid_argument);
}

TEST_CASE("launch_layernorm rejects bad arguments", "[kernels]") {
  test::DeviceArray<float> buffer(std::size_t{64} * 4);
  const float* x = buffer.get();
  float* out = buffer.get();
  CHECK_THROWS_AS(launch_layernorm(x, x, x, out, 0, 64, kEps, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_layernorm(x, x, x, out, -1, 64, kEps, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_layernorm(x, x, x, out, 4, 0, kEps, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_layernorm(x, x, x, out, 4, 64, -1.0f, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_layernorm(x, x, x, out, 1, kMaxLayernormC + 1, kEps, nullptr),
                  std::invalid_argument);
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
