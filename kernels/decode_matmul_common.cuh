// kernels/decode_matmul_common.cuh - what the fp32/tf32 and the bf16 decode matmuls
// (decode_matmul.cu, decode_matmul_bf16.cu) share: the kernels' argument struct and the
// host checks that fill it, and the end of every kernel - the k-groups of warps summed
// in group order, the splits of K summed in split order (in a thread-block cluster's
// distributed shared memory, or through the workspace by the block that arrives last),
// and the epilogue (bias, GELU, residual, the LM head's candidates) on the finished tile.
//
// A block ends with its partial tile of [rows][kTileStride] floats in shared memory, one
// per k-group of warps. bias and out may point to float or to __nv_bfloat16: values are
// widened to float on load, the epilogue runs in fp32 and the result is rounded once,
// to nearest even, when it is stored (common/reference.hpp, points R4, R6, R7).
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/cuda_check.hpp"
#include "kernels/argmax_order.cuh"
#include "kernels/decode_matmul.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"
#include "kernels/launch_decisions.hpp"

namespace ladder::decode_common {

constexpr int kThreads = 256;  // every decode-matmul block
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kTileColumns = kDecodeTileColumns;     // 64
constexpr int kTileStride = kDecodeTileColumns + 4;  // floats between two rows of a tile

/// Everything a decode-matmul kernel reads, by value (one struct, not 18 arguments):
/// Element is the type of x, W and bias (float or __nv_bfloat16), Output that of out.
template <typename Element, typename Output>
struct DecodeMatmulArguments {
  const Element* x;                 ///< [B, K]
  const Element* weight;            ///< packed (the kernel's layout)
  const Element* bias;              ///< [N] or null
  Output* out;                      ///< [B, N] or null (LM head without logits)
  float* candidate_values;          ///< [B, T] or null
  std::int32_t* candidate_indices;  ///< [B, T] or null
  float* partials;                  ///< [S][T][B][64] when S > 1
  unsigned int* tile_counters;      ///< [T] when S > 1, zero between launches
  int B;
  int K;
  int N;
  int padded_rows;  ///< K padded as the layout pads it (32 rows for fp32, 8 for bf16)
  int column_tiles;
  int chunks;
  int splits;
  int chunks_per_split;
  DecodeEpilogue epilogue;
  bool out_pairs;       ///< N even and out aligned to two outputs: paired stores
  bool programmatic;    ///< launched as a programmatic dependent (DecodeLaunch::kProgrammatic,
                        ///< on a device that runs them)
  bool cluster_splits;  ///< S > 1 and the S blocks of a column tile are one thread-block
                        ///< cluster (rank = split): the partials are summed from the
                        ///< blocks' shared memory, not through the workspace
};

// ---------------------------------------------------------------- host side

/// The kernels' limit on B: all B rows of x for a chunk sit in shared memory (or in the
/// mma fragments) beside the weight, in row tiles of at most kDecodeMaxRows.
inline void require_decode_rows(const char* launcher, int B) {
  launch_checks::require_at_most(launcher, "B", B, kDecodeMaxRows,
                                 "the decode matmuls hold all rows of x on chip (larger batches: "
                                 "slices of 64 rows, DecodeStepContext)");
}

/// The plan of a product cut into chunks of `chunk_rows` inputs of K, row tile
/// `row_tile`, the splits that take the fewest waves x chunks per block
/// (choose_decode_splits, for `resident_blocks` blocks of the kernel a multiprocessor
/// holds). Throws std::invalid_argument, naming `caller`, on B outside [1, 64], K or N
/// <= 0, or multiprocessors or resident_blocks <= 0.
inline DecodeMatmulPlan plan_decode_chunks(const char* caller, int B, int K, int N,
                                           int multiprocessors, int resident_blocks, int row_tile,
                                           int chunk_rows) {
  launch_checks::require_positive(caller, {{"B", B}, {"K", K}, {"N", N}});
  require_decode_rows(caller, B);
  DecodeMatmulPlan plan;
  plan.row_tile = row_tile;
  plan.column_tiles = (N + kTileColumns - 1) / kTileColumns;
  plan.chunks = (K + chunk_rows - 1) / chunk_rows;
  const DecodeSplits chosen =
      choose_decode_splits(plan.chunks, plan.column_tiles, multiprocessors, resident_blocks);
  plan.splits = chosen.splits;
  plan.chunks_per_split = chosen.chunks_per_split;
  plan.partial_floats =
      plan.splits > 1 ? static_cast<std::size_t>(plan.splits) * plan.column_tiles * B * kTileColumns
                      : 0;
  return plan;
}

/// The checks of launch_decode_matmul and its bf16 twin: pointers, the bias against the
/// epilogue, the shape.
inline void check_product_arguments(const char* launcher, const void* x, const void* weight,
                                    const void* bias, const void* out, int B, int K, int N,
                                    DecodeEpilogue epilogue) {
  launch_checks::require_not_null(launcher, {{"x", x}, {"packed_weight", weight}, {"out", out}});
  if (epilogue == DecodeEpilogue::kNone) {
    launch_checks::require(bias == nullptr, launcher,
                           "bias must be null with DecodeEpilogue::kNone (use kBias to add it)");
  } else {
    launch_checks::require_not_null(launcher, "bias", bias);
  }
  launch_checks::require_positive(launcher, {{"B", B}, {"K", K}, {"N", N}});
  require_decode_rows(launcher, B);
}

/// The checks of launch_decode_lm_head and its bf16 twin.
inline void check_lm_head_arguments(const char* launcher, const void* x, const void* packed_wte,
                                    const void* logits, const void* candidate_values,
                                    const void* candidate_indices, int B, int C, int V) {
  launch_checks::require_not_null(launcher, {{"x", x}, {"packed_wte", packed_wte}});
  launch_checks::require((candidate_values == nullptr) == (candidate_indices == nullptr), launcher,
                         "candidate_values and candidate_indices must both be given or both null");
  launch_checks::require(logits != nullptr || candidate_values != nullptr, launcher,
                         "nothing to write: give logits, candidates or both");
  launch_checks::require_positive(launcher, {{"B", B}, {"C", C}, {"V", V}});
  require_decode_rows(launcher, B);
}

/// The arguments of one product under `plan` whose split sums go through `partials` and
/// `tile_counters` (both may be null when plan.splits == 1), as a kernel block reads them;
/// no check, no programmatic launch, no cluster (launch_product_kernel decides those).
template <typename Element, typename Output>
DecodeMatmulArguments<Element, Output> arguments_for_plan(
    const Element* x, const Element* weight, const Element* bias, Output* out,
    float* candidate_values, std::int32_t* candidate_indices, int B, int K, int N, int padded_rows,
    DecodeEpilogue epilogue, const DecodeMatmulPlan& plan, float* partials,
    unsigned int* tile_counters) {
  DecodeMatmulArguments<Element, Output> arguments{};
  arguments.x = x;
  arguments.weight = weight;
  arguments.bias = bias;
  arguments.out = out;
  arguments.candidate_values = candidate_values;
  arguments.candidate_indices = candidate_indices;
  arguments.partials = partials;
  arguments.tile_counters = tile_counters;
  arguments.B = B;
  arguments.K = K;
  arguments.N = N;
  arguments.padded_rows = padded_rows;
  arguments.column_tiles = plan.column_tiles;
  arguments.chunks = plan.chunks;
  arguments.splits = plan.splits;
  arguments.chunks_per_split = plan.chunks_per_split;
  arguments.epilogue = epilogue;
  arguments.out_pairs = out != nullptr && N % 2 == 0 &&
                        reinterpret_cast<std::uintptr_t>(out) % (2 * sizeof(Output)) == 0;
  return arguments;
}

/// The arguments of one product under `plan`, after the checks every product shares
/// (a 16-byte aligned weight, the grid's column limit, a workspace large enough).
template <typename Element, typename Output>
DecodeMatmulArguments<Element, Output> product_arguments(
    const char* launcher, const Element* x, const Element* weight, const Element* bias, Output* out,
    float* candidate_values, std::int32_t* candidate_indices, int B, int K, int N, int padded_rows,
    DecodeEpilogue epilogue, const DecodeMatmulPlan& plan, DecodeMatmulWorkspace& workspace,
    DecodeLaunch launch) {
  constexpr int kMaxGridY = 65535;  // column tiles are blockIdx.y
  launch_checks::require(launch_checks::is_16_byte_aligned(weight), launcher,
                         "the packed weight must be 16-byte aligned");
  launch_checks::require(plan.column_tiles <= kMaxGridY, launcher,
                         "N must be at most 65535 * 64 (one block row per column tile)");
  if (plan.splits > 1) {
    launch_checks::require(plan.partial_floats <= workspace.partial_floats() &&
                               plan.column_tiles <= workspace.tile_counter_count(),
                           launcher, "the workspace is too small for this product");
  }
  DecodeMatmulArguments<Element, Output> arguments = arguments_for_plan(
      x, weight, bias, out, candidate_values, candidate_indices, B, K, N, padded_rows, epilogue,
      plan, workspace.partials(), workspace.tile_counters());
  arguments.programmatic =
      launch == DecodeLaunch::kProgrammatic && workspace.programmatic_launches();
  return arguments;
}

/// The most blocks one thread-block cluster holds where the device allows more than the
/// portable 8 (compute capability 9.0: 16, cudaFuncAttributeNonPortableClusterSizeAllowed).
constexpr int kMaxClusterBlocks = 16;

/// Lets `kernel` launch in clusters of up to kMaxClusterBlocks blocks; false where the
/// device refuses (the error is cleared: it is an answer, not a failure).
template <typename Arguments>
bool allow_large_clusters(void (*kernel)(Arguments)) {
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
      cudaSuccess)
    return true;
  (void)cudaGetLastError();
  return false;
}

