// kernels/persistent_decode.cu - the persistent decode kernel (persistent_decode.cuh says
// what it does; common/persistent_schedule.hpp what it runs and why that cannot deadlock).
//
// Notation: B rows, C = n_embd, H heads of D = C / H, V vocabulary, e the kernel's decode
// step (0, 1, ...), s = first_step + e the generation's step, p = first_position + e its
// cache position. Blocks of 256 threads, two a multiprocessor: while one block waits on its
// counters, the other works. The interpreter, with every op's body inlined, would take up to
// 252 registers a thread; capped at 128 it spills a little (the leave above the kernel), and
// the step still runs in 0.74-0.84 of its time at one block a multiprocessor.
//
// Shared memory of a block: the product tile's two [R][68] float tiles (34 KiB at row
// tile R = 64), the attention's merge state (4.2 KiB) and a few words, static.
#include "kernels/persistent_decode.cuh"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "kernels/argmax_order.cuh"
#include "kernels/bfloat16_packs.cuh"
#include "kernels/cache_attention_bf16_head.cuh"
#include "kernels/decode_matmul_bf16_tile.cuh"
#include "kernels/decode_matmul_common.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/kernel_limits.hpp"
#include "kernels/launch_checks.hpp"
#include "kernels/layernorm_row.cuh"

namespace ladder {

namespace {

using bf16 = __nv_bfloat16;
using decode_common::kThreads;  // 256, every instruction's block
using ProductArguments = decode_bf16::DecodeMatmulBf16Arguments<bf16>;
using LmHeadArguments = decode_bf16::DecodeMatmulBf16Arguments<float>;

constexpr int kWarps = kThreads / kWarpSize;
static_assert(kThreads == kLayernormThreads, "a LayerNorm row is one block of the kernel");
static_assert(kThreads >= 2 * kAttentionThreads, "attention runs on the block's first 128 threads");

constexpr int kLayerProducts = kPersistentProducts - 1;  // every product but the LM head
constexpr int kMaxLayers = 48;                           // GPT-2 XL

/// The kernel's arguments: the launch's description, and every product's kernel
/// arguments as chapter 10's launch would pass them, per layer; the LM head's with logits
/// kept (the tests) from device memory, one per step (launch.argument_tables).
/// A LayerNorm's weight and bias.
struct NormWeights {
  const bf16* weight;
  const bf16* bias;
};

struct KernelArguments {
  PersistentDecodeLaunch launch;     ///< its `layers` (host memory) cleared
  NormWeights norms[kMaxLayers][2];  ///< ln_1, ln_2 of every layer
  ProductArguments layer_products[kMaxLayers][kLayerProducts];
  LmHeadArguments lm_head;          ///< without logits
  const LmHeadArguments* lm_heads;  ///< with logits kept: one per step, in device memory
  int lm_head_candidates;           ///< the LM head's column tiles: candidates per row
};

// ---------------------------------------------------------------- counters

/// A strong load of a counter, without the acquire: spinning with acquire loads would
/// invalidate the multiprocessor's L1 at every turn of the loop.
__device__ __forceinline__ std::uint32_t load_relaxed(const std::uint32_t* at) {
  std::uint32_t value;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(value) : "l"(at) : "memory");
  return value;
}

/// After a relaxed load saw the count: an acquire load of the same counter, once. The
/// count only grows within a launch, so it reads the count seen or a later one, and
/// synchronizes with every producer's release; unlike fence.acq_rel it does not wait for
/// this thread's own loads still in flight (the weight chunks asked before the wait).
__device__ __forceinline__ std::uint32_t load_acquire(const std::uint32_t* at) {
  std::uint32_t value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(value) : "l"(at) : "memory");
  return value;
}

__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(now));
  return now;
}

__device__ __forceinline__ bool fault_raised(const PersistentDecodeLaunch& a) {
  return *reinterpret_cast<const volatile std::int32_t*>(&a.fault->raised) != 0;
}

