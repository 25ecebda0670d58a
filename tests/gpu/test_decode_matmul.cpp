// tests/gpu/test_decode_matmul.cpp - kernels/decode_matmul (the decode matmuls on packed
// weights) against reference::linear (+ gelu, + the residual add) and reference::lm_head,
// the LM head's argmax first pass against reference::argmax, ties and NaN included.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/device_model.hpp"
#include "common/reference.hpp"
#include "common/weights.hpp"
#include "kernels/decode_matmul.cuh"
#include "kernels/sampling.cuh"
#include "tests/gpu/decode_matmul_test_helpers.hpp"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

constexpr double kFp32Tolerance = 1e-5;  // plain fp32 FFMA, against the fp64 reference
constexpr double kTf32Tolerance = 5e-3;  // TF32 keeps a 10-bit mantissa: ~1e-4 here, a bound

double tolerance(DecodePrecision precision) {
  return precision == DecodePrecision::kFp32 ? kFp32Tolerance : kTf32Tolerance;
}

struct Shape {
  int K;
  int N;
};
// GPT-2 small's four products (qkv, attention projection, MLP up, MLP down), and
// GPT-2 medium's (C = 1024).
const Shape kGpt2Shapes[] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
const Shape kGpt2MediumShapes[] = {{1024, 3072}, {1024, 1024}, {1024, 4096}, {4096, 1024}};
// Sizes that are multiples of nothing: K = 97 takes the 4-byte x path, N = 1 one column.
const Shape kOddShapes[] = {{100, 97}, {64, 100}, {97, 65}, {33, 1}, {1, 130}};

using test::DecodeQueue;
using test::kEpilogues;

/// A weight W [K, N] with its packed copy on the device.
struct PackedWeight {
  PackedWeight(std::mt19937& rng, int K, int N)
      : weight(test::random_matrix(rng, K, N, -1.0f, 1.0f)),
        packed(pack_decode_weight(weight.data(), K, N)) {}
  std::vector<float> weight;
  test::DeviceArray<float> packed;
};

/// What launch_decode_matmul must produce, from the fp64-accumulating reference:
/// `with_bias` = x W + bias, `without_bias` = x W, residual [B, N] for kBiasResidual.
std::vector<float> expected_output(const std::vector<float>& without_bias,
                                   const std::vector<float>& with_bias,
                                   const std::vector<float>& residual, DecodeEpilogue epilogue) {
  switch (epilogue) {
    case DecodeEpilogue::kNone:
      return without_bias;
    case DecodeEpilogue::kBias:
      return with_bias;
    case DecodeEpilogue::kBiasGelu: {
      std::vector<float> out(with_bias.size());
      reference::gelu(with_bias.data(), out.data(), out.size());
      return out;
    }
    case DecodeEpilogue::kBiasResidual: {
      std::vector<float> out(with_bias.size());
      reference::add(residual.data(), with_bias.data(), out.data(), out.size());
      return out;
    }
  }
  return {};
}

/// The largest error of `actual` against `expected`, relative to the largest magnitude the
/// sum could have: |x| |W| + |bias| (+ |residual|), per element, from the reference. A
/// product with few columns (N = 1, say) can cancel to almost nothing, and rounding error
/// scales with the terms summed, not with the result; relative to max |expected| alone
/// such a row reports a large error for a correct kernel. NaN or a size mismatch: infinity.
double error_against_magnitude(const std::vector<float>& actual, const std::vector<float>& expected,
                               const std::vector<float>& magnitude) {
  if (actual.size() != expected.size() || actual.empty())
    return std::numeric_limits<double>::infinity();
  double largest_error = 0.0;
  double largest_magnitude = 0.0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (!std::isfinite(actual[i]) || !std::isfinite(expected[i]))
      return std::numeric_limits<double>::infinity();
    largest_error = std::max(largest_error, std::abs(static_cast<double>(actual[i]) - expected[i]));
    largest_magnitude = std::max(largest_magnitude, static_cast<double>(magnitude[i]));
  }
  return largest_magnitude > 0.0 ? largest_error / largest_magnitude : largest_error;
}

std::vector<float> absolute(const std::vector<float>& values) {
  std::vector<float> result(values.size());
  std::transform(values.begin(), values.end(), result.begin(),
                 [](float value) { return std::abs(value); });
  return result;
}

/// Runs one product into a fresh output - poisoned, or holding `residual` for
/// kBiasResidual - and returns what the output holds afterwards.
std::vector<float> run_product(DecodeQueue& queue, const float* x, const float* packed,
                               const float* bias, const std::vector<float>& residual, int B, int K,
                               int N, DecodeEpilogue epilogue, DecodePrecision precision) {
  test::DeviceArray<float> out(static_cast<std::size_t>(B) * N);
  if (epilogue == DecodeEpilogue::kBiasResidual) {
    out.upload(residual);
  } else {
    out.poison();
  }
  launch_decode_matmul(x, packed, epilogue == DecodeEpilogue::kNone ? nullptr : bias, out.get(), B,
                       K, N, epilogue, precision, queue.workspace, queue.stream.get());
  queue.stream.synchronize();
  return out.download();
}

