// kernels/persistent_weight_stages.cuh - the persistent decode kernel's weight stages: every
// chunk of W a block's product instructions read, in the order it reads them, step after
// step, copied into a ring of shared-memory buffers by the bulk copy engine
// (cp.async.bulk, sm_90) ahead of the instruction that reads it.
//
// Weights never depend on an earlier op, so the copy of an instruction's chunks can start
// while the block still runs the instructions before it, or waits for their counters.
// One buffer ("slot") holds one chunk: 64 inputs of a 64-column tile, as the packed layout
// (BfloatLayout::k_tiled) stores it, 8 rows of 1 KiB (an octet of 8 inputs for each of the
// 64 columns, 16 bytes a column), each row one bulk copy, rows padded apart (kRowStride). Each slot
// has two mbarriers:
//   full[s]   the copy's bytes have landed (arrive.expect_tx by the producer, complete_tx
//             by the copy engine);
//   empty[s]  every warp of the block has read the chunk (one arrival a warp).
// Position j of the stream (a block-local count of chunks, over every step) sits in slot
// j % slots, for the (j / slots)-th time: its full barrier's phase j / slots; before it is
// copied, the empty barrier's phase j / slots - 1 (the chunk j - slots) must be complete.
//
// The producer is thread 0, between the block's own work: at every instruction's start
// (after the barrier of the instruction before, when every chunk read so far is free) it
// fills every free slot, and inside a product it makes sure that the chunk the block is
// about to read has been asked for, which may wait for the slowest warp to release the
// slot of the chunk `slots` positions back (every warp has read it, or is reading it:
// warps read the stream in order, and thread 0 has asked for everything before). So no
// wait names a copy that nobody will issue, and no warp waits on thread 0 while thread 0
// waits on that warp. A block that leaves the kernel first waits for the copies it asked
// for and nobody read (the next step's first chunks, asked for before the step's stop
// decision), so that none lands in a block that has gone.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/bfloat16.hpp"  // kBfloatTileK
#include "kernels/decode_matmul_bf16_tile.cuh"
#include "kernels/device_primitives.cuh"

namespace ladder::persistent_stages {

constexpr int kRowBytes = decode_common::kTileColumns * kBfloatTileK * 2;  // an octet: 1 KiB
/// A row's place in a slot: its 1 KiB and 32 bytes more, so that the 8 lanes of a
/// quarter warp (which one 16-byte shared load serves at a time: g = 0, 1 and u = 0..3,
/// octets u a row apart) start 8 banks apart per row and 4 per column, never in the same
/// bank; rows 1 KiB apart would put the 4 octets of a column in the same banks.
constexpr int kRowStride = kRowBytes + 32;
constexpr int kSlotBytes = decode_bf16::kOctetsPerChunk * kRowStride;  // 8.25 KiB
constexpr int kMaxSlots = 32;  ///< the barriers' static room; the slots that fit are fewer

/// Whether this compilation has the bulk copy engine and the transaction barriers (sm_90).
/// Built for an earlier GPU, the kernel reads W as chapter 10's blocks do (each product
/// instruction its own chunks, four ahead, into registers) and asks for no stages; the
/// PTX below is then never reached (it traps).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define LADDER_WEIGHT_STAGES 1
#else
#define LADDER_WEIGHT_STAGES 0
#endif
constexpr bool kStagedWeights = LADDER_WEIGHT_STAGES != 0;

// ---------------------------------------------------------------- the PTX

__device__ __forceinline__ std::uint32_t shared_address(const void* pointer) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(pointer));
}

__device__ __forceinline__ void barrier_init(std::uint64_t* barrier, int arrivals) {
#if LADDER_WEIGHT_STAGES
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)),
               "r"(arrivals)
               : "memory");
#else
  __trap();
#endif
}

/// After the barriers' initialisation, before the copy engine (the async proxy) uses them.
__device__ __forceinline__ void fence_barrier_init() {
#if LADDER_WEIGHT_STAGES
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

/// One arrival that also expects `bytes` to land before the phase completes.
__device__ __forceinline__ void arrive_expecting(std::uint64_t* barrier, std::uint32_t bytes) {
#if LADDER_WEIGHT_STAGES
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(barrier)),
      "r"(bytes)
      : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void arrive(std::uint64_t* barrier) {
#if LADDER_WEIGHT_STAGES
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(barrier))
               : "memory");