/// allow_large_clusters for every bf16 kernel (decode_matmul_bf16.cu); the workspace's
/// constructor calls it.
bool allow_large_clusters_bf16();

/// Whether a grid of `blocks` blocks leaves enough of one wave of `slots` resident blocks
/// free to be placed in clusters: a cluster's blocks must all sit in one GPC at once, and a
/// grid that fills nearly every resident slot leaves clusters to a second wave. At most
/// 85% of the slots: on the H200, c_fc's 240 blocks of 264 slots ran slower in clusters
/// and c_attn's 216 faster (docs/tuning_log.md).
constexpr bool grid_leaves_room_for_clusters(long long blocks, long long slots) {
  return blocks * 100 <= 85 * slots;
}

/// grid_leaves_room_for_clusters for `kernel`, with the slots its occupancy gives.
template <typename Arguments>
bool clusters_fit_one_wave(void (*kernel)(Arguments), long long blocks, std::size_t shared_bytes,
                           DecodeMatmulWorkspace& workspace) {
  const long long slots = static_cast<long long>(workspace.resident_blocks(
                              reinterpret_cast<const void*>(kernel), shared_bytes)) *
                          workspace.multiprocessors();
  return grid_leaves_room_for_clusters(blocks, slots);
}

/// Launches `kernel` on `grid` x kThreads threads with `shared_bytes` of dynamic shared
/// memory; when arguments.programmatic and the kernel's code holds the wait
/// (launch_for_kernel) it carries the programmatic stream serialization attribute
/// (decode_matmul.cuh); and where its 1 < S <= workspace.cluster_splits() splits (grid.x)
/// fit one wave (clusters_fit_one_wave), the kernel holds the cluster code and the device
/// can place such a cluster (sum_splits_in_clusters) it launches in clusters of the S
/// splits of a column tile (arguments.cluster_splits), otherwise they sum through the
/// workspace.
template <typename Arguments>
void launch_product_kernel(void (*kernel)(Arguments), dim3 grid, std::size_t shared_bytes,
                           Arguments arguments, DecodeMatmulWorkspace& workspace,
                           cudaStream_t stream) {
  const void* kernel_address = reinterpret_cast<const void*>(kernel);
  const KernelBuild build = workspace.build_of(kernel_address);
  arguments.programmatic = launch_for_kernel(arguments.programmatic ? DecodeLaunch::kProgrammatic
                                                                    : DecodeLaunch::kAfterPrevious,
                                             build) == DecodeLaunch::kProgrammatic;
  const bool splits_fit_a_cluster =
      arguments.splits > 1 && arguments.splits <= workspace.cluster_splits();
  arguments.cluster_splits =
      splits_fit_a_cluster &&
      sum_splits_in_clusters(
          arguments.splits, workspace.cluster_splits(), build,
          clusters_fit_one_wave(kernel, static_cast<long long>(grid.x) * grid.y, shared_bytes,
                                workspace),
          workspace.active_clusters(kernel_address, shared_bytes, arguments.splits));
  cudaLaunchAttribute attributes[2]{};
  unsigned int count = 0;
  if (arguments.programmatic) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  if (arguments.cluster_splits) {
    workspace.count_cluster_launch();
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = grid.x;
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, arguments));
  CUDA_CHECK_LAUNCH(stream);
}