/// For each B: fresh x, every epilogue, checked against the reference within `tolerance`.
void check_products(std::mt19937& rng, DecodeQueue& queue, const Shape shape,
                    std::initializer_list<int> batches, DecodePrecision precision,
                    double tolerance) {
  const int K = shape.K;
  const int N = shape.N;
  const PackedWeight weight(rng, K, N);
  const std::vector<float> bias = test::random_uniform(rng, N, -2.0f, 2.0f);
  const test::DeviceArray<float> bias_device(bias);
  for (const int B : batches) {
    const std::vector<float> x = test::random_matrix(rng, B, K, -1.0f, 1.0f);
    const std::vector<float> residual = test::random_matrix(rng, B, N, -3.0f, 3.0f);
    const test::DeviceArray<float> x_device(x);
    std::vector<float> without_bias(static_cast<std::size_t>(B) * N);
    std::vector<float> with_bias(without_bias.size());
    reference::linear(x.data(), weight.weight.data(), nullptr, without_bias.data(), B, K, N);
    reference::linear(x.data(), weight.weight.data(), bias.data(), with_bias.data(), B, K, N);
    std::vector<float> magnitude(without_bias.size());
    reference::linear(absolute(x).data(), absolute(weight.weight).data(), absolute(bias).data(),
                      magnitude.data(), B, K, N);
    for (std::size_t i = 0; i < magnitude.size(); ++i) magnitude[i] += std::abs(residual[i]);
    for (const DecodeEpilogue epilogue : kEpilogues) {
      CAPTURE(B, K, N, static_cast<int>(epilogue), static_cast<int>(precision));
      const std::vector<float> y =
          run_product(queue, x_device.get(), weight.packed.get(), bias_device.get(), residual, B, K,
                      N, epilogue, precision);
      CHECK(error_against_magnitude(y, expected_output(without_bias, with_bias, residual, epilogue),
                                    magnitude) <= tolerance);
    }
  }
}

// ---------------------------------------------------------------- products

/// Every row tile (8, 16, 32, 64), full and one row into it, on GPT-2 small's and
/// medium's shapes and odd ones, with every epilogue, in `precision`.
void check_products_of_every_shape(DecodePrecision precision) {
  LADDER_SEEDED_RNG(rng);
  DecodeQueue queue;
  for (const Shape shape : kGpt2Shapes)
    check_products(rng, queue, shape, {1, 3, 8, 16, 17, 32, 33, 64}, precision,
                   tolerance(precision));
  for (const Shape shape : kGpt2MediumShapes)
    check_products(rng, queue, shape, {3, 64}, precision, tolerance(precision));
  for (const Shape shape : kOddShapes)
    check_products(rng, queue, shape, {1, 3, 8, 9, 17, 33, 64}, precision, tolerance(precision));
}

/// Each kernel the launcher picks in `precision`, once per row tile full and once with
/// rows to spare (`batches`), on the three ways a product's splits are summed: none (one
/// split), in a thread-block cluster, through the workspace. Every epilogue is checked
/// against the reference. The shapes are c_proj's (12 splits), K = 97 (the 4-byte x path,
/// a K and an N tail) and K = 1 (one chunk, so one split).
///
/// Racecheck needs each code path once, not every shape: the sweeps ([sweep]) vary the
/// shapes for the arithmetic, and under racecheck one of them runs past 300 s
/// (scripts/gpu_check.sh, sanitize, leaves them out).
void check_each_kernel_and_path(DecodePrecision precision, std::initializer_list<int> batches) {
  LADDER_SEEDED_RNG(rng);
  test::SummingWays ways;
  for (const Shape shape : {Shape{768, 768}, Shape{97, 65}, Shape{1, 130}}) {
    for (const int B : batches)
      ways.saw(plan_decode_matmul(B, shape.K, shape.N, precision, ways.plain.workspace).splits);
    check_products(rng, ways.clustered, shape, batches, precision, tolerance(precision));
    check_products(rng, ways.plain, shape, batches, precision, tolerance(precision));
  }
  ways.check_every_way();
}

// Two test cases, not one with a generator: racecheck runs one test case a process
// (scripts/gpu_check.sh, sanitize), and both precisions together took it past 260 s.
TEST_CASE("launch_decode_matmul matches the reference with every epilogue, fp32",
          "[kernels][decode_matmul][sweep]") {
  check_products_of_every_shape(DecodePrecision::kFp32);
}

TEST_CASE("launch_decode_matmul matches the reference with every epilogue, tf32",
          "[kernels][decode_matmul][sweep]") {
  check_products_of_every_shape(DecodePrecision::kTf32);
}

// Row tiles 2, 8, 16, 32 and 64 in fp32; 16, 32 and 64 in TF32.
TEST_CASE("each fp32 decode-matmul kernel, full and partial, on each way of summing splits",
          "[kernels][decode_matmul]") {
  check_each_kernel_and_path(DecodePrecision::kFp32, {1, 2, 5, 8, 13, 16, 31, 32, 47, 64});
}

TEST_CASE("each tf32 decode-matmul kernel, full and partial, on each way of summing splits",
          "[kernels][decode_matmul]") {
  check_each_kernel_and_path(DecodePrecision::kTf32, {1, 16, 31, 32, 47, 64});
}

