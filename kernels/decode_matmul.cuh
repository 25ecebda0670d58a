// kernels/decode_matmul.cuh - matrix products written for decode: a few rows (B <= 64)
// against a large weight, y = x W (+ a fused epilogue), and the tied LM head with the
// argmax's first pass fused.
//
// Notation
//   B     rows of x: the batch, one token per row (1 <= B <= kDecodeMaxRows = 64)
//   K     inner dimension (in_features; C for the LM head)
//   N     output columns (out_features; V for the LM head)
//   T     column tiles of the packed weight, ceil(N / 64) (decode_matmul_layout.hpp)
//   S     splits of K: the blocks that share one column tile, each summing a range of K
//
// Math
//   y[b, n] = sum_k x[b, k] W[k, n]       x [B, K] row-major, W [K, N] packed
//   kNone          out = y
//   kBias          out = y + bias
//   kBiasGelu      out = gelu(y + bias)        (GPT-2's tanh GELU, device_primitives.cuh)
//   kBiasResidual  out = out + y + bias        (out is the residual stream, in place)
//   LM head        logits = x wte^T, W = wte^T packed (pack_decode_weight_transposed),
//                  and per column tile t and row b the best (value, index) of the tile
//                  under the argmax order of argmax_order.cuh (ties to the lower index,
//                  NaN first): candidates [B, T], which a second pass reduces to the token.
//
// Why not a library GEMM: at M = B rows the product is a stream of the weight past a
// few rows of x, and the time is the bytes of W over the memory bandwidth (at B = 32
// in plain fp32 it also reaches the FMA rate: 16 FLOP per weight byte). So every byte
// of W is read once, in 16-byte pieces, by exactly one block; all B rows of x meet it
// on chip (the rows of x for a chunk's 32 k sit in shared memory beside it); and the
// grid is cut fine enough (over N, and over K for the narrow products) that every
// multiprocessor streams. The price of 64-column tiles: x is read from L2 once per
// tile, T B K floats in all, B / 64 of the weight's bytes (half at B = 32).
//
// Grid: blocks (s, t) for s < S, t < T, 256 threads. Block (s, t) streams its range of
// rows of column tile t - one contiguous run of the packed weight - through shared
// memory in chunks of 32 rows (8 KiB), four stages deep with cp.async (eight for row
// tiles of up to 16 rows), the matching 32 columns of x [B, 32] beside each chunk; its 8
// warps split the chunk's rows among them and multiply-add (fp32: FFMA; tf32: mma.sync
// m16n8k8 on the tensor cores). Bytes in flight: three chunks ahead per block (seven up
// to 16 rows), 24 KiB (56), and two blocks per multiprocessor, 48 KiB (112); Little's law
// asks ~4.3 TB/s x ~700 ns = ~3 MB over the chip, ~23 KiB per multiprocessor at the
// memory's idle latency, more as the latency grows under load.
// fp32 row tiles of up to 8 rows keep the weight out of shared memory: each thread loads
// its 16-byte pieces of the run straight into registers, four chunks ahead (32 KiB a
// block; three blocks a multiprocessor at 2 rows, two at 8), x is staged once in shared
// memory, and no barrier is needed per chunk (decode_matmul_fp32_direct_kernel).
// Sums, in a fixed order (bit-identical repeat runs, no float atomics): each warp over
// its rows in order; the warps of a block in warp order; with S > 1 the splits in split
// order: every block writes its partial tile to the workspace and bumps the tile's
// integer counter, and the block that arrives last adds the S partials, 0 to S - 1,
// applies the epilogue and resets the counter for the next launch.
// Thread-block clusters (sm_90 on) shorten that tail: where 1 < S <= 16 and the grid
// takes at most 85% of one wave's resident blocks, the S blocks of a column tile launch
// as one cluster; after a cluster barrier each block finishes a slice of the tile's
// rows, reading that slice of every partial straight from the others' shared memory
// (distributed shared memory) and adding them in the same order, 0 to S - 1, then
// running the epilogue on it. The same bits, without the partials' round trip through
// L2, the two device-wide fences and the atomic, and the tail's work spread over the S
// blocks; a second barrier keeps every block resident until its partial has been read.
// From the plans and the occupancy on the
// H200's 132 multiprocessors: all four layer products at every B, in fp32 and tf32
// (c_attn S = 6, c_proj 12, the MLP's c_proj 16 where 20 splits would stream a chunk less
// a block, and c_fc 5 where a multiprocessor holds 3 or more blocks of the kernel (fp32
// B <= 2, tf32 17-32 rows), else 4: 5 would leave no room for clusters;
// choose_decode_splits asks it of the kernel's residency) and in bf16 (64-input chunks:
// c_fc S = 4, the MLP's c_proj 16).
// In the sm_90 SASS the cluster barrier is UCGABAR_ARV and UCGABAR_WAIT (promised).
//
// Programmatic dependent launch (DecodeLaunch::kProgrammatic, sm_90 and later): the
// launch carries cudaLaunchAttributeProgrammaticStreamSerialization, so the product's
// blocks may start before the kernel before it on the stream has finished. Nothing a
// block does before griddepcontrol.wait (cudaGridDependencySynchronize) touches memory
// another kernel writes: it only loads its tile's bias for the epilogue (two values a
// thread, so that the end of the block's critical path waits for no load but the
// residual's) and starts streaming its own weight (fp32/tf32: the first three chunks by
// cp.async into shared memory and the next ones prefetched into L2; bf16: the first four
// chunks into registers), neither of which any kernel of the step writes. The
// wait returns when the previous kernel has completed and its writes are visible; only
// then are x, the residual stream, the workspace and out read or written. A kernel
// launched without the attribute passes the wait at once (and skips the L2 prefetch), so
// the two launches do the same arithmetic in the same order and give the same bits.
// The kernel before (the primary) needs nothing for correctness: the wait is for its
// completion, not for a signal. It decides how early the product may launch. One that
// never signals signals implicitly as its blocks exit: the product's blocks then start
// as the primary's last blocks finish, which saves the launch gap and hides the
// pipeline's fill, but overlaps none of the primary's work. The LayerNorm and attention
// kernels a product follows in a step signal first thing (LaunchDependents::kAtStart,
// device_primitives.cuh: launch_dependents_at_start), so the product streams its first
// chunks while they run. The decode matmuls signal too (griddepcontrol.launch_dependents,
// cudaTriggerProgrammaticLaunchCompletion): the fp32 and TF32 kernels first thing, so
// the kernel after, launched when every block has signalled, takes the slots this grid
// leaves and streams its own weight (or, a LayerNorm or an attention, loads what it can)
// while this one streams and sums; the bf16 kernel once a block has read its last weight
// chunk, so its stream has the memory to itself. Correctness does not depend on when:
// the wait still waits for completion.
// In a CUDA graph: stream capture turns the attribute into a programmatic edge between
// the two kernel nodes, so the captured step behaves as the stream does. In the sm_90
// SASS the wait is ACQBULK and the signal PREEXIT (the kernels' promises, checked by
// scripts/kernel_report.py).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/device_model.hpp"
#include "kernels/decode_matmul_layout.hpp"
#include "kernels/launch_decisions.hpp"
#include "kernels/launch_dependents.hpp"

