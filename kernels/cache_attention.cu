// kernels/cache_attention.cu - static-cache attention and fused (append +
// flash-decoding) attention, both with the position read from device memory. (The
// plain append at the cursor, launch_append_kv_at_cursor, is the prefill's store
// kernel with T = 1: attention.cu.)
//
// Notation and layouts: see cache_attention.cuh. The warp-level online softmax both
// attention kernels use is in online_softmax.cuh: a warp folds 32 positions at a time
// into its running (max, sum, weighted values); a block merges its warps through shared
// memory; the fused kernel additionally merges the blocks of one (b, h) through the
// workspace.
#include "kernels/cache_attention.cuh"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <type_traits>

#include "common/cuda_check.hpp"
#include "kernels/attention.cuh"
#include "kernels/attention_dispatch.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"
#include "kernels/online_softmax.cuh"
#include "kernels/programmatic_launch.cuh"

namespace ladder {

namespace {

constexpr int kStaticWarps = 8;  // the warps of one (b, h) split the capacity
constexpr int kStaticThreads = kStaticWarps * kWarpSize;
constexpr int kFusedWarps = 4;  // the warps of one block split its share of positions
constexpr int kFusedThreads = kFusedWarps * kWarpSize;
// Flash-decoding split: a block's four warps take one chunk of 32 positions each, so a
// block covers 128 positions in one pass and a (b, h) gets one block per 128 positions
// of the cache (at most kMaxSplits). Every warp's work is then one chunk, whatever B is:
// at decode sizes each chunk is a couple of memory round trips, and a warp that walked
// several chunks one after the other would add round trips, not bandwidth.
constexpr int kMaxSplits = 32;  // the final merge reads one split per lane of a warp
static_assert(kMaxSplits <= kWarpSize, "one warp merges the splits' maxima and sums");
constexpr int kPositionsPerWarpChunk = kWarpSize;
constexpr int kPositionsPerBlock = kFusedWarps * kPositionsPerWarpChunk;

// ---------------------------------------------------------------- static cache

// Math:   p = cursor->position; score_s = q_b . k_s / sqrt(D) + (s <= p ? 0 : -inf) for
//         every s < capacity, k_s = keys[b, h, s, :];
//         out[b, h*D + d] = sum_s softmax_s(score) values[b, h, s, d].
// Shapes: q [B, >= C] (row stride q_row_stride), keys, values [B, H, capacity, D],
//         out [B, C]; D % kWidth == 0, D <= 32 kDims.
// Grid:   one block per (b, h): block x serves b = x / H, h = x % H. Warp w takes the
//         chunks of 32 positions starting at 32 w, 32 (w + 8), ... up to capacity - all
//         of them, masked or not; the eight warp states are merged through shared
//         memory in warp order. (Two resident blocks per SM let ptxas use up to 128
//         registers: 112 for GPT-2's D = 64 on sm_90; docs/kernels.md lists each
//         kernel's registers.)
// Promises (kWidth = 4): LDG.E.128
template <int kWidth, int kDims>
__global__ void __launch_bounds__(kStaticThreads, 2)
    static_cache_attention_kernel(const float* q, int q_row_stride, const float* keys,
                                  const float* values, const DecodePosition* cursor, int capacity,
                                  float* out, int H, int C) {
  __shared__ __align__(16) float query[kMaxHeadDim];
  __shared__ WarpStates<kStaticWarps> warp_states;
  const int b = blockIdx.x / H;
  const int h = blockIdx.x % H;
  const int D = C / H;
  float* out_row = out + static_cast<std::size_t>(b) * C + h * D;

  const int position = cursor->position;
  if (position < 0 || position >= capacity) {  // the same for the whole block
    for (int d = threadIdx.x; d < D; d += blockDim.x) out_row[d] = NAN;
    return;
  }
  const std::size_t head_offset = (static_cast<std::size_t>(b) * H + h) * capacity * D;
  attend_in_block<kStaticWarps, kWidth, kDims>(
      q + static_cast<std::size_t>(b) * q_row_stride + h * D, keys + head_offset,
      values + head_offset, capacity, /*first_masked=*/position + 1, D, out_row, query,
      warp_states);
}

// ---------------------------------------------------------------- fused (flash-decoding)

/// Where the fused kernel reads row b's position, and what a row whose position lies
/// outside [0, capacity) outputs: one position for every row, from the device cursor
/// (a batch that moves in step; out of range gives NaN), or one per row (serving rows at
/// their own lengths; a negative position marks an idle row, whose output is 0).
struct CursorPosition {
  const DecodePosition* cursor;
  __device__ int of(int) const { return cursor->position; }
  __device__ static float out_of_range_output() { return NAN; }
};
struct RowPositions {
  const int* positions;
  __device__ int of(int b) const { return positions[b]; }
  __device__ static float out_of_range_output() { return 0.0f; }
};

/// The workspace of the fused kernel, carved from the caller's buffer: per (b, h),
/// an arrival counter and the partial state of each split.
struct SplitWorkspace {
  int* arrivals;          ///< [B * H] blocks of this launch that have finished; 0 between launches
  float* partial_max;     ///< [B * H, splits]
  float* partial_sum;     ///< [B * H, splits]
  float* partial_values;  ///< [B * H, splits, D]
};

// Math:   p = row_position.of(b) (cursor->position, or positions[b]), L = p + 1;
//         keys[b, h, p] = k_b, values[b, h, p] = v_b;
//         out[b, h*D + d] = sum_{s < L} softmax_s(q_b . k_s / sqrt(D)) v_s[d], where q_b,
//         k_b, v_b are the head-h slices of qkv row b and k_p, v_p are k_b, v_b.
// Shapes: qkv [B, 3C], keys, values [B, H, capacity, D], out [B, C]; D % kWidth == 0,
//         D <= 32 kDims.
// Grid:   blockIdx.x = b * H + h, blockIdx.y = split < splits. Positions 0 .. L - 1 are
//         cut into shares of `share` = ceil(L / splits) rounded up to a multiple of 128
//         (exactly 128 while capacity <= 128 * kMaxSplits); block `split` takes
//         [split * share, min((split + 1) * share, L)), and the ceil(L / share) blocks
//         that have a share are the active ones (the others return at once). Inside a
//         block, warp w folds the chunks of 32 positions starting at share start + 32 w,
//         + 32 (w + 4), ... (one chunk each unless the share is longer); the warp states are
//         merged through shared memory. With one active block that is the output;
//         otherwise each block writes its state to the workspace, and the last of the
//         active blocks to arrive (an atomic counter per (b, h)) merges them: warp 0
//         weighs split s (lane s) by exp(m_s - M), then thread d sums dimension d over
//         splits 0, 1, ... in that order; finally it resets the counter to 0.
//         (Five resident blocks per SM bound the kernel to 96 registers: enough to keep
//         a whole key row in flight per lane without spilling for D <= 96 on every
//         architecture built (D = 128 spills 12 bytes on sm_90); left to itself ptxas
//         spilled some instantiations on sm_80.)
// The body of both fused kernels below, which differ only in where a row's position
// comes from (and keep their names, so profiles of either stay comparable over time).
template <int kWidth, int kDims, typename PositionSource>
__device__ __forceinline__ void fused_decode_attention(const float* qkv, float* keys, float* values,
                                                       PositionSource row_position, int capacity,
                                                       float* out, SplitWorkspace workspace,
                                                       int splits, int H, int C,
                                                       LaunchDependents dependents) {
  // c_proj's decode matmul may start streaming its weight now (device_primitives.cuh):
  // its blocks take only the slots this grid leaves (they are scheduled once all of its
  // blocks have started or exited) and load their weight while this kernel reads the
  // cache.
  launch_dependents_at_start(dependents);
  // Under a programmatic launch (DecodeLaunch) this block may start before c_attn has
  // finished writing qkv: nothing is read before the wait (at once for a plain launch).
  wait_for_previous_kernel();
  __shared__ __align__(16) float query[kMaxHeadDim];
  __shared__ WarpStates<kFusedWarps> warp_states;
  __shared__ bool merges_splits;
  __shared__ float split_weights[kWarpSize];  // one per lane of the merging warp
  __shared__ float merged_sum;
  const int head = blockIdx.x;
  const int split = blockIdx.y;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int b = head / H;
  const int h = head % H;
  const int D = C / H;
  float* out_row = out + static_cast<std::size_t>(b) * C + h * D;

  const int position = row_position.of(b);
  if (position < 0 || position >= capacity) {  // the same for every block of row b
    if (split == 0)
      for (int d = threadIdx.x; d < D; d += blockDim.x)
        out_row[d] = PositionSource::out_of_range_output();
    return;
  }
  const int length = position + 1;
  const int share = (length + splits - 1) / splits;
  const int share_rounded =
      (share + kPositionsPerBlock - 1) / kPositionsPerBlock * kPositionsPerBlock;
  const int active_splits = (length + share_rounded - 1) / share_rounded;
  const int first = split * share_rounded;
  if (first >= length) return;  // this block's share lies past the valid length
  const int end = min(first + share_rounded, length);

  const float* qkv_row = qkv + static_cast<std::size_t>(b) * 3 * C;
  const float* fresh_key = qkv_row + C + h * D;
  const float* fresh_value = qkv_row + 2 * C + h * D;
  const std::size_t head_offset = static_cast<std::size_t>(head) * capacity * D;
  float* head_keys = keys + head_offset;
  float* head_values = values + head_offset;

  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    query[d] = qkv_row[h * D + d] * scale;
    if (end == length) {  // the block holding position p appends this step's k, v
      head_keys[static_cast<std::size_t>(position) * D + d] = fresh_key[d];
      head_values[static_cast<std::size_t>(position) * D + d] = fresh_value[d];
    }
  }
  __syncthreads();

