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
    throw DeviceOutOfMemory("out of device memory: the model's weights need " +
                            format_bytes(static_cast<double>(size)));
  }
  CUDA_CHECK(status);
  // cudaMemcpy from pageable memory may return once the bytes are staged, before they
  // reach the device, and it runs on the legacy default stream, which the decoders'
  // non-blocking streams do not wait for: the weights are on the device only once the
  // device has synchronized.
  cudaError_t uploaded = cudaMemcpy(values_, weights.values.data(), size, cudaMemcpyHostToDevice);
  if (uploaded == cudaSuccess) uploaded = cudaDeviceSynchronize();
  if (uploaded != cudaSuccess) {
    cudaFree(values_);
    CUDA_CHECK(uploaded);
  }
}

DeviceModel::~DeviceModel() {
  if (values_ != nullptr && cudaFree(values_) != cudaSuccess)
    std::fprintf(stderr, "warning: cudaFree of the model's weights failed\n");
}

DeviceLayer DeviceModel::layer(int index) const {
  return DeviceLayer::at_offsets(values_, layout_.layers.at(static_cast<std::size_t>(index)));
}

}  // namespace ladder