TEST_CASE("launch_decode_matmul handles every B from 1 to 64", "[kernels][decode_matmul]") {
  LADDER_SEEDED_RNG(rng);
  DecodeQueue queue;
  for (const DecodePrecision precision : {DecodePrecision::kFp32, DecodePrecision::kTf32}) {
    for (const Shape shape : {Shape{100, 97}, Shape{97, 130}}) {
      const PackedWeight weight(rng, shape.K, shape.N);
      const std::vector<float> bias = test::random_uniform(rng, shape.N, -2.0f, 2.0f);
      const test::DeviceArray<float> bias_device(bias);
      for (int B = 1; B <= kDecodeMaxRows; ++B) {
        CAPTURE(B, shape.K, shape.N, static_cast<int>(precision));
        const std::vector<float> x = test::random_matrix(rng, B, shape.K, -1.0f, 1.0f);
        const test::DeviceArray<float> x_device(x);
        const std::vector<float> y =
            run_product(queue, x_device.get(), weight.packed.get(), bias_device.get(), {}, B,
                        shape.K, shape.N, DecodeEpilogue::kBiasGelu, precision);
        std::vector<float> expected(static_cast<std::size_t>(B) * shape.N);
        reference::linear(x.data(), weight.weight.data(), bias.data(), expected.data(), B, shape.K,
                          shape.N);
        reference::gelu(expected.data(), expected.data(), expected.size());
        CHECK(test::checked_relative_error(y, expected) <= tolerance(precision));
      }
    }
  }
}

TEST_CASE("the fp32 decode matmul does not use TF32", "[kernels][decode_matmul]") {
  // x = 1 + 2^-12 and W = 1 + 2^-12: in fp32 each product is 1 + 2^-11 + 2^-24, which
  // TF32 (10 mantissa bits) would round to 1. Summed over K = 64 rows the fp32 result is
  // 64 + 64 * 2^-11 (+ rounding); TF32's would be 64.
  DecodeQueue queue;
  const int B = 2;
  const int K = 64;
  const int N = 64;
  const float value = 1.0f + std::ldexp(1.0f, -12);
  const std::vector<float> weight(static_cast<std::size_t>(K) * N, value);
  const test::DeviceArray<float> packed(pack_decode_weight(weight.data(), K, N));
  const test::DeviceArray<float> x(std::vector<float>(static_cast<std::size_t>(B) * K, value));
  const std::vector<float> fp32 = run_product(queue, x.get(), packed.get(), nullptr, {}, B, K, N,
                                              DecodeEpilogue::kNone, DecodePrecision::kFp32);
  const std::vector<float> tf32 = run_product(queue, x.get(), packed.get(), nullptr, {}, B, K, N,
                                              DecodeEpilogue::kNone, DecodePrecision::kTf32);
  const double exact = K * static_cast<double>(value) * value;
  for (const float y : fp32) REQUIRE(std::fabs(y - exact) < 1e-4);
  for (const float y : tf32) REQUIRE(std::fabs(y - 64.0) < 1e-4);
}

TEST_CASE("launch_decode_matmul handles pointers that are only 4-byte aligned",
          "[kernels][decode_matmul]") {
  LADDER_SEEDED_RNG(rng);
  DecodeQueue queue;
  const int B = 5;
  const int K = 768;
  const int N = 768;
  const PackedWeight weight(rng, K, N);
  const std::vector<float> x = test::random_matrix(rng, B, K, -1.0f, 1.0f);
  const std::vector<float> bias = test::random_uniform(rng, N, -1.0f, 1.0f);
  const test::UnalignedDeviceArray<float> x_device(x);
  const test::UnalignedDeviceArray<float> bias_device(bias);
  for (const DecodePrecision precision : {DecodePrecision::kFp32, DecodePrecision::kTf32}) {
    CAPTURE(static_cast<int>(precision));
    test::UnalignedDeviceArray<float> y(static_cast<std::size_t>(B) * N);
    y.poison();
    launch_decode_matmul(x_device.get(), weight.packed.get(), bias_device.get(), y.get(), B, K, N,
                         DecodeEpilogue::kBias, precision, queue.workspace, queue.stream.get());
    queue.stream.synchronize();
    std::vector<float> expected(static_cast<std::size_t>(B) * N);
    reference::linear(x.data(), weight.weight.data(), bias.data(), expected.data(), B, K, N);
    CHECK(std::isnan(y.element_in_front()));  // the float before the output was not touched
    CHECK(test::checked_relative_error(y.download(), expected) <= tolerance(precision));
  }
}

TEST_CASE("decode matmuls repeat bit for bit, split or not, on any stream",
          "[kernels][decode_matmul]") {
  LADDER_SEEDED_RNG(rng);
  DecodeQueue first;
  DecodeQueue second;
  for (const DecodePrecision precision : {DecodePrecision::kFp32, DecodePrecision::kTf32}) {
    // B = 1 and 8: fp32's register-direct row tiles; B = 32: the shared-memory pipeline.
    for (const Shape shape : {Shape{3072, 768}, Shape{768, 2304}, Shape{768, 50257}}) {
      for (const int B : {1, 8, 32}) {
        CAPTURE(B, shape.K, shape.N, static_cast<int>(precision));
        const DecodeMatmulPlan plan =
            plan_decode_matmul(B, shape.K, shape.N, precision, first.workspace);
        CAPTURE(plan.splits);
        const PackedWeight weight(rng, shape.K, shape.N);
        const test::DeviceArray<float> bias(test::random_uniform(rng, shape.N, -1.0f, 1.0f));
        const test::DeviceArray<float> x(test::random_matrix(rng, B, shape.K, -1.0f, 1.0f));
        const std::vector<float> first_bits =
            run_product(first, x.get(), weight.packed.get(), bias.get(), {}, B, shape.K, shape.N,
                        DecodeEpilogue::kBiasGelu, precision);
        for (int repeat = 0; repeat < 3; ++repeat) {
          CHECK(run_product(first, x.get(), weight.packed.get(), bias.get(), {}, B, shape.K,
                            shape.N, DecodeEpilogue::kBiasGelu, precision) == first_bits);
        }
        CHECK(run_product(second, x.get(), weight.packed.get(), bias.get(), {}, B, shape.K, shape.N,
                          DecodeEpilogue::kBiasGelu, precision) == first_bits);
      }
    }
  }
}