  // Position p is read from qkv, never from the cache entry written just above.
  const auto rows_of = [=](int s) {
    const std::size_t row = static_cast<std::size_t>(s) * D;
    const bool fresh = s == position;
    return KeyValueRows{fresh ? fresh_key : head_keys + row,
                        fresh ? fresh_value : head_values + row};
  };
  OnlineSoftmax<kDims> state;
  for (int chunk = first + warp * kPositionsPerWarpChunk; chunk < end;
       chunk += kFusedWarps * kPositionsPerWarpChunk) {
    fold_positions<kWidth>(query, rows_of, chunk, min(kPositionsPerWarpChunk, end - chunk),
                           /*first_masked=*/INT_MAX, D, lane, state);
  }

  warp_states.store(warp, lane, D, state);
  __syncthreads();
  const float block_max = warp_states.block_max();  // finite: warp 0 saw position `first`
  if (active_splits == 1) {
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      float sum = 0.0f;
      float value = 0.0f;
      warp_states.merge(block_max, d, sum, value);
      out_row[d] = value / sum;
    }
    return;
  }

  // This block's state, relative to its own maximum, goes to the workspace.
  const std::size_t slot = static_cast<std::size_t>(head) * splits + split;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.0f;
    float value = 0.0f;
    warp_states.merge(block_max, d, sum, value);
    workspace.partial_values[slot * D + d] = value;
    if (d == 0) {
      workspace.partial_max[slot] = block_max;
      workspace.partial_sum[slot] = sum;
    }
  }
  // Make the state visible GPU-wide before announcing it; the last block to arrive
  // sees every other block's announcement, hence (after its own fence) their states.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0)
    merges_splits = atomicAdd(&workspace.arrivals[head], 1) == active_splits - 1;
  __syncthreads();
  if (!merges_splits) return;
  __threadfence();

  // The last block merges the splits' states: warp 0 reads one split per lane and
  // computes each split's weight exp(m_s - M) and the merged sum; then every thread
  // merges the weighted values of its dimensions. Reads bypass L1 (__ldcg): the
  // states were written by other SMs during this launch.
  const std::size_t first_slot = static_cast<std::size_t>(head) * splits;
  if (warp == 0) {
    const bool has_split = lane < active_splits;
    const float split_max =
        has_split ? __ldcg(&workspace.partial_max[first_slot + lane]) : -INFINITY;
    const float largest = warp_max(split_max);  // every lane takes part in the shuffles
    const float weight = has_split ? expf(split_max - largest) : 0.0f;
    const float weighted_sum =
        has_split ? __ldcg(&workspace.partial_sum[first_slot + lane]) * weight : 0.0f;
    split_weights[lane] = weight;
    const float sum = warp_sum(weighted_sum);  // a fixed reduction order: deterministic
    if (lane == 0) merged_sum = sum;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float value = 0.0f;
#pragma unroll 8
    for (int s = 0; s < active_splits; ++s)  // split order: the same result every run
      value += __ldcg(&workspace.partial_values[(first_slot + s) * D + d]) * split_weights[s];
    out_row[d] = value / merged_sum;
  }
  if (threadIdx.x == 0) workspace.arrivals[head] = 0;  // ready for the next launch
}

