// kernels/programmatic_launch.cuh - launches one of the kernels between the decode
// matmuls (LayerNorm, attention) plainly or as a programmatic dependent launch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "common/cuda_check.hpp"
#include "kernels/launch_decisions.hpp"
#include "kernels/launch_dependents.hpp"

namespace ladder {

/// What `kernel`'s loaded code was built as (cudaFuncGetAttributes; launch_decisions.hpp).
/// Throws ladder::CudaError when the query fails.
inline KernelBuild kernel_build(const void* kernel) {
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return KernelBuild{attributes.binaryVersion, attributes.ptxVersion};
}

/// kernel<<<grid, block, shared_bytes, stream>>>(arguments...) for kAfterPrevious; for
/// kProgrammatic the same launch with cudaLaunchAttributeProgrammaticStreamSerialization
/// (kernels/decode_matmul.cuh, "Programmatic dependent launch"): its blocks may start once
/// every block of the kernel before has let them (LaunchDependents), so the kernel must
/// call wait_for_previous_kernel (device_primitives.cuh) before it reads or writes memory
/// another kernel of the stream writes or reads. The caller passes kProgrammatic only
/// where the device runs such launches (compute capability 9.0 on:
/// DecodeMatmulWorkspace::programmatic_launches, which the step contexts' launch() asks),
/// and even then the kernel itself is asked: a build whose code lacks the wait (compute_80
/// PTX JIT-compiled on a 9.0 device, launch_for_kernel) launches plainly. The question is
/// a host-side lookup per programmatic launch (the graph chapters make them only while
/// capturing).
template <typename... Parameters, typename... Arguments>
void launch_between_products(DecodeLaunch launch, void (*kernel)(Parameters...), dim3 grid,
                             dim3 block, std::size_t shared_bytes, cudaStream_t stream,
                             Arguments&&... arguments) {
  if (launch == DecodeLaunch::kProgrammatic)
    launch = launch_for_kernel(launch, kernel_build(reinterpret_cast<const void*>(kernel)));
  if (launch == DecodeLaunch::kAfterPrevious) {
    kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Arguments>(arguments)...);
    return;
  }
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Arguments>(arguments)...));
}

}  // namespace ladder
