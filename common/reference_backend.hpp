// common/reference_backend.hpp - the CPU reference as a serving back-end: what the
// scheduler's CPU tests run against, and what a reader without a GPU can serve a trace on.
// It runs the reference in the precision it is given: bf16 (reference.hpp's bf16 mode, the
// oracle of a GPU back-end that stores bf16, such as chapter 12's) or fp32.
//
// Each slot is its own reference::Model::KvCache. A prefill starts the slot's cache afresh
// and feeds the prompt one position at a time (as reference::generate() does); a decode
// feeds the slot's last token. It computes each step when it is launched, so
// finish_step() only hands the tokens back, in launch order.
//
// It is strict about the contract of common/continuous_batching.hpp, so a scheduler bug
// shows up as an exception rather than as different tokens: a slot twice in one step, a
// decode of a slot never prefilled, or a decode at a position other than the slot's
// length (the next free position of its cache) is refused.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "common/continuous_batching.hpp"
#include "common/reference.hpp"
#include "common/weights.hpp"

namespace ladder {

class ReferenceBackend : public ServingBackend {
 public:
  /// `slots` caches of `capacity` positions, refused (std::invalid_argument, one line)
  /// unless they fit require_slots_fit() in `bytes_available` of host memory; the model
  /// run in `precision` (reference::Model's modes). Keeps a reference to the weights,
  /// which must outlive it.
  ReferenceBackend(const Gpt2Weights& weights, int slots, int capacity, double bytes_available,
                   reference::Precision precision);
  ReferenceBackend(const Gpt2Weights&& weights, int slots, int capacity, double bytes_available,
                   reference::Precision precision) = delete;

  int slot_count() const override { return static_cast<int>(slots_.size()); }
  int slot_capacity() const override { return capacity_; }
  void launch_step(const StepPlan& plan) override;
  std::vector<std::int32_t> finish_step() override;

 private:
  struct Slot {
    reference::Model::KvCache cache;
    std::int32_t last_token = -1;  ///< -1 until the slot is first prefilled
  };

  std::int32_t greedy_token(const std::vector<float>& logits) const;

  reference::Model model_;
  std::vector<Slot> slots_;
  int capacity_ = 0;
  std::deque<std::vector<std::int32_t>> finished_steps_;
};

}  // namespace ladder
