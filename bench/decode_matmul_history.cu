// bench/decode_matmul_history.cu - the decode matmul of chapters 09 and 10, version by
// version: each version a small kernel with one idea more than the version before, each
// checked against the CPU reference and then timed.
//
//   build/current/bench/decode_matmul_history                every version
//   build/current/bench/decode_matmul_history 4              version 4 only
//   build/current/bench/decode_matmul_history --batch 1,8,32 --shape c_proj
//   build/current/bench/decode_matmul_history --check-only   checks, no timing
//
// Every version computes y [B, N] = x [B, K] W [K, N] for a few rows B (1 and 32 by
// default, at most 64): GPT-2 small's products, c_attn 768 x 2304 (+ bias), c_proj
// 768 x 768 (+ bias + residual), c_fc 768 x 3072 (+ bias + GELU), mlp_proj 3072 x 768
// (+ bias + residual) and the tied LM head 768 x 50257. From version 5 on the epilogue
// of the product (in brackets) is part of the kernel. Each version is compared with
// reference::linear (and gelu, add) on random inputs from a fixed seed, with its output
// poisoned first: fp32 within 1e-4 relative, as the tests ask; bf16 against the
// reference's bf16 mode (inputs rounded to bf16, the result rounded once where the
// kernel stores it: common/reference.hpp, R4, R6, R7), every element within one bf16
// step, and within 1e-2 relative. A version that fails its check exits with code 1 and
// is never timed.
//
// Timing (bench/kernel_history.hpp): a CUDA graph of launches of the version, replayed,
// the median replay over its products. The launches walk copies of the weight that fill
// four times the L2 cache, so every product streams its weight from memory, as in a
// decode step (a step's 49 weights, 0.5 GB in fp32, never fit in L2). The graph is a
// chain of dependent launches on one stream: a step's products run one after the other.
// "% copy" is the bytes a product must move (W, x, out, and the residual it reads) over
// its time, as a share of the device-to-device copy bandwidth measured in the same run:
// the floor SPEC.md measures the chapters against. Without --shape the table shows c_fc
// and the step: 12 x (c_attn, c_proj, c_fc, mlp_proj) + lm_head = 49 products, timed
// one shape at a time and added up.
//
// Versions (each the one before plus one idea):
//   1  one warp per output column, W^T [N, K] so that a column is contiguous, fp32,
//      4-byte loads
//   2  16-byte loads (float4) of W and x
//   3  K split over blocks: each writes its partial sums to a workspace, a second kernel
//      adds the splits in split order (deterministic: no atomics)
//   4  the packed layout of kernels/decode_matmul_layout.hpp (64-column tiles, rows of
//      256 contiguous bytes): a block streams one contiguous run of W with coalesced
//      16-byte loads, and x sits in shared memory, read once per block, not per column
//   5  the epilogue (bias, GELU, residual) fused into the second kernel's sum
//   6  the splits of a column tile as one thread-block cluster: summed from the blocks'
//      shared memory (distributed shared memory), the epilogue there too; no workspace,
//      no second kernel (compute capability 9.0)
//   7  programmatic dependent launch: the product launches before the kernel before it
//      ends and fetches its weight into L2 before griddepcontrol.wait
//   8  bf16 weights and activations on the tensor cores: mma.sync m16n8k16 with fp32
//      sums, the weight in BfloatLayout::k_tiled (8 consecutive inputs of one column in
//      16 bytes), straight from memory into the mma's registers
//   9  the production kernel in fp32, launch_decode_matmul (chapter 09), grown from 7:
//      a cp.async pipeline of 4-8 stages, row tiles of 2 to 64 rows, the weight in
//      registers for up to 8 rows, clusters of up to 16 splits, the workspace beside
//   10 the production kernel in bf16, launch_decode_matmul_bf16 (chapter 10), grown from
//      8: four chunks of the weight in flight per lane, the same tail as 9
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "bench/bench_support.hpp"
#include "bench/kernel_history.hpp"
#include "common/bfloat16.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_stream.hpp"
#include "common/device_info.hpp"
#include "common/reference.hpp"
#include "kernels/decode_matmul.cuh"
#include "kernels/decode_matmul_bf16.cuh"
#include "kernels/decode_matmul_bf16_tile.cuh"
#include "kernels/decode_matmul_layout.hpp"
#include "kernels/device_primitives.cuh"

namespace {

using ladder::DecodeEpilogue;
using ladder::kWarpSize;
using Bfloat = __nv_bfloat16;

constexpr int kThreads = 256;  // every version's block
constexpr int kWarps = kThreads / kWarpSize;

// ---------------------------------------------------------------- the epilogue (5 on)

__device__ __forceinline__ float widen(float value) { return value; }
__device__ __forceinline__ float widen(Bfloat value) { return __bfloat162float(value); }
__device__ __forceinline__ void store(float* at, float value) { *at = value; }
__device__ __forceinline__ void store(Bfloat* at, float value) { *at = __float2bfloat16_rn(value); }

/// What a product does to y before it stores it; T is the element type of bias and out.
template <typename T>
struct Epilogue {
  DecodeEpilogue kind;
  const T* bias;  ///< [N], null with kNone
};

/// out[b, n] = epilogue(y): + bias, then GELU or + the residual stream out[b, n] (in
/// place), rounded once to T.
template <typename T>
__device__ __forceinline__ void store_output(const Epilogue<T>& epilogue, T* out, int b, int n,
                                             int N, float y) {
  T* at = out + static_cast<std::size_t>(b) * N + n;
  if (epilogue.kind != DecodeEpilogue::kNone) y += widen(epilogue.bias[n]);
  if (epilogue.kind == DecodeEpilogue::kBiasGelu) y = ladder::gelu(y);
  if (epilogue.kind == DecodeEpilogue::kBiasResidual) y += widen(*at);
  store(at, y);
}

// ---------------------------------------------------------------- version 1

// Warp w of block c owns column n = 8 c + w of W, which W^T [N, K] holds as K contiguous
// floats; lane l takes k = l, l + 32, ..., one 4-byte load of W and one of x per row,
// keeps a sum per row of x, and the warp adds its 32 lanes' sums. Every warp reads all
// of x: B K floats per column, from L1 and L2.
template <int kRows>
__global__ void __launch_bounds__(kThreads)
    warp_per_column_kernel(const float* x, const float* w_t, float* out, int B, int K, int N) {
  const int n = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  if (n >= N) return;
  const float* column = w_t + static_cast<std::size_t>(n) * K;
  float sums[kRows] = {};
  for (int k = lane; k < K; k += kWarpSize) {
    const float w = column[k];
#pragma unroll
    for (int b = 0; b < kRows; ++b)
      if (b < B) sums[b] = fmaf(x[static_cast<std::size_t>(b) * K + k], w, sums[b]);
  }
#pragma unroll
  for (int b = 0; b < kRows; ++b) {
    const float total = ladder::warp_sum(sums[b]);
    if (lane == 0 && b < B) out[static_cast<std::size_t>(b) * N + n] = total;
  }
}

// ---------------------------------------------------------------- version 2

/// sum + the dot product of two float4.
__device__ __forceinline__ float dot4(float4 a, float4 b, float sum) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, sum))));
}

