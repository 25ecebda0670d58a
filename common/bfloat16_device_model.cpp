// common/bfloat16_device_model.cpp - rounding, packing and uploading the bf16 parameters.
#include "common/bfloat16_device_model.hpp"

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/bfloat16.hpp"
#include "common/cuda_check.hpp"
#include "kernels/kernel_limits.hpp"

namespace ladder {

namespace {

/// The host image of the device array: tensors appended one after the other, each
/// starting at a multiple of 8 elements (16 bytes).
class BfloatImage {
 public:
  std::size_t add(const std::vector<std::uint16_t>& tensor) {
    const std::size_t offset = values_.size();
    values_.insert(values_.end(), tensor.begin(), tensor.end());
    values_.resize((values_.size() + kBfloatTileK - 1) / kBfloatTileK * kBfloatTileK, 0);
    return offset;
  }
  /// A vector (or any tensor kept as it is) of `count` floats at `source`.
  std::size_t add_rounded(const float* source, std::size_t count) {
    std::vector<std::uint16_t> bits(count);
    for (std::size_t i = 0; i < count; ++i) bits[i] = float_to_bfloat16_bits(source[i]);
    return add(bits);
  }
  /// A Conv1D matrix [K, N], k_tiled.
  std::size_t add_matrix(const float* source, int K, int N) {
    return add(pack_bfloat16_weights(source, K, N, BfloatLayout::k_tiled));
  }
  const std::vector<std::uint16_t>& values() const { return values_; }

 private:
  std::vector<std::uint16_t> values_;
};

}  // namespace

std::string bfloat16_model_problem(const Gpt2Config& config) {
  const int head_size = config.head_dim();
  if (head_size % kBfloatHeadDimMultiple == 0) return "";
  return "head size n_embd / n_head = " + std::to_string(head_size) + " is not a multiple of " +
         std::to_string(kBfloatHeadDimMultiple) +
         ", which the bf16 attention kernel needs (it reads a head in 16-byte packs of 8 values)";
}

BfloatDeviceModel::BfloatDeviceModel(const Gpt2Weights& weights)
    : config_(weights.config), layout_(weights.layout) {
  const std::string problem = bfloat16_model_problem(config_);
  if (!problem.empty()) throw std::invalid_argument("BfloatDeviceModel: " + problem);
  const int C = config_.n_embd;
  const int V = config_.vocab_size;
  const std::size_t c = static_cast<std::size_t>(C);
  BfloatImage image;
  const ParameterLayout& source = weights.layout;
  layout_.token_embedding =
      image.add_rounded(weights.at(source.token_embedding), static_cast<std::size_t>(V) * c);
  layout_.position_embedding = image.add_rounded(weights.at(source.position_embedding),
                                                 static_cast<std::size_t>(config_.n_positions) * c);
  for (std::size_t index = 0; index < source.layers.size(); ++index) {
    const LayerOffsets& from = source.layers[index];
    LayerOffsets& to = layout_.layers[index];
    to.ln_1_weight = image.add_rounded(weights.at(from.ln_1_weight), c);
    to.ln_1_bias = image.add_rounded(weights.at(from.ln_1_bias), c);
    to.qkv_weight = image.add_matrix(weights.at(from.qkv_weight), C, 3 * C);
    to.qkv_bias = image.add_rounded(weights.at(from.qkv_bias), 3 * c);
    to.attn_proj_weight = image.add_matrix(weights.at(from.attn_proj_weight), C, C);
    to.attn_proj_bias = image.add_rounded(weights.at(from.attn_proj_bias), c);
    to.ln_2_weight = image.add_rounded(weights.at(from.ln_2_weight), c);
    to.ln_2_bias = image.add_rounded(weights.at(from.ln_2_bias), c);
    to.fc_weight = image.add_matrix(weights.at(from.fc_weight), C, 4 * C);
    to.fc_bias = image.add_rounded(weights.at(from.fc_bias), 4 * c);
    to.mlp_proj_weight = image.add_matrix(weights.at(from.mlp_proj_weight), 4 * C, C);
    to.mlp_proj_bias = image.add_rounded(weights.at(from.mlp_proj_bias), c);
  }
  layout_.ln_f_weight = image.add_rounded(weights.at(source.ln_f_weight), c);
  layout_.ln_f_bias = image.add_rounded(weights.at(source.ln_f_bias), c);
  lm_head_weight_ = image.add(pack_bfloat16_weights_transposed(weights.at(source.token_embedding),
                                                               V, C, BfloatLayout::k_tiled));
  count_ = image.values().size();
  layout_.total = count_;

  const std::size_t size = count_ * sizeof(__nv_bfloat16);
  values_ = static_cast<__nv_bfloat16*>(allocate_device_memory(size, "the bf16 weights"));
  upload_and_wait(values_, image.values().data(), size);
}

BfloatDeviceModel::~BfloatDeviceModel() {
  if (values_ != nullptr && cudaFree(values_) != cudaSuccess)
    std::fprintf(stderr, "warning: cudaFree of the bf16 weights failed\n");
}

BfloatDeviceLayer BfloatDeviceModel::layer(int index) const {
  return BfloatDeviceLayer::at_offsets(values_, layout_.layers.at(static_cast<std::size_t>(index)));
}

std::vector<BfloatDeviceLayer> BfloatDeviceModel::layers() const {
  std::vector<BfloatDeviceLayer> all;
  for (const LayerOffsets& offsets : layout_.layers)
    all.push_back(BfloatDeviceLayer::at_offsets(values_, offsets));
  return all;
}

}  // namespace ladder