// ---------------------------------------------------------------- the kernels' tail

__device__ __forceinline__ float widen(float value) { return value; }
__device__ __forceinline__ float widen(__nv_bfloat16 value) { return __bfloat162float(value); }

/// Two neighbouring outputs, columns n and n + 1, as one 8-byte (float) or 4-byte (bf16)
/// store; `at` must be aligned to the pair.
__device__ __forceinline__ void store_pair(float* at, float first, float second) {
  *reinterpret_cast<float2*>(at) = make_float2(first, second);
}
__device__ __forceinline__ void store_pair(__nv_bfloat16* at, float first, float second) {
  *reinterpret_cast<__nv_bfloat162*>(at) = __floats2bfloat162_rn(first, second);
}
__device__ __forceinline__ void store_one(float* at, float value) { *at = value; }
__device__ __forceinline__ void store_one(__nv_bfloat16* at, float value) {
  *at = __float2bfloat16_rn(value);
}

/// Adds the k-groups' tiles (tile g at shared + g * kRows * kTileStride) in group order
/// into the first; rows below B only.
template <int kRows>
__device__ __forceinline__ void sum_k_groups(float* shared, int groups, int B) {
  constexpr int kQuads = kTileColumns / 4;
  for (int e = threadIdx.x; e < B * kQuads; e += kThreads) {
    const int offset = (e / kQuads) * kTileStride + 4 * (e % kQuads);
    float4 sum = *reinterpret_cast<const float4*>(shared + offset);
    for (int g = 1; g < groups; ++g) {
      const float4 more =
          *reinterpret_cast<const float4*>(shared + g * kRows * kTileStride + offset);
      sum.x += more.x;
      sum.y += more.y;
      sum.z += more.z;
      sum.w += more.w;
    }
    *reinterpret_cast<float4*>(shared + offset) = sum;
  }
  __syncthreads();
}