namespace ladder {

/// The most rows the decode matmuls take (x [B, K] with B <= 64).
constexpr int kDecodeMaxRows = 64;

/// What the product does before it is stored.
enum class DecodeEpilogue {
  kNone,          ///< out = x W
  kBias,          ///< out = x W + bias
  kBiasGelu,      ///< out = gelu(x W + bias)
  kBiasResidual,  ///< out += x W + bias (the residual stream, read and written)
};

/// Plain fp32 multiply-adds (the default everywhere), or TF32 tensor cores: inputs
/// rounded to a 10-bit mantissa, fp32 accumulation (~1e-3 relative error).
enum class DecodePrecision { kFp32, kTf32 };

/// How one product is cut into blocks (a pure function of the shape, the precision and
/// the device, so one device always sums in the same order).
struct DecodeMatmulPlan {
  int row_tile = 0;                ///< B rounded up to the kernel's row tile (2, 8, 16, 32 or 64)
  int column_tiles = 0;            ///< T
  int chunks = 0;                  ///< 32-row chunks of the padded K
  int splits = 0;                  ///< S
  int chunks_per_split = 0;        ///< chunks one block streams (the last split may have fewer)
  std::size_t partial_floats = 0;  ///< workspace floats for the split partial sums (S > 1)
};

class DecodeMatmulWorkspace;

/// The plan of a [B, K] x [K, N] product on the workspace's device: the splits of
/// choose_decode_splits, for the workspace's multiprocessors and the blocks of the plan's
/// kernel one of them holds (DecodeMatmulWorkspace::resident_blocks; the kernel a 16-byte
/// aligned x takes, so the plan does not depend on x's address). Throws
/// std::invalid_argument on B outside [1, 64] or K or N <= 0, ladder::CudaError when the
/// occupancy query fails.
DecodeMatmulPlan plan_decode_matmul(int B, int K, int N, DecodePrecision precision,
                                    DecodeMatmulWorkspace& workspace);

/// How many blocks share one column tile, each streaming a run of chunks of K.
struct DecodeSplits {
  int splits = 0;            ///< S
  int chunks_per_split = 0;  ///< chunks one block streams (the last split may have fewer)
};

/// The split of `chunks` chunks of K for `column_tiles` column tiles that takes the
/// fewest waves x chunks per block (two resident blocks per multiprocessor, at most 4
/// blocks per multiprocessor in all), or, where that split could not be summed in a
/// thread-block cluster, the best one that could if it costs at most one chunk a block
/// more. Whether a grid leaves room for clusters is asked as the launch asks it, of the
/// `resident_blocks` blocks of the product's kernel that one multiprocessor holds.
/// plan_decode_matmul's choice, and the bf16 kernels' (decode_matmul_bf16.cuh), so both
/// fit one DecodeMatmulWorkspace. Throws std::invalid_argument when an argument is <= 0.
DecodeSplits choose_decode_splits(int chunks, int column_tiles, int multiprocessors,
                                  int resident_blocks);

/// A model's matmul weights packed for the decode matmuls, once, when it is loaded:
/// every layer's four Conv1D weights (pack_decode_weight) and the tied LM head's wte
/// (pack_decode_weight_transposed: W = wte^T [C, V]), in one device allocation. Each is
/// read from the DeviceModel, packed on the host and uploaded; the biases, LayerNorms
/// and embeddings stay where the DeviceModel has them.
class PackedDecodeModel {
 public:
  struct Layer {
    const float* qkv_weight;        ///< [C, 3C] packed
    const float* attn_proj_weight;  ///< [C, C] packed
    const float* fc_weight;         ///< [C, 4C] packed
    const float* mlp_proj_weight;   ///< [4C, C] packed
  };

