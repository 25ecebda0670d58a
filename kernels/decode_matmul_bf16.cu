// kernels/decode_matmul_bf16.cu - the bf16 decode matmuls (see decode_matmul_bf16.cuh
// for the math, the grid and the order of the sums): the weight streamed from global
// memory straight into mma.sync fragments, x read beside it, and the tail of the fp32
// kernels (decode_matmul_common.cuh).
//
// Shared memory of a block: only the tail's two [R][68] float tiles (one per k-group of
// warps; R the row tile), 34 KiB at R = 64, static.
#include "kernels/decode_matmul_bf16.cuh"

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/cuda_check.hpp"
#include "kernels/decode_matmul_bf16_tile.cuh"
#include "kernels/decode_matmul_common.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"

namespace ladder {

namespace {

using decode_bf16::bf16_product_tile;
using decode_bf16::DecodeMatmulBf16Arguments;
using decode_bf16::kChunkRows;
using decode_bf16::kKGroups;
using decode_common::kThreads;
using decode_common::kTileStride;

constexpr int kBlocksPerMultiprocessor = 2;

// One block per (split, tile) = (blockIdx.x, blockIdx.y): bf16_product_tile.
// Promises: LDG.E.128<ACQBULK HMMA.16816.F32.BF16 PREEXIT UCGABAR_ARV UCGABAR_WAIT
template <int kRows, bool kXVector, typename Out>
__global__ void __launch_bounds__(kThreads, kBlocksPerMultiprocessor)
    decode_matmul_bf16_kernel(const DecodeMatmulBf16Arguments<Out> a) {
  __shared__ float4 shared_storage[kKGroups * kRows * kTileStride / 4];
  bf16_product_tile<kRows, kXVector>(a, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y),
                                     reinterpret_cast<float*>(shared_storage), [&] {
                                       if (a.programmatic) wait_for_previous_kernel();
                                     });
}

// ---------------------------------------------------------------- host side

template <typename Out>
using KernelPointer = void (*)(DecodeMatmulBf16Arguments<Out>);

template <typename Out>
KernelPointer<Out> kernel_for(int rows, bool x_vector) {
  switch (rows) {
    case 16:
      return x_vector ? decode_matmul_bf16_kernel<16, true, Out>
                      : decode_matmul_bf16_kernel<16, false, Out>;
    case 32:
      return x_vector ? decode_matmul_bf16_kernel<32, true, Out>
                      : decode_matmul_bf16_kernel<32, false, Out>;
    default:
      return x_vector ? decode_matmul_bf16_kernel<64, true, Out>
                      : decode_matmul_bf16_kernel<64, false, Out>;
  }
}

template <typename Out>
void run_product(const char* launcher, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                 const __nv_bfloat16* bias, Out* out, float* candidate_values,
                 std::int32_t* candidate_indices, int B, int K, int N, DecodeEpilogue epilogue,
                 DecodeMatmulWorkspace& workspace, cudaStream_t stream, DecodeLaunch launch) {
  const DecodeMatmulPlan plan = plan_decode_matmul_bf16(B, K, N, workspace);
  const int padded_rows = (K + kBfloatTileK - 1) / kBfloatTileK * kBfloatTileK;
  const DecodeMatmulBf16Arguments<Out> arguments = decode_common::product_arguments(
      launcher, x, weight, bias, out, candidate_values, candidate_indices, B, K, N, padded_rows,
      epilogue, plan, workspace, launch);
  const bool x_vector = K % kBfloatTileK == 0 && launch_checks::is_16_byte_aligned(x);
  const dim3 grid(static_cast<unsigned int>(plan.splits),
                  static_cast<unsigned int>(plan.column_tiles));
  decode_common::launch_product_kernel(kernel_for<Out>(plan.row_tile, x_vector), grid,
                                       /*shared_bytes=*/0, arguments, workspace, stream);
}

}  // namespace

bool decode_common::allow_large_clusters_bf16() {
  for (const int rows : {16, 32, 64}) {
    for (const bool x_vector : {false, true}) {
      if (!decode_common::allow_large_clusters(kernel_for<__nv_bfloat16>(rows, x_vector)) ||
          !decode_common::allow_large_clusters(kernel_for<float>(rows, x_vector)))
        return false;
    }
  }
  return true;
}

DecodeMatmulPlan plan_decode_matmul_bf16(int B, int K, int N, DecodeMatmulWorkspace& workspace) {
  constexpr const char* kName = "plan_decode_matmul_bf16";
  const int row_tile = B <= 16 ? 16 : B <= 32 ? 32 : 64;  // mma.sync takes rows 16 at a time
  const int resident_blocks =
      workspace.resident_blocks(reinterpret_cast<const void*>(kernel_for<__nv_bfloat16>(
                                    row_tile, /*x_vector=*/K % kBfloatTileK == 0)),
                                /*shared_bytes=*/0);
  return decode_common::plan_decode_chunks(kName, B, K, N, workspace.multiprocessors(),
                                           resident_blocks, row_tile, kChunkRows);
}

void launch_decode_matmul_bf16(const __nv_bfloat16* x, const __nv_bfloat16* packed_weight,
                               const __nv_bfloat16* bias, __nv_bfloat16* out, int B, int K, int N,
                               DecodeEpilogue epilogue, DecodeMatmulWorkspace& workspace,
                               cudaStream_t stream, DecodeLaunch launch) {
  constexpr const char* kName = "launch_decode_matmul_bf16";
  decode_common::check_product_arguments(kName, x, packed_weight, bias, out, B, K, N, epilogue);
  run_product(kName, x, packed_weight, bias, out, nullptr, nullptr, B, K, N, epilogue, workspace,
              stream, launch);
}

void launch_decode_lm_head_bf16(const __nv_bfloat16* x, const __nv_bfloat16* packed_wte,
                                float* logits, float* candidate_values,
                                std::int32_t* candidate_indices, int B, int C, int V,
                                DecodeMatmulWorkspace& workspace, cudaStream_t stream,
                                DecodeLaunch launch) {
  constexpr const char* kName = "launch_decode_lm_head_bf16";
  decode_common::check_lm_head_arguments(kName, x, packed_wte, logits, candidate_values,
                                         candidate_indices, B, C, V);
  run_product(kName, x, packed_wte, static_cast<const __nv_bfloat16*>(nullptr), logits,
              candidate_values, candidate_indices, B, C, V, DecodeEpilogue::kNone, workspace,
              stream, launch);
}

}  // namespace ladder