/// The quads (four neighbouring columns, one float4) of a tile row.
constexpr int kQuadsPerRow = kTileColumns / 4;

/// For every quad e in [first, end) of a tile (e = 16 row + quad): the S partial tiles'
/// quads, added in split order, 0 to S - 1, and stored into the tile `tile_values`
/// ([rows][kTileStride]). The one order both ways of gathering the splits use, so both
/// give the same bits. split_tile(s) points at split s's partial tile, whose rows lie
/// `row_stride` floats apart; load(at) reads the float4 at `at`. Thread t takes quads
/// first + t, + kThreads, ... (at most kRows * 16 / kThreads of them), forms their
/// offsets once and loads a group of splits of all of them before it adds any: four
/// splits a group with one quad a thread, two with more (fewer loads held in registers at
/// once; each kernel's count is in docs/kernels.md). A group's loads are predicated, not
/// branched around, so they are in flight together, and each costs one address add.
template <int kRows, typename SplitTile, typename Load>
__device__ __forceinline__ void sum_splits_in_order(float* tile_values, int first, int end,
                                                    int splits, int row_stride,
                                                    const SplitTile& split_tile, const Load& load) {
  constexpr int kQuadsPerThread = (kRows * kQuadsPerRow + kThreads - 1) / kThreads;
  constexpr int kSplitsAtOnce = kQuadsPerThread == 1 ? 4 : 2;
  int quads[kQuadsPerThread];
  int offsets[kQuadsPerThread];  // in a partial tile
  bool inside[kQuadsPerThread];
  float4 sums[kQuadsPerThread];
  const float* first_tile = split_tile(0);
#pragma unroll
  for (int j = 0; j < kQuadsPerThread; ++j) {
    quads[j] = first + static_cast<int>(threadIdx.x) + j * kThreads;
    inside[j] = quads[j] < end;
    offsets[j] = (quads[j] / kQuadsPerRow) * row_stride + 4 * (quads[j] % kQuadsPerRow);
    sums[j] = inside[j] ? load(first_tile + offsets[j]) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  for (int group = 1; group < splits; group += kSplitsAtOnce) {
    const float* tiles[kSplitsAtOnce];
#pragma unroll
    for (int k = 0; k < kSplitsAtOnce; ++k) tiles[k] = split_tile(min(group + k, splits - 1));
    float4 more[kQuadsPerThread][kSplitsAtOnce];
#pragma unroll
    for (int j = 0; j < kQuadsPerThread; ++j) {
#pragma unroll
      for (int k = 0; k < kSplitsAtOnce; ++k)
        more[j][k] = inside[j] && group + k < splits ? load(tiles[k] + offsets[j])
                                                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < kQuadsPerThread; ++j) {
#pragma unroll
      for (int k = 0; k < kSplitsAtOnce; ++k) {
        if (group + k >= splits) break;
        sums[j].x += more[j][k].x;
        sums[j].y += more[j][k].y;
        sums[j].z += more[j][k].z;
        sums[j].w += more[j][k].w;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kQuadsPerThread; ++j) {
    if (inside[j])
      *reinterpret_cast<float4*>(tile_values + (quads[j] / kQuadsPerRow) * kTileStride +
                                 4 * (quads[j] % kQuadsPerRow)) = sums[j];
  }
}

/// Two neighbouring outputs of the residual stream, columns n and n + 1, widened to float;
/// `at` must be aligned to the pair.
__device__ __forceinline__ float2 load_pair(const float* at) {
  return *reinterpret_cast<const float2*>(at);
}
__device__ __forceinline__ float2 load_pair(const __nv_bfloat16* at) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(at));
}

/// The bias of the two columns this thread stores in every row of tile `tile` (lane l:
/// columns 64 tile + 2 l and + 1; zeros past N and with kNone). The bias is a weight, which
/// no kernel of the step writes: every kernel loads it first thing, before
/// wait_for_previous_kernel, so that the epilogue at the end of the block's critical path
/// does not wait one more round trip to memory for it.
template <typename Arguments>
__device__ __forceinline__ float2 load_tile_bias(const Arguments& a, int tile) {
  const int first_column = tile * kTileColumns + 2 * (static_cast<int>(threadIdx.x) % kWarpSize);
  float bias[2] = {0.0f, 0.0f};
  if (a.epilogue != DecodeEpilogue::kNone) {
#pragma unroll
    for (int j = 0; j < 2; ++j)
      if (first_column + j < a.N) bias[j] = widen(a.bias[first_column + j]);
  }
  return make_float2(bias[0], bias[1]);
}

/// The epilogue on rows [first_row, end_row) of the finished tile [B][kTileStride]
/// (columns 64 tile ..): warp w takes rows first_row + w, + 8, ...; lane l columns 2 l and
/// 2 l + 1, whose bias (load_tile_bias) is `tile_bias`. Writes out (rounded once to its
/// type) and, for the LM head, each row's best (value, index) of the tile, taken on the
/// stored values. A warp loads the residual of all its rows (at most kRows / 8) before it
/// stores any: the loads are in flight together, not one round trip a row.
template <int kRows, typename Arguments>
__device__ __forceinline__ void store_rows(const Arguments& a, int tile, float2 tile_bias,
                                           const float* tile_values, int first_row, int end_row) {
  constexpr int kRowsPerWarp = (kRows + kWarps - 1) / kWarps;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int first_column = tile * kTileColumns + 2 * lane;
  const bool pair_inside = first_column + 1 < a.N;
  const float bias[2] = {tile_bias.x, tile_bias.y};  // the same two columns in every row
  float values[kRowsPerWarp][2];
  float residual[kRowsPerWarp][2];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int b = first_row + warp + kWarps * i;
    if (b >= end_row) break;
    const float2 pair = *reinterpret_cast<const float2*>(tile_values + b * kTileStride + 2 * lane);
    values[i][0] = pair.x;
    values[i][1] = pair.y;
    residual[i][0] = 0.0f;
    residual[i][1] = 0.0f;
    if (a.epilogue == DecodeEpilogue::kBiasResidual) {
      const auto* out_row = a.out + static_cast<std::size_t>(b) * a.N;
      if (a.out_pairs && pair_inside) {
        const float2 stream = load_pair(out_row + first_column);
        residual[i][0] = stream.x;
        residual[i][1] = stream.y;
      } else {
        for (int j = 0; j < 2; ++j)
          if (first_column + j < a.N) residual[i][j] = widen(out_row[first_column + j]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int b = first_row + warp + kWarps * i;
    if (b >= end_row) break;
    auto* out_row = a.out != nullptr ? a.out + static_cast<std::size_t>(b) * a.N : nullptr;
    Candidate best = no_candidate();
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int n = first_column + j;
      if (n >= a.N) continue;
      float y = values[i][j];
      if (a.epilogue != DecodeEpilogue::kNone) y += bias[j];
      if (a.epilogue == DecodeEpilogue::kBiasGelu) y = gelu(y);
      if (a.epilogue == DecodeEpilogue::kBiasResidual) y += residual[i][j];
      values[i][j] = y;
      const Candidate mine{y, n};
      if (beats(mine, best)) best = mine;
    }
    if (out_row != nullptr) {
      if (a.out_pairs && pair_inside) {
        store_pair(out_row + first_column, values[i][0], values[i][1]);
      } else {
        for (int j = 0; j < 2; ++j)
          if (first_column + j < a.N) store_one(out_row + first_column + j, values[i][j]);
      }
    }
    if (a.candidate_values != nullptr) {
      best = warp_argmax(best);
      if (lane == 0) {
        a.candidate_values[static_cast<std::size_t>(b) * a.column_tiles + tile] = best.value;
        a.candidate_indices[static_cast<std::size_t>(b) * a.column_tiles + tile] = best.index;
      }
    }
  }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/// With the S splits of the tile as one thread-block cluster (block rank s = split s):
/// each partial stays in its block's shared memory, and every rank finishes a slice of
/// the tile's rows, reading that slice of all S partials there (distributed shared
/// memory) and adding them in split order, as the workspace path does: the same bits,
/// without the partials' round trip through L2, the fences and the counter's atomic, and
/// with the sums and the epilogue spread over the S blocks instead of left to one.
template <int kRows, typename Arguments>
__device__ __forceinline__ void finish_in_cluster(const Arguments& a, int tile, int split,
                                                  float2 tile_bias, float* tile_values) {
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int rows_per_rank = (a.B + a.splits - 1) / a.splits;
  const int first_row = min(a.B, split * rows_per_rank);
  const int end_row = min(a.B, first_row + rows_per_rank);
  cluster.sync();  // every split's partial is in its block's shared memory
  // Rank r writes only its own rows of its own tile, which no other rank reads.
  sum_splits_in_order<kRows>(
      tile_values, first_row * kQuadsPerRow, end_row * kQuadsPerRow, a.splits, kTileStride,
      [&](int s) {
        return static_cast<const float*>(
            cluster.map_shared_rank(tile_values, static_cast<unsigned int>(s)));
      },
      [](const float* at) { return *reinterpret_cast<const float4*>(at); });
  // This block has read what it needs of the others' shared memory. No block may exit
  // while another still reads its partial: arrive now, wait before the end. The arrival
  // needs no release fence (this block wrote nothing the others read since the first
  // barrier): relaxed. The sums stay in this block's shared memory: a block barrier.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  __syncthreads();
  store_rows<kRows>(a, tile, tile_bias, tile_values, first_row, end_row);
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}
#endif

/// With S > 1 and no cluster: writes this block's tile to the workspace; the block that
/// completes the tile's set sums the S partials in split order into `tile_values` and
/// returns true, the others return false (and have nothing left to do).
template <int kRows, typename Arguments>
__device__ __forceinline__ bool gather_through_workspace(const Arguments& a, int tile, int split,
                                                         float* tile_values) {
  __shared__ bool last_to_arrive;
  const std::size_t tile_floats = static_cast<std::size_t>(a.B) * kTileColumns;
  const auto partial = [&](int s) {
    return a.partials + (static_cast<std::size_t>(s) * a.column_tiles + tile) * tile_floats;
  };
  float* mine = partial(split);
  for (int e = threadIdx.x; e < a.B * kQuadsPerRow; e += kThreads) {
    const int row = e / kQuadsPerRow;
    const int column = 4 * (e % kQuadsPerRow);
    __stcg(reinterpret_cast<float4*>(mine + row * kTileColumns + column),
           *reinterpret_cast<const float4*>(tile_values + row * kTileStride + column));
  }
  // The release pattern of the PTX memory model, once for the block: the barrier orders
  // every thread's partial before thread 0's fence, and the fence orders them before the
  // count (one fence.acq_rel, not a sequentially consistent fence in each of 256 threads).
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
    const unsigned int arrived = atomicAdd(a.tile_counters + tile, 1u);
    last_to_arrive = arrived == static_cast<unsigned int>(a.splits - 1);
    // The acquire: the count saw every other block's release, so after this fence (and
    // the barrier below, for the other threads) their partials are visible here.
    if (last_to_arrive) asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
  }
  __syncthreads();
  if (!last_to_arrive) return false;
  sum_splits_in_order<kRows>(
      tile_values, 0, a.B * kQuadsPerRow, a.splits, kTileColumns, partial,
      [](const float* at) { return __ldcg(reinterpret_cast<const float4*>(at)); });
  if (threadIdx.x == 0) a.tile_counters[tile] = 0;  // ready for the next launch
  __syncthreads();
  return true;
}

/// A tensor-core warp's sums into its k-group's tile (shared + k_group * kRows * kTileStride):
/// kMTiles m16 tiles by two n8 tiles, in the mma.sync accumulator layout (lane 4 g + t holds
/// rows g and g + 8, columns 2 t and 2 t + 1 of each n8 tile; the warp's 16 columns start at
/// 16 column_group).
template <int kRows, int kMTiles>
__device__ __forceinline__ void store_mma_sums(float* shared, int k_group, int column_group, int g,
                                               int t, const float (&sums)[kMTiles][2][4]) {
  float* group_tile = shared + k_group * kRows * kTileStride;
#pragma unroll
  for (int m16 = 0; m16 < kMTiles; ++m16) {
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8) {
      float* d = group_tile + (16 * m16 + g) * kTileStride + 16 * column_group + 8 * n8 + 2 * t;
      *reinterpret_cast<float2*>(d) = make_float2(sums[m16][n8][0], sums[m16][n8][1]);
      *reinterpret_cast<float2*>(d + 8 * kTileStride) =
          make_float2(sums[m16][n8][2], sums[m16][n8][3]);
    }
  }
}

/// The end every decode-matmul kernel shares, once each k-group's tile is in shared memory:
/// the groups summed, the splits gathered (in the cluster, or through the workspace by the
/// block that arrives last), and the finished tile stored with this thread's `tile_bias`
/// (load_tile_bias, loaded before the kernel's wait).
template <int kRows, typename Arguments>
__device__ __forceinline__ void finish_tile(const Arguments& a, int tile, int split,
                                            float2 tile_bias, float* shared, int k_groups) {
  __syncthreads();
  sum_k_groups<kRows>(shared, k_groups, a.B);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (a.splits > 1 && a.cluster_splits) {
    finish_in_cluster<kRows>(a, tile, split, tile_bias, shared);
    return;
  }
#endif
  if (a.splits == 1 || gather_through_workspace<kRows>(a, tile, split, shared))
    store_rows<kRows>(a, tile, tile_bias, shared, 0, a.B);
}

/// The chunks of split `split`: [first, first + count).
struct ChunkRange {
  int first;
  int count;
};

template <typename Arguments>
__device__ __forceinline__ ChunkRange chunk_range(const Arguments& a, int split) {
  const int first = split * a.chunks_per_split;
  return ChunkRange{first, min(a.chunks_per_split, a.chunks - first)};
}

}  // namespace ladder::decode_common