// GPT-2 small with the chapters' random weights (seed 0, full config), packed as the
// chapters pack them: each layer product of layer 0 at B = 1 and 32, run 50 times in
// thread-block clusters and 50 times through the workspace, gives one set of bits. (The
// chapter-level 50-run tests at these shapes, gpu_tests "[chapters]", run the whole step,
// attention splits included, but the plans decide there which sums run where.)
TEST_CASE("GPT-2 small's layer products give the same bits on 50 runs, in clusters and not",
          "[kernels][decode_matmul]") {
  const Gpt2Config config;  // GPT-2 small
  const Gpt2Weights weights = random_gpt2_weights(config, 0);
  const DeviceModel model(weights);
  const PackedDecodeModel packed(model);
  const DeviceLayer layer = model.layer(0);
  const PackedDecodeModel::Layer packed_layer = packed.layer(0);
  const int C = config.n_embd;
  struct Product {
    const float* weight;
    const float* bias;
    int K;
    int N;
    DecodeEpilogue epilogue;
  };
  const Product products[] = {
      {packed_layer.qkv_weight, layer.qkv_bias, C, 3 * C, DecodeEpilogue::kBias},
      {packed_layer.attn_proj_weight, layer.attn_proj_bias, C, C, DecodeEpilogue::kBiasResidual},
      {packed_layer.fc_weight, layer.fc_bias, C, 4 * C, DecodeEpilogue::kBiasGelu},
      {packed_layer.mlp_proj_weight, layer.mlp_proj_bias, 4 * C, C, DecodeEpilogue::kBiasResidual}};
  LADDER_SEEDED_RNG(rng);
  test::SummingWays ways;
  constexpr int kRepeats = 50;
  for (const DecodePrecision precision : {DecodePrecision::kFp32, DecodePrecision::kTf32}) {
    for (const Product& product : products) {
      for (const int B : {1, 32}) {
        CAPTURE(B, product.K, product.N, static_cast<int>(precision));
        const DecodeMatmulPlan plan =
            plan_decode_matmul(B, product.K, product.N, precision, ways.clustered.workspace);
        CAPTURE(plan.splits);
        ways.saw(plan.splits);
        const test::DeviceArray<float> x(test::random_matrix(rng, B, product.K, -1.0f, 1.0f));
        const std::vector<float> residual = test::random_matrix(rng, B, product.N, -1.0f, 1.0f);
        const std::vector<float> first_bits =
            run_product(ways.clustered, x.get(), product.weight, product.bias, residual, B,
                        product.K, product.N, product.epilogue, precision);
        int differing_runs = 0;
        for (int repeat = 0; repeat < kRepeats; ++repeat) {
          for (DecodeQueue* queue : {&ways.clustered, &ways.plain}) {
            if (queue == &ways.clustered && repeat == 0) continue;  // first_bits
            const std::vector<float> bits =
                run_product(*queue, x.get(), product.weight, product.bias, residual, B, product.K,
                            product.N, product.epilogue, precision);
            differing_runs +=
                std::memcmp(bits.data(), first_bits.data(), bits.size() * sizeof(float)) != 0;
          }
        }
        CHECK(differing_runs == 0);
      }
    }
  }
  // Both ways of summing ran: the workspace on `plain`, clusters on `clustered` where the
  // device has them (compute capability 9.0 on, and a cluster fits).
  CHECK(ways.split);
  CHECK(ways.plain.workspace.cluster_launches() == 0);
  if (ways.clustered.workspace.cluster_splits() > 0)
    CHECK(ways.clustered.workspace.cluster_launches() > 0);
}

