// kernels/persistent_decode.cuh - every decode step of a generation in one kernel launch:
// an interpreter, run by every resident block, of the instruction schedule that
// common/persistent_schedule.hpp builds (and its simulator proves on the CPU).
//
// Each block walks its own list of instructions, step after step. An instruction is one
// block of one of chapter 10's kernels - a LayerNorm row, a (row, head) of attention, a
// (split, column tile) of a bf16 decode matmul, an argmax row - run by the very device
// function that kernel runs (layernorm_row.cuh, cache_attention_bf16_head.cuh,
// decode_matmul_bf16_tile.cuh), so the sums, their order and the rounding are chapter
// 10's and so are the tokens. What replaces the kernel boundary between two ops:
//   * a producer, once its outputs are written, adds 1 to a counter with release
//     semantics (__syncthreads, then one thread: fence.acq_rel.gpu and a relaxed add);
//   * a consumer's first warp spins with relaxed loads, a lane a counter, until every
//     counter it needs has reached its target, each lane loads its counter once more
//     with acquire semantics (ld.acquire.gpu: it reads that count or a later one), and
//     the block meets at __syncthreads: the acquire makes the producers' writes visible
//     to those lanes, the barrier to the rest of the block (release, acquire and the
//     barriers order one another transitively);
//   * a product's weight, which nothing writes, is requested before that wait (the
//     same place where chapter 10's kernels wait for the kernel before them under a
//     programmatic launch), so it streams while the block waits for its inputs.
// Between two steps every block waits for the step's stop instruction, which decides,
// as chapter 08's WHILE loop did, whether another step runs: the loop is on the device
// and the host launches once and waits once per generation.
//
// Every wait is bounded: a counter that does not reach its target within
// `watchdog_ns` of the wait's start stops the kernel - the block records which
// instruction waited on which counter (PersistentFault) and every other block, seeing
// the fault, leaves at its next wait - and the host turns the record into one error.
//
// The grid is every block the device holds at once (the occupancy query), launched
// cooperatively so that the launch fails rather than leaving a block unscheduled (a
// waiting block would then wait for ever for a block that never runs).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/device_model.hpp"  // DeviceLayerOf
#include "common/persistent_schedule.hpp"
#include "kernels/decode_matmul.cuh"  // DecodeMatmulPlan
#include "kernels/decode_position.cuh"
#include "kernels/sampling.cuh"  // GreedyState

