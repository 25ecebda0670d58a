// tests/gpu/test_elementwise.cpp - kernels/elementwise (bias add, GELU, residual add)
// against reference::add and reference::gelu.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/reference.hpp"
#include "kernels/elementwise.cuh"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

constexpr double kTolerance = 1e-5;

// rows x columns, including sizes with rows * columns not divisible by 4 (scalar path).
const int kRowCounts[] = {1, 3, 37};
const int kColumnCounts[] = {64, 100, 768, 3};

/// Calls check(rows, columns, count) for every shape of kColumnCounts x kRowCounts.
template <typename Check>
void for_each_shape(Check check) {
  for (const int columns : kColumnCounts) {
    for (const int rows : kRowCounts) {
      CAPTURE(rows, columns);
      check(rows, columns, static_cast<std::size_t>(rows) * columns);
    }
  }
}

/// a + b for `count` floats, by reference::add.
std::vector<float> expected_sum(const float* a, const float* b, std::size_t count) {
  std::vector<float> sum(count);
  reference::add(a, b, sum.data(), count);
  return sum;
}

/// x [count / columns, columns] plus bias [columns] on every row, by reference::add.
std::vector<float> expected_bias_add(const float* x, const float* bias, std::size_t count,
                                     int columns) {
  std::vector<float> tiled_bias(count);
  for (std::size_t i = 0; i < count; ++i) tiled_bias[i] = bias[i % columns];
  return expected_sum(x, tiled_bias.data(), count);
}

TEST_CASE("launch_add_bias matches the reference", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for_each_shape([&](int rows, int columns, std::size_t count) {
    const std::vector<float> x = test::random_uniform(rng, count, -1.0f, 1.0f);
    const std::vector<float> bias = test::random_uniform(rng, columns, -1.0f, 1.0f);
    test::DeviceArray<float> x_device(x);
    const test::DeviceArray<float> bias_device(bias);

    launch_add_bias(x_device.get(), bias_device.get(), rows, columns, stream.get());
    stream.synchronize();

    const std::vector<float> expected = expected_bias_add(x.data(), bias.data(), count, columns);
    CHECK(test::checked_relative_error(x_device.download(), expected) == 0.0);
  });
}

TEST_CASE("launch_gelu matches the reference, in place and out of place", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for_each_shape([&](int rows, int columns, std::size_t count) {
    // Covers the near-linear part, the bend around 0 and the saturated tails.
    const std::vector<float> x = test::random_uniform(rng, count, -6.0f, 6.0f);
    std::vector<float> expected(count);
    reference::gelu(x.data(), expected.data(), count);

    const test::DeviceArray<float> x_device(x);
    test::DeviceArray<float> out(count);
    out.poison();
    launch_gelu(x_device.get(), out.get(), rows, columns, stream.get());
    stream.synchronize();
    CHECK(test::checked_relative_error(out.download(), expected) <= kTolerance);

    test::DeviceArray<float> in_place(x);
    launch_gelu(in_place.get(), in_place.get(), rows, columns, stream.get());
    stream.synchronize();
    CHECK(test::checked_relative_error(in_place.download(), expected) <= kTolerance);
  });
}

TEST_CASE("launch_residual_add matches the reference", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for_each_shape([&](int rows, int columns, std::size_t count) {
    const std::vector<float> residual = test::random_uniform(rng, count, -1.0f, 1.0f);
    const std::vector<float> x = test::random_uniform(rng, count, -1.0f, 1.0f);
    test::DeviceArray<float> residual_device(residual);
    const test::DeviceArray<float> x_device(x);

    launch_residual_add(residual_device.get(), x_device.get(), rows, columns, stream.get());
    stream.synchronize();

    const std::vector<float> expected = expected_sum(residual.data(), x.data(), count);
    CHECK(test::checked_relative_error(residual_device.download(), expected) == 0.0);
  });
}

TEST_CASE("elementwise launchers take the scalar path on unaligned pointers", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int rows = 3;
  const int columns = 64;  // divisible by 4: only the pointers force the scalar path
  const std::size_t count = static_cast<std::size_t>(rows) * columns;
  const std::vector<float> a = test::random_uniform(rng, count + 1, -2.0f, 2.0f);
  const std::vector<float> b = test::random_uniform(rng, count + 1, -2.0f, 2.0f);
  const std::vector<float> a_tail(a.begin() + 1, a.end());
  const std::vector<float> b_tail(b.begin() + 1, b.end());

  SECTION("residual add") {
    test::DeviceArray<float> residual(a);
    const test::DeviceArray<float> x(b);
    launch_residual_add(residual.get() + 1, x.get() + 1, rows, columns, stream.get());
    stream.synchronize();
    std::vector<float> result = residual.download();
    CHECK(result[0] == a[0]);
    result.erase(result.begin());
    const std::vector<float> expected = expected_sum(a_tail.data(), b_tail.data(), count);
    CHECK(test::checked_relative_error(result, expected) == 0.0);
  }
  SECTION("bias add") {
    test::DeviceArray<float> x(a);
    const test::DeviceArray<float> bias(b);
    launch_add_bias(x.get() + 1, bias.get() + 1, rows, columns, stream.get());
    stream.synchronize();
    std::vector<float> result = x.download();
    result.erase(result.begin());
    const std::vector<float> expected =
        expected_bias_add(a_tail.data(), b_tail.data(), count, columns);
    CHECK(test::checked_relative_error(result, expected) == 0.0);
  }
  SECTION("gelu") {
    const test::DeviceArray<float> x(a);
    test::DeviceArray<float> out(count + 1);
    out.poison();
    launch_gelu(x.get() + 1, out.get() + 1, rows, columns, stream.get());
    stream.synchronize();
    std::vector<float> result = out.download();
    result.erase(result.begin());
    std::vector<float> expected(count);
    reference::gelu(a_tail.data(), expected.data(), count);
    CHECK(test::checked_relative_error(result, expected) <= kTolerance);
  }
}

TEST_CASE("elementwise launchers reject bad arguments", "[kernels]") {
  test::DeviceArray<float> buffer(std::size_t{64} * 4);
  float* x = buffer.get();
  CHECK_THROWS_AS(launch_add_bias(x, x, 0, 64, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_add_bias(x, x, 4, -1, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_add_bias(nullptr, x, 4, 64, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_add_bias(x, nullptr, 4, 64, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_gelu(x, x, 0, 64, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_gelu(x, x, 4, 0, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_gelu(nullptr, x, 4, 64, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_gelu(x, nullptr, 4, 64, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_residual_add(x, x, -3, 64, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_residual_add(x, x, 4, 0, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_residual_add(nullptr, x, 4, 64, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_residual_add(x, nullptr, 4, 64, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace ladder