TEST_CASE("splits summed in a thread-block cluster give the workspace path's bits",
          "[kernels][decode_matmul][sweep]") {
  LADDER_SEEDED_RNG(rng);
  DecodeQueue clustered;
  DecodeQueue plain;
  plain.workspace.disable_cluster_splits();
  for (const DecodePrecision precision : {DecodePrecision::kFp32, DecodePrecision::kTf32}) {
    // GPT-2's four layer products at each row tile: c_proj (S = 12), c_attn (S = 6), c_fc
    // (S = 4) and the MLP's c_proj (S = 16) take clusters at every B.
    for (const Shape shape :
         {Shape{768, 768}, Shape{768, 2304}, Shape{768, 3072}, Shape{3072, 768}}) {
      const PackedWeight weight(rng, shape.K, shape.N);
      const test::DeviceArray<float> bias(test::random_uniform(rng, shape.N, -1.0f, 1.0f));
      for (const int B : {1, 2, 5, 8, 13, 16, 31, 32, 47, 64}) {
        CAPTURE(B, shape.K, shape.N, static_cast<int>(precision));
        const test::DeviceArray<float> x(test::random_matrix(rng, B, shape.K, -1.0f, 1.0f));
        const std::vector<float> residual = test::random_matrix(rng, B, shape.N, -1.0f, 1.0f);
        for (const DecodeEpilogue epilogue :
             {DecodeEpilogue::kBiasGelu, DecodeEpilogue::kBiasResidual}) {
          const std::vector<float> in_clusters =
              run_product(clustered, x.get(), weight.packed.get(), bias.get(), residual, B, shape.K,
                          shape.N, epilogue, precision);
          const std::vector<float> through_workspace =
              run_product(plain, x.get(), weight.packed.get(), bias.get(), residual, B, shape.K,
                          shape.N, epilogue, precision);
          CHECK(std::memcmp(in_clusters.data(), through_workspace.data(),
                            in_clusters.size() * sizeof(float)) == 0);
        }
      }
    }
  }
  CHECK(plain.workspace.cluster_launches() == 0);
  // Compute capability 9.0 on: c_proj's 12 x 12 blocks at least take the cluster path.
  if (clustered.workspace.cluster_splits() > 0) CHECK(clustered.workspace.cluster_launches() > 0);
}

TEST_CASE("choose_decode_splits keeps to a cluster's splits where that costs a chunk at most",
          "[kernels][decode_matmul]") {
  // On 132 multiprocessors, each holding 2 blocks of the kernel (264 slots, 224 of them
  // leave room for clusters): the MLP's c_proj (96 chunks of K = 3072, 12 column tiles):
  // 20 splits of 5 chunks are more than a cluster holds; 16 of 6 are summed in one and
  // stream one chunk more.
  const DecodeSplits mlp_proj = choose_decode_splits(96, 12, 132, 2);
  CHECK(mlp_proj.splits == 16);
  CHECK(mlp_proj.chunks_per_split == 6);
  // c_fc (24 chunks, 48 tiles): 5 splits of 5 chunks make 240 blocks, too many for
  // clusters in 264 slots; 4 of 6 make 192.
  const DecodeSplits fc = choose_decode_splits(24, 48, 132, 2);
  CHECK(fc.splits == 4);
  CHECK(fc.chunks_per_split == 6);
  // A kernel held 3 to a multiprocessor (the 2-row fp32 tile): 240 blocks of 396 slots
  // leave room, so c_fc keeps its 5 splits, in clusters.
  CHECK(choose_decode_splits(24, 48, 132, 3).splits == 5);
  // Plans that take clusters anyway are the cheapest as before: c_proj's 12, c_attn's 6.
  CHECK(choose_decode_splits(24, 12, 132, 2).splits == 12);
  CHECK(choose_decode_splits(24, 36, 132, 2).splits == 6);
  // On 144 multiprocessors the MLP's c_proj: 24 splits of 4 chunks against 16 of 6, two
  // chunks more, so 24 stay.
  CHECK(choose_decode_splits(96, 12, 144, 2).splits == 24);
}

TEST_CASE("plan_decode_matmul covers K exactly and fits the workspace",
          "[kernels][decode_matmul]") {
  DecodeMatmulWorkspace workspace;
  for (const DecodePrecision precision : {DecodePrecision::kFp32, DecodePrecision::kTf32}) {
    for (const int B : {1, 2, 3, 8, 9, 16, 17, 32, 33, 64}) {
      for (const Shape shape :
           {Shape{768, 2304}, Shape{768, 768}, Shape{768, 3072}, Shape{3072, 768},
            Shape{768, 50257}, Shape{1, 1}, Shape{100000, 64}}) {
        CAPTURE(B, shape.K, shape.N, static_cast<int>(precision));
        const DecodeMatmulPlan plan = plan_decode_matmul(B, shape.K, shape.N, precision, workspace);
        CHECK(plan.row_tile >= B);
        CHECK(plan.chunks * kDecodeChunkRows >= shape.K);
        CHECK(plan.chunks_per_split * plan.splits >= plan.chunks);       // every chunk ...
        CHECK(plan.chunks_per_split * (plan.splits - 1) < plan.chunks);  // ... no empty split
        CHECK(plan.partial_floats <= workspace.partial_floats());
        if (plan.splits > 1) CHECK(plan.column_tiles <= workspace.tile_counter_count());
      }
    }
  }
  CHECK(plan_decode_matmul(1, 768, 768, DecodePrecision::kFp32, workspace).splits > 1);
  CHECK(plan_decode_matmul(64, 768, 50257, DecodePrecision::kFp32, workspace).splits == 1);
}

// ---------------------------------------------------------------- the LM head

using test::LmHeadResult;

LmHeadResult run_lm_head(DecodeQueue& queue, const float* x, const float* packed_wte, int B, int C,
                         int V, DecodePrecision precision, bool with_logits) {
  return test::lm_head_into_poisoned(
      B, V, queue.stream, [&](float* logits, float* values, std::int32_t* indices) {
        launch_decode_lm_head(x, packed_wte, with_logits ? logits : nullptr, values, indices, B, C,
                              V, precision, queue.workspace, queue.stream.get());
      });
}