#else
  __trap();
#endif
}

/// Whether the phase of parity `parity` has completed: at once (test_wait), or with
/// kSuspend after the hardware's own short wait (try_wait suspends the thread for a
/// while, a time limit of the hardware's, before it answers).
template <bool kSuspend>
__device__ __forceinline__ bool phase_done(std::uint64_t* barrier, std::uint32_t parity) {
#if LADDER_WEIGHT_STAGES
  std::uint32_t done;
#define LADDER_PHASE_CHECK(wait)                           \
  asm volatile("{\n .reg .pred p;\n mbarrier." wait        \
               ".parity.shared::cta.b64 p, [%1], %2;\n"    \
               " selp.u32 %0, 1, 0, p;\n}\n"               \
               : "=r"(done)                                \
               : "r"(shared_address(barrier)), "r"(parity) \
               : "memory")
  if constexpr (kSuspend)
    LADDER_PHASE_CHECK("try_wait");
  else
    LADDER_PHASE_CHECK("test_wait");
#undef LADDER_PHASE_CHECK
  return done != 0;
#else
  __trap();
  return false;
#endif
}

/// Waits until the phase of parity `parity` has completed. Bounded: a copy that never
/// lands, or a warp that never reads, would otherwise hang the kernel; past `limit_ns`
/// the kernel traps (the launch fails with cudaErrorLaunchFailure, never a hang).
__device__ __forceinline__ void wait_phase(std::uint64_t* barrier, std::uint32_t parity,
                                           unsigned long long limit_ns) {
  if (phase_done<false>(barrier, parity)) return;
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(start));
  while (!phase_done<true>(barrier, parity)) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(now));
    if (now - start > limit_ns) __trap();
  }
}

/// `bytes` (a multiple of 16) from global `source` to shared `destination` (16-byte
/// aligned both), counted on `barrier` when they land.
__device__ __forceinline__ void bulk_copy(void* destination, const void* source,
                                          std::uint32_t bytes, std::uint64_t* barrier) {
#if LADDER_WEIGHT_STAGES
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(shared_address(destination)),
      "l"(__cvta_generic_to_global(source)), "r"(bytes), "r"(shared_address(barrier))
      : "memory");
#else
  __trap();
#endif
}

// ---------------------------------------------------------------- the stream

/// Where one chunk of one product instruction's W is: the packed matrix, its N and row
/// count in octets, the column tile and the chunk (of 64 inputs).
struct ChunkSource {
  const __nv_bfloat16* weight;
  int N;
  int octets;
  int tile;
  int chunk;
};

/// The ring: `slots` buffers of kSlotBytes (dynamic shared memory) and their barriers,
/// and the two ends of the stream. `read` (every thread holds the same) counts the chunks
/// the block has read; `asked` (thread 0's) the chunks asked for.
struct WeightStages {
  unsigned char* buffers;
  std::uint64_t* full;
  std::uint64_t* empty;
  std::uint32_t slots;
  std::uint32_t read;
  std::uint32_t asked;
  unsigned long long limit_ns;

  /// Thread 0, before anything is asked for; the block meets at a barrier after it.
  __device__ void init() {
    for (std::uint32_t s = 0; s < slots; ++s) {
      barrier_init(&full[s], 1);
      barrier_init(&empty[s], decode_common::kWarps);
    }
    fence_barrier_init();
  }

  /// Thread 0: whether position `asked` may be copied now (its slot's last chunk read by
  /// every warp), waiting for it when `wait`.
  __device__ bool slot_free(bool wait) {
    if (asked < slots) return true;
    const std::uint32_t use = asked / slots - 1;  // the slot's last use
    if (!wait) return phase_done<false>(&empty[asked % slots], use & 1);
    wait_phase(&empty[asked % slots], use & 1, limit_ns);
    return true;
  }