// The batch's kernel: every row at the cursor's position.
// Promises (kWidth = 4): LDG.E.128 PREEXIT ACQBULK
template <int kWidth, int kDims>
__global__ void __launch_bounds__(kFusedThreads, 5)
    fused_decode_attention_kernel(const float* qkv, float* keys, float* values,
                                  CursorPosition cursor, int capacity, float* out,
                                  SplitWorkspace workspace, int splits, int H, int C,
                                  LaunchDependents dependents) {
  fused_decode_attention<kWidth, kDims>(qkv, keys, values, cursor, capacity, out, workspace, splits,
                                        H, C, dependents);
}

// The serving slots' kernel: row b at positions[b], idle (output 0, no write) outside
// [0, capacity).
// Promises (kWidth = 4): LDG.E.128 PREEXIT ACQBULK
template <int kWidth, int kDims>
__global__ void __launch_bounds__(kFusedThreads, 5)
    fused_decode_attention_per_row_kernel(const float* qkv, float* keys, float* values,
                                          RowPositions positions, int capacity, float* out,
                                          SplitWorkspace workspace, int splits, int H, int C,
                                          LaunchDependents dependents) {
  fused_decode_attention<kWidth, kDims>(qkv, keys, values, positions, capacity, out, workspace,
                                        splits, H, C, dependents);
}