TEST_CASE("launch_decode_lm_head matches reference::lm_head and reference::argmax",
          "[kernels][decode_matmul]") {
  LADDER_SEEDED_RNG(rng);
  DecodeQueue queue;
  struct Case {
    int B;
    int C;
    int V;
  };
  for (const DecodePrecision precision : {DecodePrecision::kFp32, DecodePrecision::kTf32}) {
    for (const Case c : {Case{1, 64, 97}, Case{3, 64, 97}, Case{37, 100, 97}, Case{5, 97, 200},
                         Case{1, 768, 50257}, Case{8, 768, 50257}, Case{32, 768, 50257},
                         Case{64, 768, 50257}, Case{2, 1024, 50257}}) {
      CAPTURE(c.B, c.C, c.V, static_cast<int>(precision));
      const std::vector<float> wte = test::random_matrix(rng, c.V, c.C, -1.0f, 1.0f);
      const std::vector<float> x = test::random_matrix(rng, c.B, c.C, -1.0f, 1.0f);
      const test::DeviceArray<float> packed(pack_decode_weight_transposed(wte.data(), c.V, c.C));
      const test::DeviceArray<float> x_device(x);
      const LmHeadResult result =
          run_lm_head(queue, x_device.get(), packed.get(), c.B, c.C, c.V, precision,
                      /*with_logits=*/true);

      std::vector<float> expected(static_cast<std::size_t>(c.B) * c.V);
      reference::lm_head(x.data(), wte.data(), expected.data(), c.B, c.C, c.V);
      CHECK(test::checked_relative_error(result.logits, expected) <= tolerance(precision));
      test::check_candidates(result.logits, result.candidate_values, result.candidate_indices, c.B,
                             c.V);

      // Without logits: the same candidates, and the logits stay untouched.
      const LmHeadResult candidates_only =
          run_lm_head(queue, x_device.get(), packed.get(), c.B, c.C, c.V, precision,
                      /*with_logits=*/false);
      CHECK(candidates_only.candidate_indices == result.candidate_indices);
      CHECK(test::all_nan(candidates_only.logits));
    }
  }
}

TEST_CASE("the LM head's argmax first pass breaks ties to the lowest index and ranks NaN first",
          "[kernels][decode_matmul]") {
  LADDER_SEEDED_RNG(rng);
  DecodeQueue queue;
  const int B = 3;
  const int C = 64;
  const int V = 300;  // tiles of 64: 0-63, 64-127, 128-191, 192-255, 256-299
  // x > 0, so a wte row of ones gives every row its largest logit, sum_c x[b, c] ~ 32,
  // far above the random rows' (|logit| ~ 5).
  const std::vector<float> x = test::random_matrix(rng, B, C, 0.0f, 1.0f);
  const test::DeviceArray<float> x_device(x);
  const auto wte_with = [&](std::initializer_list<int> ones, std::initializer_list<int> nans) {
    std::vector<float> wte = test::random_matrix(rng, V, C, -0.2f, 0.2f);
    for (const int v : ones)
      for (int c = 0; c < C; ++c) wte[static_cast<std::size_t>(v) * C + c] = 1.0f;
    for (const int v : nans)
      wte[static_cast<std::size_t>(v) * C + 5] = std::numeric_limits<float>::quiet_NaN();
    return wte;
  };
  const DecodePrecision precision = GENERATE(DecodePrecision::kFp32, DecodePrecision::kTf32);
  CAPTURE(static_cast<int>(precision));
  SECTION("equal maxima in one tile and across tiles") {
    // Identical wte rows give bit-identical logits: the same sums in the same order.
    const std::vector<float> wte = wte_with({200, 130, 131, 10, 299}, {});
    const test::DeviceArray<float> packed(pack_decode_weight_transposed(wte.data(), V, C));
    const LmHeadResult result =
        run_lm_head(queue, x_device.get(), packed.get(), B, C, V, precision, true);
    const std::vector<int> tokens = test::check_candidates(result.logits, result.candidate_values,
                                                           result.candidate_indices, B, V);
    const int tiles = decode_lm_head_candidates(V);
    for (int b = 0; b < B; ++b) {
      CAPTURE(b);
      CHECK(tokens[b] == 10);
      CHECK(result.candidate_indices[static_cast<std::size_t>(b) * tiles + 2] == 130);
      CHECK(result.candidate_indices[static_cast<std::size_t>(b) * tiles + 3] == 200);
      CHECK(result.candidate_indices[static_cast<std::size_t>(b) * tiles + 4] == 299);
    }
  }
  SECTION("a NaN logit wins its tile and the row, the lowest NaN first") {
    const std::vector<float> wte = wte_with({10}, {250, 270, 66});
    const test::DeviceArray<float> packed(pack_decode_weight_transposed(wte.data(), V, C));
    const LmHeadResult result =
        run_lm_head(queue, x_device.get(), packed.get(), B, C, V, precision, true);
    const int tiles = decode_lm_head_candidates(V);
    for (int b = 0; b < B; ++b) {
      CAPTURE(b);
      const std::size_t row = static_cast<std::size_t>(b) * tiles;
      CHECK(result.candidate_indices[row + 0] == 10);
      CHECK(result.candidate_indices[row + 1] == 66);
      CHECK(std::isnan(result.candidate_values[row + 1]));
      CHECK(result.candidate_indices[row + 3] == 250);
      CHECK(result.candidate_indices[row + 4] == 270);
      CHECK(reference::argmax(result.logits.data() + static_cast<std::size_t>(b) * V, V) == 66);
    }
  }
}

