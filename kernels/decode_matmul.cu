// kernels/decode_matmul.cu - the decode matmuls (see decode_matmul.cuh for the math,
// the grid and the order of the sums): one streaming pipeline, two inner products
// (fp32 FFMA and TF32 mma.sync), a register-direct fp32 kernel for row tiles of up to 8
// rows, and the tail shared with the bf16 kernels (decode_matmul_common.cuh) that sums
// the warps and the splits and applies the epilogue.
//
// Shared memory of a block (floats):
//   pipeline  stages_for(R) stages, W chunk [32][72] (64 columns + 8 of padding)
//                                   x chunk [R][36]  (32 columns + 4 of padding)
//   tail      (reuses the pipeline) one [R][68] tile per k-group of warps; their sum
//             ends in the first, which the epilogue reads.
//   register-direct (R <= 8): no weight; x of up to 32 chunks in the order its threads
//             read it, [chunk][k-group 16][step 2][R]; the tail's 8 tiles reuse it.
// R is the row tile (B rounded up). The paddings keep the tensor-core fragment reads
// free of bank conflicts (rows 72 floats apart start 8 banks apart; rows 36 apart, 4
// banks apart); the FFMA path reads W 16 bytes per lane along a row and x as a broadcast.
#include "kernels/decode_matmul.cuh"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "kernels/decode_matmul_common.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"
#include "kernels/programmatic_launch.cuh"