// ---------------------------------------------------------------- host side

/// Blocks per (b, h) for this capacity: one per kPositionsPerBlock positions, at most
/// kMaxSplits (longer caches give each block a longer share). The workspace is sized for
/// it; a launch activates only the blocks the current length needs.
int splits_for(int capacity) {
  const int blocks = (capacity + kPositionsPerBlock - 1) / kPositionsPerBlock;
  return std::clamp(blocks, 1, kMaxSplits);
}

/// Byte offsets of the workspace's four arrays, each 256-byte aligned.
struct WorkspaceLayout {
  std::size_t partial_max;
  std::size_t partial_sum;
  std::size_t partial_values;
  std::size_t total;
};

std::size_t round_up_256(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

WorkspaceLayout workspace_layout(int B, int H, int C, int capacity) {
  const std::size_t heads = static_cast<std::size_t>(B) * static_cast<std::size_t>(H);
  const std::size_t states = heads * static_cast<std::size_t>(splits_for(capacity));
  WorkspaceLayout layout{};
  layout.partial_max = round_up_256(heads * sizeof(int));
  layout.partial_sum = layout.partial_max + round_up_256(states * sizeof(float));
  layout.partial_values = layout.partial_sum + round_up_256(states * sizeof(float));
  layout.total = layout.partial_values +
                 round_up_256(states * static_cast<std::size_t>(C / H) * sizeof(float));
  return layout;
}

}  // namespace

void launch_static_cache_attention(const float* q, int q_row_stride, const float* keys,
                                   const float* values, const DecodePosition* cursor, int capacity,
                                   float* out, int B, int H, int C, cudaStream_t stream) {
  constexpr const char* kName = "launch_static_cache_attention";
  launch_checks::require_not_null(
      kName, {{"q", q}, {"keys", keys}, {"values", values}, {"cursor", cursor}, {"out", out}});
  launch_checks::require_positive(kName, "capacity", capacity);
  check_attention_head_size(kName, B, H, C);
  check_query_row_stride(kName, q_row_stride, C);

  const unsigned int blocks = static_cast<unsigned int>(B * H);
  const bool packed = cache_rows_are_packed(C / H, keys, values);
  with_width_and_dims(packed, C / H, [&](auto width, auto dims) {
    static_cache_attention_kernel<decltype(width)::value, decltype(dims)::value>
        <<<blocks, kStaticThreads, 0, stream>>>(q, q_row_stride, keys, values, cursor, capacity,
                                                out, H, C);
  });
  CUDA_CHECK_LAUNCH(stream);
}