/// Thread 0 only: spins until counters[counter] >= target. False when the watchdog fires
/// (this block records the fault, unless another block did first) or another block's
/// fault is seen: the kernel is stopping.
__device__ bool spin_until(const PersistentDecodeLaunch& a, int counter, std::uint32_t target,
                           int instruction, int step) {
  const std::uint32_t* at = a.schedule.counters + counter;
  if (load_relaxed(at) >= target) {
    (void)load_acquire(at);
    return true;
  }
  const unsigned long long start = global_timer_ns();
  for (unsigned int spins = 1;; ++spins) {
    const std::uint32_t value = load_relaxed(at);
    if (value >= target) {
      (void)load_acquire(at);
      return true;
    }
    if (spins % 64 == 0) {
      if (fault_raised(a)) return false;
      if (global_timer_ns() - start > a.watchdog_ns) {
        if (atomicCAS(&a.fault->raised, 0, 1) == 0) {
          a.fault->block = static_cast<std::int32_t>(blockIdx.x);
          a.fault->instruction = instruction;
          a.fault->counter = counter;
          a.fault->target = target;
          a.fault->value = value;
          a.fault->step = step;
          __threadfence();
        }
        return false;
      }
    }
    if (spins > 1024) __nanosleep(64);  // a long wait: leave the issue slots to the other block
  }
}

/// Every thread: waits for every counter `instruction` names at step `step`. The first
/// warp's lanes take one wait each (a LayerNorm row waits for a dozen tiles: one round
/// trip to memory for all of them, not a dozen in a row), then the block meets. Sets
/// `stopping` when the kernel is stopping.
__device__ __forceinline__ void wait_for_counters(const PersistentDecodeLaunch& a,
                                                  const PersistentInstruction& instruction,
                                                  int index, int step, int& stopping) {
  if (threadIdx.x < kWarpSize) {
    bool ok = true;
    for (int w = static_cast<int>(threadIdx.x); w < instruction.wait_count; w += kWarpSize) {
      const CounterWait wait = a.schedule.waits[instruction.first_wait + w];
      const int steps_done = step + 1 + wait.step_offset;
      if (steps_done <= 0) continue;
      ok = ok && spin_until(a, wait.counter,
                            static_cast<std::uint32_t>(wait.per_step) *
                                static_cast<std::uint32_t>(steps_done),
                            index, step);
    }
    if (!__all_sync(kFullWarpMask, ok) && threadIdx.x == 0) stopping = 1;
  }
  __syncthreads();
}

/// Every thread: this instruction's outputs are written; one thread adds 1 to its
/// counter, after a fence that orders the whole block's writes (seen through the
/// barrier) before the count: fence.acq_rel and a relaxed add, the release pattern of
/// the PTX memory model (lighter than __threadfence's sequentially consistent fence).
__device__ __forceinline__ void signal(const PersistentDecodeLaunch& a, int counter) {
  __syncthreads();
  if (threadIdx.x == 0 && counter >= 0) {
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
    asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;\n" ::"l"(a.schedule.counters + counter)
                 : "memory");
  }
}

// ---------------------------------------------------------------- the ops

/// hidden[b] = bf16(wte[token] + wpe[p]), added in fp32 (common/reference.hpp R2), as the
/// bf16 embedding kernel: 16-byte packs of 8, thread t packs t, t + 256, ...
__device__ __forceinline__ void embed_row(const PersistentDecodeLaunch& a, int b, int position) {
  const int token = a.next_tokens[b];
  const bf16* token_row = a.token_embedding + static_cast<std::size_t>(token) * a.C;
  const bf16* position_row = a.position_embedding + static_cast<std::size_t>(position) * a.C;
  bf16* out = a.hidden + static_cast<std::size_t>(b) * a.C;
  for (int pack = static_cast<int>(threadIdx.x); pack < a.C / kBfloatPack; pack += kThreads) {
    const PackedFloats<kBfloatPack> token_part = load_pack<kBfloatPack>(token_row, pack);
    const PackedFloats<kBfloatPack> position_part = load_pack<kBfloatPack>(position_row, pack);
    PackedFloats<kBfloatPack> sum;
#pragma unroll
    for (int k = 0; k < kBfloatPack; ++k)
      sum.values[k] = token_part.values[k] + position_part.values[k];
    store_pack<kBfloatPack>(out, pack, sum);
  }
}