namespace ladder {

namespace {

using decode_common::chunk_range;
using decode_common::ChunkRange;
using decode_common::finish_tile;
using decode_common::load_tile_bias;
using decode_common::store_mma_sums;

constexpr int kThreads = decode_common::kThreads;  // 256
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kTileColumns = kDecodeTileColumns;  // 64
constexpr int kChunkRows = kDecodeChunkRows;      // 32
constexpr int kWeightStride = kTileColumns + 8;   // floats between two W rows in shared memory
constexpr int kXStride = kChunkRows + 4;          // floats between two x rows in shared memory
constexpr int kTileStride = decode_common::kTileStride;  // floats between two rows of a summed tile
/// Blocks the plan aims for per multiprocessor (two fit: registers and shared memory).
constexpr int kTargetBlocksPerMultiprocessor = 2;

/// The fp32 kernels' arguments: x, W, bias and out in fp32, W packed by
/// pack_decode_weight (padded_rows: K rounded up to 32).
using DecodeMatmulArguments = decode_common::DecodeMatmulArguments<float, float>;

// ---------------------------------------------------------------- row tiles and shared memory

/// Rows a thread of the shared-pipeline FFMA kernel owns (row tiles of 16 rows and more).
constexpr int kFmaThreadRows = 8;

/// The shared-pipeline FFMA path's work split for row tile kRows: a thread owns
/// kThreadRows rows x 4 columns; a warp 2 x 16 lanes, so 2 kThreadRows rows x all 64
/// columns; the 8 warps are kRowGroups groups of rows times kKGroups groups of the
/// chunk's rows. The two half-warps take alternate rows of the warp's (even and odd):
/// each x load is one address per half-warp, and rows one apart (kXStride = 36 floats)
/// start 4 banks apart, so the two addresses never share a bank. With whole blocks of
/// kThreadRows rows per half the two would start 8 x 36 = 288 floats apart, a multiple
/// of the 32 banks: a two-way conflict on every x load.
template <int kRows>
struct FmaTiling {
  static constexpr int kThreadRows = kFmaThreadRows;
  static constexpr int kWarpRows = 2 * kThreadRows;
  static constexpr int kRowGroups = kRows / kWarpRows;
  static constexpr int kKGroups = kWarps / kRowGroups;
  static_assert(kRowGroups * kWarpRows == kRows && kKGroups * kRowGroups == kWarps,
                "the warps must tile the rows and the chunk exactly");
  static_assert((kChunkRows / 4) % kKGroups == 0, "every k-group takes the same steps");
};

/// The TF32 path's split: warp w takes columns 16 (w % 4) .. + 15 (two n8 tiles) for
/// every m16 tile of rows, and the chunk's k8 steps w / 4, w / 4 + 2.
constexpr int kTf32ColumnGroups = kTileColumns / 16;
constexpr int kTf32KGroups = kWarps / kTf32ColumnGroups;

/// Row tiles of up to 8 rows in fp32 take the register-direct kernel (no weight in
/// shared memory); larger ones and TF32 the shared-memory pipeline.
__host__ __device__ constexpr bool is_register_direct(int rows, DecodePrecision precision) {
  return precision == DecodePrecision::kFp32 && rows <= 8;
}

/// The register-direct kernel's split of a chunk: a step of the block reads 16 rows x 64
/// columns, 256 pieces of 16 bytes, one per thread; thread t takes row t / 16 of every
/// step (its k-group) and columns 4 (t % 16) .. + 3; a chunk is two steps.
constexpr int kDirectPiecesPerRow = kTileColumns / 4;              // 16
constexpr int kDirectKGroups = kThreads / kDirectPiecesPerRow;     // 16
constexpr int kDirectStepsPerChunk = kChunkRows / kDirectKGroups;  // 2
/// Chunks of the weight a thread has in flight: 2 x 16 bytes each, 8 KiB a block each.
constexpr int kDirectChunksAhead = 4;
/// Chunks of x staged in shared memory at once: 1024 inputs, all of GPT-2's K = 768 and
/// 1024; a block with more chunks than that stages its x window after window.
constexpr int kDirectXWindowChunks = 32;
static_assert(kDirectXWindowChunks % kDirectChunksAhead == 0,
              "a window ends where the ring of loads comes round");
/// Blocks a multiprocessor holds of the register-direct kernel (its registers' bound):
/// at 2 rows a thread's sums are 8 floats and 3 blocks fit in 80 registers (4, in 64,
/// spill); at 8 rows its 32 sums, 32 floats of weight in flight and 16 of x take more
/// than 80: 2.
__host__ __device__ constexpr int direct_blocks_per_multiprocessor(int rows) {
  return rows <= 2 ? 3 : 2;
}

__host__ __device__ constexpr int stage_floats(int rows) {
  return kChunkRows * kWeightStride + rows * kXStride;
}

/// Shared-memory stages of the pipeline for row tile `rows`: a block has up to stages - 1
/// chunks in flight, 8 KiB of weight each. A block of a small row tile does little
/// arithmetic per chunk, so its two blocks a multiprocessor stream only as fast as the
/// bytes they keep in flight cover the memory's latency under load. At 16 rows a stage
/// is small (11 KiB), so 8 stages fit twice in a multiprocessor (90 KiB a block); from
/// 32 rows the tiles are larger and a block has more arithmetic per chunk: 4.
__host__ __device__ constexpr int stages_for(int rows) { return rows <= 16 ? 8 : 4; }

__host__ __device__ constexpr int k_groups(int rows, DecodePrecision precision) {
  return is_register_direct(rows, precision)   ? kWarps
         : precision == DecodePrecision::kTf32 ? kTf32KGroups
                                               : kWarps / (rows / (2 * kFmaThreadRows));
}

/// Dynamic shared memory of a block: the pipeline (or the register-direct kernel's x
/// window), or the tail's tiles if larger.
__host__ __device__ constexpr int shared_bytes(int rows, DecodePrecision precision) {
  const int staged = is_register_direct(rows, precision) ? kDirectXWindowChunks * kChunkRows * rows
                                                         : stages_for(rows) * stage_floats(rows);
  const int tail = k_groups(rows, precision) * rows * kTileStride;
  return static_cast<int>(sizeof(float)) * (staged > tail ? staged : tail);
}

// Every block must launch on each GPU the release preset builds for: sm_86 and sm_89 give
// a block at most 99 KiB of shared memory. Two blocks must fit one of sm_90's 228 KiB (the
// plan counts two a multiprocessor). Each with 2 KiB for the static shared memory and the
// 1 KiB the driver reserves per block.
constexpr int kSmallestBlockShared = 99 * 1024;
constexpr int kSm90MultiprocessorShared = 228 * 1024;
constexpr int kSharedBesidesDynamic = 3 * 1024;
constexpr bool fits_everywhere(int rows, DecodePrecision precision) {
  return shared_bytes(rows, precision) + kSharedBesidesDynamic <= kSmallestBlockShared &&
         kTargetBlocksPerMultiprocessor * (shared_bytes(rows, precision) + kSharedBesidesDynamic) <=
             kSm90MultiprocessorShared;
}
static_assert(fits_everywhere(2, DecodePrecision::kFp32) &&
                  fits_everywhere(8, DecodePrecision::kFp32) &&
                  fits_everywhere(16, DecodePrecision::kFp32) &&
                  fits_everywhere(32, DecodePrecision::kFp32) &&
                  fits_everywhere(64, DecodePrecision::kFp32) &&
                  fits_everywhere(16, DecodePrecision::kTf32) &&
                  fits_everywhere(32, DecodePrecision::kTf32) &&
                  fits_everywhere(64, DecodePrecision::kTf32),
              "a row tile's shared memory no longer fits every GPU the release preset builds for");

int row_tile_for(int B, DecodePrecision precision) {
  if (B <= 2 && precision == DecodePrecision::kFp32) return 2;
  if (B <= 8 && precision == DecodePrecision::kFp32) return 8;
  if (B <= 16) return 16;
  if (B <= 32) return 32;
  return 64;
}

// ---------------------------------------------------------------- cp.async

constexpr unsigned int kFloatBytes = sizeof(float);

/// The address of `pointer`, which points into shared memory, in the .shared state space
/// (what cp.async takes as its destination).
__device__ __forceinline__ unsigned int shared_address(const float* pointer) {
  return static_cast<unsigned int>(__cvta_generic_to_shared(pointer));
}

/// Copies kBytes global -> shared (`destination`, a shared_address) without holding a
/// register; with fill false the bytes are zeros. 16 bytes go through L2 only
/// (cp.async.cg: the weight is read once), 4 bytes (x rows that are not 16-byte aligned)
/// through L1 (cp.async.ca).
template <int kBytes>
__device__ __forceinline__ void copy_async(unsigned int destination, const float* global,
                                           bool fill) {
  static_assert(kBytes == 16 || kBytes == 4, "cp.async moves 16 or 4 bytes here");
  const int source_bytes = fill ? kBytes : 0;
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(global),
                 "r"(source_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(destination), "l"(global),
                 "r"(source_bytes)
                 : "memory");
  }
}

__device__ __forceinline__ void commit_async_copies() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_async_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// ---------------------------------------------------------------- a thread's copies

// Every chunk moves the same pieces to the same places of a stage, from one chunk further
// along W and x; so a thread forms its pieces' addresses once and advances its sources
// by a constant per chunk. Recomputed per chunk, that arithmetic (64-bit sources, the
// rows and columns of each piece) took about as many instructions as the chunk's
// multiply-adds.

/// One thread's copies of the weight, chunk after chunk of its column tile. A chunk is
/// 32 rows x 16 pieces of 16 bytes, contiguous in the packed weight (piece p at 4 p
/// floats); thread t copies pieces t + i kThreads, to row p / 16, column 4 (p % 16).
class WeightCopies {
 public:
  static constexpr int kPiecesPerRow = kTileColumns / 4;
  static constexpr int kPieces = kChunkRows * kPiecesPerRow / kThreads;  // per thread
  static constexpr int kRowsApart = kThreads / kPiecesPerRow;  // between a thread's pieces
  static_assert(kPieces * kThreads == kChunkRows * kPiecesPerRow, "W pieces split evenly");

  /// The first chunk to request is the one at `chunk_weight`.
  __device__ explicit WeightCopies(const float* chunk_weight)
      : source_(chunk_weight + 4 * threadIdx.x),
        place_(kFloatBytes *
               (threadIdx.x / kPiecesPerRow * kWeightStride + 4 * (threadIdx.x % kPiecesPerRow))) {}

  /// Requests the next chunk into the stage at shared address `stage`.
  __device__ __forceinline__ void request_next(unsigned int stage) {
#pragma unroll
    for (int i = 0; i < kPieces; ++i)
      copy_async<16>(stage + place_ + kFloatBytes * i * kRowsApart * kWeightStride,
                     source_ + i * 4 * kThreads, true);
    source_ += kChunkRows * kTileColumns;
  }