  /// Throws ladder::DeviceOutOfMemory or ladder::CudaError when the upload fails.
  explicit PackedDecodeModel(const DeviceModel& model);
  ~PackedDecodeModel();
  PackedDecodeModel(const PackedDecodeModel&) = delete;
  PackedDecodeModel& operator=(const PackedDecodeModel&) = delete;

  Layer layer(int index) const { return layers_.at(static_cast<std::size_t>(index)); }
  /// wte^T [C, V] packed: the LM head's weight for launch_decode_lm_head.
  const float* lm_head_weight() const { return lm_head_weight_; }
  /// Bytes of packed weights on the device (the padding included).
  std::size_t bytes() const { return floats_ * sizeof(float); }

 private:
  float* values_ = nullptr;
  std::size_t floats_ = 0;
  std::vector<Layer> layers_;
  const float* lm_head_weight_ = nullptr;
};

/// Device scratch for the split sums (partial tiles and one counter per column tile),
/// sized for every product the launchers accept on the current device, and the kernels'
/// shared-memory limits raised. Construct it once, before the loop (and before a graph
/// capture); it allocates nothing afterwards. Two products running at once on one
/// workspace would mix their partial sums: keep one workspace per stream, used by one host
/// thread at a time (it also remembers the kernels' occupancy and counts cluster launches).
class DecodeMatmulWorkspace {
 public:
  /// Throws ladder::CudaError when the allocation or an attribute call fails.
  DecodeMatmulWorkspace();
  ~DecodeMatmulWorkspace();
  DecodeMatmulWorkspace(const DecodeMatmulWorkspace&) = delete;
  DecodeMatmulWorkspace& operator=(const DecodeMatmulWorkspace&) = delete;