  /// Thread 0: copies chunk `source` into position `asked`'s slot.
  __device__ void ask(const ChunkSource& source) {
    const std::uint32_t slot = asked % slots;
    const int columns =
        min(decode_common::kTileColumns, source.N - source.tile * decode_common::kTileColumns);
    const int first_octet = source.chunk * decode_bf16::kOctetsPerChunk;
    const int rows = min(decode_bf16::kOctetsPerChunk, source.octets - first_octet);
    const std::uint32_t row_bytes = static_cast<std::uint32_t>(columns) * kBfloatTileK * 2;
    arrive_expecting(&full[slot], row_bytes * static_cast<std::uint32_t>(rows));
    unsigned char* destination = buffers + static_cast<std::size_t>(slot) * kSlotBytes;
    for (int r = 0; r < rows; ++r)
      bulk_copy(
          destination + r * kRowStride,
          source.weight + (static_cast<std::size_t>(first_octet + r) * source.N +
                           static_cast<std::size_t>(source.tile) * decode_common::kTileColumns) *
                              kBfloatTileK,
          row_bytes, &full[slot]);
    ++asked;
  }

  /// Thread 0, before the block leaves: every copy asked for has landed.
  __device__ void drain() {
    for (std::uint32_t j = read; j < asked; ++j)
      wait_phase(&full[j % slots], (j / slots) & 1, limit_ns);
  }
};

// Math:   bf16_product_tile's (decode_matmul_bf16_tile.cuh), in the same order: the same
//         bits; only where the lane's pieces of W come from differs.
// The weight: chunk c of this instruction is the block's stream position stages.read;
// `ask_up_to(position)` (thread 0 only: the producer) makes sure it has been asked for.
// Every thread waits for the chunk's bytes, reads its two pieces from the slot, and after
// the chunk's products its warp releases the slot.
template <int kRows, typename Out, typename Wait, typename AskUpTo>
__device__ __forceinline__ void bf16_product_tile_staged(
    const decode_bf16::DecodeMatmulBf16Arguments<Out>& a, int split, int tile, float* shared,
    const Wait& wait_for_inputs, WeightStages& stages, const AskUpTo& ask_up_to) {
  using namespace decode_bf16;
  const float2 bias = decode_common::load_tile_bias(a, tile);
  const TileLane place = tile_lane(a, tile);
  const int octets = a.padded_rows / kBfloatTileK;
  const decode_common::ChunkRange range = decode_common::chunk_range(a, split);
  // The lane's two pieces, at row `place.octet` of a slot: 16 bytes a column.
  int piece_offset[2];
#pragma unroll
  for (int n8 = 0; n8 < 2; ++n8)
    piece_offset[n8] = place.octet * kRowStride +
                       (place.columns[n8] - tile * decode_common::kTileColumns) * kBfloatTileK * 2;
  float sums[kRows / 16][2][4] = {};
  wait_for_inputs();
  for (int chunk = 0; chunk < range.count; ++chunk) {
    const std::uint32_t position = stages.read;
    if (threadIdx.x == 0) ask_up_to(position);
    const std::uint32_t slot = position % stages.slots;
    wait_phase(&stages.full[slot], (position / stages.slots) & 1, stages.limit_ns);
    const unsigned char* buffer = stages.buffers + static_cast<std::size_t>(slot) * kSlotBytes;
    const bool octet_inside = (range.first + chunk) * kOctetsPerChunk + place.octet < octets;
    uint4 pieces[2];
#pragma unroll
    for (int n8 = 0; n8 < 2; ++n8)
      pieces[n8] = octet_inside && place.column_inside[n8]
                       ? *reinterpret_cast<const uint4*>(buffer + piece_offset[n8])
                       : make_uint4(0, 0, 0, 0);
    const int k = (range.first + chunk) * kChunkRows + kBfloatTileK * place.octet;
    multiply_chunk<kRows, true>(a, place, k, pieces, sums);
    // The pieces are in registers and used: the warp is done with the slot.
    __syncwarp();
    if (static_cast<int>(threadIdx.x) % kWarpSize == 0) arrive(&stages.empty[slot]);
    stages.read = position + 1;
  }
  decode_common::store_mma_sums<kRows>(shared, place.k_group, place.column_group, place.g, place.u,
                                       sums);
  decode_common::finish_tile<kRows>(a, tile, split, bias, shared, kKGroups);
}

}  // namespace ladder::persistent_stages