 private:
  const float* source_;  ///< piece t of the next chunk
  unsigned int place_;   ///< bytes from a stage's start to piece t's place
};

/// One thread's copies of x, chunk after chunk: rows [0, kRows) x the chunk's 32 columns
/// of K, as pieces of 4 floats (kXVector: K % 4 == 0 and x 16-byte aligned, so a piece is
/// all inside K or all past it) or of one; zeros past B and past K. Thread t copies pieces
/// t + i kThreads: as kThreads is a multiple of the pieces in a row, they share a column
/// and lie kRowsApart rows apart, and from chunk to chunk only the column moves. A piece
/// is found by its 32-bit offset in x (run_product checks that B K fits): a 64-bit pointer
/// per piece cost registers and more instructions per chunk.
template <int kRows, bool kXVector>
class XCopies {
 public:
  static constexpr int kWidth = kXVector ? 4 : 1;  // floats per piece
  static constexpr int kPiecesPerRow = kChunkRows / kWidth;
  static constexpr int kRowsApart = kThreads / kPiecesPerRow;
  static constexpr int kPieces = (kRows + kRowsApart - 1) / kRowsApart;  // per thread
  static_assert(kRowsApart * kPiecesPerRow == kThreads, "a thread's pieces share a column");

  /// The first chunk to request is `first_chunk`.
  __device__ XCopies(const DecodeMatmulArguments& a, int first_chunk)
      : x_(a.x),
        B_(a.B),
        K_(a.K),
        first_row_(static_cast<int>(threadIdx.x) / kPiecesPerRow),
        column_(first_chunk * kChunkRows +
                kWidth * (static_cast<int>(threadIdx.x) % kPiecesPerRow)),
        offset_(static_cast<unsigned int>(first_row_) * a.K + column_),
        place_(kFloatBytes * (kChunkRows * kWeightStride + first_row_ * kXStride +
                              kWidth * (threadIdx.x % kPiecesPerRow))) {}

  /// Requests the next chunk into the stage at shared address `stage`.
  __device__ __forceinline__ void request_next(unsigned int stage) {
    const bool column_inside = column_ < K_;
#pragma unroll
    for (int i = 0; i < kPieces; ++i) {
      const int row = first_row_ + i * kRowsApart;
      if (kRows < kRowsApart && row >= kRows) continue;  // a small tile: some threads idle
      const bool inside = column_inside && row < B_;
      const unsigned int offset = offset_ + i * kRowsApart * static_cast<unsigned int>(K_);
      copy_async<kFloatBytes * kWidth>(stage + place_ + kFloatBytes * i * kRowsApart * kXStride,
                                       x_ + (inside ? offset : 0u), inside);
    }
    offset_ += kChunkRows;
    column_ += kChunkRows;
  }

 private:
  const float* x_;  ///< the source of the zero copies: any valid address
  int B_;
  int K_;
  int first_row_;        ///< of piece 0
  int column_;           ///< of K, the thread's column in the next chunk
  unsigned int offset_;  ///< of piece 0 of the next chunk, in floats from x (wraps past B)
  unsigned int place_;   ///< bytes from a stage's start to piece 0's place
};

// ---------------------------------------------------------------- the pipeline

/// Chunks of the weight a programmatic dependent launch prefetches into L2 before its
/// wait, past the stages - 1 it copies into shared memory (8 KiB each).
constexpr int kL2PrefetchChunks = 4;

/// Streams chunks first_chunk .. first_chunk + chunk_count - 1 of column tile `tile`
/// through stages_for(kRows) shared-memory stages and calls compute(w, x) on each, w the chunk
/// [32][kWeightStride] and x the rows of x for the same 32 k [kRows][kXStride] (zeros
/// past B and past K). Returns when every copy has landed and every thread is done
/// with shared memory. The first stages' weight is requested before
/// wait_for_previous_kernel, x only after it (decode_matmul.cuh: programmatic launch).
/// Chunk c sits in stage c % kStages.
template <int kRows, bool kXVector, typename Compute>
__device__ __forceinline__ void stream_chunks(const DecodeMatmulArguments& a, int tile,
                                              int first_chunk, int chunk_count, float* shared,
                                              const Compute& compute) {
  constexpr int kStages = stages_for(kRows);
  constexpr int kChunkFloats = kChunkRows * kTileColumns;  // 32 rows x 64 columns, contiguous
  const float* first_weight = a.weight +
                              static_cast<std::size_t>(tile) * a.padded_rows * kTileColumns +
                              static_cast<std::size_t>(first_chunk) * kChunkFloats;
  WeightCopies weight(first_weight);
  XCopies<kRows, kXVector> x(a, first_chunk);
  const unsigned int pipeline = shared_address(shared);
  const auto stage_address = [&](int stage) {
    return pipeline + kFloatBytes * stage * stage_floats(kRows);
  };

  // The weight does not depend on the kernel before: its first stages, and with a
  // programmatic launch the next chunks into L2 (one 128-byte line per thread of the
  // first 64), are requested before the wait. Group `stage` then holds x of that stage
  // (group 0 also the weight of every first stage), so the waits below count as before.
  for (int stage = 0; stage < kStages - 1; ++stage)
    if (stage < chunk_count) weight.request_next(stage_address(stage));
  if (a.programmatic) {
    constexpr int kLineFloats = 128 / sizeof(float);
    constexpr int kLinesPerChunk = kChunkFloats / kLineFloats;  // 64
    const int last = min(chunk_count, kStages - 1 + kL2PrefetchChunks);
    if (threadIdx.x < kLinesPerChunk) {
      for (int chunk = kStages - 1; chunk < last; ++chunk)
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(first_weight + chunk * kChunkFloats +
                                                        threadIdx.x * kLineFloats));
    }
  }
  wait_for_previous_kernel();
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (stage < chunk_count) x.request_next(stage_address(stage));
    commit_async_copies();  // an empty group keeps the counting below uniform
  }
  for (int chunk = 0; chunk < chunk_count; ++chunk) {
    wait_async_copies<kStages - 2>();  // this thread's copies of `chunk` have landed
    __syncthreads();                   // everyone's have, and chunk - 1's stage is free
    const int ahead = chunk + kStages - 1;
    if (ahead < chunk_count) {
      const unsigned int free_stage = stage_address(ahead % kStages);
      weight.request_next(free_stage);
      x.request_next(free_stage);
    }
    commit_async_copies();
    const float* w = shared + (chunk % kStages) * stage_floats(kRows);
    compute(w, w + kChunkRows * kWeightStride);
  }
  wait_async_copies<0>();
  __syncthreads();
}

/// The block's dynamic shared memory (16-byte aligned: float4 copies land there).
__device__ __forceinline__ float* dynamic_shared_memory() {
  extern __shared__ float4 shared_storage[];
  return reinterpret_cast<float*>(shared_storage);
}

// ---------------------------------------------------------------- fp32: FFMA

