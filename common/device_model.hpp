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

/// Pointers to one transformer block's tensors on the device.
struct DeviceLayer {
  const float* ln_1_weight;
  const float* ln_1_bias;
  const float* qkv_weight;        ///< [C, 3C]
  const float* qkv_bias;          ///< [3C]
  const float* attn_proj_weight;  ///< [C, C]
  const float* attn_proj_bias;    ///< [C]
  const float* ln_2_weight;
  const float* ln_2_bias;
  const float* fc_weight;         ///< [C, 4C]
  const float* fc_bias;           ///< [4C]
  const float* mlp_proj_weight;   ///< [4C, C]
  const float* mlp_proj_bias;     ///< [C]
};

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