std::size_t fused_decode_attention_workspace_bytes(int B, int H, int C, int capacity) {
  constexpr const char* kName = "fused_decode_attention_workspace_bytes";
  launch_checks::require_positive(kName, "capacity", capacity);
  check_attention_heads(kName, B, H, C);
  return workspace_layout(B, H, C, capacity).total;
}

namespace {

/// The fused kernel for either position source: checks, workspace carving, grid.
template <typename PositionSource>
void launch_fused_attention_kernel(const char* name, const float* qkv, float* keys, float* values,
                                   PositionSource row_position, const char* position_name,
                                   const void* position_pointer, int capacity, float* out,
                                   void* workspace, int B, int H, int C, cudaStream_t stream,
                                   LaunchDependents dependents, DecodeLaunch launch) {
  launch_checks::require_not_null(name, {{"qkv", qkv},
                                         {"keys", keys},
                                         {"values", values},
                                         {position_name, position_pointer},
                                         {"out", out},
                                         {"workspace", workspace}});
  launch_checks::require(launch_checks::is_16_byte_aligned(workspace), name,
                         "workspace must be 16-byte aligned");
  launch_checks::require_positive(name, "capacity", capacity);
  check_attention_head_size(name, B, H, C);

  const long long heads = static_cast<long long>(B) * H;
  const int splits = splits_for(capacity);
  const WorkspaceLayout layout = workspace_layout(B, H, C, capacity);
  char* base = static_cast<char*>(workspace);
  const SplitWorkspace split_workspace{reinterpret_cast<int*>(base),
                                       reinterpret_cast<float*>(base + layout.partial_max),
                                       reinterpret_cast<float*>(base + layout.partial_sum),
                                       reinterpret_cast<float*>(base + layout.partial_values)};

  const dim3 grid(static_cast<unsigned int>(heads), static_cast<unsigned int>(splits));
  // Packed reads need every key row, and this step's k row in qkv, 16-byte aligned.
  const bool packed =
      cache_rows_are_packed(C / H, keys, values) && launch_checks::is_16_byte_aligned(qkv);
  with_width_and_dims(packed, C / H, [&](auto width, auto dims) {
    constexpr int kWidth = decltype(width)::value;
    constexpr int kDims = decltype(dims)::value;
    if constexpr (std::is_same_v<PositionSource, CursorPosition>)
      launch_between_products(launch, fused_decode_attention_kernel<kWidth, kDims>, grid,
                              dim3(kFusedThreads), 0, stream, qkv, keys, values, row_position,
                              capacity, out, split_workspace, splits, H, C, dependents);
    else
      launch_between_products(launch, fused_decode_attention_per_row_kernel<kWidth, kDims>, grid,
                              dim3(kFusedThreads), 0, stream, qkv, keys, values, row_position,
                              capacity, out, split_workspace, splits, H, C, dependents);
  });
  CUDA_CHECK_LAUNCH(stream);
}

}  // namespace

void launch_fused_decode_attention(const float* qkv, float* keys, float* values,
                                   const DecodePosition* cursor, int capacity, float* out,
                                   void* workspace, int B, int H, int C, cudaStream_t stream,
                                   LaunchDependents dependents, DecodeLaunch launch) {
  launch_fused_attention_kernel("launch_fused_decode_attention", qkv, keys, values,
                                CursorPosition{cursor}, "cursor", cursor, capacity, out, workspace,
                                B, H, C, stream, dependents, launch);
}

void launch_fused_decode_attention_per_row(const float* qkv, float* keys, float* values,
                                           const std::int32_t* positions, int capacity, float* out,
                                           void* workspace, int B, int H, int C,
                                           cudaStream_t stream) {
  launch_fused_attention_kernel("launch_fused_decode_attention_per_row", qkv, keys, values,
                                RowPositions{positions}, "positions", positions, capacity, out,
                                workspace, B, H, C, stream, LaunchDependents::kAtStart,
                                DecodeLaunch::kAfterPrevious);
}

}  // namespace ladder
