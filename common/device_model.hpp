// common/device_model.hpp - the model's parameters on the GPU.
//
// One cudaMalloc and one copy: the flat parameter array of Gpt2Weights moves as a
// whole, and every tensor is a pointer into it. The weights live outside the
// chapters' allocators, so the allocator statistics in the tables count what a
// chapter's decode loop allocates (activations, caches), not the model.
#pragma once

#include <cstddef>

#include "common/weights.hpp"

namespace ladder {

/// Pointers to one transformer block's tensors on the device, of element type T (float
/// here, __nv_bfloat16 in common/bfloat16_device_model.hpp).
template <typename T>
struct DeviceLayerOf {
  const T* ln_1_weight;
  const T* ln_1_bias;
  const T* qkv_weight;        ///< [C, 3C]
  const T* qkv_bias;          ///< [3C]
  const T* attn_proj_weight;  ///< [C, C]
  const T* attn_proj_bias;    ///< [C]
  const T* ln_2_weight;
  const T* ln_2_bias;
  const T* fc_weight;        ///< [C, 4C]
  const T* fc_bias;          ///< [4C]
  const T* mlp_proj_weight;  ///< [4C, C]
  const T* mlp_proj_bias;    ///< [C]

  /// The layer whose tensors sit at `at` (element offsets) in the array at `values`.
  static DeviceLayerOf at_offsets(const T* values, const LayerOffsets& at) {
    return {values + at.ln_1_weight, values + at.ln_1_bias,        values + at.qkv_weight,
            values + at.qkv_bias,    values + at.attn_proj_weight, values + at.attn_proj_bias,
            values + at.ln_2_weight, values + at.ln_2_bias,        values + at.fc_weight,
            values + at.fc_bias,     values + at.mlp_proj_weight,  values + at.mlp_proj_bias};
  }
};

using DeviceLayer = DeviceLayerOf<float>;

class DeviceModel {
 public:
  explicit DeviceModel(const Gpt2Weights& weights);
  ~DeviceModel();
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  const Gpt2Config& config() const { return config_; }
  DeviceLayer layer(int index) const;
  const float* token_embedding() const { return values_ + layout_.token_embedding; }
  const float* position_embedding() const { return values_ + layout_.position_embedding; }
  const float* ln_f_weight() const { return values_ + layout_.ln_f_weight; }
  const float* ln_f_bias() const { return values_ + layout_.ln_f_bias; }
  /// Bytes of parameters on the device.
  std::size_t bytes() const { return layout_.total * sizeof(float); }

 private:
  Gpt2Config config_;
  ParameterLayout layout_;
  float* values_ = nullptr;
};

}  // namespace ladder
