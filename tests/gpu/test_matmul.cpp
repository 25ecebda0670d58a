// tests/gpu/test_matmul.cpp - kernels/matmul (cuBLASLt, row-major through the transpose
// trick) against reference::linear (+ reference::gelu) and reference::lm_head.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "common/reference.hpp"
#include "kernels/matmul.cuh"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

constexpr double kTolerance = 1e-5;  // plain fp32; TF32 would miss this by ~100x

struct LinearShape {
  int in_features;
  int out_features;
};
// GPT-2 small's four matrices (qkv, attention projection, MLP up, MLP down) and two
// small shapes that divide by nothing in particular.
const LinearShape kLinearShapes[] = {{64, 100},  {100, 97},   {768, 2304},
                                     {768, 768}, {768, 3072}, {3072, 768}};

struct LmHeadCase {
  int rows;
  int C;
  int V;
};

/// For each case: random x [rows, C] and wte [V, C], `launch(x, wte, logits, rows, C, V)`
/// into a poisoned logits [rows, V] on `stream`, checked against reference::lm_head.
template <typename Launch>
void check_lm_head(std::mt19937& rng, const test::DeviceStream& stream,
                   std::initializer_list<LmHeadCase> cases, Launch launch) {
  for (const LmHeadCase c : cases) {
    CAPTURE(c.rows, c.C, c.V);
    const std::vector<float> wte = test::random_matrix(rng, c.V, c.C, -1.0f, 1.0f);
    const std::vector<float> x = test::random_matrix(rng, c.rows, c.C, -1.0f, 1.0f);
    const test::DeviceArray<float> wte_device(wte);
    const test::DeviceArray<float> x_device(x);
    const std::vector<float> logits = test::launch_into_poisoned(
        static_cast<std::size_t>(c.rows) * c.V, stream,
        [&](float* result) { launch(x_device.get(), wte_device.get(), result, c.rows, c.C, c.V); });

    std::vector<float> expected(logits.size());
    reference::lm_head(x.data(), wte.data(), expected.data(), c.rows, c.C, c.V);
    CHECK(test::checked_relative_error(logits, expected) <= kTolerance);
  }
}

// ---------------------------------------------------------------- cuBLASLt

/// An LtMatmul with its own workspace, as a chapter sets it up.
struct LtWithWorkspace {
  explicit LtWithWorkspace(bool allow_tf32 = false,
                           SplitKReduction reduction = SplitKReduction::kAny)
      : workspace(LtMatmul::kRecommendedWorkspaceBytes),
        matmul(workspace.get(), workspace.bytes(), allow_tf32, reduction) {}
  test::DeviceArray<unsigned char> workspace;
  LtMatmul matmul;
};

/// What LtMatmul::linear must produce, from the fp64-accumulating reference.
std::vector<float> expected_linear(const std::vector<float>& x, const std::vector<float>& weight,
                                   const std::vector<float>& bias, int rows, int in, int out,
                                   LinearEpilogue epilogue) {
  std::vector<float> expected(static_cast<std::size_t>(rows) * out);
  reference::linear(x.data(), weight.data(),
                    epilogue == LinearEpilogue::kNone ? nullptr : bias.data(), expected.data(),
                    rows, in, out);
  if (epilogue == LinearEpilogue::kBiasGelu)
    reference::gelu(expected.data(), expected.data(), expected.size());
  return expected;
}

TEST_CASE("LtMatmul::linear matches the reference with each epilogue in plain fp32", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  // Every reduction policy: the default, split-K summed inside the kernel, no split.
  const SplitKReduction reduction =
      GENERATE(SplitKReduction::kAny, SplitKReduction::kInsideTheKernel, SplitKReduction::kNoSplit);
  CAPTURE(static_cast<int>(reduction));
  LtWithWorkspace lt(/*allow_tf32=*/false, reduction);
  REQUIRE_FALSE(lt.matmul.allow_tf32());

  for (const LinearShape shape : kLinearShapes) {
    const int in = shape.in_features;
    const int out = shape.out_features;
    const std::vector<float> weight = test::random_matrix(rng, in, out, -1.0f, 1.0f);
    const std::vector<float> bias = test::random_uniform(rng, out, -2.0f, 2.0f);
    const test::DeviceArray<float> weight_device(weight);
    const test::DeviceArray<float> bias_device(bias);
    for (const int rows : {1, 3, 32, 37}) {
      for (const LinearEpilogue epilogue :
           {LinearEpilogue::kNone, LinearEpilogue::kBias, LinearEpilogue::kBiasGelu}) {
        CAPTURE(rows, in, out, static_cast<int>(epilogue));
        const std::vector<float> x = test::random_matrix(rng, rows, in, -1.0f, 1.0f);
        const test::DeviceArray<float> x_device(x);
        const std::vector<float> y = test::launch_into_poisoned(
            static_cast<std::size_t>(rows) * out, stream, [&](float* result) {
              lt.matmul.linear(x_device.get(), weight_device.get(),
                               epilogue == LinearEpilogue::kNone ? nullptr : bias_device.get(),
                               result, rows, in, out, epilogue, stream.get());
            });

        const std::vector<float> expected =
            expected_linear(x, weight, bias, rows, in, out, epilogue);
        CHECK(test::checked_relative_error(y, expected) <= kTolerance);
      }
    }
  }
}

