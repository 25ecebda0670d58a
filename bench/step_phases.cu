// bench/step_phases.cu - what chaining a decode step's 86 dependent kernels costs, apart
// from the bytes they move: the step as launched kernels against one persistent kernel.
//
// Chapters 09 and 10 run a decode step as 86 dependent launches (the embedding and the
// argmax aside): per layer a LayerNorm, c_attn, the attention, c_proj, a LayerNorm, c_fc
// and the MLP's c_proj, then the last LayerNorm and the LM head. Here each becomes a
// phase that does no arithmetic: a product's phase streams its weight (fp32, or bf16's
// half the bytes; every block a share, 16-byte loads), a LayerNorm's or an attention's
// streams nothing. The phases are chained four ways, each timed as one replay:
//   one pass      one kernel streams the 49 weights' bytes: what the loads alone take
//   plain         86 kernels in a CUDA graph, each starting when the one before completed
//   programmatic  the same 86 as programmatic dependent launches: each kernel lets the
//                 next launch first thing, streams its weight, then waits for the one
//                 before (as the chapters' decode matmuls stream theirs before their
//                 wait: kernels/decode_matmul.cuh, "Programmatic dependent launch")
//   persistent    one cooperative kernel, every block resident at once, runs the 86
//                 phases: each block streams its share of a phase's weight, then waits at
//                 a grid-wide barrier (cooperative_groups' grid.sync) for the phase
//                 before to end everywhere
//   persistent, next weight in L2
//                 the same, and each block first asks for its slice of the next weight
//                 phase's bytes to be brought into L2 (cp.async.bulk.prefetch.L2, at most
//                 16 MB of a phase, so the LM head's 154 MB do not flush what is read
//                 now), so that HBM keeps streaming while the grid waits at its barriers
// each on grids of 1, 2, 4 and 8 blocks of 256 threads a multiprocessor (the persistent
// kernels only where they all fit at once). A chain's time over one pass's is what its
// chaining costs a step; over the 85 dependencies, what one costs. A step run as one
// persistent kernel would pay the persistent columns' per dependency, its arithmetic on
// top.
//
// Each phase checks its order, which is what the chaining exists for: every block stamps
// the phase it finished, and after its wait each block of the next phase reads the
// stamp of another block (block b reads b + 1's, so every stamp is read); a stamp
// missing is counted, and any count makes the program fail (exit 1) after its tables.
// The stamps are zeroed before every replay, in the replay (a memset of 86 x grid
// words, a microsecond or two of each chain's time; one pass zeroes its grid's words).
// Timing: CUDA events, the median of 20 replays after 3 warm-ups. The 49 weights are one
// buffer of 0.5 GB in fp32, four times the L2 cache or more, so each replay streams them
// from HBM as a decode step does.
//
// Run:  build/native/bench/step_phases
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_event.hpp"
#include "common/cuda_graph.hpp"
#include "common/cuda_stream.hpp"
#include "common/device_info.hpp"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_dependents.hpp"
#include "kernels/programmatic_launch.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kLayers = 12;
constexpr int kPhases = 7 * kLayers + 2;  // 86: the step's launches but the embedding and argmax
constexpr int kWarmupReplays = 3;
constexpr int kTimedReplays = 20;
constexpr int kC = 768;    // GPT-2 small's width
constexpr int kV = 50257;  // its vocabulary (the tied LM head)
constexpr std::size_t kPrefetchCapBytes = std::size_t{16} << 20;  // of a phase, into L2

// ---------------------------------------------------------------- the phases

/// What the kernels read: phase p streams the float4s first[p] .. first[p + 1] of
/// `weights` (an empty range for a LayerNorm or an attention).
struct Phases {
  const float4* weights;
  std::size_t first[kPhases + 1];
  int prefetch_at[kPhases];    ///< the weight phase whose bytes phase p asks L2 for, or -1
  int count;                   ///< kPhases, or 1 for the one pass
  unsigned int* stamps;        ///< [count][gridDim.x]: 1 once that block finished that phase
  unsigned int* out_of_order;  ///< stamps found missing
  float* sink;                 ///< written only if a sum is NaN: never (the weights are 0)
};