/// The argmax of row b over the LM head's candidates, then the greedy bookkeeping of
/// argmax_step_kernel (sampling.cu): the token (or the forced one), its column of the
/// output, the row's finished flag.
__device__ __forceinline__ void argmax_row(const PersistentDecodeLaunch& a, int b, int step,
                                           int candidates, Candidate* warp_winners) {
  const std::size_t offset = static_cast<std::size_t>(b) * candidates;
  const Candidate best = block_argmax<kThreads>(
      a.candidate_values + offset, a.candidate_indices + offset, candidates, warp_winners);
  if (threadIdx.x == 0) {
    const GreedyState& state = a.state;
    const std::size_t column = static_cast<std::size_t>(b) * state.max_steps + step;
    const int token = state.forced_tokens != nullptr ? state.forced_tokens[column] : best.index;
    a.next_tokens[b] = token;
    state.output_tokens[column] = token;
    state.finished[b] = (state.finished[b] != 0 || token == state.eos_id) ? 1 : 0;
  }
}

/// After step `step`'s argmax: every row finished? The flag, the cursor advanced (as
/// all_finished_kernel does) and the decision for the next step, which every block reads
/// at the next step's start.
__device__ __forceinline__ void stop_decision(const PersistentDecodeLaunch& a, int e, int step,
                                              int position) {
  bool mine = true;
  for (int b = static_cast<int>(threadIdx.x); b < a.B; b += kThreads)
    mine = mine && a.state.finished[b] != 0;
  const int every_row = __syncthreads_and(mine);
  if (threadIdx.x == 0) {
    a.state.all_finished[0] = every_row != 0 ? 1 : 0;
    a.cursor->step = step + 1;
    a.cursor->position = position + 1;
    a.decisions[e] = (every_row == 0 && step + 1 < a.state.max_steps) ? 1 : 0;
  }
}

/// A named barrier of the block's first 128 threads (barrier 0 is __syncthreads).
__device__ __forceinline__ void attention_barrier() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kAttentionThreads) : "memory");
}

// ---------------------------------------------------------------- the interpreter