// As version 1, in 16-byte pieces: lane l takes inputs 4 l .. 4 l + 3, then 4 (l + 32)
// ...; a warp's load is 512 contiguous bytes instead of 128, a quarter of the load
// instructions for the same bytes (K % 4 == 0).
template <int kRows>
__global__ void __launch_bounds__(kThreads)
    vector_warp_per_column_kernel(const float* x, const float* w_t, float* out, int B, int K,
                                  int N) {
  const int n = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  if (n >= N) return;
  const auto* column = reinterpret_cast<const float4*>(w_t + static_cast<std::size_t>(n) * K);
  const auto* x4 = reinterpret_cast<const float4*>(x);
  const int pieces = K / 4;
  float sums[kRows] = {};
  for (int k = lane; k < pieces; k += kWarpSize) {
    const float4 w = column[k];
#pragma unroll
    for (int b = 0; b < kRows; ++b)
      if (b < B) sums[b] = dot4(x4[static_cast<std::size_t>(b) * pieces + k], w, sums[b]);
  }
#pragma unroll
  for (int b = 0; b < kRows; ++b) {
    const float total = ladder::warp_sum(sums[b]);
    if (lane == 0 && b < B) out[static_cast<std::size_t>(b) * N + n] = total;
  }
}

// ---------------------------------------------------------------- version 3

// Version 2 over the pieces [split share, (split + 1) share) of K only, split =
// blockIdx.y: S times the blocks, so that a narrow product fills every multiprocessor.
// The sums go to partials [S][B][N].
template <int kRows>
__global__ void __launch_bounds__(kThreads)
    split_warp_per_column_kernel(const float* x, const float* w_t, float* partials, int B, int K,
                                 int N, int share) {
  const int n = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int split = static_cast<int>(blockIdx.y);
  if (n >= N) return;
  const auto* column = reinterpret_cast<const float4*>(w_t + static_cast<std::size_t>(n) * K);
  const auto* x4 = reinterpret_cast<const float4*>(x);
  const int pieces = K / 4;
  const int end = min(pieces, (split + 1) * share);
  float sums[kRows] = {};
  for (int k = split * share + lane; k < end; k += kWarpSize) {
    const float4 w = column[k];
#pragma unroll
    for (int b = 0; b < kRows; ++b)
      if (b < B) sums[b] = dot4(x4[static_cast<std::size_t>(b) * pieces + k], w, sums[b]);
  }
  float* partial = partials + static_cast<std::size_t>(split) * B * N;
#pragma unroll
  for (int b = 0; b < kRows; ++b) {
    const float total = ladder::warp_sum(sums[b]);
    if (lane == 0 && b < B) partial[static_cast<std::size_t>(b) * N + n] = total;
  }
}

// The second pass: out[b, n] = partials[0][b][n] + ... + partials[S - 1][b][n], in split
// order, so a repeat run gives the same bits. A thread per output.
__global__ void sum_splits_kernel(const float* partials, float* out, int B, int N, int splits) {
  const std::size_t outputs = static_cast<std::size_t>(B) * N;
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= outputs) return;
  float sum = 0.0f;
  for (int s = 0; s < splits; ++s) sum += partials[s * outputs + i];
  out[i] = sum;
}

// ---------------------------------------------------------------- version 4

constexpr int kTileColumns = ladder::kDecodeTileColumns;  // 64 columns: 256 bytes a row
constexpr int kChunkRows = ladder::kDecodeChunkRows;      // K is padded to a multiple of 32
constexpr int kQuads = kTileColumns / 4;                  // 16 threads read one tile row
constexpr int kGroups = kThreads / kQuads;                // 16 such groups in a block
constexpr int kWindow = 128;                              // inputs of x staged at once
constexpr int kXStride = kWindow + 1;  // odd: rows of x 8 apart start 8 banks apart
constexpr int kPiecesAtOnce = 4;       // loads of W a thread issues before it uses one

/// How a block's 16 groups share a tile for row tile kRows (1, 8, 32 or 64 rows of x): a
/// thread sums kThreadRows rows x 4 columns; the groups split the rows (kRowGroups) and
/// the inputs of K (kKGroups) among them.
template <int kRows>
struct TileThreads {
  static constexpr int kThreadRows = kRows < 8 ? kRows : 8;
  static constexpr int kRowGroups = kRows / kThreadRows;
  static constexpr int kKGroups = kGroups / kRowGroups;
  static constexpr int kSharedFloats = kRows * kXStride > kKGroups* kRows* kTileColumns
                                           ? kRows* kXStride
                                           : kKGroups* kRows* kTileColumns;
};

/// A product on the packed weight, cut into S splits of K (runs of 32-row chunks) per
/// column tile: block (split, tile) sums rows [split rows_per_split, ...) of the tile.
template <typename T>
struct PackedProduct {
  const T* x;       ///< [B, K]
  const T* weight;  ///< packed: fp32 pack_decode_weight, bf16 BfloatLayout::k_tiled
  int B;
  int K;
  int N;
  int padded_rows;
  int splits;
  int rows_per_split;  ///< a multiple of the chunk (32 rows fp32, 64 inputs bf16)
  bool programmatic;   ///< launched as a programmatic dependent (version 8)
};