// Math:   y = x W over this block's rows of K, for the rows of x below B and the 64
//         columns of tile blockIdx.y; then the tail (splits, epilogue).
// Shapes: see DecodeMatmulArguments; kRows in {16, 32, 64}, kRows >= B.
// Grid:   (S, T) blocks of 256 threads. Warp w: row group w % kRowGroups, k-group
//         w / kRowGroups; lane l: rows l / 16 + 2 r (r < kThreadRows) of the warp's
//         rows, columns 4 (l % 16) + [0, 4). Per 4 rows k .. k + 3 of a chunk a
//         thread loads 4 float4 of W and one float4 of x per row (a broadcast: all 16
//         lanes of a half-warp read the same address) for 16 FFMA per row.
// Promises: LDGSTS.E.BYPASS.128<ACQBULK PREEXIT UCGABAR_ARV UCGABAR_WAIT
template <int kRows, bool kXVector>
__global__ void __launch_bounds__(kThreads, kTargetBlocksPerMultiprocessor)
    decode_matmul_fp32_kernel(const DecodeMatmulArguments a) {
  allow_next_kernel_to_launch();  // first thing: decode_matmul.cuh, "Programmatic dependent launch"
  using Tiling = FmaTiling<kRows>;
  constexpr int kThreadRows = Tiling::kThreadRows;
  float* shared = dynamic_shared_memory();
  const int split = blockIdx.x;
  const int tile = blockIdx.y;
  const float2 bias = load_tile_bias(a, tile);  // before the wait: a weight
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int row_group = warp % Tiling::kRowGroups;
  const int k_group = warp / Tiling::kRowGroups;
  // This thread's rows: first_row + 2 r (FmaTiling: the half-warps alternate rows).
  const int first_row = row_group * Tiling::kWarpRows + lane / 16;
  const int column = 4 * (lane % 16);

  float sums[kThreadRows][4] = {};
  const ChunkRange range = chunk_range(a, split);
  stream_chunks<kRows, kXVector>(
      a, tile, range.first, range.count, shared, [&](const float* w, const float* xs) {
        constexpr int kSteps = kChunkRows / 4 / Tiling::kKGroups;
#pragma unroll
        for (int step = 0; step < kSteps; ++step) {
          const int k = 4 * (k_group + step * Tiling::kKGroups);
          float4 weights[4];
#pragma unroll
          for (int i = 0; i < 4; ++i)
            weights[i] = *reinterpret_cast<const float4*>(w + (k + i) * kWeightStride + column);
#pragma unroll
          for (int r = 0; r < kThreadRows; ++r) {
            const float4 xv =
                *reinterpret_cast<const float4*>(xs + (first_row + 2 * r) * kXStride + k);
            const float x_k[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              sums[r][0] = fmaf(x_k[i], weights[i].x, sums[r][0]);
              sums[r][1] = fmaf(x_k[i], weights[i].y, sums[r][1]);
              sums[r][2] = fmaf(x_k[i], weights[i].z, sums[r][2]);
              sums[r][3] = fmaf(x_k[i], weights[i].w, sums[r][3]);
            }
          }
        }
      });

  float* group_tile = shared + k_group * kRows * kTileStride;
#pragma unroll
  for (int r = 0; r < kThreadRows; ++r)
    *reinterpret_cast<float4*>(group_tile + (first_row + 2 * r) * kTileStride + column) =
        make_float4(sums[r][0], sums[r][1], sums[r][2], sums[r][3]);
  finish_tile<kRows>(a, tile, split, bias, shared, Tiling::kKGroups);
}

// ---------------------------------------------------------------- fp32 register-direct

// At row tiles of 2 and 8 a chunk has little arithmetic (16 and 64 FFMA a thread), and
// the pipeline's copies, waits and barrier per chunk cost more instructions than the
// multiply-adds: the kernel was bound by instructions, not bytes. Here the weight goes
// from global memory straight into registers, several chunks ahead, and only x, staged
// once per block (per window of 32 chunks), sits in shared memory: no barrier per chunk.

/// 16 bytes of the weight, read once by one thread: through the non-coherent path,
/// without a line in L1 (nothing else reads it on this multiprocessor).
__device__ __forceinline__ float4 load_weight_piece(const float* at) {
  float4 piece;
  asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(piece.x), "=f"(piece.y), "=f"(piece.z), "=f"(piece.w)
               : "l"(at));
  return piece;
}

/// Where input `k` (of the window) of row `row` sits in the staged x: the chunk's
/// 32 inputs k-group by k-group, each group's two inputs (steps) side by side, each input
/// kRows rows: a thread finds its chunk's 2 kRows values in one contiguous run.
template <int kRows>
__device__ __forceinline__ int staged_x_index(int k, int row) {
  const int chunk = k / kChunkRows;
  const int in_chunk = k % kChunkRows;
  return ((chunk * kDirectKGroups + in_chunk % kDirectKGroups) * kDirectStepsPerChunk +
          in_chunk / kDirectKGroups) *
             kRows +
         row;
}

/// x rows [0, kRows) x inputs first_k .. first_k + 32 chunks - 1 into `staged`
/// (staged_x_index), zeros past B and past K; as 16-byte loads when kXVector (K % 4 == 0
/// and x 16-byte aligned, so a piece is all inside K or all past it). Every row's load
/// of a piece is issued before the first store.
template <int kRows, bool kXVector>
__device__ __forceinline__ void stage_x(const DecodeMatmulArguments& a, int first_k, int chunks,
                                        float* staged) {
  constexpr int kWidth = kXVector ? 4 : 1;  // floats per piece
  const int inputs = chunks * kChunkRows;
  for (int k = kWidth * static_cast<int>(threadIdx.x); k < inputs; k += kWidth * kThreads) {
    const int column = first_k + k;
    float values[kRows][kWidth];
#pragma unroll
    for (int row = 0; row < kRows; ++row) {
      const float* source = a.x + static_cast<unsigned int>(row) * a.K + column;
      if constexpr (kXVector) {
        const float4 piece = row < a.B && column < a.K ? *reinterpret_cast<const float4*>(source)
                                                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        values[row][0] = piece.x;
        values[row][1] = piece.y;
        values[row][2] = piece.z;
        values[row][3] = piece.w;
      } else {
        values[row][0] = row < a.B && column < a.K ? *source : 0.0f;
      }
    }
#pragma unroll
    for (int row = 0; row < kRows; ++row)
#pragma unroll
      for (int i = 0; i < kWidth; ++i) staged[staged_x_index<kRows>(k + i, row)] = values[row][i];
  }
}