// Math:   every decode step of the generation: the ops of persistent_schedule.hpp, each
//         instruction the body of the chapter-10 kernel block it stands for.
// Shapes: PersistentDecodeLaunch; kRows the products' row tile (16, 32 or 64 >= B).
// Grid:   schedule.blocks blocks of 256 threads, all resident (cooperative launch);
//         block k runs schedule.block_instructions[block_first[k] .. block_first[k + 1])
//         every step.
// Promises: LDG.E.128 HMMA.16816.F32.BF16 REDG.E.ADD.STRONG.GPU NANOSLEEP
// Spills: at most 440 bytes (128 registers a thread, two blocks a multiprocessor: the step
// measured 0.74-0.84 of its time at one block a multiprocessor, docs/tuning_log.md row 41)
template <int kRows>
__global__ void __launch_bounds__(kThreads, kPersistentBlocksPerMultiprocessor)
    persistent_decode_kernel(const KernelArguments arguments) {
  const PersistentDecodeLaunch& a = arguments.launch;
  __shared__ float4 product_storage[decode_bf16::kKGroups * kRows * decode_common::kTileStride / 4];
  __shared__ AttentionShared attention_shared;
  __shared__ Candidate warp_winners[kWarps];
  __shared__ int stopping;  // set once, by thread 0, when the kernel is stopping
  float* product_shared = reinterpret_cast<float*>(product_storage);
  const int first = a.schedule.block_first[blockIdx.x];
  const int end = a.schedule.block_first[blockIdx.x + 1];
  const int lm_head_candidates = arguments.lm_head_candidates;
  if (threadIdx.x == 0) stopping = 0;

  for (int e = 0;; ++e) {
    const int step = a.first_step + e;
    const int position = a.first_position + e;
    // The step's start: the decision of the step before (of the prefill, for the first).
    // Thread 0 waits for the stop instruction; after the barrier every thread reads the
    // decision itself (ordered after thread 0's acquire by the barrier).
    if (threadIdx.x == 0 && e > 0 &&
        !spin_until(a, a.schedule.stop_counter, static_cast<std::uint32_t>(e), -1, e))
      stopping = 1;
    __syncthreads();
    if (stopping != 0) return;
    const bool another_step =
        e == 0 ? a.state.all_finished[0] == 0 && step < a.state.max_steps
               : *reinterpret_cast<const volatile std::int32_t*>(a.decisions + e - 1) != 0;
    if (!another_step) return;

    // The next instruction is read while this one runs: two dependent loads fewer on a
    // block's path from one instruction to the next.
    int next_index = first < end ? a.schedule.block_instructions[first] : 0;
    PersistentInstruction next_instruction{};
    if (first < end) next_instruction = a.schedule.instructions[next_index];
    for (int k = first; k < end; ++k) {
      const int index = next_index;
      const PersistentInstruction instruction = next_instruction;
      if (k + 1 < end) {
        next_index = a.schedule.block_instructions[k + 1];
        next_instruction = a.schedule.instructions[next_index];
      }
      // The timeline (profiling only): when the block took the instruction up, when its
      // waits were over (stamped inside `wait`), when it had signalled.
      const bool stamp = a.timeline != nullptr && e == a.timeline_step && threadIdx.x == 0;
      unsigned long long taken_up = 0;
      unsigned long long ready = 0;
      if (stamp) taken_up = global_timer_ns();
      const auto wait = [&] {
        wait_for_counters(a, instruction, index, e, stopping);
        if (stamp) ready = global_timer_ns();
      };
      switch (static_cast<PersistentOp>(instruction.op)) {
        case PersistentOp::kEmbedding:
          wait();
          embed_row(a, instruction.unit, position);
          break;
        case PersistentOp::kLayerNorm: {
          const auto norm = static_cast<PersistentNorm>(instruction.which);
          const bf16* weight = a.ln_f_weight;
          const bf16* bias = a.ln_f_bias;
          if (norm != PersistentNorm::kFinal) {
            const NormWeights& weights = arguments.norms[instruction.layer][instruction.which];
            weight = weights.weight;
            bias = weights.bias;
          }
          normalize_row<bf16, kBfloatPack, 1, false>(instruction.unit, nullptr, a.hidden, weight,
                                                     bias, a.normed, a.C, a.eps, wait);
          break;
        }
        case PersistentOp::kProduct: {
          // The arguments chapter 10's launch would pass, read in place from the table.
          if (instruction.which == static_cast<int>(PersistentProduct::kLmHead)) {
            const LmHeadArguments& p =
                a.logits_history != nullptr ? arguments.lm_heads[step] : arguments.lm_head;
            decode_bf16::bf16_product_tile<kRows, true>(p, instruction.unit / p.column_tiles,
                                                        instruction.unit % p.column_tiles,
                                                        product_shared, wait);
          } else {
            const ProductArguments& p =
                arguments.layer_products[instruction.layer][instruction.which];
            decode_bf16::bf16_product_tile<kRows, true>(p, instruction.unit / p.column_tiles,
                                                        instruction.unit % p.column_tiles,
                                                        product_shared, wait);
          }
          break;
        }
        case PersistentOp::kAttention: {
          wait();
          const int b = instruction.unit / a.H;
          const int h = instruction.unit % a.H;
          const std::size_t layer_offset =
              static_cast<std::size_t>(instruction.layer) * a.layer_elements;
          if (threadIdx.x < kAttentionThreads)
            attend_head_bf16(b, h, position, a.qkv, a.keys + layer_offset, a.values + layer_offset,
                             a.capacity, a.attended, a.H, a.C, static_cast<int>(threadIdx.x),
                             attention_shared, [] { attention_barrier(); });
          break;
        }
        case PersistentOp::kArgmax:
          wait();
          argmax_row(a, instruction.unit, step, lm_head_candidates, warp_winners);
          break;
        case PersistentOp::kStop:
          wait();
          stop_decision(a, e, step, position);
          break;
      }
      if (stopping != 0) return;  // the same for the whole block: set before a barrier
      signal(a, instruction.signal);
      if (stamp) {
        unsigned long long* at = a.timeline + 3 * static_cast<std::size_t>(index);
        at[0] = taken_up;
        at[1] = ready;
        at[2] = global_timer_ns();
      }
    }
  }
}

