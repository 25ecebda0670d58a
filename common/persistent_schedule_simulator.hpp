// common/persistent_schedule_simulator.hpp - proves a persistent decode schedule
// (persistent_schedule.hpp) on the CPU, before any GPU runs it.
//
// How. The simulator plays the GPU interpreter with `shape.blocks` virtual blocks and the
// same counters: block k runs its instructions block_instructions[block_first[k] ..
// block_first[k + 1]) in order, step after step; before step e >= 1 it waits until the
// stop counter has reached e; an instruction runs once every wait holds
// (counters[w.counter] >= w.per_step * (e + 1 + w.step_offset)) and then adds 1 to its
// signal. Each tick a random block that can move on runs one instruction (an instruction
// is atomic here: the memory ordering inside one, fence then signal, is the kernel's
// job). The seed also picks a bias: uniform interleavings, long runs of one block, or a
// few blocks that lag far behind the rest, so rare orders are explored too. When no
// block can move on, that is a deadlock, reported with who waits for what.
//
// What. Every instruction reads and writes regions of the kernel's buffers, as the
// kernel does. A region is the piece one instruction writes whole: hidden by (row,
// 64-column tile), since rows (the embedding) and tiles (the projections' residual
// epilogue) both write it; normed by row; qkv, expanded and the LM head's candidates by
// tile (a product's epilogue writes every row of its tile); attended by (row, head); the
// KV cache by (layer, row, head); each product's split-sum workspace by (split, tile),
// with its arrival counter; next_tokens, finished and the output column by row; the stop
// decision. Each region carries a version stamp: the step and the place in the step (the
// phase) of its last write. Checked at every access:
//   - a read sees exactly the version its producer of this step wrote (or of the step
//     before, or of the prefill, for the tokens, the finished flags, the cache's older
//     positions and the stop decision): never stale, never already overwritten;
//   - a write replaces exactly the version before it (every output region is written
//     once per step, per layer for the per-layer buffers), and only after every reader
//     of that version has read it;
//   - a product's tile is summed by the split that arrives last at its workspace counter,
//     which is then back at 0.
// After the run: every instruction ran once a step, every counter holds
// counter_arrivals[c] * steps, every region holds its last step's last version, and that
// version's readers of the same step all read it.
#pragma once

#include <cstdint>
#include <string>

#include "common/persistent_schedule.hpp"

namespace ladder {

struct SimulationResult {
  bool ok = false;
  std::string problem;     ///< the first violation or the deadlock, "" when ok
  long long executed = 0;  ///< instructions run
};

/// Runs `schedule` for `steps` decode steps under the interleaving that `seed` draws.
SimulationResult simulate_persistent_schedule(const PersistentSchedule& schedule, int steps,
                                              std::uint64_t seed);

/// The static premises of the deadlock argument (persistent_schedule.hpp): every
/// same-step wait names a counter whose signallers all come earlier in the list, every
/// wait's target is its counter's arrivals, which equal its signallers, and each block's
/// list is increasing. "" when they hold, else the first that fails.
std::string check_wait_order(const PersistentSchedule& schedule);

}  // namespace ladder
