// tests/gpu/test_bfloat16_decode_step_context.cpp - BfloatDecodeStepContext
// (common/bfloat16_decode_step_context.hpp) against the bf16 reference, past the 64 rows
// one kernel launch takes (a prefill's B T rows, run in slices), and the position-major
// prompts a bf16 prefill reads (upload_position_major_prompts, common/greedy_decoding.hpp).
// Run: gpu_tests "[bf16][decode_step_context]"
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "common/bfloat16_decode_step_context.hpp"
#include "common/bfloat16_device_model.hpp"
#include "common/device_allocator.hpp"
#include "common/greedy_decoding.hpp"
#include "common/reference.hpp"
#include "common/weights.hpp"
#include "tests/gpu/bfloat16_test_helpers.hpp"
#include "tests/gpu/device_test_helpers.hpp"
#include "tests/support/golden_data.hpp"

namespace ladder {
namespace {

/// The golden model (2 layers, C = 64, V = 381: the LM head's last column tile partial)
/// as the bf16 reference rounds it and on the device.
struct GoldenInBfloat16 {
  const Gpt2Weights weights = testing::load_golden_model();
  const reference::Model rounded{weights, reference::Precision::bf16};
  const BfloatDeviceModel model{weights};
  const Gpt2Weights& host() const { return rounded.weights(); }
};

TEST_CASE("BfloatDecodeStepContext::linear slices any number of rows (bf16 reference)",
          "[kernels][bf16][decode_step_context]") {
  LADDER_SEEDED_RNG(rng);
  const GoldenInBfloat16 golden;
  const int C = golden.host().config.n_embd;
  const LayerOffsets& at = golden.host().layout.layers[0];
  const BfloatDeviceLayer layer = golden.model.layer(0);
  BfloatDecodeStepContext step;
  for (const int rows : {1, 64, 65, 150}) {
    CAPTURE(rows);
    const std::vector<float> x =
        test::random_bfloat16(rng, static_cast<std::size_t>(rows) * C, -1.0f, 1.0f);
    const test::DeviceBfloats x_device(test::to_bfloat16_bits(x));
    // c_fc: bf16(gelu(x W + b)), [rows, 4C], W and b the reference's rounded ones.
    std::vector<float> expected(static_cast<std::size_t>(rows) * 4 * C);
    reference::linear(x.data(), golden.host().at(at.fc_weight), golden.host().at(at.fc_bias),
                      expected.data(), rows, C, 4 * C);
    reference::gelu(expected.data(), expected.data(), expected.size());
    expected = test::rounded_to_bfloat16(expected);
    test::DeviceBfloats out(expected.size());
    out.poison();
    step.linear(test::as_bfloat16(x_device), layer.fc_weight, layer.fc_bias, test::as_bfloat16(out),
                rows, C, 4 * C, DecodeEpilogue::kBiasGelu);
    CUDA_CHECK(cudaStreamSynchronize(step.stream()));
    const std::vector<float> actual = test::from_bfloat16_bits(out.download());
    CHECK(test::beyond_one_bfloat16_step(actual, expected, 1e-4 * test::max_magnitude(expected)) ==
          0);
  }
}

TEST_CASE("BfloatDecodeStepContext::lm_head gives fp32 logits and candidates, past 64 rows",
          "[kernels][bf16][decode_step_context]") {
  LADDER_SEEDED_RNG(rng);
  const GoldenInBfloat16 golden;
  const int C = golden.host().config.n_embd;
  const int V = golden.host().config.vocab_size;
  BfloatDecodeStepContext step;
  const int candidates = decode_lm_head_candidates(V);
  for (const int rows : {3, 70}) {
    CAPTURE(rows);
    const std::vector<float> x =
        test::random_bfloat16(rng, static_cast<std::size_t>(rows) * C, -1.0f, 1.0f);
    std::vector<float> expected(static_cast<std::size_t>(rows) * V);
    reference::lm_head(x.data(), golden.host().at(golden.host().layout.token_embedding),
                       expected.data(), rows, C, V);
    const test::DeviceBfloats x_device(test::to_bfloat16_bits(x));
    // Every output poisoned: an element a slice fails to write stays NaN (or -1).
    const auto poisoned = [](std::size_t count, auto element) {
      test::DeviceArray<decltype(element)> array(count);
      array.poison();
      return array;
    };
    const auto logits = poisoned(expected.size(), 0.0f);
    const auto values = poisoned(static_cast<std::size_t>(rows) * candidates, 0.0f);
    const auto indices = poisoned(static_cast<std::size_t>(rows) * candidates, std::int32_t{0});
    const ArgmaxCandidates result =
        step.lm_head(test::as_bfloat16(x_device), golden.model.lm_head_weight(), logits.get(),
                     values.get(), indices.get(), rows, C, V);
    CUDA_CHECK(cudaStreamSynchronize(step.stream()));
    CHECK(result.count == candidates);
    CHECK(result.values == values.get());
    CHECK(result.indices == indices.get());
    CHECK(test::checked_relative_error(logits.download(), expected) <= 1e-4);
    // Every row's candidates written, the slices' included (kernels/decode_matmul_bf16's
    // own tests check which column each one names).
    for (const float value : values.download()) CHECK(std::isfinite(value));
    for (const std::int32_t index : indices.download()) CHECK((index >= 0 && index < V));
  }
}

TEST_CASE("upload_position_major_prompts puts each position's B ids side by side",
          "[bf16][decode_step_context]") {
  const std::unique_ptr<DeviceAllocator> allocator = make_device_allocator("caching");
  const test::DeviceStream stream;
  const PromptBatch prompts = prompts_from_rows({{1, 2, 3}, {4, 5, 6}}, 2);
  const PositionMajorPrompts device =
      upload_position_major_prompts(*allocator, prompts, stream.get());
  stream.synchronize();
  const auto download = [](const auto* source, std::size_t count) {
    std::vector<std::remove_const_t<std::remove_pointer_t<decltype(source)>>> host(count);
    CUDA_CHECK(cudaMemcpy(host.data(), source, count * sizeof(host[0]), cudaMemcpyDeviceToHost));
    return host;
  };
  CHECK(download(device.tokens.get(), 6) == std::vector<std::int32_t>{1, 4, 2, 5, 3, 6});
  CHECK(download(device.positions.get(), 6) == std::vector<std::int32_t>{0, 0, 1, 1, 2, 2});
  const std::vector<DecodePosition> cursors = download(device.cursors.get(), 3);
  for (int t = 0; t < 3; ++t) {
    CHECK(cursors[static_cast<std::size_t>(t)].step == 0);
    CHECK(cursors[static_cast<std::size_t>(t)].position == t);
  }
}

}  // namespace
}  // namespace ladder
