// common/device_model.cpp - uploading the parameters.
#include "common/device_model.hpp"

#include <cstdio>

#include "common/cuda_check.hpp"

namespace ladder {

DeviceModel::DeviceModel(const Gpt2Weights& weights)
    : config_(weights.config), layout_(weights.layout) {
  const std::size_t size = layout_.total * sizeof(float);
  const cudaError_t status = cudaMalloc(&values_, size);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw DeviceOutOfMemory("out of device memory: the model's weights need " + format_bytes(
        static_cast<double>(size)));
  }
  CUDA_CHECK(status);
  CUDA_CHECK(cudaMemcpy(values_, weights.values.data(), size, cudaMemcpyHostToDevice));
}

DeviceModel::~DeviceModel() {
  if (values_ != nullptr && cudaFree(values_) != cudaSuccess)
    std::fprintf(stderr, "warning: cudaFree of the model's weights failed\n");
}

DeviceLayer DeviceModel::layer(int index) const {
  const LayerOffsets& at = layout_.layers.at(static_cast<std::size_t>(index));
  return {values_ + at.ln_1_weight,      values_ + at.ln_1_bias,      values_ + at.qkv_weight,
          values_ + at.qkv_bias,         values_ + at.attn_proj_weight, values_ + at.attn_proj_bias,
          values_ + at.ln_2_weight,      values_ + at.ln_2_bias,      values_ + at.fc_weight,
          values_ + at.fc_bias,          values_ + at.mlp_proj_weight, values_ + at.mlp_proj_bias};
}

}  // namespace ladder
