// common/persistent_schedule.hpp - the instruction schedule of the persistent decode
// kernel (chapter 11): what every resident block does in one decode step, in which order,
// and what it waits for. Host code without CUDA, built once per (model shape, batch,
// products' plans, grid), proved on the CPU by the simulator
// (common/persistent_schedule_simulator.hpp) and interpreted on the GPU by
// kernels/persistent_decode.cu.
//
// One decode step of GPT-2 is a chain of operations (ops): the embedding of the step's
// tokens, per layer ln_1, the qkv product, attention, the attention's projection (+ the
// residual), ln_2, c_fc (+ GELU), the MLP's projection (+ the residual), then ln_f, the LM
// head with the argmax's first pass, the argmax and the stop decision. Each op is cut
// into units (instructions): a row for the embedding, the LayerNorms and the argmax; a
// (row, head) for attention; a (split of K, 64-column tile) for a product, exactly the
// blocks of chapter 10's kernel for that product (so the sums and their order, hence the
// bits, are chapter 10's).
//
// Dependencies are counters in global memory instead of kernel boundaries. Every
// instruction, once its outputs are written, adds 1 to one counter (its `signal`); a
// consumer waits until each counter it needs has reached a target. Counters only grow
// during a generation (zeroed before the launch), so a target names a step: counter c,
// which `arrivals[c]` instructions signal every step, has reached arrivals[c] * (e + 1)
// once step e's producers are all done (e = 0 for the kernel's first decode step).
// Granularity follows what each consumer really reads:
//   embedding row b       <- the previous step's stop decision
//   ln_1 row b (layer 0)  <- the embedding of row b
//   ln_1 / ln_f row b     <- every tile of the previous layer's MLP projection
//   a product unit        <- its LayerNorm's rows (qkv, c_fc, the LM head), or only the
//                            producers of the inputs its split of K reads: the attention
//                            heads inside it (attention projection), the c_fc tiles inside
//                            it (MLP projection: a chunk of 64 inputs is one c_fc tile)
//   attention (b, h)      <- the qkv tiles holding head h's q, k and v columns
//   ln_2 row b            <- every tile of the attention projection
//   argmax row b          <- every LM-head unit
//   stop                  <- every argmax row
//
// Deadlock freedom. The instructions of a step are listed in an order where every wait
// names only counters signalled by instructions earlier in the list (or in an earlier
// step), instruction i goes to block i % blocks, and each block runs its instructions in
// list order, step after step. Then the earliest unfinished instruction (step-major) is
// the current instruction of its block and everything it waits for is finished, so
// some block can always move on, provided every block is resident at once (the kernel is
// launched cooperatively). The simulator checks this and the data hazards under random
// interleavings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ladder {

/// What an instruction computes.
enum class PersistentOp : std::int32_t {
  kEmbedding = 0,  ///< unit = row b: hidden[b] = wte[token[b]] + wpe[position]
  kLayerNorm = 1,  ///< unit = row b: normed[b] = LayerNorm(hidden[b]); `which`: PersistentNorm
  kProduct = 2,    ///< unit = split * column_tiles + tile of product `which` (PersistentProduct)
  kAttention = 3,  ///< unit = b * n_head + h: append k, v at the step's position, attend
  kArgmax = 4,     ///< unit = row b: the step's token from the LM head's candidates
  kStop = 5,       ///< unit 0: every row finished? the cursor advanced; another step?
};

/// Which LayerNorm a kLayerNorm instruction applies.
enum class PersistentNorm : std::int32_t { kFirst = 0, kSecond = 1, kFinal = 2 };

/// Which product a kProduct instruction is part of (each has its own split-sum workspace,
/// since two of them can run at once: c_fc's last tiles beside the MLP projection's first).
enum class PersistentProduct : std::int32_t {
  kQkv = 0,                  ///< normed [B, C] x c_attn [C, 3C] + bias -> qkv
  kAttentionProjection = 1,  ///< attended [B, C] x c_proj [C, C] + bias, added to hidden
  kMlpExpand = 2,            ///< normed [B, C] x c_fc [C, 4C] + bias, GELU -> expanded
  kMlpProjection = 3,        ///< expanded [B, 4C] x c_proj [4C, C] + bias, added to hidden
  kLmHead = 4,               ///< normed [B, C] x wte^T [C, V]: logits and candidates
};
constexpr int kPersistentProducts = 5;

/// How a product is cut: the plan of chapter 10's kernel for it (plan_decode_matmul_bf16).
struct ProductTiling {
  int splits = 0;            ///< S: blocks summing one column tile, each a run of chunks of K
  int column_tiles = 0;      ///< T: 64 output columns each
  int chunks = 0;            ///< chunks of 64 inputs of K
  int chunks_per_split = 0;  ///< chunks one split streams (the last may have fewer)
  int units() const { return splits * column_tiles; }
};

/// Everything the schedule depends on.
struct PersistentShape {
  int n_layer = 0;
  int n_embd = 0;      ///< C
  int n_head = 0;      ///< H
  int vocab_size = 0;  ///< V
  int batch = 0;       ///< B, 1..64
  ProductTiling products[kPersistentProducts];
  int blocks = 0;  ///< resident blocks of the kernel: the grid
};

/// Wait until counters[counter] >= per_step * (step + 1 + step_offset), step being the
/// kernel's decode step (0, 1, ...). step_offset -1 names the step before (at step 0:
/// target 0, nothing to wait for).
struct CounterWait {
  std::int32_t counter = 0;
  std::int32_t per_step = 0;
  std::int32_t step_offset = 0;
};

/// One unit of work. Plain 32-bit fields: the device reads the same bytes.
struct PersistentInstruction {
  std::int32_t op = 0;          ///< PersistentOp
  std::int32_t layer = -1;      ///< 0..n_layer-1, or -1 outside the layers
  std::int32_t which = 0;       ///< PersistentNorm or PersistentProduct
  std::int32_t unit = 0;        ///< see PersistentOp
  std::int32_t first_wait = 0;  ///< its waits: waits[first_wait .. first_wait + wait_count)
  std::int32_t wait_count = 0;
  std::int32_t signal = -1;  ///< the counter it adds 1 to when done
};

struct PersistentSchedule {
  PersistentShape shape;
  /// One step's instructions, in an order where every wait names earlier instructions.
  std::vector<PersistentInstruction> instructions;
  std::vector<CounterWait> waits;
  /// Block k runs block_instructions[block_first[k] .. block_first[k + 1]), increasing.
  std::vector<std::int32_t> block_first;
  std::vector<std::int32_t> block_instructions;
  /// Signals every counter receives per step.
  std::vector<std::int32_t> counter_arrivals;
  /// The counter the stop instruction signals: a block waits for it at each step's start.
  std::int32_t stop_counter = -1;

  int counter_count() const { return static_cast<int>(counter_arrivals.size()); }
};

/// The schedule of one decode step for `shape`. Throws std::invalid_argument on a shape
/// the kernel cannot run (B outside 1..64, sizes <= 0, n_embd not divisible by n_head or
/// by 64, a product tiling that does not cover its K and N).
PersistentSchedule build_persistent_schedule(const PersistentShape& shape);

/// The expected product shapes of GPT-2: K and N of `product` for n_embd C and vocab V.
struct ProductSize {
  int K = 0;
  int N = 0;
};
ProductSize persistent_product_size(PersistentProduct product, int C, int V);

/// "layer 3, attention projection, split 2 of tile 5" and the like, for error lines.
std::string describe(const PersistentSchedule& schedule, const PersistentInstruction& instruction);

}  // namespace ladder