// Versions 4-7's loop: block (split, tile) multiplies its rows of column tile `tile` of
// the packed weight - one contiguous run, 256 bytes a row - by x, and leaves the tile
// [kRows][64] (rows of x at B and past zero) at the start of `shared`. Thread t of group
// g = t / 16 loads the 16-byte piece t % 16 of every kKGroups-th row, straight into
// registers, four rows before it multiplies any; x comes in windows of 128 inputs into shared
// memory, once for all 64 columns. The k-groups' tiles are added in group order.
template <int kRows>
__device__ __forceinline__ void tile_sums(const PackedProduct<float>& p, int split, int tile,
                                          float* shared) {
  using Threads = TileThreads<kRows>;
  const int quad = static_cast<int>(threadIdx.x) % kQuads;
  const int group = static_cast<int>(threadIdx.x) / kQuads;
  const int first_row = (group % Threads::kRowGroups) * Threads::kThreadRows;
  const int k_group = group / Threads::kRowGroups;
  const auto* w = reinterpret_cast<const float4*>(p.weight + static_cast<std::size_t>(tile) *
                                                                 p.padded_rows * kTileColumns) +
                  quad;  // piece (k, quad) of the tile at w[16 k]
  const int begin = split * p.rows_per_split;
  const int end = min(p.padded_rows, begin + p.rows_per_split);
  float sums[Threads::kThreadRows][4] = {};
  for (int window = begin; window < end; window += kWindow) {
    __syncthreads();  // the last window's x has been read
    for (int i = static_cast<int>(threadIdx.x); i < kRows * kWindow / 4; i += kThreads) {
      const int b = i / (kWindow / 4);
      const int k = 4 * (i % (kWindow / 4));
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (b < p.B && window + k < p.K)
        v = *reinterpret_cast<const float4*>(p.x + static_cast<std::size_t>(b) * p.K + window + k);
      float* to = shared + b * kXStride + k;
      to[0] = v.x;
      to[1] = v.y;
      to[2] = v.z;
      to[3] = v.w;
    }
    __syncthreads();
    const int rows = min(kWindow, end - window);
    for (int k = k_group; k < rows; k += kPiecesAtOnce * Threads::kKGroups) {
      float4 pieces[kPiecesAtOnce];  // loaded before any is used: four in flight
#pragma unroll
      for (int i = 0; i < kPiecesAtOnce; ++i) {
        const int row = k + i * Threads::kKGroups;
        pieces[i] = row < rows ? __ldg(w + static_cast<std::size_t>(window + row) * kQuads)
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int i = 0; i < kPiecesAtOnce; ++i) {
        const int row = min(k + i * Threads::kKGroups, kWindow - 1);  // zeros past `rows`
#pragma unroll
        for (int r = 0; r < Threads::kThreadRows; ++r) {
          const float xv = shared[(first_row + r) * kXStride + row];
          sums[r][0] = fmaf(xv, pieces[i].x, sums[r][0]);
          sums[r][1] = fmaf(xv, pieces[i].y, sums[r][1]);
          sums[r][2] = fmaf(xv, pieces[i].z, sums[r][2]);
          sums[r][3] = fmaf(xv, pieces[i].w, sums[r][3]);
        }
      }
    }
  }
  __syncthreads();  // x is no longer read: the k-groups' tiles take its place
  auto* tiles = reinterpret_cast<float4*>(shared);  // [kKGroups][kRows][16] quads
#pragma unroll
  for (int r = 0; r < Threads::kThreadRows; ++r)
    tiles[(k_group * kRows + first_row + r) * kQuads + quad] =
        make_float4(sums[r][0], sums[r][1], sums[r][2], sums[r][3]);
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < kRows * kQuads; e += kThreads) {
    float4 sum = tiles[e];
    for (int g = 1; g < Threads::kKGroups; ++g) {
      const float4 more = tiles[g * kRows * kQuads + e];
      sum = make_float4(sum.x + more.x, sum.y + more.y, sum.z + more.z, sum.w + more.w);
    }
    tiles[e] = sum;
  }
  __syncthreads();
}

// Version 4: tile_sums, and the block's tile to partials [S][B][N] for the second pass
// (sum_splits_kernel of version 3). Grid (S, T), T = ceil(N / 64).
template <int kRows>
__global__ void __launch_bounds__(kThreads)
    packed_tile_kernel(const PackedProduct<float> p, float* partials) {
  __shared__ __align__(16) float shared[TileThreads<kRows>::kSharedFloats];
  const int split = static_cast<int>(blockIdx.x);
  const int tile = static_cast<int>(blockIdx.y);
  tile_sums<kRows>(p, split, tile, shared);
  float* partial = partials + static_cast<std::size_t>(split) * p.B * p.N;
  for (int e = static_cast<int>(threadIdx.x); e < p.B * kTileColumns; e += kThreads) {
    const int n = tile * kTileColumns + e % kTileColumns;
    if (n < p.N) partial[static_cast<std::size_t>(e / kTileColumns) * p.N + n] = shared[e];
  }
}

// ---------------------------------------------------------------- version 5

// sum_splits_kernel with the epilogue on the sum: bias, GELU or the residual add cost no
// launch and no pass over [B, N] of their own.
__global__ void sum_splits_epilogue_kernel(const float* partials, float* out,
                                           const Epilogue<float> epilogue, int B, int N,
                                           int splits) {
  const std::size_t outputs = static_cast<std::size_t>(B) * N;
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= outputs) return;
  float sum = 0.0f;
  for (int s = 0; s < splits; ++s) sum += partials[s * outputs + i];
  store_output(epilogue, out, static_cast<int>(i / N), static_cast<int>(i % N), N, sum);
}

// ---------------------------------------------------------------- version 6

// The S blocks of column tile `tile` are one thread-block cluster (rank = split), each
// with its tile [kRows][64] in shared memory (`tile_values`). After a cluster barrier,
// rank r adds up rows [r ceil(B / S), ...) of the S tiles, read in split order through
// distributed shared memory, and stores them through the epilogue; a second barrier
// keeps every block alive until the others have read its tile.
template <typename T>
__device__ __forceinline__ void finish_in_cluster(const float* tile_values, T* out,
                                                  const Epilogue<T>& epilogue, int B, int N,
                                                  int tile) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int splits = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int rows_per_rank = (B + splits - 1) / splits;
  const int first_row = min(B, rank * rows_per_rank);
  const int end_row = min(B, first_row + rows_per_rank);
  cluster.sync();  // every split's tile is in its block's shared memory
  for (int e = first_row * kQuads + static_cast<int>(threadIdx.x); e < end_row * kQuads;
       e += kThreads) {
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s = 0; s < splits; ++s) {
      const float4 more = reinterpret_cast<const float4*>(
          cluster.map_shared_rank(tile_values, static_cast<unsigned int>(s)))[e];
      sum = make_float4(sum.x + more.x, sum.y + more.y, sum.z + more.z, sum.w + more.w);
    }
    const float values[4] = {sum.x, sum.y, sum.z, sum.w};
    for (int j = 0; j < 4; ++j) {
      const int n = tile * kTileColumns + 4 * (e % kQuads) + j;
      if (n < N) store_output(epilogue, out, e / kQuads, n, N, values[j]);
    }
  }
  cluster.sync();  // no block exits while another still reads its tile
#else
  (void)tile_values, (void)out, (void)epilogue, (void)B, (void)N, (void)tile;
  __trap();  // the host launches clusters only on compute capability 9.0 and later
#endif
}

// Version 6: version 5's product in one kernel, the splits summed in the cluster.
template <int kRows>
__global__ void __launch_bounds__(kThreads)
    cluster_tile_kernel(const PackedProduct<float> p, float* out, const Epilogue<float> epilogue) {
  __shared__ __align__(16) float shared[TileThreads<kRows>::kSharedFloats];
  const int tile = static_cast<int>(blockIdx.y);
  tile_sums<kRows>(p, static_cast<int>(blockIdx.x), tile, shared);
  finish_in_cluster(shared, out, epilogue, p.B, p.N, tile);
}