// Math:   as decode_matmul_fp32_kernel; kRows in {2, 8}.
// Shapes: see DecodeMatmulArguments; kRows >= B.
// Grid:   (S, T) blocks of 256 threads. Thread t: k-group t / 16, columns 4 (t % 16)
//         + [0, 4); of each chunk it reads rows t / 16 and t / 16 + 16, the two 16-byte
//         pieces at 4 t and 4 t + 1024 floats (a warp: 512 contiguous bytes), kept
//         kDirectChunksAhead chunks ahead in registers (32 KiB a block in flight), and
//         its 2 kRows values of x in one run of shared memory (a broadcast to the 16 lanes
//         of a half-warp) for 8 kRows FFMA. The warp's two k-groups add by a shuffle
//         (the lower first), and the 8 warps' tiles go to the tail in warp order.
// Promises: LDG.E.NA.128.CONSTANT<ACQBULK PREEXIT UCGABAR_ARV UCGABAR_WAIT
template <int kRows, bool kXVector>
__global__ void __launch_bounds__(kThreads, direct_blocks_per_multiprocessor(kRows))
    decode_matmul_fp32_direct_kernel(const DecodeMatmulArguments a) {
  static_assert(is_register_direct(kRows, DecodePrecision::kFp32) && kRows % 2 == 0,
                "register-direct row tiles: 2 or 8");
  allow_next_kernel_to_launch();  // first thing: decode_matmul.cuh, "Programmatic dependent launch"
  constexpr int kChunkFloats = kChunkRows * kTileColumns;     // 32 rows x 64 columns, contiguous
  constexpr int kStepFloats = kDirectKGroups * kTileColumns;  // 16 rows
  float* shared = dynamic_shared_memory();
  const int split = blockIdx.x;
  const int tile = blockIdx.y;
  const float2 bias = load_tile_bias(a, tile);  // before the wait: a weight
  const int k_group = static_cast<int>(threadIdx.x) / kDirectPiecesPerRow;
  const int column = 4 * (static_cast<int>(threadIdx.x) % kDirectPiecesPerRow);
  const ChunkRange range = chunk_range(a, split);
  const float* first_weight = a.weight +
                              static_cast<std::size_t>(tile) * a.padded_rows * kTileColumns +
                              static_cast<std::size_t>(range.first) * kChunkFloats;

  // Chunk c of the range sits in pieces[c % kDirectChunksAhead] from its load until its
  // multiply-adds; the loads go in chunk order, so one pointer walks the weight.
  float4 pieces[kDirectChunksAhead][kDirectStepsPerChunk];
  const float* next_weight = first_weight + 4 * threadIdx.x;
  int chunks_requested = 0;
  const auto request_next = [&](float4(&into)[kDirectStepsPerChunk]) {
    if (chunks_requested < range.count) {
#pragma unroll
      for (int step = 0; step < kDirectStepsPerChunk; ++step)
        into[step] = load_weight_piece(next_weight + step * kStepFloats);
    }
    next_weight += kChunkFloats;
    ++chunks_requested;
  };

  // The weight does not depend on the kernel before: the first chunks, and with a
  // programmatic launch the next ones into L2 (one 128-byte line per thread of the first
  // 64), are requested before the wait; x only after it (decode_matmul.cuh).
#pragma unroll
  for (int i = 0; i < kDirectChunksAhead; ++i) request_next(pieces[i]);
  if (a.programmatic) {
    constexpr int kLineFloats = 128 / sizeof(float);
    constexpr int kLinesPerChunk = kChunkFloats / kLineFloats;  // 64
    const int last = min(range.count, kDirectChunksAhead + kL2PrefetchChunks);
    if (threadIdx.x < kLinesPerChunk) {
      for (int chunk = kDirectChunksAhead; chunk < last; ++chunk)
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(first_weight + chunk * kChunkFloats +
                                                        threadIdx.x * kLineFloats));
    }
  }
  wait_for_previous_kernel();

  // This thread's run of x in the first chunk of a window; chunk c's is c runs further.
  constexpr int kStagedChunkFloats = kChunkRows * kRows;
  const float* thread_x = shared + staged_x_index<kRows>(k_group, 0);
  float sums[kRows][4] = {};
  for (int window = 0; window < range.count; window += kDirectXWindowChunks) {
    const int window_chunks = min(kDirectXWindowChunks, range.count - window);
    if (window > 0) __syncthreads();  // every thread is done with the last window's x
    stage_x<kRows, kXVector>(a, (range.first + window) * kChunkRows, window_chunks, shared);
    __syncthreads();
    for (int chunk = 0; chunk < window_chunks; chunk += kDirectChunksAhead) {
#pragma unroll
      for (int i = 0; i < kDirectChunksAhead; ++i) {
        if (chunk + i >= window_chunks) break;  // the same for the whole block
        // x of this thread's two inputs, each for every row: [step][row].
        const float* run = thread_x + (chunk + i) * kStagedChunkFloats;
        float x_values[kDirectStepsPerChunk * kRows];
#pragma unroll
        for (int q = 0; q < kDirectStepsPerChunk * kRows / 4; ++q) {
          const float4 four = reinterpret_cast<const float4*>(run)[q];
          x_values[4 * q] = four.x;
          x_values[4 * q + 1] = four.y;
          x_values[4 * q + 2] = four.z;
          x_values[4 * q + 3] = four.w;
        }
#pragma unroll
        for (int step = 0; step < kDirectStepsPerChunk; ++step) {
          const float4 w = pieces[i][step];
#pragma unroll
          for (int row = 0; row < kRows; ++row) {
            const float x_k = x_values[step * kRows + row];
            sums[row][0] = fmaf(x_k, w.x, sums[row][0]);
            sums[row][1] = fmaf(x_k, w.y, sums[row][1]);
            sums[row][2] = fmaf(x_k, w.z, sums[row][2]);
            sums[row][3] = fmaf(x_k, w.w, sums[row][3]);
          }
        }
        request_next(pieces[i]);
      }
    }
  }

  // Lanes l and l + 16 hold k-groups 2 w and 2 w + 1 of the same columns: the lower
  // half adds the upper's sums to its own and stores the warp's tile.
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
#pragma unroll
  for (int row = 0; row < kRows; ++row)
