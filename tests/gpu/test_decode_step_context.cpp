// tests/gpu/test_decode_step_context.cpp - DecodeStepContext (common/decode_step_context.hpp)
// against the CPU reference: its products on the packed weights with every epilogue, and
// more rows than the decode kernels take (a prefill's B T rows, run in slices of 64).
// Run: gpu_tests "[decode_step_context]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "common/decode_step_context.hpp"
#include "common/device_model.hpp"
#include "common/reference.hpp"
#include "common/weights.hpp"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

/// A one-layer GPT-2 with random biases (the documented initialisation zeroes them).
Gpt2Weights small_model_with_biases(std::mt19937& rng) {
  Gpt2Config config;
  config.n_layer = 1;
  config.n_head = 2;
  config.n_embd = 64;
  config.vocab_size = 200;  // four column tiles, the last one partial
  config.n_positions = 16;
  config.bos_token_id = 199;
  config.eos_token_id = 199;
  Gpt2Weights weights = random_gpt2_weights(config, 7);
  const LayerOffsets& at = weights.layout.layers[0];
  const std::vector<float> bias = test::random_uniform(rng, 4 * config.n_embd, -0.5f, 0.5f);
  std::copy(bias.begin(), bias.end(), weights.at(at.fc_bias));
  std::copy(bias.begin(), bias.begin() + config.n_embd, weights.at(at.mlp_proj_bias));
  return weights;
}

TEST_CASE("DecodeStepContext::linear slices any number of rows and applies each epilogue",
          "[kernels][decode_step_context]") {
  LADDER_SEEDED_RNG(rng);
  const Gpt2Weights weights = small_model_with_biases(rng);
  const int C = weights.config.n_embd;
  const LayerOffsets& at = weights.layout.layers[0];
  const DeviceModel model(weights);
  const DeviceLayer layer = model.layer(0);
  const bool tf32 = GENERATE(false, true);
  CAPTURE(tf32);
  const double tolerance = tf32 ? 5e-3 : 1e-5;
  DecodeStepContext step(model, tf32);
  const PackedDecodeModel::Layer packed = step.layer(0);
  for (const int rows : {1, 64, 65, 150}) {
    CAPTURE(rows);
    const std::vector<float> x = test::random_matrix(rng, rows, C, -1.0f, 1.0f);
    const test::DeviceArray<float> x_device(x);

    // c_fc: gelu(x W + b), [rows, 4C].
    std::vector<float> expected(static_cast<std::size_t>(rows) * 4 * C);
    reference::linear(x.data(), weights.at(at.fc_weight), weights.at(at.fc_bias), expected.data(),
                      rows, C, 4 * C);
    reference::gelu(expected.data(), expected.data(), expected.size());
    test::DeviceArray<float> expanded(expected.size());
    expanded.poison();
    step.linear(x_device.get(), packed.fc_weight, layer.fc_bias, expanded.get(), rows, C, 4 * C,
                DecodeEpilogue::kBiasGelu);
    CUDA_CHECK(cudaStreamSynchronize(step.stream()));
    CHECK(test::checked_relative_error(expanded.download(), expected) <= tolerance);

    // The attention projection into the residual stream: hidden += x W + b.
    const std::vector<float> hidden = test::random_matrix(rng, rows, C, -1.0f, 1.0f);
    std::vector<float> product(hidden.size());
    reference::linear(x.data(), weights.at(at.attn_proj_weight), weights.at(at.attn_proj_bias),
                      product.data(), rows, C, C);
    reference::add(hidden.data(), product.data(), product.data(), product.size());
    test::DeviceArray<float> hidden_device(hidden);
    step.linear(x_device.get(), packed.attn_proj_weight, layer.attn_proj_bias, hidden_device.get(),
                rows, C, C, DecodeEpilogue::kBiasResidual);
    CUDA_CHECK(cudaStreamSynchronize(step.stream()));
    CHECK(test::checked_relative_error(hidden_device.download(), product) <= tolerance);
  }
}

TEST_CASE("DecodeStepContext::lm_head gives the logits and each row's argmax, past 64 rows",
          "[kernels][decode_step_context]") {
  LADDER_SEEDED_RNG(rng);
  const Gpt2Weights weights = small_model_with_biases(rng);
  const int C = weights.config.n_embd;
  const int V = weights.config.vocab_size;
  const DeviceModel model(weights);
  DecodeStepContext step(model, /*allow_tf32=*/false);
  const int candidates = decode_lm_head_candidates(V);
  for (const int rows : {3, 70}) {
    CAPTURE(rows);
    const std::vector<float> x = test::random_matrix(rng, rows, C, -1.0f, 1.0f);
    std::vector<float> expected(static_cast<std::size_t>(rows) * V);
    reference::lm_head(x.data(), weights.at(weights.layout.token_embedding), expected.data(), rows,
                       C, V);
    const test::DeviceArray<float> x_device(x);
    test::DeviceArray<float> logits(expected.size());
    test::DeviceArray<float> values(static_cast<std::size_t>(rows) * candidates);
    test::DeviceArray<std::int32_t> indices(static_cast<std::size_t>(rows) * candidates);
    logits.poison();
    values.poison();
    indices.poison();
    const ArgmaxCandidates result =
        step.lm_head(x_device.get(), logits.get(), values.get(), indices.get(), rows, C, V);
    CUDA_CHECK(cudaStreamSynchronize(step.stream()));
    CHECK(result.values == values.get());
    CHECK(result.indices == indices.get());
    CHECK(result.count == candidates);
    CHECK(test::checked_relative_error(logits.download(), expected) <= 1e-5);
    // The winner among a row's candidates is the row's argmax of the logits written.
    const std::vector<float> written = logits.download();
    const std::vector<float> candidate_values = values.download();
    const std::vector<std::int32_t> candidate_indices = indices.download();
    for (int row = 0; row < rows; ++row) {
      CAPTURE(row);
      const std::size_t first = static_cast<std::size_t>(row) * candidates;
      const int best = reference::argmax(candidate_values.data() + first, candidates);
      CHECK(candidate_indices[first + static_cast<std::size_t>(best)] ==
            reference::argmax(written.data() + static_cast<std::size_t>(row) * V, V));
    }
  }
}

}  // namespace
}  // namespace ladder