// ---------------------------------------------------------------- version 7

// Version 6 launched as a programmatic dependent: its blocks start while the kernel
// before still runs (every block of that kernel lets them, first thing, as this one does
// for the next). The weight is no kernel's output, so before griddepcontrol.wait each
// block asks L2 for its first window of it (128 rows x 256 bytes, a line per thread);
// x and out, which the kernel before may write, only after.
template <int kRows>
__global__ void __launch_bounds__(kThreads)
    programmatic_tile_kernel(const PackedProduct<float> p, float* out,
                             const Epilogue<float> epilogue) {
  __shared__ __align__(16) float shared[TileThreads<kRows>::kSharedFloats];
  ladder::allow_next_kernel_to_launch();
  const int split = static_cast<int>(blockIdx.x);
  const int tile = static_cast<int>(blockIdx.y);
  const int begin = split * p.rows_per_split;
  const int rows = min(kWindow, min(p.padded_rows, begin + p.rows_per_split) - begin);
  constexpr int kLineFloats = 128 / sizeof(float);  // two rows of a tile: 64 lines a window
  const float* first =
      p.weight + (static_cast<std::size_t>(tile) * p.padded_rows + begin) * kTileColumns;
  if (static_cast<int>(threadIdx.x) * kLineFloats < rows * kTileColumns)
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(first + threadIdx.x * kLineFloats));
  ladder::wait_for_previous_kernel();
  tile_sums<kRows>(p, split, tile, shared);
  finish_in_cluster(shared, out, epilogue, p.B, p.N, tile);
}

// ---------------------------------------------------------------- version 8

constexpr int kBfloatChunk = 64;  // inputs of K per step of the loop: 8 pieces of 8

// The tensor-core instruction itself (d += a b, m16n8k16, bf16 in, fp32 sums) is the one
// the production kernel issues: decode_bf16::mma_bf16 (kernels/decode_matmul_bf16_tile.cuh).
using ladder::decode_bf16::mma_bf16;

/// 8 bf16 of row `row` of x from input k: one 16-byte load (K % 8 == 0), zeros past B, K.
__device__ __forceinline__ uint4 load_x8(const PackedProduct<Bfloat>& p, int row, int k) {
  if (row >= p.B || k >= p.K) return make_uint4(0, 0, 0, 0);
  return __ldg(reinterpret_cast<const uint4*>(p.x + static_cast<std::size_t>(row) * p.K + k));
}

// Version 7 in bf16 on mma.sync: W in BfloatLayout::k_tiled, [K / 8][N][8]. Warp w takes
// columns 16 (w % 4) .. + 15 of the tile (two n8 tiles) and inputs 32 (w / 4) .. + 31 of
// every 64-input chunk (its k-group); lane 4 g + u loads 16 bytes of W for column g of
// each n8 tile and 16 bytes of x for rows g and g + 8 of each m16 tile, the same 8 inputs
// 8 u .. 8 u + 7 of its k-group: they feed two k16 mma steps, whose k order is permuted
// the same way for x and W, so the sum is the same product. The next chunk's W is loaded
// while this one is multiplied (the first before griddepcontrol.wait). The two k-groups'
// tiles are added in shared memory; then version 6's tail, rounding once to bf16.
template <int kRows>
__global__ void __launch_bounds__(kThreads)
    bf16_mma_kernel(const PackedProduct<Bfloat> p, Bfloat* out, const Epilogue<Bfloat> epilogue) {
  constexpr int kMTiles = kRows / 16;
  __shared__ float4 tiles[2 * kRows * kQuads];  // [k-group][kRows][16] quads
  ladder::allow_next_kernel_to_launch();
  const int tile = static_cast<int>(blockIdx.y);
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int k_group = warp / 4;
  const int g = lane / 4;
  const int u = lane % 4;
  const int first_column = tile * kTileColumns + 16 * (warp % 4) + g;  // n8 tile 0; + 8: 1
  const int begin = static_cast<int>(blockIdx.x) * p.rows_per_split;
  const int end = min(p.padded_rows, begin + p.rows_per_split);
  const auto load_weight = [&](int k, uint4(&pieces)[2]) {  // k: the lane's 8 inputs
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8) {
      const int n = first_column + 8 * n8;
      pieces[n8] = k < end && n < p.N
                       ? __ldg(reinterpret_cast<const uint4*>(
                             p.weight + (static_cast<std::size_t>(k / 8) * p.N + n) * 8))
                       : make_uint4(0, 0, 0, 0);
    }
  };
  const int lane_inputs = 32 * k_group + 8 * u;
  uint4 next[2];
  load_weight(begin + lane_inputs, next);
  // In its own branch: in one basic block with the loads above, ptxas would issue the
  // wait first, and the weight would move only once the kernel before had finished.
  if (p.programmatic) ladder::wait_for_previous_kernel();
  float sums[kMTiles][2][4] = {};
  for (int chunk = begin; chunk < end; chunk += kBfloatChunk) {
    const uint4 w[2] = {next[0], next[1]};
    load_weight(chunk + kBfloatChunk + lane_inputs, next);
#pragma unroll
    for (int m16 = 0; m16 < kMTiles; ++m16) {
      const uint4 upper = load_x8(p, 16 * m16 + g, chunk + lane_inputs);
      const uint4 lower = load_x8(p, 16 * m16 + g + 8, chunk + lane_inputs);
      const std::uint32_t a[2][4] = {{upper.x, lower.x, upper.y, lower.y},
                                     {upper.z, lower.z, upper.w, lower.w}};
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8) {
        const std::uint32_t b[2][2] = {{w[n8].x, w[n8].y}, {w[n8].z, w[n8].w}};
        mma_bf16(sums[m16][n8], a[0], b[0]);
        mma_bf16(sums[m16][n8], a[1], b[1]);
      }
    }
  }
  // The accumulators: lane 4 g + u holds rows g and g + 8 of its m16 tile, columns 2 u and
  // 2 u + 1 of each n8 tile.
  auto* values = reinterpret_cast<float*>(tiles);
#pragma unroll
  for (int m16 = 0; m16 < kMTiles; ++m16)
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 16 * m16 + g + 8 * half;
        const int column = 16 * (warp % 4) + 8 * n8 + 2 * u;
        *reinterpret_cast<float2*>(values + (k_group * kRows + row) * kTileColumns + column) =
            make_float2(sums[m16][n8][2 * half], sums[m16][n8][2 * half + 1]);
      }
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < kRows * kQuads; e += kThreads) {
    const float4 first = tiles[e];
    const float4 second = tiles[kRows * kQuads + e];
    tiles[e] =
        make_float4(first.x + second.x, first.y + second.y, first.z + second.z, first.w + second.w);
  }
  __syncthreads();
  finish_in_cluster(values, out, epilogue, p.B, p.N, tile);
}

// ---------------------------------------------------------------- host: launches

