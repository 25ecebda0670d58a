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
#include "kernels/decode_matmul_common.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"

namespace ladder {

namespace {

using decode_common::chunk_range;
using decode_common::ChunkRange;
using decode_common::kThreads;
using decode_common::kTileColumns;
using decode_common::kTileStride;

constexpr int kChunkRows = kDecodeBf16ChunkRows;                 // 64 inputs per chunk
constexpr int kOctetsPerChunk = kChunkRows / kBfloatTileK;       // 8 pieces of 8 inputs
constexpr int kColumnGroups = kTileColumns / 16;                 // 4: warp % 4
constexpr int kKGroups = decode_common::kWarps / kColumnGroups;  // 2: warp / 4
constexpr int kChunksAhead = 4;  // chunks of W in flight per lane (8 x 16 bytes)
constexpr int kBlocksPerMultiprocessor = 2;

/// The bf16 kernels' arguments: x, W and bias bf16, W packed k_tiled (padded_rows: K
/// rounded up to 8); Out is __nv_bfloat16 for the products, float for the LM head.
template <typename Out>
using DecodeMatmulBf16Arguments = decode_common::DecodeMatmulArguments<__nv_bfloat16, Out>;

/// d += a b for one m16n8k16 tile: a 16 x 16 bf16 (row), b 16 x 8 bf16 (col), d fp32.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                         const std::uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/// The four 32-bit words (bf16 pairs) of a 16-byte piece, by constant index.
__device__ __forceinline__ std::uint32_t word(const uint4& piece, int index) {
  return index == 0 ? piece.x : index == 1 ? piece.y : index == 2 ? piece.z : piece.w;
}

/// 8 bf16 of x row `row` from input k (zeros past B or K). kXVector: one 16-byte load
/// (K % 8 == 0, so a piece is all inside K or all outside); else 8 guarded 2-byte loads.
template <bool kXVector, typename Out>
__device__ __forceinline__ uint4 load_x(const DecodeMatmulBf16Arguments<Out>& a, int row, int k) {
  if (row >= a.B) return make_uint4(0, 0, 0, 0);
  const __nv_bfloat16* source = a.x + static_cast<std::size_t>(row) * a.K;
  if constexpr (kXVector) {
    if (k >= a.K) return make_uint4(0, 0, 0, 0);
    return __ldg(reinterpret_cast<const uint4*>(source + k));
  } else {
    std::uint32_t words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const std::uint32_t low = k + 2 * i < a.K ? __bfloat16_as_ushort(source[k + 2 * i]) : 0u;
      const std::uint32_t high =
          k + 2 * i + 1 < a.K ? __bfloat16_as_ushort(source[k + 2 * i + 1]) : 0u;
      words[i] = low | (high << 16);
    }
    return make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// Math:   y = x W over this block's chunks of K, for the rows of x below B and the 64
//         columns of tile blockIdx.y, on the tensor cores (bf16 in, fp32 sums); then
//         the tail: k-groups, splits, epilogue, one rounding to Out.
// Shapes: see DecodeMatmulBf16Arguments; kRows in {16, 32, 64}, kRows >= B.
// Grid:   (S, T) blocks of 256 threads; warp w: columns 16 (w % 4) .. + 15, inputs
//         32 (w / 4) .. + 31 of each chunk; lane 4 g + u: W column 8 n8 + g and x rows
//         g, g + 8 of each m16 tile, inputs 8 u .. 8 u + 7 (decode_matmul_bf16.cuh).
// Promises: LDG.E.128<ACQBULK HMMA.16816.F32.BF16 PREEXIT UCGABAR_ARV UCGABAR_WAIT
template <int kRows, bool kXVector, typename Out>
__global__ void __launch_bounds__(kThreads, kBlocksPerMultiprocessor)
    decode_matmul_bf16_kernel(const DecodeMatmulBf16Arguments<Out> a) {
  constexpr int kMTiles = kRows / 16;
  static_assert(kMTiles * 16 == kRows, "bf16 row tiles are multiples of 16");
  __shared__ float4 shared_storage[kKGroups * kRows * kTileStride / 4];
  float* shared = reinterpret_cast<float*>(shared_storage);
  const int split = blockIdx.x;
  const int tile = blockIdx.y;
  const float2 bias = decode_common::load_tile_bias(a, tile);  // before the wait: a weight
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int column_group = warp % kColumnGroups;
  const int k_group = warp / kColumnGroups;
  const int g = lane / 4;
  const int u = lane % 4;
  // This lane's two weight columns (one per n8 tile), and whether they exist.
  int columns[2];
  bool column_inside[2];
#pragma unroll
  for (int n8 = 0; n8 < 2; ++n8) {
    columns[n8] = tile * kTileColumns + 16 * column_group + 8 * n8 + g;
    column_inside[n8] = columns[n8] < a.N;
  }
  const int lane_octet = 4 * k_group + u;  // the octet of each chunk this lane reads

  const int octets = a.padded_rows / kBfloatTileK;
  const ChunkRange range = chunk_range(a, split);
  const auto load_weights = [&](int chunk_in_range, uint4(&pieces)[2]) {
    const int octet = (range.first + chunk_in_range) * kOctetsPerChunk + lane_octet;  // of 8 inputs
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8) {
      pieces[n8] = make_uint4(0, 0, 0, 0);
      if (chunk_in_range < range.count && octet < octets && column_inside[n8])
        pieces[n8] = __ldg(reinterpret_cast<const uint4*>(
            a.weight + (static_cast<std::size_t>(octet) * a.N + columns[n8]) * kBfloatTileK));
    }
  };

  float sums[kMTiles][2][4] = {};
  uint4 ahead[kChunksAhead][2];
#pragma unroll
  for (int i = 0; i < kChunksAhead; ++i) load_weights(i, ahead[i]);
  // The weight loads above do not depend on the kernel before; x, the residual stream
  // and the workspace do (decode_matmul.cuh: programmatic launch). The wait sits in its
  // own branch: in one basic block with the loads, ptxas schedules it first (ACQBULK
  // before the first LDG), and the weight would start moving only once the kernel before
  // has finished; the kernel report checks the order (LDG.E.128<ACQBULK). Launched
  // without the attribute, a kernel has nothing to wait for.
  if (a.programmatic) wait_for_previous_kernel();
  for (int chunk = 0; chunk < range.count; chunk += kChunksAhead) {
#pragma unroll
    for (int i = 0; i < kChunksAhead; ++i) {
      if (chunk + i >= range.count) break;  // the same for the whole block
      const int k = (range.first + chunk + i) * kChunkRows + 8 * lane_octet;
#pragma unroll
      for (int m16 = 0; m16 < kMTiles; ++m16) {
        const uint4 upper = load_x<kXVector>(a, 16 * m16 + g, k);
        const uint4 lower = load_x<kXVector>(a, 16 * m16 + g + 8, k);
#pragma unroll
        for (int step = 0; step < 2; ++step) {
          const std::uint32_t a_fragment[4] = {word(upper, 2 * step), word(lower, 2 * step),
                                               word(upper, 2 * step + 1),
                                               word(lower, 2 * step + 1)};
#pragma unroll
          for (int n8 = 0; n8 < 2; ++n8) {
            const std::uint32_t b_fragment[2] = {word(ahead[i][n8], 2 * step),
                                                 word(ahead[i][n8], 2 * step + 1)};
            mma_bf16(sums[m16][n8], a_fragment, b_fragment);
          }
        }
      }
      load_weights(chunk + i + kChunksAhead, ahead[i]);
    }
  }
  // Unlike the fp32 kernels, the next kernel may launch only once every block has read
  // its last weight chunk (kernels/decode_matmul.cuh, "Programmatic dependent launch"):
  // a bf16 product streams half fp32's bytes, so at small B its stream is most of its
  // time, and a neighbour launched early would share it.
  allow_next_kernel_to_launch();

  decode_common::store_mma_sums<kRows>(shared, k_group, column_group, g, u, sums);
  decode_common::finish_tile<kRows>(a, tile, split, bias, shared, kKGroups);
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
