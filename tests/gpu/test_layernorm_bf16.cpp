// tests/gpu/test_layernorm_bf16.cpp - launch_layernorm_bf16 (kernels/layernorm) against
// reference::layernorm on bf16 inputs and parameters, rounded to bf16 (common/reference.hpp, R3).
// The statistics are fp32 on the GPU and fp64 in the reference: an output may differ by one bf16
// step where the rounding flips, plus a slack of 1e-5 of the largest output for the fp32
// statistics' own error (~1e-6 relative) near zero.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/reference.hpp"
#include "kernels/layernorm.cuh"
#include "tests/gpu/bfloat16_test_helpers.hpp"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

constexpr float kEps = 1e-5f;
constexpr double kSlack = 1e-5;

std::vector<float> run_layernorm(const test::DeviceStream& stream, const std::vector<float>& x,
                                 const test::DeviceBfloats& weight, const test::DeviceBfloats& bias,
                                 int rows, int C) {
  const test::DeviceBfloats x_device(test::to_bfloat16_bits(x));
  test::DeviceBfloats out(x.size());
  out.poison();
  launch_layernorm_bf16(test::as_bfloat16(x_device), test::as_bfloat16(weight),
                        test::as_bfloat16(bias), test::as_bfloat16(out), rows, C, kEps,
                        stream.get());
  stream.synchronize();
  return test::from_bfloat16_bits(out.download());
}

TEST_CASE("launch_layernorm_bf16 matches the bf16 reference", "[kernels][bf16]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  // 768 and 1600 (GPT-2 small, XL) and 2048 take 16-byte packs, one or two per thread;
  // 97 and 1999 (odd) the scalar path.
  for (const int C : {768, 1600, 2048, 97, 1999}) {
    const std::vector<float> weight = test::random_bfloat16(rng, C, 0.5f, 1.5f);
    const std::vector<float> bias = test::random_bfloat16(rng, C, -0.5f, 0.5f);
    const test::DeviceBfloats weight_device(test::to_bfloat16_bits(weight));
    const test::DeviceBfloats bias_device(test::to_bfloat16_bits(bias));
    for (const int rows : {1, 3, 32, 65}) {
      CAPTURE(C, rows);
      const std::vector<float> x = test::rounded_to_bfloat16(test::offset_rows(rng, rows, C));
      std::vector<float> expected(x.size());
      reference::layernorm(x.data(), weight.data(), bias.data(), expected.data(), rows, C, kEps);
      expected = test::rounded_to_bfloat16(expected);
      const std::vector<float> out = run_layernorm(stream, x, weight_device, bias_device, rows, C);
      CHECK(test::beyond_one_bfloat16_step(out, expected, kSlack * test::max_magnitude(expected)) ==
            0);
      const std::vector<float> again =
          run_layernorm(stream, x, weight_device, bias_device, rows, C);
      CHECK(std::memcmp(out.data(), again.data(), out.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("launch_layernorm_bf16 rejects bad arguments", "[kernels][bf16]") {
  test::DeviceStream stream;
  test::DeviceBfloats row(4096);
  __nv_bfloat16* const r = test::as_bfloat16(row);
  CHECK_THROWS_AS(launch_layernorm_bf16(nullptr, r, r, r, 1, 8, kEps, stream.get()),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_layernorm_bf16(r, r, r, r, 1, kMaxLayernormC + 1, kEps, stream.get()),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_layernorm_bf16(r, r, r, r, 1, 8, -1.0f, stream.get()),
                  std::invalid_argument);
}

}  // namespace
}  // namespace ladder