/// Calls launch(std::integral_constant<int, R>{}) with the first row tile R of the list
/// (ascending) that holds B rows; the last takes every B left.
template <int kFirst, int... kRest, typename Launch>
void with_row_tile(int B, const Launch& launch) {
  if constexpr (sizeof...(kRest) == 0) {
    launch(std::integral_constant<int, kFirst>{});
  } else {
    if (B <= kFirst) {
      launch(std::integral_constant<int, kFirst>{});
    } else {
      with_row_tile<kRest...>(B, launch);
    }
  }
}

/// cudaLaunchKernelEx with the S splits of a column tile as one cluster (grid.x = S) and,
/// when `programmatic`, as a programmatic dependent launch.
template <typename... Parameters, typename... Arguments>
void launch_in_clusters(void (*kernel)(Parameters...), dim3 grid, bool programmatic,
                        cudaStream_t stream, Arguments... arguments) {
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeClusterDimension;
  attributes[0].val.clusterDim.x = grid.x;
  attributes[0].val.clusterDim.y = 1;
  attributes[0].val.clusterDim.z = 1;
  attributes[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = programmatic ? 2 : 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, arguments...));
  CUDA_CHECK_LAUNCH(stream);
}

constexpr int kMaxSplits = 8;  // the portable cluster size

/// Splits of `chunks` chunks of K for `blocks` blocks per split: enough for about two
/// blocks per multiprocessor, at most kMaxSplits, at most one per chunk.
int choose_splits(int chunks, int blocks, int multiprocessors) {
  const int wanted = (2 * multiprocessors + blocks - 1) / blocks;
  return std::clamp(wanted, 1, std::min(kMaxSplits, chunks));
}

// ---------------------------------------------------------------- host: the bench

struct Shape {
  const char* name;
  int K;
  int N;
  DecodeEpilogue epilogue;
  int per_step;  // products of this shape in a decode step
};
constexpr int kC = 768;  // GPT-2 small
const Shape kShapes[] = {
    {"c_attn", kC, 3 * kC, DecodeEpilogue::kBias, 12},
    {"c_proj", kC, kC, DecodeEpilogue::kBiasResidual, 12},
    {"c_fc", kC, 4 * kC, DecodeEpilogue::kBiasGelu, 12},
    {"mlp_proj", 4 * kC, kC, DecodeEpilogue::kBiasResidual, 12},
    {"lm_head", kC, 50257, DecodeEpilogue::kNone, 1},
};
constexpr int kShapeCount = sizeof(kShapes) / sizeof(kShapes[0]);
constexpr int kDefaultShape = 2;  // c_fc

struct Version {
  const char* name;
  bool epilogue;    // applies the shape's epilogue
  bool bfloat;      // bf16 in and out
  bool needs_sm90;  // thread-block clusters
};
constexpr int kVersions = 10;
const Version kVersionList[kVersions] = {
    {"one warp per output column, 4-byte loads", false, false, false},
    {"16-byte loads of W and x", false, false, false},
    {"K split over blocks, splits summed by a 2nd kernel", false, false, false},
    {"packed 64-column tiles, x in shared memory", false, false, false},
    {"bias / GELU / residual fused into the sum", true, false, false},
    {"splits summed in a cluster (DSMEM), one kernel", true, false, true},
    {"programmatic dependent launch", true, false, true},
    {"bf16 on the tensor cores (mma.sync m16n8k16)", true, true, true},
    {"production fp32: launch_decode_matmul (from 7)", true, false, false},
    {"production bf16: launch_decode_matmul_bf16 (from 8)", true, true, false},
};

constexpr double kFp32Tolerance = 1e-4;
constexpr double kBfloatTolerance = 1e-2;
// Slack of the one-bf16-step check, relative to the largest output: the fp32 sums' own
// error (tests/gpu/test_decode_matmul_bf16.cpp says why 1e-4).
constexpr double kBfloatSlack = 1e-4;

struct Arguments {
  int version = 0;  // 0: all
  std::vector<int> batches{1, 32};
  int shape = -1;  // -1: c_fc shown, every shape timed for the step
  bool check_only = false;
};

Arguments parse_arguments(int argc, char** argv) {
  const std::string usage =
      "usage: decode_matmul_history [VERSION 1.." + std::to_string(kVersions) +
      "] [--batch B[,B...]] [--shape c_attn|c_proj|c_fc|mlp_proj|lm_head] [--check-only], "
      "1 <= B <= 64";
  const auto number = [&](const std::string& text, long low, long high) {
    char* end = nullptr;
    const long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value < low || value > high)
      throw std::invalid_argument(usage);
    return static_cast<int>(value);
  };
  Arguments arguments;
  bool version_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--batch" && i + 1 < argc) {
      arguments.batches.clear();
      std::string list = argv[++i];
      for (std::size_t start = 0; start <= list.size();) {
        const std::size_t comma = std::min(list.find(',', start), list.size());
        arguments.batches.push_back(number(list.substr(start, comma - start), 1, 64));
        start = comma + 1;
      }
    } else if (argument == "--shape" && i + 1 < argc) {
      const std::string name = argv[++i];
      for (int s = 0; s < kShapeCount; ++s)
        if (name == kShapes[s].name) arguments.shape = s;
      if (arguments.shape < 0) throw std::invalid_argument(usage);
    } else if (argument == "--check-only") {
      arguments.check_only = true;
    } else if (!version_given && argument.rfind("--", 0) != 0) {
      arguments.version = number(argument, 1, kVersions);
      version_given = true;
    } else {
      throw std::invalid_argument(usage);
    }
  }
  return arguments;
}

std::vector<std::uint16_t> bfloat_bits(const std::vector<float>& values) {
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    bits[i] = ladder::float_to_bfloat16_bits(values[i]);
  return bits;
}

std::vector<float> rounded(std::vector<float> values) {
  ladder::round_to_bfloat16(values.data(), values.size());
  return values;
}

/// Device memory of any element type, freed when the object goes.
class DeviceBuffers {
 public:
  DeviceBuffers() = default;
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  ~DeviceBuffers() {
    for (void* pointer : buffers_) cudaFree(pointer);  // a destructor must not throw
  }
  template <typename T>
  T* upload(const std::vector<T>& host) {
    T* device = allocate<T>(host.size());
    CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return device;
  }
  template <typename T>
  T* allocate(std::size_t count) {
    void* pointer = nullptr;
    CUDA_CHECK(cudaMalloc(&pointer, std::max<std::size_t>(count, 1) * sizeof(T)));
    buffers_.push_back(pointer);
    return static_cast<T*>(pointer);
  }

 private:
  std::vector<void*> buffers_;
};

