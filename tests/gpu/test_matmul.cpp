// tests/gpu/test_matmul.cpp - kernels/matmul (cuBLAS, row-major through the transpose
// trick) against reference::linear and reference::lm_head.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
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

/// A handle with its own workspace, as the chapters set it up.
struct HandleWithWorkspace {
  explicit HandleWithWorkspace(bool allow_tf32 = false)
      : workspace(CublasHandle::kRecommendedWorkspaceBytes), handle(allow_tf32) {
    handle.set_workspace(workspace.get(), workspace.bytes());
  }
  test::DeviceArray<unsigned char> workspace;
  CublasHandle handle;
};

struct LinearShape {
  int in_features;
  int out_features;
};
// GPT-2 small's four matrices (qkv, attention projection, MLP up, MLP down) and two
// small shapes that divide by nothing in particular.
const LinearShape kLinearShapes[] = {{64, 100},  {100, 97},   {768, 2304},
                                     {768, 768}, {768, 3072}, {3072, 768}};

TEST_CASE("launch_linear matches the reference in plain fp32", "[kernels]") {
  const std::uint32_t seed = test::fresh_seed();
  INFO("seed " << seed << " (rerun with LADDER_TEST_SEED=" << seed << ")");
  std::mt19937 rng(seed);
  test::DeviceStream stream;
  HandleWithWorkspace cublas;
  REQUIRE_FALSE(cublas.handle.allow_tf32());

  for (const LinearShape shape : kLinearShapes) {
    const int in = shape.in_features;
    const int out = shape.out_features;
    const std::vector<float> weight =
        test::random_uniform(rng, static_cast<std::size_t>(in) * out, -1.0f, 1.0f);
    const test::DeviceArray<float> weight_device(weight);
    for (const int rows : {1, 3, 37}) {
      CAPTURE(rows, in, out);
      const std::vector<float> x =
          test::random_uniform(rng, static_cast<std::size_t>(rows) * in, -1.0f, 1.0f);
      const test::DeviceArray<float> x_device(x);
      test::DeviceArray<float> y(static_cast<std::size_t>(rows) * out);
      y.poison();

      launch_linear(cublas.handle, x_device.get(), weight_device.get(), y.get(), rows, in, out,
                    stream.get());
      stream.synchronize();

      std::vector<float> expected(y.size());
      reference::linear(x.data(), weight.data(), nullptr, expected.data(), rows, in, out);
      CHECK(test::checked_relative_error(y.download(), expected) <= kTolerance);
    }
  }
}

TEST_CASE("launch_lm_head matches the reference in plain fp32", "[kernels]") {
  const std::uint32_t seed = test::fresh_seed();
  INFO("seed " << seed << " (rerun with LADDER_TEST_SEED=" << seed << ")");
  std::mt19937 rng(seed);
  test::DeviceStream stream;
  // The one-step setup: a handle bound to its stream, with its workspace.
  test::DeviceArray<unsigned char> workspace(CublasHandle::kRecommendedWorkspaceBytes);
  CublasHandle handle(stream.get(), workspace.get(), workspace.bytes());

  struct Case {
    int rows;
    int C;
    int V;
  };
  for (const Case c : {Case{1, 64, 97}, Case{3, 64, 97}, Case{37, 100, 97}, Case{1, 768, 50257},
                       Case{3, 768, 50257}}) {
    CAPTURE(c.rows, c.C, c.V);
    const std::vector<float> wte =
        test::random_uniform(rng, static_cast<std::size_t>(c.V) * c.C, -1.0f, 1.0f);
    const std::vector<float> x =
        test::random_uniform(rng, static_cast<std::size_t>(c.rows) * c.C, -1.0f, 1.0f);
    const test::DeviceArray<float> wte_device(wte);
    const test::DeviceArray<float> x_device(x);
    test::DeviceArray<float> logits(static_cast<std::size_t>(c.rows) * c.V);
    logits.poison();

    launch_lm_head(handle, x_device.get(), wte_device.get(), logits.get(), c.rows, c.C, c.V,
                   stream.get());
    stream.synchronize();

    std::vector<float> expected(logits.size());
    reference::lm_head(x.data(), wte.data(), expected.data(), c.rows, c.C, c.V);
    CHECK(test::checked_relative_error(logits.download(), expected) <= kTolerance);
  }
}