#pragma unroll
    for (int j = 0; j < 4; ++j) sums[row][j] += __shfl_down_sync(0xffffffffu, sums[row][j], 16);
  __syncthreads();  // the tiles overwrite the staged x
  if (lane < kDirectPiecesPerRow) {
    float* warp_tile = shared + warp * kRows * kTileStride;
#pragma unroll
    for (int row = 0; row < kRows; ++row)
      *reinterpret_cast<float4*>(warp_tile + row * kTileStride + column) =
          make_float4(sums[row][0], sums[row][1], sums[row][2], sums[row][3]);
  }
  finish_tile<kRows>(a, tile, split, bias, shared, kWarps);
}

// ---------------------------------------------------------------- tf32: mma.sync

/// fp32 -> tf32, rounded to nearest (the bits of a float with a 10-bit mantissa).
__device__ __forceinline__ std::uint32_t to_tf32(float value) {
  std::uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(value));
  return bits;
}

/// d += a b for one m16n8k8 tile: a 16 x 8 (row), b 8 x 8 (col), d 16 x 8 fp32.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const std::uint32_t (&a)[4],
                                         const std::uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Math:   as decode_matmul_fp32_kernel, the products on the tensor cores in TF32.
// Shapes: as there; kRows in {16, 32, 64}.
// Grid:   (S, T) blocks of 256 threads. Warp w: columns 16 (w % 4) .. + 15 as two n8
//         tiles, all kRows / 16 m16 tiles of rows, the chunk's k8 steps w / 4 and
//         w / 4 + 2. Lane l = 4 g + t holds the PTX fragments: a (rows g, g + 8; k t,
//         t + 4), b (k t, t + 4; column g), d (rows g, g + 8; columns 2 t, 2 t + 1).
// Promises: LDGSTS.E.BYPASS.128<ACQBULK HMMA.1688.F32.TF32 PREEXIT UCGABAR_ARV UCGABAR_WAIT
template <int kRows, bool kXVector>
__global__ void __launch_bounds__(kThreads, kTargetBlocksPerMultiprocessor)
    decode_matmul_tf32_kernel(const DecodeMatmulArguments a) {
  constexpr int kMTiles = kRows / 16;
  static_assert(kMTiles * 16 == kRows, "tf32 row tiles are multiples of 16");
  allow_next_kernel_to_launch();  // first thing: decode_matmul.cuh, "Programmatic dependent launch"
  float* shared = dynamic_shared_memory();
  const int split = blockIdx.x;
  const int tile = blockIdx.y;
  const float2 bias = load_tile_bias(a, tile);  // before the wait: a weight
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int column_group = warp % kTf32ColumnGroups;
  const int k_group = warp / kTf32ColumnGroups;
  const int g = lane / 4;
  const int t = lane % 4;

  float sums[kMTiles][2][4] = {};
  const ChunkRange range = chunk_range(a, split);
  stream_chunks<kRows, kXVector>(
      a, tile, range.first, range.count, shared, [&](const float* w, const float* xs) {
        constexpr int kSteps = kChunkRows / 8 / kTf32KGroups;
#pragma unroll
        for (int step = 0; step < kSteps; ++step) {
          const int k = 8 * (k_group + step * kTf32KGroups);
          std::uint32_t b[2][2];
#pragma unroll
          for (int n8 = 0; n8 < 2; ++n8) {
            const int n = 16 * column_group + 8 * n8 + g;
            b[n8][0] = to_tf32(w[(k + t) * kWeightStride + n]);
            b[n8][1] = to_tf32(w[(k + t + 4) * kWeightStride + n]);
          }
#pragma unroll
          for (int m16 = 0; m16 < kMTiles; ++m16) {
            const float* x_rows = xs + (16 * m16 + g) * kXStride + k + t;
            const std::uint32_t a_fragment[4] = {to_tf32(x_rows[0]), to_tf32(x_rows[8 * kXStride]),
                                                 to_tf32(x_rows[4]),
                                                 to_tf32(x_rows[8 * kXStride + 4])};
            mma_tf32(sums[m16][0], a_fragment, b[0]);
            mma_tf32(sums[m16][1], a_fragment, b[1]);
          }
        }
      });

  store_mma_sums<kRows>(shared, k_group, column_group, g, t, sums);
  finish_tile<kRows>(a, tile, split, bias, shared, kTf32KGroups);
}

// ---------------------------------------------------------------- host side

using KernelPointer = void (*)(DecodeMatmulArguments);

/// The kernel for a row tile, a precision and the x path.
KernelPointer kernel_for(int rows, DecodePrecision precision, bool x_vector) {
  if (precision == DecodePrecision::kTf32) {
    switch (rows) {
      case 16:
        return x_vector ? decode_matmul_tf32_kernel<16, true>
                        : decode_matmul_tf32_kernel<16, false>;
      case 32:
        return x_vector ? decode_matmul_tf32_kernel<32, true>
                        : decode_matmul_tf32_kernel<32, false>;
      default:
        return x_vector ? decode_matmul_tf32_kernel<64, true>
                        : decode_matmul_tf32_kernel<64, false>;
    }
  }
  switch (rows) {
    case 2:
      return x_vector ? decode_matmul_fp32_direct_kernel<2, true>
                      : decode_matmul_fp32_direct_kernel<2, false>;
    case 8:
      return x_vector ? decode_matmul_fp32_direct_kernel<8, true>
                      : decode_matmul_fp32_direct_kernel<8, false>;
    case 16:
      return x_vector ? decode_matmul_fp32_kernel<16, true> : decode_matmul_fp32_kernel<16, false>;
    case 32:
      return x_vector ? decode_matmul_fp32_kernel<32, true> : decode_matmul_fp32_kernel<32, false>;
    default:
      return x_vector ? decode_matmul_fp32_kernel<64, true> : decode_matmul_fp32_kernel<64, false>;
  }
}

/// Every (rows, precision) the launchers use.
struct KernelVariant {
  int rows;
  DecodePrecision precision;
};
constexpr KernelVariant kVariants[] = {{2, DecodePrecision::kFp32},  {8, DecodePrecision::kFp32},
                                       {16, DecodePrecision::kFp32}, {32, DecodePrecision::kFp32},
                                       {64, DecodePrecision::kFp32}, {16, DecodePrecision::kTf32},
                                       {32, DecodePrecision::kTf32}, {64, DecodePrecision::kTf32}};

/// The most partial floats and counters any plan can ask for: a split plan (S > 1) has
/// at most 2 slots blocks (plan_decode_matmul), so T S <= 2 slots and T <= slots.
std::size_t max_partial_floats(int multiprocessors) {
  return std::size_t{2} * kTargetBlocksPerMultiprocessor * multiprocessors * kDecodeMaxRows *
         kTileColumns;
}