TEST_CASE("the argmax step over the LM head's candidates picks the argmax of the logits",
          "[kernels][decode_matmul]") {
  LADDER_SEEDED_RNG(rng);
  DecodeQueue queue;
  const DecodePrecision precision = GENERATE(DecodePrecision::kFp32, DecodePrecision::kTf32);
  const int max_steps = 3;
  const int step = 1;
  const int eos_id = 7;
  for (const int B : {1, 5, 32, 64}) {
    for (const int V : {97, 50257}) {
      const int C = 768;
      CAPTURE(B, V, static_cast<int>(precision));
      std::vector<float> wte = test::random_matrix(rng, V, C, -1.0f, 1.0f);
      const std::vector<float> x = test::random_matrix(rng, B, C, 0.0f, 1.0f);
      // Row eos_id made the largest logit of every row where V allows: the EOS bookkeeping.
      for (int c = 0; c < C; ++c) wte[static_cast<std::size_t>(eos_id) * C + c] = 1.0f;
      const test::DeviceArray<float> packed(pack_decode_weight_transposed(wte.data(), V, C));
      const test::DeviceArray<float> x_device(x);
      const LmHeadResult result =
          run_lm_head(queue, x_device.get(), packed.get(), B, C, V, precision, true);
      const test::DeviceArray<float> values(result.candidate_values);
      const test::DeviceArray<std::int32_t> indices(result.candidate_indices);
      test::DeviceArray<std::int32_t> next_tokens(B);
      test::DeviceArray<std::int32_t> finished(std::vector<std::int32_t>(B, 0));
      test::DeviceArray<std::int32_t> all_finished(1);
      test::DeviceArray<std::int32_t> output_tokens(static_cast<std::size_t>(B) * max_steps);
      test::DeviceArray<DecodePosition> cursor = test::device_cursor(step, 10);
      next_tokens.poison();
      output_tokens.poison();
      const GreedyState state{nullptr,   finished.get(), all_finished.get(), output_tokens.get(),
                              max_steps, eos_id};
      launch_argmax_step_from_candidates(
          ArgmaxCandidates{values.get(), indices.get(), decode_lm_head_candidates(V)},
          next_tokens.get(), state, cursor.get(), B, queue.stream.get());
      queue.stream.synchronize();
      const std::vector<std::int32_t> tokens = next_tokens.download();
      const std::vector<std::int32_t> written = output_tokens.download();
      for (int b = 0; b < B; ++b) {
        CAPTURE(b);
        const int expected =
            reference::argmax(result.logits.data() + static_cast<std::size_t>(b) * V, V);
        CHECK(expected == eos_id);
        CHECK(tokens[b] == expected);
        CHECK(written[static_cast<std::size_t>(b) * max_steps + step] == expected);
      }
      CHECK(finished.download() == std::vector<std::int32_t>(B, 1));
      CHECK(all_finished.download()[0] == 1);
      CHECK(cursor.download()[0].step == step + 1);
    }
  }
}