/// This block's share of phase `phase`'s weight, summed so that the loads are kept:
/// thread t of block b reads float4 b 256 + t, then every grid's width on, four loads in
/// flight at a time.
__device__ void stream_weight(const Phases& a, int phase) {
  const std::size_t end = a.first[phase + 1];
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t i = a.first[phase] + static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  float sum = 0.0f;
  for (; i + 3 * stride < end; i += 4 * stride) {
    const float4 v0 = __ldcs(a.weights + i);
    const float4 v1 = __ldcs(a.weights + i + stride);
    const float4 v2 = __ldcs(a.weights + i + 2 * stride);
    const float4 v3 = __ldcs(a.weights + i + 3 * stride);
    sum += (v0.x + v0.y + v0.z + v0.w) + (v1.x + v1.y + v1.z + v1.w) + (v2.x + v2.y + v2.z + v2.w) +
           (v3.x + v3.y + v3.z + v3.w);
  }
  for (; i < end; i += stride) {
    const float4 v = __ldcs(a.weights + i);
    sum += v.x + v.y + v.z + v.w;
  }
  if (isnan(sum)) a.sink[blockIdx.x] = sum;
}

/// Asks L2 for this block's slice of the first kPrefetchCapBytes of phase `phase`'s
/// weight (one thread; the copy engine brings it while the block goes on).
__device__ void prefetch_weight_into_l2(const Phases& a, int phase) {
  if (threadIdx.x != 0) return;
  const std::size_t begin = a.first[phase] * 16;
  const std::size_t end = min(a.first[phase + 1] * 16, begin + kPrefetchCapBytes);
  const std::size_t slice =
      (end - begin + gridDim.x * std::size_t{16} - 1) / (gridDim.x * std::size_t{16}) * 16;
  const std::size_t from = begin + blockIdx.x * slice;
  if (from >= end) return;
  const unsigned int bytes = static_cast<unsigned int>(min(slice, end - from));
  const char* at = reinterpret_cast<const char*>(a.weights) + from;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(at)),
               "r"(bytes)
               : "memory");
}

/// After the wait for phase - 1: its stamp from the next block must be there.
__device__ void check_phase_before(const Phases& a, int phase) {
  if (phase == 0 || threadIdx.x != 0) return;
  const unsigned int other = (blockIdx.x + 1) % gridDim.x;
  if (__ldcg(a.stamps + static_cast<std::size_t>(phase - 1) * gridDim.x + other) != 1u)
    atomicAdd(a.out_of_order, 1u);
}

/// Every thread of the block is done with the phase: stamp it.
__device__ void stamp_phase(const Phases& a, int phase) {
  __syncthreads();
  if (threadIdx.x == 0)
    __stcg(a.stamps + static_cast<std::size_t>(phase) * gridDim.x + blockIdx.x, 1u);
}

/// One phase a launch: plain, or a programmatic dependent (the wait returns at once for a
/// plain launch, and the signal does nothing before one).
__global__ void __launch_bounds__(kThreads) launched_phase_kernel(const Phases a, int phase) {
  ladder::allow_next_kernel_to_launch();  // first thing, as the fp32 decode matmuls
  stream_weight(a, phase);                // weights: no kernel writes them
  ladder::wait_for_previous_kernel();
  check_phase_before(a, phase);
  stamp_phase(a, phase);
}

/// Every phase in one launch, a grid-wide barrier before each but the first; with
/// kPrefetchNext, each phase first asks L2 for the next weight phase's bytes. The launch
/// must be cooperative (cudaLaunchCooperativeKernel) with every block resident at once.
template <bool kPrefetchNext>
__global__ void __launch_bounds__(kThreads) persistent_phases_kernel(const Phases a) {
  const cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  for (int phase = 0; phase < a.count; ++phase) {
    if (kPrefetchNext && a.prefetch_at[phase] >= 0)
      prefetch_weight_into_l2(a, a.prefetch_at[phase]);
    stream_weight(a, phase);
    if (phase > 0) grid.sync();  // the phase before has ended in every block
    check_phase_before(a, phase);
    stamp_phase(a, phase);
  }
}

// ---------------------------------------------------------------- host