struct ProductPointers {
  const float* x;
  const float* weight;
  const float* bias;
  float* out;
  float* candidate_values;
  std::int32_t* candidate_indices;
};

void run_product(const char* launcher, const ProductPointers& p, int B, int K, int N,
                 DecodeEpilogue epilogue, DecodePrecision precision,
                 DecodeMatmulWorkspace& workspace, cudaStream_t stream, DecodeLaunch launch) {
  const DecodeMatmulPlan plan = plan_decode_matmul(B, K, N, precision, workspace);
  launch_checks::require(static_cast<unsigned long long>(B) * K <= 0xFFFFFFFFull, launcher,
                         "B * K must be below 2^32: the kernels address x with 32-bit offsets");
  const DecodeMatmulArguments arguments = decode_common::product_arguments(
      launcher, p.x, p.weight, p.bias, p.out, p.candidate_values, p.candidate_indices, B, K, N,
      DecodeWeightLayout::of(K, N).padded_rows, epilogue, plan, workspace, launch);
  const bool x_vector = K % 4 == 0 && launch_checks::is_16_byte_aligned(p.x);
  const dim3 grid(static_cast<unsigned int>(plan.splits),
                  static_cast<unsigned int>(plan.column_tiles));
  decode_common::launch_product_kernel(
      kernel_for(plan.row_tile, precision, x_vector), grid,
      static_cast<std::size_t>(shared_bytes(plan.row_tile, precision)), arguments, workspace,
      stream);
}

/// The floats of the [rows, columns] device matrix at `device`, on the host.
std::vector<float> download_matrix(const float* device, int rows, int columns) {
  std::vector<float> host(static_cast<std::size_t>(rows) * columns);
  CUDA_CHECK(cudaMemcpy(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace

DecodeSplits choose_decode_splits(int chunks, int column_tiles, int multiprocessors,
                                  int resident_blocks) {
  launch_checks::require_positive("choose_decode_splits", {{"chunks", chunks},
                                                           {"column_tiles", column_tiles},
                                                           {"multiprocessors", multiprocessors},
                                                           {"resident_blocks", resident_blocks}});
  // The splits that take the fewest rounds of chunks: a block streams chunks_per_split
  // chunks, and the grid runs in ceil(blocks / slots) waves of `slots` resident blocks,
  // so the time goes as waves x chunks_per_split. Ties go to fewer splits (fewer partial
  // tiles to add up); at most 2 slots blocks (the workspace's size). Where the best's
  // splits could not be summed in a thread-block cluster (more than one cluster holds, or
  // a grid too full for clusters: decode_common::grid_leaves_room_for_clusters, asked of
  // the kernel's own resident blocks, as the launch asks it), the best whose could is
  // taken instead if it streams at most one chunk more a block: its splits are summed on
  // chip, where the others go through the workspace's round trip, which costs a product
  // more than a chunk's stream (decode_matmul.cuh, "Thread-block clusters").
  const long long slots = static_cast<long long>(kTargetBlocksPerMultiprocessor) * multiprocessors;
  const long long resident_slots = static_cast<long long>(resident_blocks) * multiprocessors;
  const auto summed_in_a_cluster = [&](int splits, long long blocks) {
    return splits > 1 && splits <= decode_common::kMaxClusterBlocks &&
           decode_common::grid_leaves_room_for_clusters(blocks, resident_slots);
  };
  DecodeSplits best{1, chunks};
  DecodeSplits best_in_a_cluster{1, chunks};
  long long best_cost = -1;
  long long best_cost_in_a_cluster = -1;
  for (int wanted = 1; wanted <= chunks; ++wanted) {
    const int chunks_per_split = (chunks + wanted - 1) / wanted;
    const int splits = (chunks + chunks_per_split - 1) / chunks_per_split;
    const long long blocks = static_cast<long long>(splits) * column_tiles;
    if (splits > 1 && blocks > 2 * slots) break;  // more splits only add blocks
    const long long cost = (blocks + slots - 1) / slots * chunks_per_split;
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best = DecodeSplits{splits, chunks_per_split};
    }
    if (summed_in_a_cluster(splits, blocks) &&
        (best_cost_in_a_cluster < 0 || cost < best_cost_in_a_cluster)) {
      best_cost_in_a_cluster = cost;
      best_in_a_cluster = DecodeSplits{splits, chunks_per_split};
    }
  }
  if (best.splits > 1 && !summed_in_a_cluster(best.splits, best.splits * column_tiles) &&
      best_cost_in_a_cluster >= 0 && best_cost_in_a_cluster <= best_cost + 1)
    return best_in_a_cluster;
  return best;
}

DecodeMatmulPlan plan_decode_matmul(int B, int K, int N, DecodePrecision precision,
                                    DecodeMatmulWorkspace& workspace) {
  constexpr const char* kName = "plan_decode_matmul";
  const int row_tile = row_tile_for(B, precision);
  const int resident_blocks =
      workspace.resident_blocks(reinterpret_cast<const void*>(kernel_for(row_tile, precision,
                                                                         /*x_vector=*/K % 4 == 0)),
                                static_cast<std::size_t>(shared_bytes(row_tile, precision)));
  return decode_common::plan_decode_chunks(kName, B, K, N, workspace.multiprocessors(),
                                           resident_blocks, row_tile, kChunkRows);
}

PackedDecodeModel::PackedDecodeModel(const DeviceModel& model) {
  const Gpt2Config& config = model.config();
  const int C = config.n_embd;
  const int V = config.vocab_size;
  // Every packed weight in model order: offsets first, one allocation, then the copies.
  struct Packing {
    const float* source;
    int K;
    int N;
    bool transposed;  ///< source is [N, K] (wte), not [K, N]
    std::size_t offset;
  };
  std::vector<Packing> packings;
  std::size_t floats = 0;
  const auto add = [&](const float* source, int K, int N, bool transposed) {
    packings.push_back(Packing{source, K, N, transposed, floats});
    floats += DecodeWeightLayout::of(K, N).packed_floats();
  };
  for (int index = 0; index < config.n_layer; ++index) {
    const DeviceLayer layer = model.layer(index);
    add(layer.qkv_weight, C, 3 * C, false);
    add(layer.attn_proj_weight, C, C, false);
    add(layer.fc_weight, C, 4 * C, false);
    add(layer.mlp_proj_weight, 4 * C, C, false);
  }
  add(model.token_embedding(), C, V, true);

  values_ = static_cast<float*>(
      allocate_device_memory(floats * sizeof(float), "the packed decode weights"));
  floats_ = floats;
  try {
    for (const Packing& packing : packings) {
      const std::vector<float> packed =
          packing.transposed
              ? pack_decode_weight_transposed(
                    download_matrix(packing.source, packing.N, packing.K).data(), packing.N,
                    packing.K)
              : pack_decode_weight(download_matrix(packing.source, packing.K, packing.N).data(),
                                   packing.K, packing.N);
      CUDA_CHECK(cudaMemcpy(values_ + packing.offset, packed.data(), packed.size() * sizeof(float),
                            cudaMemcpyHostToDevice));
    }
    // The uploads are on the device before the kernels read them on non-blocking streams
    // (DeviceModel's upload, common/device_model.cpp, says why).
    CUDA_CHECK(cudaDeviceSynchronize());
  } catch (...) {
    cudaFree(values_);
    throw;
  }
  for (int index = 0; index < config.n_layer; ++index) {
    const Packing* at = packings.data() + 4 * index;
    layers_.push_back(Layer{values_ + at[0].offset, values_ + at[1].offset, values_ + at[2].offset,
                            values_ + at[3].offset});
  }
  lm_head_weight_ = values_ + packings.back().offset;
}

PackedDecodeModel::~PackedDecodeModel() {
  cudaFree(values_);  // a destructor must not throw
}

DecodeMatmulWorkspace::DecodeMatmulWorkspace() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device));
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  programmatic_launches_ = major >= 9;
  partial_floats_ = max_partial_floats(multiprocessors_);
  tile_counter_count_ = kTargetBlocksPerMultiprocessor * multiprocessors_;
  CUDA_CHECK(cudaMalloc(&partials_, partial_floats_ * sizeof(float)));
  const cudaError_t counters_status = cudaMalloc(
      &tile_counters_, static_cast<std::size_t>(tile_counter_count_) * sizeof(unsigned int));
  if (counters_status != cudaSuccess) {
    cudaFree(partials_);
    CUDA_CHECK(counters_status);
  }
  try {
    CUDA_CHECK(cudaMemset(tile_counters_, 0,
                          static_cast<std::size_t>(tile_counter_count_) * sizeof(unsigned int)));
    // Thread-block clusters (compute capability 9.0 on): of up to 16 blocks where every
    // kernel, fp32, tf32 and bf16, allows that size; else of the portable 8.
    bool large_clusters = major >= 9;
    for (const KernelVariant variant : kVariants) {
      for (const bool x_vector : {false, true}) {
        const auto kernel = kernel_for(variant.rows, variant.precision, x_vector);
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        shared_bytes(variant.rows, variant.precision)));
        if (large_clusters) large_clusters = decode_common::allow_large_clusters(kernel);
      }
    }
    if (large_clusters) large_clusters = decode_common::allow_large_clusters_bf16();
    cluster_splits_ = major < 9 ? 0 : large_clusters ? decode_common::kMaxClusterBlocks : 8;
    residency_.reserve(32);  // 16 fp32/tf32 and 12 bf16 kernels, one size each: no later growth
    builds_.reserve(32);
    clusters_.reserve(64);                // a kernel meets at most a few split counts
    CUDA_CHECK(cudaDeviceSynchronize());  // the counters are zero before any launch
  } catch (...) {
    cudaFree(partials_);
    cudaFree(tile_counters_);
    throw;
  }
}