/// `copies` device copies of `host` (copy 0 is what the check reads; the timed launches
/// walk them all, so the weight comes from memory, not from L2).
template <typename T>
std::vector<const T*> weight_copies(DeviceBuffers& buffers, const std::vector<T>& host,
                                    int copies) {
  std::vector<const T*> pointers;
  T* first = buffers.upload(host);
  pointers.push_back(first);
  for (int c = 1; c < copies; ++c) {
    T* copy = buffers.allocate<T>(host.size());
    CUDA_CHECK(cudaMemcpy(copy, first, host.size() * sizeof(T), cudaMemcpyDeviceToDevice));
    pointers.push_back(copy);
  }
  return pointers;
}

/// Elements where a bf16 result and its reference differ by more than one bf16 step at
/// the larger of the two plus `slack`, or either is not finite.
std::size_t beyond_one_bfloat16_step(const std::vector<float>& actual,
                                     const std::vector<float>& expected, double slack) {
  std::size_t beyond = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i];
    const double e = expected[i];
    int exponent = 0;
    std::frexp(std::max(std::fabs(a), std::fabs(e)), &exponent);
    const double step = std::ldexp(1.0, std::max(exponent - 8, -133));
    if (!std::isfinite(a) || !std::isfinite(e) || std::fabs(a - e) > step + slack) ++beyond;
  }
  return beyond;
}

/// One shape at one B: its inputs, references and device buffers, and each version's
/// launch.
class Problem {
 public:
  Problem(const Shape& shape, int B, const ladder::DeviceInfo& device,
          ladder::DecodeMatmulWorkspace& workspace, cudaStream_t stream)
      : shape_(shape), B_(B), K_(shape.K), N_(shape.N), workspace_(workspace), stream_(stream) {
    const std::size_t weights = static_cast<std::size_t>(K_) * N_;
    const std::vector<float> x = ladder::bench::random_floats(static_cast<std::size_t>(B) * K_, 11);
    const std::vector<float> w = ladder::bench::random_floats(weights, 12);
    std::vector<float> bias = ladder::bench::random_floats(N_, 13);
    std::vector<float> residual =
        ladder::bench::random_floats(static_cast<std::size_t>(B) * N_, 14);
    for (float& value : bias) value *= 2.0f;
    for (float& value : residual) value *= 3.0f;
    residual_ = residual;
    expected_plain_ = reference(x, w, bias, residual, DecodeEpilogue::kNone);
    expected_epilogue_ = shape.epilogue == DecodeEpilogue::kNone
                             ? expected_plain_
                             : reference(x, w, bias, residual, shape.epilogue);
    const std::vector<float> x16 = rounded(x);
    const std::vector<float> w16 = rounded(w);
    const std::vector<float> bias16 = rounded(bias);
    residual16_ = rounded(residual);
    expected_bfloat_ = rounded(reference(x16, w16, bias16, residual16_, shape.epilogue));

    // Copies enough to fill the L2 four times (at least two: no launch finds the
    // weight the launch before it left in L2).
    const auto copies_for = [&](std::size_t bytes) {
      return static_cast<int>(
          std::max<std::size_t>(2, (4 * device.l2_cache_bytes + bytes - 1) / bytes));
    };
    std::vector<float> w_t(weights);
    for (int k = 0; k < K_; ++k)
      for (int n = 0; n < N_; ++n)
        w_t[static_cast<std::size_t>(n) * K_ + k] = w[static_cast<std::size_t>(k) * N_ + n];
    const std::vector<float> packed = ladder::pack_decode_weight(w.data(), K_, N_);
    const std::vector<std::uint16_t> tiled =
        ladder::pack_bfloat16_weights(w, K_, N_, ladder::BfloatLayout::k_tiled);
    copies_ = copies_for(weights * sizeof(float));
    bfloat_copies_ = copies_for(weights * sizeof(Bfloat));
    w_t_ = weight_copies(buffers_, w_t, copies_);
    packed_ = weight_copies(buffers_, packed, copies_);
    tiled_ = weight_copies(buffers_, tiled, bfloat_copies_);

    x_ = buffers_.upload(x);
    bias_ = buffers_.upload(bias);
    out_ = buffers_.allocate<float>(residual.size());
    x16_ = reinterpret_cast<const Bfloat*>(buffers_.upload(bfloat_bits(x16)));
    bias16_ = reinterpret_cast<const Bfloat*>(buffers_.upload(bfloat_bits(bias16)));
    out16_ = reinterpret_cast<Bfloat*>(buffers_.allocate<std::uint16_t>(residual.size()));

    multiprocessors_ = device.multiprocessors;
    const int column_blocks = (N_ + kWarps - 1) / kWarps;  // versions 1-3: a warp per column
    warp_splits_ = choose_splits(K_ / 4 / kWarpSize, column_blocks, multiprocessors_);
    const ladder::DecodeWeightLayout layout = ladder::DecodeWeightLayout::of(K_, N_);
    column_tiles_ = layout.column_tiles;
    tile_product_ = split_product(x_, layout.padded_rows, kChunkRows);
    bfloat_product_ = split_product(
        x16_, (K_ + ladder::kBfloatTileK - 1) / ladder::kBfloatTileK * 8, kBfloatChunk);
    partials_ = buffers_.allocate<float>(static_cast<std::size_t>(kMaxSplits) * B * N_);
  }

