// common/device_model.cpp - uploading the parameters.
#include "common/device_model.hpp"

#include <cstdio>

#include "common/cuda_check.hpp"

namespace ladder {

DeviceModel::DeviceModel(const Gpt2Weights& weights)
    : config_(weights.config), layout_(weights.layout) {
  const std::size_t size = layout_.total * sizeof(float);
  values_ = static_cast<float*>(allocate_device_memory(size, "the model's weights"));
  upload_and_wait(values_, weights.values.data(), size);
}

DeviceModel::~DeviceModel() {
  if (values_ != nullptr && cudaFree(values_) != cudaSuccess)
    std::fprintf(stderr, "warning: cudaFree of the model's weights failed\n");
}

DeviceLayer DeviceModel::layer(int index) const {
  return DeviceLayer::at_offsets(values_, layout_.layers.at(static_cast<std::size_t>(index)));
}

}  // namespace ladder