// ---------------------------------------------------------------- host side

template <int kRows>
void* kernel_address() {
  return reinterpret_cast<void*>(persistent_decode_kernel<kRows>);
}

int row_tile_of(int B) { return B <= 16 ? 16 : B <= 32 ? 32 : 64; }

void* kernel_for(int B) {
  switch (row_tile_of(B)) {
    case 16:
      return kernel_address<16>();
    case 32:
      return kernel_address<32>();
    default:
      return kernel_address<64>();
  }
}

/// The arguments chapter 10's launch passes for one product (the same plan), with the
/// product's own split-sum workspace and no cluster (a persistent grid has none) or
/// programmatic launch, after the checks that the plan is B's and covers K and N.
template <typename Out>
decode_bf16::DecodeMatmulBf16Arguments<Out> product_arguments(
    const char* launcher, const PersistentProductPlan& product, const bf16* x, const bf16* weight,
    const bf16* bias, Out* out, float* candidate_values, std::int32_t* candidate_indices, int B,
    int K, int N, DecodeEpilogue epilogue) {
  const DecodeMatmulPlan& plan = product.plan;
  launch_checks::require(plan.row_tile == row_tile_of(B), launcher,
                         "a product's plan must have the row tile of the batch (16, 32 or 64)");
  launch_checks::require(
      plan.column_tiles == (N + kDecodeTileColumns - 1) / kDecodeTileColumns &&
          plan.chunks == (K + decode_bf16::kChunkRows - 1) / decode_bf16::kChunkRows,
      launcher, "a product's plan must cover its K and N");
  if (plan.splits > 1)
    launch_checks::require(product.partials != nullptr && product.tile_counters != nullptr,
                           launcher, "a split product needs its workspace");
  return decode_common::arguments_for_plan(x, weight, bias, out, candidate_values,
                                           candidate_indices, B, K, N,
                                           (K + kBfloatTileK - 1) / kBfloatTileK * kBfloatTileK,
                                           epilogue, plan, product.partials, product.tile_counters);
}

}  // namespace

std::size_t persistent_decode_table_bytes(int max_steps, bool keep_logits) {
  const std::size_t lm_heads = keep_logits ? static_cast<std::size_t>(max_steps) : 1;
  return lm_heads * sizeof(LmHeadArguments);
}

int persistent_decode_blocks_per_multiprocessor(int B) {
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel_for(B), kThreads, 0));
  return blocks;
}