  /// Launches version v (1-based) on weight copy `copy` into out (or out16).
  void launch(int v, int copy) {
    const cudaStream_t s = stream_;
    const int B = B_;
    const int K = K_;
    const int N = N_;
    const unsigned int column_blocks = static_cast<unsigned int>((N + kWarps - 1) / kWarps);
    const dim3 tile_grid(static_cast<unsigned int>(tile_product_.splits),
                         static_cast<unsigned int>(column_tiles_));
    const unsigned int sum_blocks = static_cast<unsigned int>((B * N + kThreads - 1) / kThreads);
    PackedProduct<float> tiles = tile_product_;
    tiles.weight = packed_[static_cast<std::size_t>(copy)];
    PackedProduct<Bfloat> bfloats = bfloat_product_;
    bfloats.weight = reinterpret_cast<const Bfloat*>(tiled_[static_cast<std::size_t>(copy)]);
    const float* w_t = w_t_[static_cast<std::size_t>(copy)];
    const Epilogue<float> epilogue{shape_.epilogue,
                                   shape_.epilogue == DecodeEpilogue::kNone ? nullptr : bias_};
    const Epilogue<Bfloat> epilogue16{shape_.epilogue,
                                      shape_.epilogue == DecodeEpilogue::kNone ? nullptr : bias16_};
    switch (v) {
      case 1:
        with_row_tile<1, 8, 32, 64>(B, [&](auto rows) {
          warp_per_column_kernel<rows.value>
              <<<column_blocks, kThreads, 0, s>>>(x_, w_t, out_, B, K, N);
        });
        break;
      case 2:
        with_row_tile<1, 8, 32, 64>(B, [&](auto rows) {
          vector_warp_per_column_kernel<rows.value>
              <<<column_blocks, kThreads, 0, s>>>(x_, w_t, out_, B, K, N);
        });
        break;
      case 3: {
        const int pieces = K / 4;
        const int share = (pieces + warp_splits_ - 1) / warp_splits_;
        const int splits = (pieces + share - 1) / share;
        with_row_tile<1, 8, 32, 64>(B, [&](auto rows) {
          split_warp_per_column_kernel<rows.value>
              <<<dim3(column_blocks, static_cast<unsigned int>(splits)), kThreads, 0, s>>>(
                  x_, w_t, partials_, B, K, N, share);
        });
        CUDA_CHECK_LAUNCH(s);
        sum_splits_kernel<<<sum_blocks, kThreads, 0, s>>>(partials_, out_, B, N, splits);
        break;
      }
      case 4:
      case 5:
        with_row_tile<1, 8, 32, 64>(B, [&](auto rows) {
          packed_tile_kernel<rows.value><<<tile_grid, kThreads, 0, s>>>(tiles, partials_);
        });
        CUDA_CHECK_LAUNCH(s);
        if (v == 4) {
          sum_splits_kernel<<<sum_blocks, kThreads, 0, s>>>(partials_, out_, B, N, tiles.splits);
        } else {
          sum_splits_epilogue_kernel<<<sum_blocks, kThreads, 0, s>>>(partials_, out_, epilogue, B,
                                                                     N, tiles.splits);
        }
        break;
      case 6:
        with_row_tile<1, 8, 32, 64>(B, [&](auto rows) {
          launch_in_clusters(cluster_tile_kernel<rows.value>, tile_grid, false, s, tiles, out_,
                             epilogue);
        });
        return;
      case 7:
        with_row_tile<1, 8, 32, 64>(B, [&](auto rows) {
          launch_in_clusters(programmatic_tile_kernel<rows.value>, tile_grid, true, s, tiles, out_,
                             epilogue);
        });
        return;
      case 8:
        with_row_tile<16, 32, 64>(B, [&](auto rows) {
          launch_in_clusters(bf16_mma_kernel<rows.value>,
                             dim3(static_cast<unsigned int>(bfloats.splits),
                                  static_cast<unsigned int>(column_tiles_)),
                             true, s, bfloats, out16_, epilogue16);
        });
        return;
      case 9:
        ladder::launch_decode_matmul(x_, tiles.weight, epilogue.bias, out_, B, K, N,
                                     shape_.epilogue, ladder::DecodePrecision::kFp32, workspace_, s,
                                     ladder::DecodeLaunch::kProgrammatic);
        return;
      default:
        ladder::launch_decode_matmul_bf16(x16_, bfloats.weight, epilogue16.bias, out16_, B, K, N,
                                          shape_.epilogue, workspace_, s,
                                          ladder::DecodeLaunch::kProgrammatic);
        return;
    }
    CUDA_CHECK_LAUNCH(s);
  }