// cuBLASLt's documentation names its epilogue only "GELU". Here its pre-activations
// span the curved part of GELU (bias in [-4, 4], a small product on top), where the
// exact (erf) GELU and GPT-2's tanh approximation differ by up to 4.7e-4 (at |x| = 2.7),
// about 1e-4 of the largest output: the epilogue must match the tanh form to 1e-5,
// which the erf form cannot.
TEST_CASE("LtMatmul's GELU epilogue is GPT-2's tanh GELU, large |x| included", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  LtWithWorkspace lt;
  const int rows = 32;
  const int in = 768;
  const int out = 3072;  // GPT-2 small's MLP up-projection
  const std::vector<float> x = test::random_matrix(rng, rows, in, -1.0f, 1.0f);
  const std::vector<float> weight = test::random_matrix(rng, in, out, -0.01f, 0.01f);
  const test::DeviceArray<float> x_device(x);
  const test::DeviceArray<float> weight_device(weight);
  // cuBLASLt's gelu(x @ weight + bias), with `bias` [out].
  const auto gelu_linear = [&](const std::vector<float>& bias) {
    const test::DeviceArray<float> bias_device(bias);
    return test::launch_into_poisoned(
        static_cast<std::size_t>(rows) * out, stream, [&](float* result) {
          lt.matmul.linear(x_device.get(), weight_device.get(), bias_device.get(), result, rows, in,
                           out, LinearEpilogue::kBiasGelu, stream.get());
        });
  };

  SECTION("pre-activations in [-4, 4]") {
    const std::vector<float> bias = test::random_uniform(rng, out, -4.0f, 4.0f);
    const std::vector<float> y = gelu_linear(bias);

    const std::vector<float> pre_activation =
        expected_linear(x, weight, bias, rows, in, out, LinearEpilogue::kBias);
    std::vector<float> tanh_gelu(pre_activation.size());
    reference::gelu(pre_activation.data(), tanh_gelu.data(), pre_activation.size());
    std::vector<float> erf_gelu(pre_activation.size());
    for (std::size_t i = 0; i < pre_activation.size(); ++i) {
      const double v = pre_activation[i];
      erf_gelu[i] = static_cast<float>(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
    }
    // The test can tell the two GELUs apart ...
    REQUIRE(test::checked_relative_error(erf_gelu, tanh_gelu) > 5 * kTolerance);
    // ... and cuBLASLt computes the tanh one.
    CHECK(test::checked_relative_error(y, tanh_gelu) <= kTolerance);
  }
  SECTION("pre-activations of magnitude 10 to 90: gelu(x) = x above, 0 below, never NaN") {
    std::vector<float> bias = test::random_uniform(rng, out, 10.0f, 90.0f);
    for (std::size_t o = 0; o < bias.size(); o += 2) bias[o] = -bias[o];
    const std::vector<float> result = gelu_linear(bias);
    const std::vector<float> expected =
        expected_linear(x, weight, bias, rows, in, out, LinearEpilogue::kBiasGelu);
    CHECK(test::checked_relative_error(result, expected) <= kTolerance);
    for (std::size_t i = 0; i < result.size(); ++i) {
      const float reference_value = expected[i];
      if (std::fabs(result[i] - reference_value) >
          1e-5f * std::fmax(1.0f, std::fabs(reference_value))) {
        FAIL_CHECK("element " << i << ": " << result[i] << " instead of " << reference_value);
        break;
      }
    }
  }
}

TEST_CASE("LtMatmul::lm_head matches the reference in plain fp32", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  LtWithWorkspace lt;

  check_lm_head(rng, stream,
                {LmHeadCase{1, 64, 97}, LmHeadCase{3, 64, 97}, LmHeadCase{37, 100, 97},
                 LmHeadCase{1, 768, 50257}, LmHeadCase{32, 768, 50257}},
                [&](const float* x, const float* wte, float* logits, int rows, int C, int V) {
                  lt.matmul.lm_head(x, wte, logits, rows, C, V, stream.get());
                });
}

TEST_CASE("LtMatmul plans each shape once and stays bitwise reproducible", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream first_stream;
  test::DeviceStream second_stream;
  LtWithWorkspace lt;
  const int rows = 32;
  const int in = 768;
  const int out = 3072;
  const std::vector<float> x =
      test::random_uniform(rng, static_cast<std::size_t>(rows) * in + 1, -1.0f, 1.0f);
  const test::DeviceArray<float> x_device(x);
  const test::DeviceArray<float> weight(test::random_matrix(rng, in, out, -1.0f, 1.0f));
  const test::DeviceArray<float> bias(test::random_uniform(rng, out, -1.0f, 1.0f));
  test::DeviceArray<float> first(static_cast<std::size_t>(rows) * out);
  test::DeviceArray<float> again(static_cast<std::size_t>(rows) * out);
  test::DeviceArray<float> other_stream(static_cast<std::size_t>(rows) * out);
  CHECK(lt.matmul.cached_plans() == 0);

  lt.matmul.linear(x_device.get(), weight.get(), bias.get(), first.get(), rows, in, out,
                   LinearEpilogue::kBiasGelu, first_stream.get());
  CHECK(lt.matmul.cached_plans() == 1);
  for (int repeat = 0; repeat < 5; ++repeat)
    lt.matmul.linear(x_device.get(), weight.get(), bias.get(), again.get(), rows, in, out,
                     LinearEpilogue::kBiasGelu, first_stream.get());
  CHECK(lt.matmul.cached_plans() == 1);  // the same shape: no new heuristic query
  first_stream.synchronize();
  // Another epilogue, another row count, and an input only 4-byte aligned: three plans.
  lt.matmul.linear(x_device.get(), weight.get(), bias.get(), again.get(), rows, in, out,
                   LinearEpilogue::kBias, first_stream.get());
  lt.matmul.linear(x_device.get(), weight.get(), bias.get(), again.get(), rows - 1, in, out,
                   LinearEpilogue::kBiasGelu, first_stream.get());
  lt.matmul.linear(x_device.get() + 1, weight.get(), bias.get(), again.get(), rows, in, out,
                   LinearEpilogue::kBiasGelu, first_stream.get());
  CHECK(lt.matmul.cached_plans() == 4);
  first_stream.synchronize();
  // Back to the first shape, on another stream: the same bits.
  lt.matmul.linear(x_device.get(), weight.get(), bias.get(), other_stream.get(), rows, in, out,
                   LinearEpilogue::kBiasGelu, second_stream.get());
  lt.matmul.linear(x_device.get(), weight.get(), bias.get(), again.get(), rows, in, out,
                   LinearEpilogue::kBiasGelu, second_stream.get());
  second_stream.synchronize();
  CHECK(lt.matmul.cached_plans() == 4);
  const std::vector<float> first_result = first.download();
  CHECK(again.download() == first_result);
  CHECK(other_stream.download() == first_result);
}

TEST_CASE("LtMatmul handles pointers that are only 4-byte aligned", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  LtWithWorkspace lt;
  const int rows = 3;
  const int in = 100;
  const int out = 97;
  const std::vector<float> x = test::random_matrix(rng, rows, in, -1.0f, 1.0f);
  const std::vector<float> weight = test::random_matrix(rng, in, out, -1.0f, 1.0f);
  const std::vector<float> bias = test::random_uniform(rng, out, -1.0f, 1.0f);
  // Every buffer one float past a 256-byte boundary.
  const test::UnalignedDeviceArray<float> x_device(x);
  const test::UnalignedDeviceArray<float> weight_device(weight);
  const test::UnalignedDeviceArray<float> bias_device(bias);
  test::UnalignedDeviceArray<float> y(static_cast<std::size_t>(rows) * out);
  y.poison();

  lt.matmul.linear(x_device.get(), weight_device.get(), bias_device.get(), y.get(), rows, in, out,
                   LinearEpilogue::kBiasGelu, stream.get());
  stream.synchronize();

  const std::vector<float> expected =
      expected_linear(x, weight, bias, rows, in, out, LinearEpilogue::kBiasGelu);
  CHECK(std::isnan(y.element_in_front()));  // the float before the output was not touched
  CHECK(test::checked_relative_error(y.download(), expected) <= kTolerance);
}

TEST_CASE("a TF32 LtMatmul still computes the product, to TF32 precision", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  LtWithWorkspace lt(/*allow_tf32=*/true);
  REQUIRE(lt.matmul.allow_tf32());
  const int rows = 37;
  const int in = 768;
  const int out = 2304;
  const std::vector<float> x = test::random_matrix(rng, rows, in, -1.0f, 1.0f);
  const std::vector<float> weight = test::random_matrix(rng, in, out, -1.0f, 1.0f);
  const std::vector<float> bias = test::random_uniform(rng, out, -1.0f, 1.0f);
  const test::DeviceArray<float> x_device(x);
  const test::DeviceArray<float> weight_device(weight);
  const test::DeviceArray<float> bias_device(bias);
  const std::vector<float> y =
      test::launch_into_poisoned(static_cast<std::size_t>(rows) * out, stream, [&](float* result) {
        lt.matmul.linear(x_device.get(), weight_device.get(), bias_device.get(), result, rows, in,
                         out, LinearEpilogue::kBias, stream.get());
      });

  const std::vector<float> expected =
      expected_linear(x, weight, bias, rows, in, out, LinearEpilogue::kBias);
  // TF32 keeps 10 mantissa bits: ~1e-4 here. Only a sanity bound.
  CHECK(test::checked_relative_error(y, expected) <= 5e-3);
}

TEST_CASE("LtMatmul rejects bad arguments", "[kernels]") {
  LtWithWorkspace lt;
  test::DeviceArray<float> buffer(std::size_t{64} * 64);
  test::DeviceArray<float> other(std::size_t{64} * 64);
  const float* in = buffer.get();
  float* out = other.get();
  LtMatmul& matmul = lt.matmul;
  constexpr LinearEpilogue kBias = LinearEpilogue::kBias;
  constexpr LinearEpilogue kNone = LinearEpilogue::kNone;
  // linear(x, weight, bias, out, rows, in_features, out_features, epilogue)
  CHECK_THROWS_AS(matmul.linear(in, in, in, out, 0, 8, 8, kBias, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(matmul.linear(in, in, in, out, 8, 0, 8, kBias, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(matmul.linear(in, in, in, out, 8, 8, -8, kBias, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(matmul.linear(nullptr, in, in, out, 8, 8, 8, kBias, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(matmul.linear(in, nullptr, in, out, 8, 8, 8, kBias, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(matmul.linear(in, in, in, nullptr, 8, 8, 8, kBias, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(matmul.linear(in, in, nullptr, out, 8, 8, 8, kBias, nullptr),
                  std::invalid_argument);  // kBias needs a bias
  CHECK_THROWS_AS(matmul.linear(in, in, nullptr, out, 8, 8, 8, LinearEpilogue::kBiasGelu, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(matmul.linear(in, in, in, out, 8, 8, 8, kNone, nullptr),
                  std::invalid_argument);  // a bias that kNone would silently drop
  // lm_head(x, wte, logits, rows, C, V)
  CHECK_THROWS_AS(matmul.lm_head(in, in, out, 0, 8, 8, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(matmul.lm_head(in, in, out, 8, 0, 8, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(matmul.lm_head(in, in, out, 8, 8, 0, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(matmul.lm_head(nullptr, in, out, 8, 8, 8, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(matmul.lm_head(in, nullptr, out, 8, 8, 8, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(matmul.lm_head(in, in, nullptr, 8, 8, 8, nullptr), std::invalid_argument);
  CHECK(matmul.cached_plans() == 0);  // nothing reached cuBLASLt
  // Workspaces: 256-byte aligned, and a buffer when bytes > 0.
  CHECK_THROWS_AS(LtMatmul(lt.workspace.get() + 4, 1024), std::invalid_argument);
  CHECK_THROWS_AS(LtMatmul(nullptr, 1024), std::invalid_argument);
  // A moved-from LtMatmul is refused, not passed to cuBLASLt.
  LtMatmul moved_to = std::move(matmul);  // NOLINT(bugprone-use-after-move): on purpose
  // NOLINTNEXTLINE(bugprone-use-after-move): on purpose
  CHECK_THROWS_AS(matmul.linear(in, in, in, out, 8, 8, 8, kBias, nullptr), std::invalid_argument);
  // NOLINTNEXTLINE(bugprone-use-after-move): on purpose
  CHECK_THROWS_AS(matmul.lm_head(in, in, out, 8, 8, 8, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace ladder
