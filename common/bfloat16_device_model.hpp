// common/bfloat16_device_model.hpp - the model's parameters on the GPU in bf16, the
// matrices packed for the bf16 decode matmuls (kernels/decode_matmul_bf16.cuh).
//
// Point R1 of common/reference.hpp: every parameter rounded to bf16 once, at load
// (round to nearest even, common/bfloat16.hpp), so a bf16 chapter computes with exactly
// the weights of reference::Model(weights, Precision::bf16). Laid out for the kernels:
//   * the four matrices of every layer [K, N]: BfloatLayout::k_tiled;
//   * the tied LM head: wte^T [C, V] in k_tiled (pack_bfloat16_weights_transposed);
//   * wte [V, C] row-major as well, for the embedding (which reads rows of it);
//   * wpe, the LayerNorms and the biases as they are.
// Every tensor starts 16 bytes aligned (padded to 8 elements) for 16-byte loads. One
// allocation and one copy; like DeviceModel, outside the chapters' allocators.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/device_model.hpp"
#include "common/weights.hpp"

namespace ladder {

using BfloatDeviceLayer = DeviceLayerOf<__nv_bfloat16>;

/// Why the bf16 kernels cannot run a model of `config` (valid by Gpt2Config::validate(),
/// which every chapter asks), in one line, or empty when they can: the bf16 attention's
/// head size must be a multiple of kBfloatHeadDimMultiple (kernels/kernel_limits.hpp). A
/// bf16 chapter asks it before anything reaches the device.
std::string bfloat16_model_problem(const Gpt2Config& config);

class BfloatDeviceModel {
 public:
  /// Rounds and packs `weights` on the host and uploads them. Throws
  /// std::invalid_argument before any upload when bfloat16_model_problem names one,
  /// ladder::DeviceOutOfMemory or ladder::CudaError when the upload fails.
  explicit BfloatDeviceModel(const Gpt2Weights& weights);
  ~BfloatDeviceModel();
  BfloatDeviceModel(const BfloatDeviceModel&) = delete;
  BfloatDeviceModel& operator=(const BfloatDeviceModel&) = delete;

  const Gpt2Config& config() const { return config_; }
  /// Layer `index`: its matrices k_tiled, its vectors as they are.
  BfloatDeviceLayer layer(int index) const;
  /// Every layer, in order (the persistent kernel takes them all at once).
  std::vector<BfloatDeviceLayer> layers() const;
  /// wte [V, C] row-major (the embedding's table).
  const __nv_bfloat16* token_embedding() const { return values_ + layout_.token_embedding; }
  const __nv_bfloat16* position_embedding() const { return values_ + layout_.position_embedding; }
  const __nv_bfloat16* ln_f_weight() const { return values_ + layout_.ln_f_weight; }
  const __nv_bfloat16* ln_f_bias() const { return values_ + layout_.ln_f_bias; }
  /// wte^T [C, V] k_tiled: the weight of launch_decode_lm_head_bf16.
  const __nv_bfloat16* lm_head_weight() const { return values_ + lm_head_weight_; }
  /// Bytes on the device (padding included).
  std::size_t bytes() const { return count_ * sizeof(__nv_bfloat16); }

 private:
  Gpt2Config config_;
  ParameterLayout layout_;  ///< offsets in bf16 elements into values_
  std::size_t lm_head_weight_ = 0;
  std::size_t count_ = 0;
  __nv_bfloat16* values_ = nullptr;
};

}  // namespace ladder