/// The float4 ranges of the step's phases for weights of `element_bytes` (4 or 2) a value.
Phases step_phases(const float4* weights, int element_bytes) {
  const auto float4s = [&](std::size_t K, std::size_t N) { return K * N * element_bytes / 16; };
  const std::array<std::size_t, 7> layer = {
      0, float4s(kC, 3 * kC), 0, float4s(kC, kC), 0, float4s(kC, 4 * kC), float4s(4 * kC, kC)};
  Phases phases{};
  phases.weights = weights;
  phases.count = kPhases;
  int phase = 0;
  for (int l = 0; l < kLayers; ++l)
    for (const std::size_t size : layer) {
      phases.first[phase + 1] = phases.first[phase] + size;
      ++phase;
    }
  phases.first[phase + 1] = phases.first[phase];  // the last LayerNorm
  ++phase;
  phases.first[phase + 1] = phases.first[phase] + float4s(kC, kV);  // the LM head
  // Phase 0 and each weight phase ask for the next weight phase: while a weight streams,
  // and across the LayerNorm and attention after it, the next one comes into L2.
  for (int p = 0; p < kPhases; ++p) {
    phases.prefetch_at[p] = -1;
    if (p != 0 && phases.first[p + 1] == phases.first[p]) continue;
    for (int next = p + 1; next < kPhases; ++next)
      if (phases.first[next + 1] > phases.first[next]) {
        phases.prefetch_at[p] = next;
        break;
      }
  }
  return phases;
}

struct Buffers {
  float4* weights;
  unsigned int* stamps;
  unsigned int* out_of_order;
  float* sink;
};

/// GPU seconds of one replay (the median) of `enqueue` after zeroing the stamps of
/// `phases` on `grid` blocks.
double replay_seconds(cudaStream_t stream, const Phases& phases, int grid,
                      const std::function<void()>& enqueue) {
  const std::size_t stamp_bytes =
      static_cast<std::size_t>(phases.count) * grid * sizeof(unsigned int);
  return ladder::median_stream_seconds(stream, kWarmupReplays, kTimedReplays, [&] {
    CUDA_CHECK(cudaMemsetAsync(phases.stamps, 0, stamp_bytes, stream));
    enqueue();
  });
}

/// The chain of phases.count launches as one graph, plain or programmatic.
double chain_seconds(cudaStream_t stream, const Phases& phases, int grid,
                     ladder::DecodeLaunch launch) {
  const ladder::CudaGraph graph = ladder::capture_graph(
      stream,
      [&] {
        for (int phase = 0; phase < phases.count; ++phase)
          ladder::launch_between_products(launch, launched_phase_kernel, dim3(grid), dim3(kThreads),
                                          0, stream, phases, phase);
        CUDA_CHECK(cudaGetLastError());
      },
      "step phases");
  const ladder::CudaGraphExec chain(graph, "step phases");
  return replay_seconds(stream, phases, grid, [&] { chain.launch(stream); });
}

template <bool kPrefetchNext>
double persistent_seconds(cudaStream_t stream, const Phases& phases, int grid) {
  return replay_seconds(stream, phases, grid, [&] {
    Phases arguments = phases;
    void* parameters[] = {&arguments};
    CUDA_CHECK(cudaLaunchCooperativeKernel(persistent_phases_kernel<kPrefetchNext>, dim3(grid),
                                           dim3(kThreads), parameters, 0, stream));
  });
}

/// Blocks of `kernel` that fit a multiprocessor at once.
template <typename Kernel>
int resident_blocks_per_multiprocessor(Kernel kernel) {
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, 0));
  return blocks;
}

double one_pass_seconds(cudaStream_t stream, const Phases& step, int grid) {
  Phases one = step;
  one.count = 1;
  one.first[1] = step.first[step.count];
  return replay_seconds(stream, one, grid, [&] {
    launched_phase_kernel<<<grid, kThreads, 0, stream>>>(one, 0);
    CUDA_CHECK(cudaGetLastError());
  });
}