namespace ladder {

/// What a block that gave up waiting records (zeroed before the launch).
struct PersistentFault {
  std::int32_t raised;       ///< nonzero once a wait timed out
  std::int32_t block;        ///< the block that gave up
  std::int32_t instruction;  ///< index into the schedule's instructions; -1: a step's start
  std::int32_t counter;
  std::uint32_t target;
  std::uint32_t value;  ///< the counter when the block gave up
  std::int32_t step;    ///< the decode step (the kernel's first is 0)
};

/// The schedule's arrays on the device.
struct PersistentScheduleView {
  const PersistentInstruction* instructions = nullptr;
  const CounterWait* waits = nullptr;
  const std::int32_t* block_first = nullptr;
  const std::int32_t* block_instructions = nullptr;
  std::uint32_t* counters = nullptr;  ///< [counter_count], zeroed before every launch
  int stop_counter = 0;
  int blocks = 0;  ///< the grid the schedule was built for
};

/// A layer's parameters (BfloatDeviceModel::layer): device pointers, every one bf16, the
/// matrices packed k_tiled.
using PersistentLayer = DeviceLayerOf<__nv_bfloat16>;

/// One product's plan (plan_decode_matmul_bf16, chapter 10's) and its split-sum workspace:
/// partials [S][T][B][64] floats when S > 1, tile arrival counters [T] (zero).
struct PersistentProductPlan {
  DecodeMatmulPlan plan;
  float* partials = nullptr;
  unsigned int* tile_counters = nullptr;
};

/// Everything one launch reads and writes. Shapes as in chapter 10: B rows, C, H heads of
/// D = C / H, V, the cache of `capacity` positions per (layer, row, head).
struct PersistentDecodeLaunch {
  PersistentScheduleView schedule;
  // The model, bf16 (BfloatDeviceModel).
  const PersistentLayer* layers = nullptr;  ///< [n_layer], in host memory: read by the launch
  const __nv_bfloat16* token_embedding = nullptr;     ///< wte [V, C]
  const __nv_bfloat16* position_embedding = nullptr;  ///< wpe [n_positions, C]
  const __nv_bfloat16* ln_f_weight = nullptr;
  const __nv_bfloat16* ln_f_bias = nullptr;
  const __nv_bfloat16* lm_head_weight = nullptr;  ///< wte^T packed k_tiled
  int n_layer = 0;
  int C = 0;
  int H = 0;
  int V = 0;
  float eps = 0.0f;
  int B = 0;
  // The step's activations ([B, ...] bf16) and the static KV cache.
  __nv_bfloat16* hidden = nullptr;    ///< [B, C], the residual stream
  __nv_bfloat16* normed = nullptr;    ///< [B, C]
  __nv_bfloat16* qkv = nullptr;       ///< [B, 3C]
  __nv_bfloat16* attended = nullptr;  ///< [B, C]
  __nv_bfloat16* expanded = nullptr;  ///< [B, 4C]
  __nv_bfloat16* keys = nullptr;      ///< [n_layer, B, H, capacity, D]
  __nv_bfloat16* values = nullptr;    ///< [n_layer, B, H, capacity, D]
  int capacity = 0;
  std::size_t layer_elements = 0;             ///< B * capacity * C
  float* candidate_values = nullptr;          ///< [B, LM-head column tiles]
  std::int32_t* candidate_indices = nullptr;  ///< [B, LM-head column tiles]
  float* logits_history = nullptr;            ///< [max_steps, B, V], or null
  PersistentProductPlan products[kPersistentProducts];
  // The greedy loop.
  std::int32_t* next_tokens = nullptr;  ///< [B]: the previous step's tokens, then this one's
  GreedyState state{};
  DecodePosition* cursor = nullptr;   ///< advanced by every step's stop instruction
  std::int32_t* decisions = nullptr;  ///< [max_steps]: after step e, another step (1) or not
  int first_step = 0;      ///< the decode step the kernel starts with (1: after the prefill)
  int first_position = 0;  ///< its cache position (T: the prompt filled 0 .. T - 1)
  // The watchdog.
  unsigned long long watchdog_ns = 0;
  PersistentFault* fault = nullptr;  ///< zeroed before the launch
  // The timeline of one step (profiling; null: none): for every instruction i of step
  // timeline_step, the global timer in ns when its block took it up, when its waits were
  // over, and when it had signalled: timeline[3 i .. 3 i + 2].
  unsigned long long* timeline = nullptr;
  int timeline_step = -1;
  /// persistent_decode_table_bytes(state.max_steps, logits_history != null) bytes of
  /// device memory, written by the launch (16-byte aligned).
  void* argument_tables = nullptr;
};

/// Bytes of PersistentDecodeLaunch::argument_tables: the LM head's kernel arguments, one
/// per step when logits are kept (each step writes its own row of the history), else one.
std::size_t persistent_decode_table_bytes(int max_steps, bool keep_logits);

/// The blocks a multiprocessor the kernel is compiled for (its __launch_bounds__: 128
/// registers a thread): while one block waits on its counters, the other works.
constexpr int kPersistentBlocksPerMultiprocessor = 2;

/// Resident blocks of the persistent kernel for a batch of B rows on one multiprocessor
/// (cudaOccupancyMaxActiveBlocksPerMultiprocessor). Throws ladder::CudaError.
int persistent_decode_blocks_per_multiprocessor(int B);

/// Launches the generation's decode steps on `stream` (cudaLaunchCooperativeKernel, grid
/// launch.schedule.blocks). Throws std::invalid_argument on shapes the kernel does not
/// run (B outside 1..64, more than 48 layers, C not a multiple of 64 or above 2048, head
/// size not a multiple of 8 or above kMaxHeadDim, a plan whose row tile is not B's) and
/// ladder::CudaError when the launch fails (a grid that cannot be resident at once included).
void launch_persistent_decode(const PersistentDecodeLaunch& launch, cudaStream_t stream);

}  // namespace ladder