TEST_CASE("launch_linear is bitwise reproducible across calls and streams", "[kernels]") {
  const std::uint32_t seed = test::fresh_seed();
  INFO("seed " << seed << " (rerun with LADDER_TEST_SEED=" << seed << ")");
  std::mt19937 rng(seed);
  test::DeviceStream first_stream;
  test::DeviceStream second_stream;
  HandleWithWorkspace cublas;
  const int rows = 32;
  const int in = 768;
  const int out = 3072;
  const test::DeviceArray<float> x(
      test::random_uniform(rng, static_cast<std::size_t>(rows) * in, -1.0f, 1.0f));
  const test::DeviceArray<float> weight(
      test::random_uniform(rng, static_cast<std::size_t>(in) * out, -1.0f, 1.0f));
  test::DeviceArray<float> first(static_cast<std::size_t>(rows) * out);
  test::DeviceArray<float> second(static_cast<std::size_t>(rows) * out);
  test::DeviceArray<float> third(static_cast<std::size_t>(rows) * out);

  // The handle moves between streams; its workspace must follow (set_stream re-applies it).
  launch_linear(cublas.handle, x.get(), weight.get(), first.get(), rows, in, out,
                first_stream.get());
  first_stream.synchronize();
  launch_linear(cublas.handle, x.get(), weight.get(), second.get(), rows, in, out,
                second_stream.get());
  second_stream.synchronize();
  launch_linear(cublas.handle, x.get(), weight.get(), third.get(), rows, in, out,
                first_stream.get());
  first_stream.synchronize();
  const std::vector<float> first_result = first.download();
  CHECK(second.download() == first_result);
  CHECK(third.download() == first_result);
}

TEST_CASE("a TF32 handle still computes the product, to TF32 precision", "[kernels]") {
  const std::uint32_t seed = test::fresh_seed();
  INFO("seed " << seed << " (rerun with LADDER_TEST_SEED=" << seed << ")");
  std::mt19937 rng(seed);
  test::DeviceStream stream;
  HandleWithWorkspace cublas(/*allow_tf32=*/true);
  REQUIRE(cublas.handle.allow_tf32());
  const int rows = 37;
  const int in = 768;
  const int out = 2304;
  const std::vector<float> x =
      test::random_uniform(rng, static_cast<std::size_t>(rows) * in, -1.0f, 1.0f);
  const std::vector<float> weight =
      test::random_uniform(rng, static_cast<std::size_t>(in) * out, -1.0f, 1.0f);
  const test::DeviceArray<float> x_device(x);
  const test::DeviceArray<float> weight_device(weight);
  test::DeviceArray<float> y(static_cast<std::size_t>(rows) * out);
  y.poison();

  launch_linear(cublas.handle, x_device.get(), weight_device.get(), y.get(), rows, in, out,
                stream.get());
  stream.synchronize();

  std::vector<float> expected(y.size());
  reference::linear(x.data(), weight.data(), nullptr, expected.data(), rows, in, out);
  // TF32 keeps 10 mantissa bits: ~1e-4 here. Only a sanity bound: whether cuBLAS
  // really picks a tensor-core kernel for this shape is its own choice.
  CHECK(test::checked_relative_error(y.download(), expected) <= 5e-3);
}

TEST_CASE("matmul launchers and the handle reject bad arguments", "[kernels]") {
  HandleWithWorkspace cublas;
  test::DeviceArray<float> buffer(std::size_t{64} * 64);
  const float* in = buffer.get();
  float* out = buffer.get();
  CublasHandle& handle = cublas.handle;
  // launch_linear(handle, x, weight, out, rows, in_features, out_features)
  CHECK_THROWS_AS(launch_linear(handle, in, in, out, 0, 8, 8, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_linear(handle, in, in, out, 8, 0, 8, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_linear(handle, in, in, out, 8, 8, -8, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_linear(handle, nullptr, in, out, 8, 8, 8, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_linear(handle, in, nullptr, out, 8, 8, 8, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_linear(handle, in, in, nullptr, 8, 8, 8, nullptr), std::invalid_argument);
  // launch_lm_head(handle, x, wte, logits, rows, C, V)
  CHECK_THROWS_AS(launch_lm_head(handle, in, in, out, 0, 8, 8, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_lm_head(handle, in, in, out, 8, 0, 8, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_lm_head(handle, in, in, out, 8, 8, 0, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_lm_head(handle, nullptr, in, out, 8, 8, 8, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_lm_head(handle, in, nullptr, out, 8, 8, 8, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_lm_head(handle, in, in, nullptr, 8, 8, 8, nullptr), std::invalid_argument);
  // Workspaces: cuBLAS needs 256-byte alignment, and a buffer when bytes > 0.
  CHECK_THROWS_AS(handle.set_workspace(cublas.workspace.get() + 4, 1024), std::invalid_argument);
  CHECK_THROWS_AS(handle.set_workspace(nullptr, 1024), std::invalid_argument);
  // A moved-from handle is refused, not passed to cuBLAS.
  CublasHandle moved_to = std::move(handle);  // NOLINT(bugprone-use-after-move): on purpose
  CHECK(moved_to.get() != nullptr);
  CHECK_THROWS_AS(launch_linear(handle, in, in, out, 8, 8, 8, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_lm_head(handle, in, in, out, 8, 8, 8, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace ladder
