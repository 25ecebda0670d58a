// common/reference_backend.cpp - the CPU reference behind the scheduler's back-end interface.
#include "common/reference_backend.hpp"

#include <stdexcept>
#include <string>

namespace ladder {

ReferenceBackend::ReferenceBackend(const Gpt2Weights& weights, int slots, int capacity,
                                   double bytes_available, reference::Precision precision)
    : model_(weights, precision), capacity_(capacity) {
  // The reference's caches hold floats whatever the precision (bf16 values in bf16 mode).
  require_slots_fit(weights.config, slots, capacity, static_cast<int>(sizeof(float)),
                    bytes_available);
  slots_.resize(static_cast<std::size_t>(slots));
}

std::int32_t ReferenceBackend::greedy_token(const std::vector<float>& logits) const {
  return reference::argmax(logits.data(), model_.config().vocab_size);
}

void ReferenceBackend::launch_step(const StepPlan& plan) {
  // Check the whole plan before touching a slot.
  check_step_plan(plan, slot_count(), capacity_);
  for (const DecodeRow& row : plan.decodes) {
    const Slot& slot = slots_[row.slot];
    if (slot.last_token < 0) {
      throw std::invalid_argument("decode of slot " + std::to_string(row.slot) +
                                  ", which was never prefilled");
    }
    if (row.position != slot.cache.length) {
      throw std::invalid_argument("decode of slot " + std::to_string(row.slot) + " at position " +
                                  std::to_string(row.position) + ", but its cache holds " +
                                  std::to_string(slot.cache.length) + " of " +
                                  std::to_string(capacity_) + " positions");
    }
  }

  std::vector<std::int32_t> tokens;
  tokens.reserve(plan.rows());
  for (const PrefillRow& row : plan.prefills) {
    Slot& slot = slots_[row.slot];
    slot.cache = reference::Model::KvCache{};
    std::vector<float> logits;
    for (std::int32_t token : row.prompt) logits = model_.step(slot.cache, token);
    slot.last_token = greedy_token(logits);
    tokens.push_back(slot.last_token);
  }
  for (const DecodeRow& row : plan.decodes) {
    Slot& slot = slots_[row.slot];
    slot.last_token = greedy_token(model_.step(slot.cache, slot.last_token));
    tokens.push_back(slot.last_token);
  }
  finished_steps_.push_back(std::move(tokens));
}

std::vector<std::int32_t> ReferenceBackend::finish_step() {
  if (finished_steps_.empty()) throw std::logic_error("finish_step: no step was launched");
  std::vector<std::int32_t> tokens = std::move(finished_steps_.front());
  finished_steps_.pop_front();
  return tokens;
}

}  // namespace ladder