  int multiprocessors() const { return multiprocessors_; }
  /// Whether the device runs programmatic dependent launches (compute capability 9.0
  /// on); where it does not, DecodeLaunch::kProgrammatic launches plainly. Where it does,
  /// each product kernel is still asked whether its own code holds the wait (build_of,
  /// launch_for_kernel), and so is each kernel between the products
  /// (launch_between_products).
  bool programmatic_launches() const { return programmatic_launches_; }
  /// The most splits of K one thread-block cluster holds on this device: 16 on compute
  /// capability 9.0 on (8, the portable size, where a kernel refuses 16), 0 before it.
  /// A product with 1 < S <= cluster_splits() whose grid leaves room in one wave sums its
  /// splits within the cluster, in distributed shared memory; others, in the workspace.
  int cluster_splits() const { return cluster_splits_; }
  /// From now on every split product sums through the workspace, none in a cluster (the
  /// same bits: the tests and benches compare the two paths with it).
  void disable_cluster_splits() { cluster_splits_ = 0; }
  /// Products launched in clusters on this workspace so far.
  long long cluster_launches() const { return cluster_launches_; }
  /// Counts one launch in clusters (launch_product_kernel, decode_matmul_common.cuh).
  void count_cluster_launch() { ++cluster_launches_; }
  /// Blocks of `kernel` (256 threads, `shared_bytes` of dynamic shared memory) resident
  /// on one multiprocessor at once: cudaOccupancyMaxActiveBlocksPerMultiprocessor, asked
  /// once per kernel and size and remembered. Throws ladder::CudaError when the query fails.
  int resident_blocks(const void* kernel, std::size_t shared_bytes);
  /// What `kernel`'s loaded code was built as (kernel_build: cudaFuncGetAttributes), asked
  /// once per kernel and remembered. Throws ladder::CudaError when the query fails.
  KernelBuild build_of(const void* kernel);
  /// Clusters of `cluster_blocks` blocks of `kernel` (256 threads, `shared_bytes` of
  /// dynamic shared memory) the device holds at once: cudaOccupancyMaxActiveClusters,
  /// asked once per kernel, size and cluster size and remembered. 0 where no such cluster
  /// can be placed (a slice of a GPU, a smaller part): the product then sums through the
  /// workspace (sum_splits_in_clusters). A refused query counts as 0.
  int active_clusters(const void* kernel, std::size_t shared_bytes, int cluster_blocks);
  float* partials() const { return partials_; }
  std::size_t partial_floats() const { return partial_floats_; }
  unsigned int* tile_counters() const { return tile_counters_; }
  int tile_counter_count() const { return tile_counter_count_; }

 private:
  int multiprocessors_ = 0;
  bool programmatic_launches_ = false;
  int cluster_splits_ = 0;
  long long cluster_launches_ = 0;
  struct Residency {
    const void* kernel;
    std::size_t shared_bytes;
    int blocks;
  };
  std::vector<Residency> residency_;  // resident_blocks' answers so far
  struct Build {
    const void* kernel;
    KernelBuild build;
  };
  std::vector<Build> builds_;  // build_of's answers so far
  struct Clusters {
    const void* kernel;
    std::size_t shared_bytes;
    int cluster_blocks;
    int clusters;
  };
  std::vector<Clusters> clusters_;  // active_clusters' answers so far
  float* partials_ = nullptr;
  std::size_t partial_floats_ = 0;
  unsigned int* tile_counters_ = nullptr;
  int tile_counter_count_ = 0;
};

/// out = epilogue(x W [+ bias]) on `stream`, with x [B, K] fp32 row-major, W [K, N]
/// packed by pack_decode_weight (16-byte aligned), bias [N] (null exactly when the
/// epilogue is kNone), out [B, N]. out must not overlap x or W; with kBiasResidual out
/// holds the residual stream on entry. Any K and N; x and out need no alignment (16-byte
/// aligned x with K % 4 == 0 takes 16-byte copies, even N with an 8-byte aligned out
/// takes paired stores).
/// Throws std::invalid_argument on a null pointer, a bias with kNone, B outside [1, 64],
/// K or N <= 0, or a weight that is not 16-byte aligned. `launch`: how it waits for the
/// kernel before it (DecodeLaunch; the same bits either way).
void launch_decode_matmul(const float* x, const float* packed_weight, const float* bias, float* out,
                          int B, int K, int N, DecodeEpilogue epilogue, DecodePrecision precision,
                          DecodeMatmulWorkspace& workspace, cudaStream_t stream,
                          DecodeLaunch launch = DecodeLaunch::kAfterPrevious);

/// Candidates the LM head leaves per row: one per column tile, ceil(V / 64).
inline int decode_lm_head_candidates(int V) { return DecodeWeightLayout::of(1, V).column_tiles; }

/// The tied LM head, logits = x wte^T, and the argmax's first pass: x [B, C], wte packed
/// by pack_decode_weight_transposed(wte, V, C); logits [B, V] (null: not written);
/// candidate_values and candidate_indices [B, decode_lm_head_candidates(V)] (both null:
/// not written), where entry (b, t) is the winner of row b among columns 64 t .. 64 t + 63
/// (argmax_order.cuh). The argmax of row b is the winner among its candidates.
/// Throws std::invalid_argument as launch_decode_matmul, when only one of the candidate
/// pointers is null, or when logits and candidates are all null.
void launch_decode_lm_head(const float* x, const float* packed_wte, float* logits,
                           float* candidate_values, std::int32_t* candidate_indices, int B, int C,
                           int V, DecodePrecision precision, DecodeMatmulWorkspace& workspace,
                           cudaStream_t stream, DecodeLaunch launch = DecodeLaunch::kAfterPrevious);

}  // namespace ladder