void launch_persistent_decode(const PersistentDecodeLaunch& launch, cudaStream_t stream) {
  constexpr const char* kName = "launch_persistent_decode";
  const PersistentDecodeLaunch& a = launch;
  launch_checks::require_at_most(kName, "n_layer", a.n_layer, kMaxLayers,
                                 "the products' arguments are a kernel parameter of 48 layers "
                                 "at most (GPT-2 XL)");
  launch_checks::require_positive(kName, {{"B", a.B},
                                          {"C", a.C},
                                          {"H", a.H},
                                          {"V", a.V},
                                          {"n_layer", a.n_layer},
                                          {"capacity", a.capacity},
                                          {"blocks", a.schedule.blocks}});
  launch_checks::require_at_most(kName, "B", a.B, kDecodeMaxRows,
                                 "one kernel holds at most 64 rows (the decode matmuls' limit)");
  launch_checks::require_divisible(kName, "C", a.C, "the 64-column tile", kDecodeTileColumns);
  launch_checks::require_at_most(kName, "C", a.C, kMaxLayernormC,
                                 "a LayerNorm row is one pack of 8 per thread of 256");
  launch_checks::require_divisible(kName, "C", a.C, "H", a.H);
  launch_checks::require_divisible(kName, "the head size D = C / H", a.C / a.H, "the bf16 pack",
                                   kBfloatPack);
  launch_checks::require_at_most(kName, "the head size D = C / H", a.C / a.H, kMaxHeadDim,
                                 "one attention thread per head dimension");
  launch_checks::require_not_null(kName, {{"instructions", a.schedule.instructions},
                                          {"waits", a.schedule.waits},
                                          {"block_first", a.schedule.block_first},
                                          {"block_instructions", a.schedule.block_instructions},
                                          {"counters", a.schedule.counters},
                                          {"layers", a.layers},
                                          {"token_embedding", a.token_embedding},
                                          {"position_embedding", a.position_embedding},
                                          {"ln_f_weight", a.ln_f_weight},
                                          {"ln_f_bias", a.ln_f_bias},
                                          {"lm_head_weight", a.lm_head_weight},
                                          {"hidden", a.hidden},
                                          {"normed", a.normed},
                                          {"qkv", a.qkv},
                                          {"attended", a.attended},
                                          {"expanded", a.expanded},
                                          {"keys", a.keys},
                                          {"values", a.values},
                                          {"candidate_values", a.candidate_values},
                                          {"candidate_indices", a.candidate_indices},
                                          {"next_tokens", a.next_tokens},
                                          {"finished", a.state.finished},
                                          {"all_finished", a.state.all_finished},
                                          {"output_tokens", a.state.output_tokens},
                                          {"cursor", a.cursor},
                                          {"decisions", a.decisions},
                                          {"fault", a.fault}});
  for (const void* pointer :
       {static_cast<const void*>(a.hidden), static_cast<const void*>(a.normed),
        static_cast<const void*>(a.qkv), static_cast<const void*>(a.attended),
        static_cast<const void*>(a.expanded), static_cast<const void*>(a.keys),
        static_cast<const void*>(a.values), static_cast<const void*>(a.token_embedding),
        static_cast<const void*>(a.position_embedding), static_cast<const void*>(a.lm_head_weight)})
    launch_checks::require(launch_checks::is_16_byte_aligned(pointer), kName,
                           "activations, the cache and the tables must be 16-byte aligned");

  launch_checks::require_not_null(kName, "argument_tables", a.argument_tables);
  launch_checks::require(launch_checks::is_16_byte_aligned(a.argument_tables), kName,
                         "argument_tables must be 16-byte aligned");
  const int C = a.C;
  const auto plan = [&](PersistentProduct product) -> const PersistentProductPlan& {
    return a.products[static_cast<int>(product)];
  };
  // Every layer's four products: chapter 10's arguments for that layer.
  std::vector<ProductArguments> layer_products;
  for (int layer_index = 0; layer_index < a.n_layer; ++layer_index) {
    const PersistentLayer& layer = a.layers[layer_index];
    const auto product = [&](PersistentProduct which, const bf16* x, const bf16* weight,
                             const bf16* bias, bf16* out, int K, int N, DecodeEpilogue epilogue) {
      layer_products.push_back(product_arguments<bf16>(kName, plan(which), x, weight, bias, out,
                                                       nullptr, nullptr, a.B, K, N, epilogue));
    };
    product(PersistentProduct::kQkv, a.normed, layer.qkv_weight, layer.qkv_bias, a.qkv, C, 3 * C,
            DecodeEpilogue::kBias);
    product(PersistentProduct::kAttentionProjection, a.attended, layer.attn_proj_weight,
            layer.attn_proj_bias, a.hidden, C, C, DecodeEpilogue::kBiasResidual);
    product(PersistentProduct::kMlpExpand, a.normed, layer.fc_weight, layer.fc_bias, a.expanded, C,
            4 * C, DecodeEpilogue::kBiasGelu);
    product(PersistentProduct::kMlpProjection, a.expanded, layer.mlp_proj_weight,
            layer.mlp_proj_bias, a.hidden, 4 * C, C, DecodeEpilogue::kBiasResidual);
  }
  // The LM head: the logits of step s (kept for the tests) go to row s of the history.
  const bool keep_logits = a.logits_history != nullptr;
  std::vector<LmHeadArguments> lm_heads;
  for (int step = 0; step < (keep_logits ? a.state.max_steps : 1); ++step)
    lm_heads.push_back(product_arguments<float>(
        kName, plan(PersistentProduct::kLmHead), a.normed, a.lm_head_weight, nullptr,
        keep_logits ? a.logits_history + static_cast<std::size_t>(step) * a.B * a.V : nullptr,
        a.candidate_values, a.candidate_indices, a.B, C, a.V, DecodeEpilogue::kNone));
  // The table of the LM head's arguments per step (logits kept), in device memory. From
  // pageable memory: the copy is staged before cudaMemcpyAsync returns.
  const std::size_t lm_bytes = lm_heads.size() * sizeof(LmHeadArguments);
  launch_checks::require(lm_bytes <= persistent_decode_table_bytes(a.state.max_steps, keep_logits),
                         kName, "argument_tables is too small");
  CUDA_CHECK(cudaMemcpyAsync(a.argument_tables, lm_heads.data(), lm_bytes, cudaMemcpyHostToDevice,
                             stream));

  // The arguments are a kernel parameter (constant memory, up to 32 KiB), as chapter 10's
  // kernels take theirs: an instruction reads its product's fields from the constant
  // bank, indexed by layer, instead of holding them in registers.
  KernelArguments arguments{};
  arguments.launch = a;
  arguments.launch.layers = nullptr;  // host memory: what the kernel needs is copied below
  for (int layer = 0; layer < a.n_layer; ++layer) {
    arguments.norms[layer][static_cast<int>(PersistentNorm::kFirst)] = {a.layers[layer].ln_1_weight,
                                                                        a.layers[layer].ln_1_bias};
    arguments.norms[layer][static_cast<int>(PersistentNorm::kSecond)] = {
        a.layers[layer].ln_2_weight, a.layers[layer].ln_2_bias};
  }
  for (int layer = 0; layer < a.n_layer; ++layer)
    for (int product = 0; product < kLayerProducts; ++product)
      arguments.layer_products[layer][product] =
          layer_products[static_cast<std::size_t>(layer * kLayerProducts + product)];
  arguments.lm_head = lm_heads.front();
  arguments.lm_heads = static_cast<const LmHeadArguments*>(a.argument_tables);
  arguments.lm_head_candidates = plan(PersistentProduct::kLmHead).plan.column_tiles;

  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  int cooperative = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  launch_checks::require(cooperative != 0, kName,
                         "the device cannot launch a cooperative kernel (every block resident at "
                         "once), which the persistent kernel needs");
  void* kernel_arguments[] = {&arguments};
  CUDA_CHECK(cudaLaunchCooperativeKernel(kernel_for(a.B),
                                         dim3(static_cast<unsigned int>(a.schedule.blocks)),
                                         dim3(kThreads), kernel_arguments, 0, stream));
  CUDA_CHECK_LAUNCH(stream);
}

}  // namespace ladder
