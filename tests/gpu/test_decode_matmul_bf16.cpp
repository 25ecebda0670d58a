// tests/gpu/test_decode_matmul_bf16.cpp - kernels/decode_matmul_bf16 (the bf16 decode
// matmuls on mma.sync) against the bf16 reference: reference::linear, gelu and add on
// bf16-valued inputs, rounded to bf16 where the kernel stores (common/reference.hpp,
// R4, R6, R7); the LM head's fp32 logits against reference::lm_head and its candidates
// against its own logits; repeat runs bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/bfloat16.hpp"
#include "common/reference.hpp"
#include "kernels/decode_matmul_bf16.cuh"
#include "tests/gpu/bfloat16_test_helpers.hpp"
#include "tests/gpu/decode_matmul_test_helpers.hpp"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

// The slack of beyond_one_bfloat16_step, relative to the output's largest magnitude: the
// fp32 sum of K <= 3072 products of values in [-1, 1) errs by ~sqrt(K) 2^-24 |partial
// sums|, some 1e-6 of the largest output; 1e-4 bounds it and stays 40 times below one
// bf16 step of the largest outputs (2^-8), so a wrong product still fails.
constexpr double kSlack = 1e-4;
// The LM head's logits are fp32: products of two bf16 are exact in fp32 and the K sums
// accumulate in fp32 on the tensor cores, ~K 2^-24 relative at worst (1e-4 at K = 768).
constexpr double kLogitTolerance = 1e-4;

struct Shape {
  int K;
  int N;
};
// GPT-2 small's four products and sizes that are multiples of nothing: K = 97 and 100
// take the 2-byte x path (K % 8 != 0), N = 1 one column, K = 1 one input.
const Shape kGpt2Shapes[] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
const Shape kOddShapes[] = {{100, 97}, {64, 100}, {97, 65}, {33, 1}, {1, 130}, {200, 8}};

using test::DecodeQueue;
using test::kEpilogues;

/// A bf16-valued W [K, N] and its k_tiled packing on the device.
struct PackedWeight {
  PackedWeight(std::mt19937& rng, int K, int N)
      : weight(test::random_bfloat16(rng, static_cast<std::size_t>(K) * N, -1.0f, 1.0f)),
        packed(pack_bfloat16_weights(weight, K, N, BfloatLayout::k_tiled)) {}
  std::vector<float> weight;
  test::DeviceBfloats packed;
};

/// What the kernel must store: the fp64 reference through the epilogue, rounded once.
std::vector<float> expected_output(const std::vector<float>& without_bias,
                                   const std::vector<float>& with_bias,
                                   const std::vector<float>& residual, DecodeEpilogue epilogue) {
  std::vector<float> out = epilogue == DecodeEpilogue::kNone ? without_bias : with_bias;
  if (epilogue == DecodeEpilogue::kBiasGelu) reference::gelu(out.data(), out.data(), out.size());
  if (epilogue == DecodeEpilogue::kBiasResidual)
    reference::add(residual.data(), out.data(), out.data(), out.size());
  return test::rounded_to_bfloat16(out);
}

/// One product into a fresh output (poisoned, or the residual for kBiasResidual).
std::vector<float> run_product(DecodeQueue& queue, const test::DeviceBfloats& x,
                               const test::DeviceBfloats& packed, const test::DeviceBfloats& bias,
                               const std::vector<float>& residual, int B, int K, int N,
                               DecodeEpilogue epilogue) {
  test::DeviceBfloats out(static_cast<std::size_t>(B) * N);
  if (epilogue == DecodeEpilogue::kBiasResidual) {
    out.upload(test::to_bfloat16_bits(residual));
  } else {
    out.poison();
  }
  launch_decode_matmul_bf16(test::as_bfloat16(x), test::as_bfloat16(packed),
                            epilogue == DecodeEpilogue::kNone ? nullptr : test::as_bfloat16(bias),
                            test::as_bfloat16(out), B, K, N, epilogue, queue.workspace,
                            queue.stream.get());
  queue.stream.synchronize();
  return test::from_bfloat16_bits(out.download());
}