  /// Runs version v once on poisoned output (the residual stream, where the version adds
  /// to it) and returns its relative error against the reference; throws when the
  /// version fails its check.
  double check(int v) {
    const Version& version = kVersionList[v - 1];
    const bool residual = version.epilogue && shape_.epilogue == DecodeEpilogue::kBiasResidual;
    const std::size_t outputs = residual_.size();
    if (version.bfloat) {
      if (residual) {
        const std::vector<std::uint16_t> bits = bfloat_bits(residual16_);
        CUDA_CHECK(cudaMemcpy(out16_, bits.data(), outputs * 2, cudaMemcpyHostToDevice));
      } else {
        CUDA_CHECK(cudaMemset(out16_, 0xff, outputs * 2));  // NaN
      }
    } else if (residual) {
      ladder::bench::copy_to_device(out_, residual_);
    } else {
      ladder::bench::poison(out_, outputs);
    }
    launch(v, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (!version.bfloat) {
      const std::vector<float> out = ladder::bench::copy_to_host(out_, outputs);
      const std::vector<float>& expected = version.epilogue ? expected_epilogue_ : expected_plain_;
      const double error = ladder::reference::relative_error(out.data(), expected.data(), outputs);
      ladder::bench::require_close(v, error, kFp32Tolerance);
      return error;
    }
    std::vector<std::uint16_t> bits(outputs);
    CUDA_CHECK(cudaMemcpy(bits.data(), out16_, outputs * 2, cudaMemcpyDeviceToHost));
    std::vector<float> out(outputs);
    for (std::size_t i = 0; i < outputs; ++i) out[i] = ladder::bfloat16_bits_to_float(bits[i]);
    const double error =
        ladder::reference::relative_error(out.data(), expected_bfloat_.data(), outputs);
    ladder::bench::require_close(v, error, kBfloatTolerance);
    double largest = 0.0;
    for (const float value : expected_bfloat_)
      largest = std::max(largest, std::fabs(double{value}));
    const std::size_t beyond =
        beyond_one_bfloat16_step(out, expected_bfloat_, kBfloatSlack * largest);
    if (beyond != 0)
      throw std::runtime_error(
          "version " + std::to_string(v) + ": " + std::to_string(beyond) +
          " outputs differ from the bf16 reference by more than one bf16 step");
    return error;
  }

  /// Median GPU microseconds of one product of version v (the graph walks the copies).
  double microseconds(int v) {
    const int copies = kVersionList[v - 1].bfloat ? bfloat_copies_ : copies_;
    const int per_launch =
        (copies + ladder::bench::kLaunchesPerGraph - 1) / ladder::bench::kLaunchesPerGraph;
    return ladder::bench::microseconds_per_launch(stream_,
                                                  [&](int i) {
                                                    for (int j = 0; j < per_launch; ++j)
                                                      launch(v, (i * per_launch + j) % copies);
                                                  }) /
           per_launch;
  }

  /// Bytes version v must move: W, x and out once, and the residual it reads.
  double bytes(int v) const {
    const Version& version = kVersionList[v - 1];
    const double element = version.bfloat ? 2.0 : 4.0;
    const bool residual = version.epilogue && shape_.epilogue == DecodeEpilogue::kBiasResidual;
    return element * (static_cast<double>(K_) * N_ + static_cast<double>(B_) * K_ +
                      (residual ? 2.0 : 1.0) * B_ * N_);
  }

 private:
  static std::vector<float> reference(const std::vector<float>& x, const std::vector<float>& w,
                                      const std::vector<float>& bias,
                                      const std::vector<float>& residual, DecodeEpilogue epilogue,
                                      int B, int K, int N) {
    std::vector<float> y(static_cast<std::size_t>(B) * N);
    ladder::reference::linear(x.data(), w.data(),
                              epilogue == DecodeEpilogue::kNone ? nullptr : bias.data(), y.data(),
                              B, K, N);
    if (epilogue == DecodeEpilogue::kBiasGelu)
      ladder::reference::gelu(y.data(), y.data(), y.size());
    if (epilogue == DecodeEpilogue::kBiasResidual)
      ladder::reference::add(residual.data(), y.data(), y.data(), y.size());
    return y;
  }
  std::vector<float> reference(const std::vector<float>& x, const std::vector<float>& w,
                               const std::vector<float>& bias, const std::vector<float>& residual,
                               DecodeEpilogue epilogue) const {
    return reference(x, w, bias, residual, epilogue, B_, K_, N_);
  }

  template <typename T>
  PackedProduct<T> split_product(const T* x, int padded_rows, int chunk_rows) const {
    const int chunks = (padded_rows + chunk_rows - 1) / chunk_rows;
    const int splits = choose_splits(chunks, column_tiles_, multiprocessors_);
    const int chunks_per_split = (chunks + splits - 1) / splits;
    return PackedProduct<T>{x,
                            nullptr,
                            B_,
                            K_,
                            N_,
                            padded_rows,
                            (chunks + chunks_per_split - 1) / chunks_per_split,
                            chunks_per_split * chunk_rows,
                            /*programmatic=*/true};
  }

  Shape shape_;
  int B_;
  int K_;
  int N_;
  ladder::DecodeMatmulWorkspace& workspace_;
  cudaStream_t stream_;
  DeviceBuffers buffers_;
  std::vector<float> residual_;
  std::vector<float> residual16_;
  std::vector<float> expected_plain_;
  std::vector<float> expected_epilogue_;
  std::vector<float> expected_bfloat_;
  int copies_ = 0;
  int bfloat_copies_ = 0;
  std::vector<const float*> w_t_;
  std::vector<const float*> packed_;
  std::vector<const std::uint16_t*> tiled_;
  const float* x_ = nullptr;
  const float* bias_ = nullptr;
  float* out_ = nullptr;
  const Bfloat* x16_ = nullptr;
  const Bfloat* bias16_ = nullptr;
  Bfloat* out16_ = nullptr;
  float* partials_ = nullptr;
  int multiprocessors_ = 0;
  int warp_splits_ = 1;
  int column_tiles_ = 0;
  PackedProduct<float> tile_product_{};
  PackedProduct<Bfloat> bfloat_product_{};
};

struct Measurement {
  bool ran = false;
  double error = 0.0;
  double microseconds = 0.0;
  double bytes = 0.0;
};

int run(const Arguments& arguments) {
  const ladder::DeviceInfo device = ladder::query_device_info();
  std::printf("%s\n", ladder::device_banner(device).c_str());
  const bool has_clusters = device.compute_capability_major >= 9;
  const double copy_bandwidth = arguments.check_only ? 0.0 : ladder::measure_copy_bandwidth();
  if (!arguments.check_only)
    std::printf("copy bandwidth (read + write): %.0f GB/s\n", copy_bandwidth * 1e-9);

  std::vector<int> shapes;
  for (int s = 0; s < kShapeCount; ++s)
    if (arguments.shape < 0 || arguments.shape == s) shapes.push_back(s);
  const int shown = arguments.shape < 0 ? kDefaultShape : arguments.shape;
  const bool step = arguments.shape < 0;

  ladder::DecodeMatmulWorkspace workspace;
  const ladder::CudaStream stream;
  // results[b][v][s]
  std::vector<std::vector<std::vector<Measurement>>> results(
      arguments.batches.size(),
      std::vector<std::vector<Measurement>>(kVersions, std::vector<Measurement>(kShapeCount)));
  for (std::size_t bi = 0; bi < arguments.batches.size(); ++bi) {
    const int B = arguments.batches[bi];
    for (const int s : shapes) {
      Problem problem(kShapes[s], B, device, workspace, stream.get());
      for (int v = 1; v <= kVersions; ++v) {
        if (arguments.version != 0 && arguments.version != v) continue;
        if (kVersionList[v - 1].needs_sm90 && !has_clusters) continue;
        Measurement& m = results[bi][static_cast<std::size_t>(v - 1)][static_cast<std::size_t>(s)];
        m.error = problem.check(v);
        m.bytes = problem.bytes(v);
        if (!arguments.check_only) m.microseconds = problem.microseconds(v);
        m.ran = true;
        if (arguments.check_only)
          std::printf("B = %2d  %-8s  version %2d  error %.1e  ok\n", B, kShapes[s].name, v,
                      m.error);
      }
    }
  }
  if (arguments.check_only) return 0;

  const Shape& table_shape = kShapes[shown];
  for (std::size_t bi = 0; bi < arguments.batches.size(); ++bi) {
    std::printf("\nB = %d: %s %d x %d", arguments.batches[bi], table_shape.name, table_shape.K,
                table_shape.N);
    if (step) std::printf("; step = 12 x (c_attn, c_proj, c_fc, mlp_proj) + lm_head");
    std::printf("\nversion  %-52s  %7s  %9s  %7s", "idea", "error", "us/call", "% copy");
    if (step) std::printf("  %9s  %7s", "step us", "% copy");
    std::printf("\n");
    for (int v = 1; v <= kVersions; ++v) {
      const Measurement& m =
          results[bi][static_cast<std::size_t>(v - 1)][static_cast<std::size_t>(shown)];
      if (arguments.version != 0 && arguments.version != v) continue;
      if (!m.ran) {
        std::printf("%-7d  %-52s  skipped: needs compute capability 9.0\n", v,
                    kVersionList[v - 1].name);
        continue;
      }
      std::printf("%-7d  %-52s  %7.1e  %9.2f  %6.1f%%", v, kVersionList[v - 1].name, m.error,
                  m.microseconds, 100.0 * m.bytes / (m.microseconds * 1e-6) / copy_bandwidth);
      if (step) {
        double seconds = 0.0;
        double bytes = 0.0;
        for (int s = 0; s < kShapeCount; ++s) {
          const Measurement& product =
              results[bi][static_cast<std::size_t>(v - 1)][static_cast<std::size_t>(s)];
          seconds += kShapes[s].per_step * product.microseconds * 1e-6;
          bytes += kShapes[s].per_step * product.bytes;
        }
        std::printf("  %9.1f  %6.1f%%", seconds * 1e6, 100.0 * bytes / seconds / copy_bandwidth);
      }
      std::printf("\n");
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kProgram = "decode_matmul_history";
  return ladder::bench::run_bench(kProgram, [&] {
    const Arguments arguments = parse_arguments(argc, argv);
    if (arguments.check_only) {
      // As a test: no device is a skip (CTest's SKIP_RETURN_CODE), not a failure.
      try {
        ladder::require_cuda_device();
      } catch (const ladder::NoCudaDevice& error) {
        std::fprintf(stderr, "%s: skipped: %s\n", kProgram, error.what());
        return 77;
      }
    }
    return run(arguments);
  });
}