TEST_CASE("PackedDecodeModel packs every layer's weights and the LM head's wte^T",
          "[kernels][decode_matmul]") {
  Gpt2Config config;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 64;
  config.vocab_size = 97;
  config.n_positions = 16;
  config.bos_token_id = 96;
  config.eos_token_id = 96;
  const Gpt2Weights weights = random_gpt2_weights(config, 3);
  const DeviceModel model(weights);
  const PackedDecodeModel packed(model);
  const int C = config.n_embd;
  const auto unpacked = [](const float* device, int K, int N) {
    std::vector<float> host(DecodeWeightLayout::of(K, N).packed_floats());
    CUDA_CHECK(
        cudaMemcpy(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return unpack_decode_weight(host, K, N);
  };
  const auto host_matrix = [&](std::size_t offset, std::size_t count) {
    return std::vector<float>(weights.at(offset), weights.at(offset) + count);
  };
  const std::size_t CC = static_cast<std::size_t>(C) * C;
  for (int index = 0; index < config.n_layer; ++index) {
    CAPTURE(index);
    const LayerOffsets& at = weights.layout.layers[static_cast<std::size_t>(index)];
    const PackedDecodeModel::Layer layer = packed.layer(index);
    CHECK(unpacked(layer.qkv_weight, C, 3 * C) == host_matrix(at.qkv_weight, 3 * CC));
    CHECK(unpacked(layer.attn_proj_weight, C, C) == host_matrix(at.attn_proj_weight, CC));
    CHECK(unpacked(layer.fc_weight, C, 4 * C) == host_matrix(at.fc_weight, 4 * CC));
    CHECK(unpacked(layer.mlp_proj_weight, 4 * C, C) == host_matrix(at.mlp_proj_weight, 4 * CC));
  }
  // The LM head: W = wte^T, so W[c, v] = wte[v, c].
  const std::vector<float> lm_head = unpacked(packed.lm_head_weight(), C, config.vocab_size);
  const float* wte = weights.at(weights.layout.token_embedding);
  bool transposed = true;
  for (int v = 0; v < config.vocab_size; ++v)
    for (int c = 0; c < C; ++c)
      transposed = transposed && lm_head[static_cast<std::size_t>(c) * config.vocab_size + v] ==
                                     wte[static_cast<std::size_t>(v) * C + c];
  CHECK(transposed);
}

// ---------------------------------------------------------------- arguments

TEST_CASE("the decode matmul launchers reject bad arguments", "[kernels][decode_matmul]") {
  DecodeMatmulWorkspace workspace;
  test::DeviceArray<float> buffer(std::size_t{1} << 16);
  test::DeviceArray<float> other(std::size_t{1} << 16);
  test::DeviceArray<std::int32_t> indices(std::size_t{1} << 10);
  const float* in = buffer.get();
  float* out = other.get();
  std::int32_t* index = indices.get();
  constexpr DecodeEpilogue kBias = DecodeEpilogue::kBias;
  constexpr DecodeEpilogue kNone = DecodeEpilogue::kNone;
  constexpr DecodePrecision kFp32 = DecodePrecision::kFp32;
  const auto linear = [&](const float* x, const float* weight, const float* bias, float* y, int B,
                          int K, int N, DecodeEpilogue epilogue) {
    launch_decode_matmul(x, weight, bias, y, B, K, N, epilogue, kFp32, workspace, nullptr);
  };
  CHECK_THROWS_AS(linear(in, in, in, out, 0, 8, 8, kBias), std::invalid_argument);
  CHECK_THROWS_AS(linear(in, in, in, out, 65, 8, 8, kBias), std::invalid_argument);
  CHECK_THROWS_AS(linear(in, in, in, out, 8, 0, 8, kBias), std::invalid_argument);
  CHECK_THROWS_AS(linear(in, in, in, out, 8, 8, -1, kBias), std::invalid_argument);
  CHECK_THROWS_AS(linear(nullptr, in, in, out, 8, 8, 8, kBias), std::invalid_argument);
  CHECK_THROWS_AS(linear(in, nullptr, in, out, 8, 8, 8, kBias), std::invalid_argument);
  CHECK_THROWS_AS(linear(in, in, in, nullptr, 8, 8, 8, kBias), std::invalid_argument);
  CHECK_THROWS_AS(linear(in, in, nullptr, out, 8, 8, 8, kBias), std::invalid_argument);
  CHECK_THROWS_AS(linear(in, in, in, out, 8, 8, 8, kNone), std::invalid_argument);
  CHECK_THROWS_AS(linear(in, in + 1, in, out, 8, 8, 8, kBias), std::invalid_argument);
  // B K = 2^32 floats: past the 32-bit offsets the kernels address x with (checked first).
  CHECK_THROWS_AS(linear(in, in, in, out, 64, 1 << 26, 8, kBias), std::invalid_argument);
  const auto lm_head = [&](const float* x, const float* wte, float* logits, float* values,
                           std::int32_t* winners, int B, int C, int V) {
    launch_decode_lm_head(x, wte, logits, values, winners, B, C, V, kFp32, workspace, nullptr);
  };
  CHECK_THROWS_AS(lm_head(in, in, out, out, index, 0, 8, 8), std::invalid_argument);
  CHECK_THROWS_AS(lm_head(in, in, out, out, index, 65, 8, 8), std::invalid_argument);
  CHECK_THROWS_AS(lm_head(in, in, out, out, index, 8, 0, 8), std::invalid_argument);
  CHECK_THROWS_AS(lm_head(in, in, out, out, index, 8, 8, 0), std::invalid_argument);
  CHECK_THROWS_AS(lm_head(nullptr, in, out, out, index, 8, 8, 8), std::invalid_argument);
  CHECK_THROWS_AS(lm_head(in, nullptr, out, out, index, 8, 8, 8), std::invalid_argument);
  CHECK_THROWS_AS(lm_head(in, in, out, out, nullptr, 8, 8, 8), std::invalid_argument);
  CHECK_THROWS_AS(lm_head(in, in, out, nullptr, index, 8, 8, 8), std::invalid_argument);
  CHECK_THROWS_AS(lm_head(in, in, nullptr, nullptr, nullptr, 8, 8, 8), std::invalid_argument);
  CHECK_THROWS_AS(lm_head(in, in + 2, out, out, index, 8, 8, 8), std::invalid_argument);
  CHECK_THROWS_AS(plan_decode_matmul(0, 8, 8, kFp32, workspace), std::invalid_argument);
  CHECK_THROWS_AS(plan_decode_matmul(65, 8, 8, kFp32, workspace), std::invalid_argument);
  CHECK_THROWS_AS(plan_decode_matmul(8, 8, 0, kFp32, workspace), std::invalid_argument);
  CHECK_THROWS_AS(choose_decode_splits(24, 48, 0, 2), std::invalid_argument);
  CHECK_THROWS_AS(choose_decode_splits(24, 48, 132, 0), std::invalid_argument);
  const GreedyState state{nullptr, index, index, index, /*max_steps=*/4, /*eos_id=*/0};
  CHECK_THROWS_AS(launch_argmax_step_from_candidates(ArgmaxCandidates{out, nullptr, 8}, index,
                                                     state, nullptr, 8, nullptr),
                  std::invalid_argument);
}

}  // namespace
}  // namespace ladder
