// tests/gpu/test_device_model_bf16.cpp - common/bfloat16_device_model: every tensor on the
// device is the bf16 reference's parameter (reference::Model(weights, Precision::bf16)
// .weights(), point R1 of common/reference.hpp) bit for bit, the matrices and the LM
// head unpacked from k_tiled, every tensor 16-byte aligned.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/bfloat16.hpp"
#include "common/bfloat16_device_model.hpp"
#include "common/reference.hpp"
#include "common/weights.hpp"
#include "kernels/launch_checks.hpp"
#include "tests/gpu/bfloat16_test_helpers.hpp"

namespace ladder {
namespace {

std::vector<float> download(const __nv_bfloat16* device, std::size_t count) {
  std::vector<std::uint16_t> bits(count);
  CUDA_CHECK(
      cudaMemcpy(bits.data(), device, count * sizeof(std::uint16_t), cudaMemcpyDeviceToHost));
  return test::from_bfloat16_bits(bits);
}

/// A k_tiled [K, N] matrix on the device, unpacked to [K, N] row-major.
std::vector<float> download_matrix(const __nv_bfloat16* device, int K, int N) {
  std::vector<std::uint16_t> bits(packed_bfloat16_size(K, N, BfloatLayout::k_tiled));
  CUDA_CHECK(
      cudaMemcpy(bits.data(), device, bits.size() * sizeof(std::uint16_t), cudaMemcpyDeviceToHost));
  return unpack_bfloat16_weights(bits, K, N, BfloatLayout::k_tiled);
}

TEST_CASE("BfloatDeviceModel holds the bf16 reference's parameters, packed for the kernels",
          "[kernels][bf16]") {
  Gpt2Config config;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 64;
  config.vocab_size = 97;  // odd: the LM head's last column tile is partial
  config.n_positions = 16;
  config.bos_token_id = 96;
  config.eos_token_id = 96;
  const Gpt2Weights weights = random_gpt2_weights(config, 5);
  const reference::Model reference_model(weights, reference::Precision::bf16);
  const Gpt2Weights& rounded = reference_model.weights();
  const BfloatDeviceModel model(weights);
  const int C = config.n_embd;
  const int V = config.vocab_size;
  const std::size_t c = static_cast<std::size_t>(C);
  const auto host = [&](std::size_t offset, std::size_t count) {
    return std::vector<float>(rounded.at(offset), rounded.at(offset) + count);
  };
  const auto aligned = [](const void* pointer) {
    return launch_checks::is_16_byte_aligned(pointer);
  };

  CHECK(download(model.token_embedding(), V * c) == host(rounded.layout.token_embedding, V * c));
  CHECK(download(model.position_embedding(), config.n_positions * c) ==
        host(rounded.layout.position_embedding, config.n_positions * c));
  CHECK(download(model.ln_f_weight(), c) == host(rounded.layout.ln_f_weight, c));
  CHECK(download(model.ln_f_bias(), c) == host(rounded.layout.ln_f_bias, c));
  for (int index = 0; index < config.n_layer; ++index) {
    CAPTURE(index);
    const LayerOffsets& at = rounded.layout.layers[static_cast<std::size_t>(index)];
    const BfloatDeviceLayer layer = model.layer(index);
    CHECK(download(layer.ln_1_weight, c) == host(at.ln_1_weight, c));
    CHECK(download(layer.ln_1_bias, c) == host(at.ln_1_bias, c));
    CHECK(download_matrix(layer.qkv_weight, C, 3 * C) == host(at.qkv_weight, 3 * c * c));
    CHECK(download(layer.qkv_bias, 3 * c) == host(at.qkv_bias, 3 * c));
    CHECK(download_matrix(layer.attn_proj_weight, C, C) == host(at.attn_proj_weight, c * c));
    CHECK(download(layer.attn_proj_bias, c) == host(at.attn_proj_bias, c));
    CHECK(download(layer.ln_2_weight, c) == host(at.ln_2_weight, c));
    CHECK(download(layer.ln_2_bias, c) == host(at.ln_2_bias, c));
    CHECK(download_matrix(layer.fc_weight, C, 4 * C) == host(at.fc_weight, 4 * c * c));
    CHECK(download(layer.fc_bias, 4 * c) == host(at.fc_bias, 4 * c));
    CHECK(download_matrix(layer.mlp_proj_weight, 4 * C, C) == host(at.mlp_proj_weight, 4 * c * c));
    CHECK(download(layer.mlp_proj_bias, c) == host(at.mlp_proj_bias, c));
    for (const void* pointer :
         {static_cast<const void*>(layer.ln_1_weight), static_cast<const void*>(layer.qkv_weight),
          static_cast<const void*>(layer.qkv_bias), static_cast<const void*>(layer.fc_weight),
          static_cast<const void*>(layer.mlp_proj_bias)})
      CHECK(aligned(pointer));
  }
  // The LM head: W = wte^T, so W[c, v] = wte[v, c].
  const std::vector<float> lm_head = download_matrix(model.lm_head_weight(), C, V);
  const std::vector<float> wte = host(rounded.layout.token_embedding, V * c);
  bool transposed = true;
  for (int v = 0; v < V; ++v)
    for (int k = 0; k < C; ++k)
      transposed = transposed && lm_head[static_cast<std::size_t>(k) * V + v] ==
                                     wte[static_cast<std::size_t>(v) * C + k];
  CHECK(transposed);
  CHECK(aligned(model.lm_head_weight()));
  CHECK(aligned(model.position_embedding()));
}

}  // namespace
}  // namespace ladder
