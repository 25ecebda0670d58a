// kernels/decode_matmul_bf16.cuh - the decode matmuls in bf16 on the tensor cores: a few
// rows (B <= 64) of bf16 activations against a bf16 weight, fp32 accumulation, the
// result rounded once to bf16 after the fused epilogue (logits stay fp32), and the tied
// LM head with the argmax's first pass fused. The bf16 twin of decode_matmul.cuh, whose
// notation (B, K, N, T, S), epilogues, split plan, workspace and order of sums it keeps.
//
// Math (common/reference.hpp's rounding points)
//   y[b, n] = sum_k x[b, k] W[k, n]        x [B, K] bf16, W bf16, sums in fp32
//   kNone          out = bf16(y)
//   kBias          out = bf16(y + bias)                 R4 (qkv)
//   kBiasGelu      out = bf16(gelu(y + bias))           R7 (MLP hidden)
//   kBiasResidual  out = bf16(out + (y + bias))         R6 (out: the bf16 residual stream)
//   LM head        logits = x wte^T in fp32, and the candidates [B, T] of the argmax's
//                  first pass on those fp32 logits, exactly as launch_decode_lm_head.
//
// Weight layout: BfloatLayout::k_tiled of common/bfloat16.hpp, [ceil(K / 8)][N][8]: the
// 8 inputs k = 8 o .. 8 o + 7 of column n in one 16-byte piece (pack_bfloat16_weights, or
// pack_bfloat16_weights_transposed(wte, V, C) for the LM head). A column tile t (64
// columns) of one octet o is 1 KiB of contiguous memory; a block owns a tile and a range
// of octets, so no byte is read by two blocks.
//
// Why mma.sync m16n8k16 and not Hopper's wgmma: the product is a stream of the weight
// past at most 64 rows of x; the tensor cores only need to keep pace with the bytes.
// wgmma works on M = 64 rows per warpgroup with both operands' tiles described in
// shared memory (descriptors, a fence, commit and wait per group): at B = 1 .. 32 most of
// its M is padding, and the weight would have to pass through shared memory first.
// mma.sync takes its operands from registers, so each lane loads its 16 bytes of W from
// global memory straight into a B fragment (no shared-memory staging of the weight), and
// M = 16 rows per instruction wastes at most 15 rows of padding.
//
// Grid: blocks (s, t) for s < S, t < T, 256 threads (8 warps). A chunk is 64 inputs of K.
// Warp w takes columns 16 (w % 4) .. + 15 of the tile (two n8 tiles) and inputs
// 32 (w / 4) .. + 31 of every chunk (its k-group), for all row tiles m16 of x. Lane
// l = 4 g + u loads, per chunk, 16 bytes of W for each n8 tile (column 8 n8 + g, the 8
// inputs 8 u .. 8 u + 7 of its k-group) and 16 bytes of x for rows g and g + 8 of each
// m16 tile (the same 8 inputs): the mma's k index is permuted (logical k 2u, 2u + 1,
// 2u + 8, 2u + 9 of a k16 step are inputs 8 u + 4 j + 0 .. 3 of step j), the same for A
// and B, so the sum is the same product. The weight of the next 4 chunks is in flight
// (registers) while a chunk is multiplied.
// Sums, in a fixed order (bit-identical repeat runs): the mma's over the chunks in
// order per warp; the two k-groups in order; the splits in split order by the block
// that arrives last (decode_matmul_common.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/bfloat16.hpp"  // BfloatLayout, kBfloatTileK
#include "kernels/decode_matmul.cuh"

namespace ladder {

/// Inputs of K one bf16 block streams per step of its loop (K is cut into these chunks
/// for the splits; the weight itself is padded to 8 only).
constexpr int kDecodeBf16ChunkRows = 64;

/// The plan of a bf16 [B, K] x [K, N] product on the workspace's device: row tile 16, 32
/// or 64, chunks of 64 inputs, the splits of choose_decode_splits for the blocks of the
/// bf16-output kernel one multiprocessor holds (the LM head's float-logits kernel takes
/// the same plan: its 786 column tiles never split). Throws std::invalid_argument on B
/// outside [1, 64] or K or N <= 0, ladder::CudaError when the occupancy query fails.
DecodeMatmulPlan plan_decode_matmul_bf16(int B, int K, int N, DecodeMatmulWorkspace& workspace);

/// out = bf16(epilogue(x W [+ bias])) on `stream`: x [B, K] bf16 row-major, W packed by
/// pack_bfloat16_weights(W, K, N, BfloatLayout::k_tiled) (16-byte aligned), bias [N] bf16
/// (null exactly when the epilogue is kNone), out [B, N] bf16; with kBiasResidual out
/// holds the residual stream on entry. out must not overlap x or W. Any K and N (x in
/// 16-byte pieces when K % 8 == 0 and x is 16-byte aligned; out in pairs when N is even
/// and out 4-byte aligned).
/// Throws std::invalid_argument on a null pointer, a bias with kNone, B outside [1, 64],
/// K or N <= 0, a weight that is not 16-byte aligned or a workspace too small. `launch`
/// as for launch_decode_matmul (DecodeLaunch, decode_matmul.cuh).
void launch_decode_matmul_bf16(const __nv_bfloat16* x, const __nv_bfloat16* packed_weight,
                               const __nv_bfloat16* bias, __nv_bfloat16* out, int B, int K, int N,
                               DecodeEpilogue epilogue, DecodeMatmulWorkspace& workspace,
                               cudaStream_t stream,
                               DecodeLaunch launch = DecodeLaunch::kAfterPrevious);

/// The tied LM head in bf16: logits = x wte^T accumulated in fp32 and stored as floats;
/// x [B, C] bf16, wte packed by pack_bfloat16_weights_transposed(wte, V, C,
/// BfloatLayout::k_tiled); logits [B, V] (null: not written); candidate_values and
/// candidate_indices [B, decode_lm_head_candidates(V)] (both null: not written), as
/// launch_decode_lm_head. Throws std::invalid_argument as launch_decode_lm_head.
void launch_decode_lm_head_bf16(const __nv_bfloat16* x, const __nv_bfloat16* packed_wte,
                                float* logits, float* candidate_values,
                                std::int32_t* candidate_indices, int B, int C, int V,
                                DecodeMatmulWorkspace& workspace, cudaStream_t stream,
                                DecodeLaunch launch = DecodeLaunch::kAfterPrevious);

}  // namespace ladder