int run(int argc) {
  if (argc != 1) throw std::invalid_argument("usage: step_phases (no arguments)");
  const ladder::DeviceInfo device = ladder::query_device_info();
  std::printf("%s\n", ladder::device_banner(device).c_str());
  const double copy_bandwidth = ladder::measure_copy_bandwidth();
  std::printf("copy bandwidth (read + write): %.0f GB/s\n", copy_bandwidth * 1e-9);
  int cooperative = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device.device));
  const int resident_per_multiprocessor =
      std::min(resident_blocks_per_multiprocessor(persistent_phases_kernel<false>),
               resident_blocks_per_multiprocessor(persistent_phases_kernel<true>));
  const int resident = cooperative ? resident_per_multiprocessor * device.multiprocessors : 0;

  const std::vector<int> blocks_per_multiprocessor = {1, 2, 4, 8};
  const int largest_grid = blocks_per_multiprocessor.back() * device.multiprocessors;
  const Phases fp32_step = step_phases(nullptr, 4);
  const std::size_t weight_float4s = fp32_step.first[kPhases];
  ladder::bench::DeviceScratch scratch;
  const Buffers buffers{
      reinterpret_cast<float4*>(scratch.floats(weight_float4s * 4)),
      reinterpret_cast<unsigned int*>(scratch.floats(std::size_t{kPhases} * largest_grid)),
      reinterpret_cast<unsigned int*>(scratch.floats(1)), scratch.floats(largest_grid)};
  const ladder::CudaStream stream;
  const cudaStream_t s = stream.get();

  for (const int element_bytes : {4, 2}) {
    Phases step = step_phases(buffers.weights, element_bytes);
    step.stamps = buffers.stamps;
    step.out_of_order = buffers.out_of_order;
    step.sink = buffers.sink;
    const double bytes = static_cast<double>(step.first[kPhases]) * 16;
    std::printf(
        "\n## %s weights: %.1f MB a step, copy floor %.1f us (the bytes over the copy "
        "bandwidth); GPU us per replay, median of %d\n\n"
        "| grid (blocks of %d) | one pass (GB/s) | plain | programmatic | persistent | "
        "persistent, next weight in L2 | per dependency: plain / programmatic / persistent / "
        "persistent, next in L2 |\n|---|--:|--:|--:|--:|--:|--:|\n",
        element_bytes == 4 ? "fp32" : "bf16", bytes * 1e-6, bytes / copy_bandwidth * 1e6,
        kTimedReplays, kThreads);
    for (const int per_multiprocessor : blocks_per_multiprocessor) {
      const int grid = per_multiprocessor * device.multiprocessors;
      const double one_pass = one_pass_seconds(s, step, grid);
      const double plain = chain_seconds(s, step, grid, ladder::DecodeLaunch::kAfterPrevious);
      const double programmatic = chain_seconds(s, step, grid, ladder::DecodeLaunch::kProgrammatic);
      const auto per_dependency = [&](double chain) {
        return (chain - one_pass) / (kPhases - 1) * 1e6;
      };
      // The persistent kernels' cells: "-" where the grid does not fit at once.
      std::string persistent_times = "- | -", persistent_costs = "- / -";
      if (grid <= resident) {
        const double persistent = persistent_seconds<false>(s, step, grid);
        const double prefetching = persistent_seconds<true>(s, step, grid);
        char cells[2][64];
        std::snprintf(cells[0], sizeof cells[0], "%.1f | %.1f", persistent * 1e6,
                      prefetching * 1e6);
        std::snprintf(cells[1], sizeof cells[1], "%.2f / %.2f", per_dependency(persistent),
                      per_dependency(prefetching));
        persistent_times = cells[0];
        persistent_costs = cells[1];
      }
      std::printf("| %d x %d | %.1f (%.0f) | %.1f | %.1f | %s | %.2f / %.2f / %s |\n",
                  device.multiprocessors, per_multiprocessor, one_pass * 1e6,
                  bytes / one_pass * 1e-9, plain * 1e6, programmatic * 1e6,
                  persistent_times.c_str(), per_dependency(plain), per_dependency(programmatic),
                  persistent_costs.c_str());
    }
  }
  std::printf("\npersistent: %d blocks of %d threads fit at once (%d a multiprocessor)%s\n",
              resident, kThreads, resident_per_multiprocessor,
              cooperative ? "" : "; no cooperative launch on this device");

  CUDA_CHECK(cudaStreamSynchronize(s));
  unsigned int out_of_order = 0;
  CUDA_CHECK(
      cudaMemcpy(&out_of_order, buffers.out_of_order, sizeof out_of_order, cudaMemcpyDeviceToHost));
  if (out_of_order != 0)
    throw std::runtime_error(std::to_string(out_of_order) +
                             " phase(s) started before the phase before had ended in every block");
  std::printf("order: every phase began after the phase before had ended, in every replay\n");
  return 0;
}

}  // namespace

int main(int argc, char**) {
  return ladder::bench::run_bench("step_phases", [&] { return run(argc); });
}