int DecodeMatmulWorkspace::resident_blocks(const void* kernel, std::size_t shared_bytes) {
  for (const Residency& known : residency_)
    if (known.kernel == kernel && known.shared_bytes == shared_bytes) return known.blocks;
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, decode_common::kThreads,
                                                           shared_bytes));
  residency_.push_back(Residency{kernel, shared_bytes, blocks});
  return blocks;
}

KernelBuild DecodeMatmulWorkspace::build_of(const void* kernel) {
  for (const Build& known : builds_)
    if (known.kernel == kernel) return known.build;
  const KernelBuild build = kernel_build(kernel);
  builds_.push_back(Build{kernel, build});
  return build;
}

int DecodeMatmulWorkspace::active_clusters(const void* kernel, std::size_t shared_bytes,
                                           int cluster_blocks) {
  for (const Clusters& known : clusters_)
    if (known.kernel == kernel && known.shared_bytes == shared_bytes &&
        known.cluster_blocks == cluster_blocks)
      return known.clusters;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned int>(cluster_blocks);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned int>(cluster_blocks));
  config.blockDim = dim3(decode_common::kThreads);
  config.dynamicSmemBytes = shared_bytes;
  config.attrs = &attribute;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();  // a refusal is an answer: no such cluster fits
    clusters = 0;
  }
  clusters_.push_back(Clusters{kernel, shared_bytes, cluster_blocks, clusters});
  return clusters;
}

DecodeMatmulWorkspace::~DecodeMatmulWorkspace() {
  cudaFree(partials_);  // a destructor must not throw
  cudaFree(tile_counters_);
}

void launch_decode_matmul(const float* x, const float* packed_weight, const float* bias, float* out,
                          int B, int K, int N, DecodeEpilogue epilogue, DecodePrecision precision,
                          DecodeMatmulWorkspace& workspace, cudaStream_t stream,
                          DecodeLaunch launch) {
  constexpr const char* kName = "launch_decode_matmul";
  decode_common::check_product_arguments(kName, x, packed_weight, bias, out, B, K, N, epilogue);
  run_product(kName, ProductPointers{x, packed_weight, bias, out, nullptr, nullptr}, B, K, N,
              epilogue, precision, workspace, stream, launch);
}

void launch_decode_lm_head(const float* x, const float* packed_wte, float* logits,
                           float* candidate_values, std::int32_t* candidate_indices, int B, int C,
                           int V, DecodePrecision precision, DecodeMatmulWorkspace& workspace,
                           cudaStream_t stream, DecodeLaunch launch) {
  constexpr const char* kName = "launch_decode_lm_head";
  decode_common::check_lm_head_arguments(kName, x, packed_wte, logits, candidate_values,
                                         candidate_indices, B, C, V);
  run_product(kName,
              ProductPointers{x, packed_wte, nullptr, logits, candidate_values, candidate_indices},
              B, C, V, DecodeEpilogue::kNone, precision, workspace, stream, launch);
}

}  // namespace ladder