void check_products(std::mt19937& rng, DecodeQueue& queue, const Shape shape,
                    std::initializer_list<int> batches) {
  const int K = shape.K;
  const int N = shape.N;
  const PackedWeight weight(rng, K, N);
  const std::vector<float> bias = test::random_bfloat16(rng, N, -2.0f, 2.0f);
  const test::DeviceBfloats bias_device(test::to_bfloat16_bits(bias));
  for (const int B : batches) {
    const std::vector<float> x =
        test::random_bfloat16(rng, static_cast<std::size_t>(B) * K, -1.0f, 1.0f);
    const std::vector<float> residual =
        test::random_bfloat16(rng, static_cast<std::size_t>(B) * N, -3.0f, 3.0f);
    const test::DeviceBfloats x_device(test::to_bfloat16_bits(x));
    std::vector<float> without_bias(static_cast<std::size_t>(B) * N);
    std::vector<float> with_bias(without_bias.size());
    reference::linear(x.data(), weight.weight.data(), nullptr, without_bias.data(), B, K, N);
    reference::linear(x.data(), weight.weight.data(), bias.data(), with_bias.data(), B, K, N);
    for (const DecodeEpilogue epilogue : kEpilogues) {
      CAPTURE(B, K, N, static_cast<int>(epilogue));
      const std::vector<float> expected =
          expected_output(without_bias, with_bias, residual, epilogue);
      const std::vector<float> y =
          run_product(queue, x_device, weight.packed, bias_device, residual, B, K, N, epilogue);
      CHECK(test::beyond_one_bfloat16_step(y, expected, kSlack * test::max_magnitude(expected)) ==
            0);
    }
  }
}

// ---------------------------------------------------------------- products

TEST_CASE("launch_decode_matmul_bf16 matches the bf16 reference with every epilogue",
          "[kernels][decode_matmul][bf16][sweep]") {
  LADDER_SEEDED_RNG(rng);
  DecodeQueue queue;
  // Every row tile (16, 32, 64), full and one row into it, and odd B.
  for (const Shape shape : kGpt2Shapes)
    check_products(rng, queue, shape, {1, 3, 16, 17, 32, 33, 64});
  for (const Shape shape : kOddShapes) check_products(rng, queue, shape, {1, 5, 31, 64});
}

// Each row tile (16, 32, 64) full and with rows to spare, on the three ways a product's
// splits are summed: none (K = 1, one chunk), a thread-block cluster, the workspace; the
// shapes c_proj's, K = 97 (the 2-byte x path, K and N tails) and K = 1. Racecheck needs
// each code path once; the sweeps ([sweep]) vary the shapes for the arithmetic
// (scripts/gpu_check.sh, sanitize, leaves them out).
TEST_CASE("each bf16 decode-matmul kernel, full and partial, on each way of summing splits",
          "[kernels][decode_matmul][bf16]") {
  LADDER_SEEDED_RNG(rng);
  test::SummingWays ways;
  for (const Shape shape : {Shape{768, 768}, Shape{97, 65}, Shape{1, 130}}) {
    for (const int B : {1, 16, 31, 32, 47, 64})
      ways.saw(plan_decode_matmul_bf16(B, shape.K, shape.N, ways.plain.workspace).splits);
    check_products(rng, ways.clustered, shape, {1, 16, 31, 32, 47, 64});
    check_products(rng, ways.plain, shape, {1, 16, 31, 32, 47, 64});
  }
  ways.check_every_way();
}

TEST_CASE("launch_decode_matmul_bf16 handles every B from 1 to 64",
          "[kernels][decode_matmul][bf16]") {
  LADDER_SEEDED_RNG(rng);
  DecodeQueue queue;
  std::vector<int> batches(64);
  for (int B = 1; B <= 64; ++B) batches[static_cast<std::size_t>(B - 1)] = B;
  const PackedWeight weight(rng, 768, 768);
  for (const int B : batches) {
    CAPTURE(B);
    const std::vector<float> x =
        test::random_bfloat16(rng, static_cast<std::size_t>(B) * 768, -1.0f, 1.0f);
    const test::DeviceBfloats x_device(test::to_bfloat16_bits(x));
    std::vector<float> expected(static_cast<std::size_t>(B) * 768);
    reference::linear(x.data(), weight.weight.data(), nullptr, expected.data(), B, 768, 768);
    expected = test::rounded_to_bfloat16(expected);
    const std::vector<float> y = run_product(queue, x_device, weight.packed, x_device, {}, B, 768,
                                             768, DecodeEpilogue::kNone);
    CHECK(test::beyond_one_bfloat16_step(y, expected, kSlack * test::max_magnitude(expected)) == 0);
  }
}

TEST_CASE("bf16 decode matmuls repeat bit for bit, split or not",
          "[kernels][decode_matmul][bf16]") {
  LADDER_SEEDED_RNG(rng);
  DecodeQueue queue;
  for (const Shape shape : {Shape{3072, 768}, Shape{768, 3072}}) {
    CAPTURE(shape.K, shape.N,
            plan_decode_matmul_bf16(33, shape.K, shape.N, queue.workspace).splits);
    const PackedWeight weight(rng, shape.K, shape.N);
    const std::vector<float> bias = test::random_bfloat16(rng, shape.N, -2.0f, 2.0f);
    const test::DeviceBfloats bias_device(test::to_bfloat16_bits(bias));
    const std::vector<float> x =
        test::random_bfloat16(rng, static_cast<std::size_t>(33) * shape.K, -1.0f, 1.0f);
    const test::DeviceBfloats x_device(test::to_bfloat16_bits(x));
    const std::vector<float> first = run_product(queue, x_device, weight.packed, bias_device, {},
                                                 33, shape.K, shape.N, DecodeEpilogue::kBiasGelu);
    for (int run = 0; run < 5; ++run) {
      const std::vector<float> again = run_product(queue, x_device, weight.packed, bias_device, {},
                                                   33, shape.K, shape.N, DecodeEpilogue::kBiasGelu);
      REQUIRE(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("bf16 splits summed in a thread-block cluster give the workspace path's bits",
          "[kernels][decode_matmul][bf16][sweep]") {
  LADDER_SEEDED_RNG(rng);
  DecodeQueue clustered;
  DecodeQueue plain;
  plain.workspace.disable_cluster_splits();
  for (const Shape shape :
       {Shape{768, 768}, Shape{768, 2304}, Shape{768, 3072}, Shape{3072, 768}}) {
    const PackedWeight weight(rng, shape.K, shape.N);
    const std::vector<float> bias = test::random_bfloat16(rng, shape.N, -2.0f, 2.0f);
    const test::DeviceBfloats bias_device(test::to_bfloat16_bits(bias));
    for (const int B : {1, 9, 16, 17, 32, 33, 64}) {
      CAPTURE(B, shape.K, shape.N,
              plan_decode_matmul_bf16(B, shape.K, shape.N, plain.workspace).splits);
      const std::vector<float> x =
          test::random_bfloat16(rng, static_cast<std::size_t>(B) * shape.K, -1.0f, 1.0f);
      const test::DeviceBfloats x_device(test::to_bfloat16_bits(x));
      const std::vector<float> residual =
          test::random_bfloat16(rng, static_cast<std::size_t>(B) * shape.N, -1.0f, 1.0f);
      for (const DecodeEpilogue epilogue :
           {DecodeEpilogue::kBiasGelu, DecodeEpilogue::kBiasResidual}) {
        const std::vector<float> in_clusters =
            run_product(clustered, x_device, weight.packed, bias_device, residual, B, shape.K,
                        shape.N, epilogue);
        const std::vector<float> through_workspace = run_product(
            plain, x_device, weight.packed, bias_device, residual, B, shape.K, shape.N, epilogue);
        CHECK(std::memcmp(in_clusters.data(), through_workspace.data(),
                          in_clusters.size() * sizeof(float)) == 0);
      }
    }
  }
  CHECK(plain.workspace.cluster_launches() == 0);
  if (clustered.workspace.cluster_splits() > 0) CHECK(clustered.workspace.cluster_launches() > 0);
}

TEST_CASE("plan_decode_matmul_bf16 covers K exactly and fits the workspace",
          "[kernels][decode_matmul][bf16]") {
  DecodeQueue queue;
  for (const Shape shape : {Shape{768, 2304}, Shape{768, 768}, Shape{768, 3072}, Shape{3072, 768},
                            Shape{768, 50257}, Shape{97, 65}}) {
    for (const int B : {1, 17, 64}) {
      CAPTURE(shape.K, shape.N, B);
      const DecodeMatmulPlan plan = plan_decode_matmul_bf16(B, shape.K, shape.N, queue.workspace);
      CHECK(plan.chunks * kDecodeBf16ChunkRows >= shape.K);
      CHECK((plan.splits - 1) * plan.chunks_per_split < plan.chunks);
      CHECK(plan.splits * plan.chunks_per_split >= plan.chunks);
      CHECK(plan.partial_floats <= queue.workspace.partial_floats());
      CHECK(plan.row_tile >= B);
    }
  }
}

TEST_CASE("launch_decode_matmul_bf16 refuses bad arguments", "[kernels][decode_matmul][bf16]") {
  DecodeQueue queue;
  test::DeviceBfloats x(64 * 64);
  test::DeviceBfloats weight(64 * 64);
  test::DeviceBfloats out(65 * 64);
  __nv_bfloat16* const x_pointer = test::as_bfloat16(x);
  __nv_bfloat16* const w = test::as_bfloat16(weight);
  __nv_bfloat16* const o = test::as_bfloat16(out);
  cudaStream_t stream = queue.stream.get();
  CHECK_THROWS_AS(launch_decode_matmul_bf16(x_pointer, w, w, o, 1, 64, 64, DecodeEpilogue::kNone,
                                            queue.workspace, stream),
                  std::invalid_argument);  // a bias with kNone
  CHECK_THROWS_AS(launch_decode_matmul_bf16(x_pointer, w, nullptr, o, 1, 64, 64,
                                            DecodeEpilogue::kBias, queue.workspace, stream),
                  std::invalid_argument);  // kBias without one
  CHECK_THROWS_AS(launch_decode_matmul_bf16(x_pointer, w, nullptr, o, 65, 64, 64,
                                            DecodeEpilogue::kNone, queue.workspace, stream),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_decode_matmul_bf16(x_pointer, w + 1, nullptr, o, 1, 64, 64,
                                            DecodeEpilogue::kNone, queue.workspace, stream),
                  std::invalid_argument);  // a weight not 16-byte aligned
  CHECK_THROWS_AS(launch_decode_lm_head_bf16(x_pointer, w, nullptr, nullptr, nullptr, 1, 64, 64,
                                             queue.workspace, stream),
                  std::invalid_argument);  // nothing to write
}

// ---------------------------------------------------------------- the LM head

using test::LmHeadResult;

LmHeadResult run_lm_head(DecodeQueue& queue, const test::DeviceBfloats& x,
                         const test::DeviceBfloats& packed_wte, int B, int C, int V) {
  return test::lm_head_into_poisoned(
      B, V, queue.stream, [&](float* logits, float* values, std::int32_t* indices) {
        launch_decode_lm_head_bf16(test::as_bfloat16(x), test::as_bfloat16(packed_wte), logits,
                                   values, indices, B, C, V, queue.workspace, queue.stream.get());
      });
}

TEST_CASE("launch_decode_lm_head_bf16 matches reference::lm_head, candidates included",
          "[kernels][decode_matmul][bf16]") {
  LADDER_SEEDED_RNG(rng);
  DecodeQueue queue;
  struct Case {
    int B;
    int C;
    int V;
  };
  // GPT-2's vocabulary (786 tiles, the last one 17 columns wide) at a small C, GPT-2's C
  // at a vocabulary of odd size, and an odd C (the 2-byte x path).
  for (const Case c : {Case{1, 64, 50257}, Case{33, 64, 50257}, Case{7, 768, 5003},
                       Case{64, 768, 1001}, Case{5, 100, 777}}) {
    CAPTURE(c.B, c.C, c.V);
    const std::vector<float> wte =
        test::random_bfloat16(rng, static_cast<std::size_t>(c.V) * c.C, -1.0f, 1.0f);
    const std::vector<float> x =
        test::random_bfloat16(rng, static_cast<std::size_t>(c.B) * c.C, -1.0f, 1.0f);
    const test::DeviceBfloats x_device(test::to_bfloat16_bits(x));
    const test::DeviceBfloats packed(
        pack_bfloat16_weights_transposed(wte.data(), c.V, c.C, BfloatLayout::k_tiled));
    const LmHeadResult result = run_lm_head(queue, x_device, packed, c.B, c.C, c.V);
    std::vector<float> expected(static_cast<std::size_t>(c.B) * c.V);
    reference::lm_head(x.data(), wte.data(), expected.data(), c.B, c.C, c.V);
    CHECK(test::checked_relative_error(result.logits, expected) <= kLogitTolerance);
    test::check_candidates(result.logits, result.candidate_values, result.candidate_indices, c.B,
                           c.V);
    const LmHeadResult again = run_lm_head(queue, x_device, packed, c.B, c.C, c.V);
    CHECK(std::memcmp(result.logits.data(), again.logits.data(),
                      result.logits.size() * sizeof(float)) == 0);
    CHECK(again.candidate_indices == result.candidate_indices);
  }
}

}  // namespace
}  // namespace ladder
