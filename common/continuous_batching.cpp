// common/continuous_batching.cpp - the request scheduler and the serving loop.
#include "common/continuous_batching.hpp"

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ladder {

// ---------------------------------------------------------------- slots and memory

double kv_cache_bytes(const Gpt2Config& config, int slots, int capacity, int bytes_per_value) {
  return 2.0 * config.n_layer * config.n_embd * static_cast<double>(slots) * capacity *
         bytes_per_value;
}

void require_slots_fit(const Gpt2Config& config, int slots, int capacity, int bytes_per_value,
                       double bytes_available) {
  if (slots < 1) {
    throw std::invalid_argument("slots: " + std::to_string(slots) + "; serve with at least one");
  }
  if (capacity < 1 || capacity > config.n_positions) {
    throw std::invalid_argument(
        "slot capacity: " + std::to_string(capacity) +
        " positions; give 1 to the model's n_positions = " + std::to_string(config.n_positions));
  }
  const double needed = kv_cache_bytes(config, slots, capacity, bytes_per_value);
  if (needed > bytes_available) {
    const double per_slot = kv_cache_bytes(config, 1, capacity, bytes_per_value);
    const auto fitting = static_cast<long long>(bytes_available / per_slot);
    char message[256];
    std::snprintf(message, sizeof(message),
                  "slots: %d slots of %d positions need %.3g GiB of KV cache but %.3g GiB are "
                  "available; ask for at most %lld slots or fewer positions",
                  slots, capacity, needed / (1 << 30), bytes_available / (1 << 30), fitting);
    throw std::invalid_argument(message);
  }
}

// ---------------------------------------------------------------- plans

void check_step_plan(const StepPlan& plan, int slots, int capacity) {
  std::vector<bool> used(static_cast<std::size_t>(slots > 0 ? slots : 0), false);
  auto claim = [&](int slot, const char* kind) {
    if (slot < 0 || slot >= slots) {
      throw std::invalid_argument(std::string(kind) + " of slot " + std::to_string(slot) +
                                  ", but the back-end has " + std::to_string(slots) + " slots");
    }
    if (used[slot]) {
      throw std::invalid_argument("slot " + std::to_string(slot) + " appears twice in one step");
    }
    used[slot] = true;
  };
  for (const PrefillRow& row : plan.prefills) {
    claim(row.slot, "prefill");
    if (row.prompt.empty() || static_cast<int>(row.prompt.size()) > capacity) {
      throw std::invalid_argument("prefill of " + std::to_string(row.prompt.size()) +
                                  " tokens into a slot of " + std::to_string(capacity) +
                                  " positions");
    }
  }
  for (const DecodeRow& row : plan.decodes) {
    claim(row.slot, "decode");
    if (row.position < 0 || row.position >= capacity) {
      throw std::invalid_argument("decode of slot " + std::to_string(row.slot) + " at position " +
                                  std::to_string(row.position) + ", outside its " +
                                  std::to_string(capacity) + " positions");
    }
  }
}

// ---------------------------------------------------------------- the scheduler

RequestScheduler::RequestScheduler(std::vector<Request> requests, int slots, int capacity,
                                   const SchedulerOptions& options)
    : requests_(std::move(requests)), options_(options), capacity_(capacity) {
  if (slots < 1) {
    throw std::invalid_argument("scheduler: " + std::to_string(slots) +
                                " slots; serve with at least one");
  }
  if (options.steps_in_flight != 1 && options.steps_in_flight != 2) {
    throw std::invalid_argument("scheduler: steps_in_flight is " +
                                std::to_string(options.steps_in_flight) + "; use 1 or 2");
  }
  validate_trace(requests_, {0, capacity});
  records_.resize(requests_.size());
  issued_.assign(requests_.size(), 0);
  finished_.assign(requests_.size(), false);
  slots_.resize(static_cast<std::size_t>(slots));
  for (std::size_t i = 0; i < requests_.size(); ++i)
    records_[i].arrival_ms = requests_[i].arrival_ms;
}

double RequestScheduler::next_arrival_ms() const {
  return next_waiting_ < requests_.size() ? requests_[next_waiting_].arrival_ms
                                          : std::numeric_limits<double>::infinity();
}

int RequestScheduler::free_slots() const {
  int free = 0;
  for (const Slot& slot : slots_) free += slot.request < 0 ? 1 : 0;
  return free;
}

bool RequestScheduler::request_done_issuing(int request) const {
  return finished_[request] || issued_[request] == requests_[request].max_new_tokens;
}

void RequestScheduler::release_slots() {
  if (options_.policy == BatchingPolicy::continuous) {
    for (Slot& slot : slots_) {
      if (slot.request >= 0 && request_done_issuing(slot.request)) slot.request = -1;
    }
    return;
  }
  // A static batch ends when its last request has all of its tokens back.
  for (const Slot& slot : slots_) {
    if (slot.request >= 0 && !finished_[slot.request]) return;
  }
  for (Slot& slot : slots_) slot.request = -1;
}

void RequestScheduler::admit(int slot, int request, double now_ms, StepPlan& plan, InFlight& step) {
  const std::vector<std::int32_t>& prompt = requests_[request].prompt;
  slots_[slot] = Slot{request, static_cast<int>(prompt.size())};
  RequestRecord& record = records_[request];
  record.slot = slot;
  record.admitted_step = step.step;
  record.admitted_ms = now_ms;
  issued_[request] = 1;  // the prefill produces the first token
  plan.prefills.push_back(PrefillRow{slot, prompt});
  step.row_requests.push_back(request);
}

StepPlan RequestScheduler::plan_step(double now_ms) {
  if (steps_in_flight() >= options_.steps_in_flight) {
    throw std::logic_error("plan_step: " + std::to_string(steps_in_flight()) +
                           " steps are in flight; finish one first");
  }
  const int step_index = static_cast<int>(steps_.size());
  for (; next_unseen_ < requests_.size() && requests_[next_unseen_].arrival_ms <= now_ms;
       ++next_unseen_) {
    records_[next_unseen_].arrival_step = step_index;
  }
  release_slots();

  StepPlan plan;
  InFlight step{step_index, {}};
  const bool admitting = options_.policy == BatchingPolicy::continuous ||
                         free_slots() == static_cast<int>(slots_.size());
  std::vector<bool> admitted_now(slots_.size(), false);
  for (std::size_t slot = 0; admitting && slot < slots_.size(); ++slot) {
    if (slots_[slot].request >= 0 || next_waiting_ == next_unseen_) continue;
    admit(static_cast<int>(slot), static_cast<int>(next_waiting_++), now_ms, plan, step);
    admitted_now[slot] = true;
  }

  int padding = 0;
  for (std::size_t slot = 0; slot < slots_.size(); ++slot) {
    Slot& state = slots_[slot];
    if (state.request < 0 || admitted_now[slot]) continue;
    if (!request_done_issuing(state.request)) {
      ++issued_[state.request];
      step.row_requests.push_back(state.request);
    } else if (state.next_position < capacity_) {  // static batching's padding
      ++padding;
      step.row_requests.push_back(-1);
    } else {
      continue;
    }
    plan.decodes.push_back(DecodeRow{static_cast<int>(slot), state.next_position++});
  }
  if (plan.empty()) return plan;

  StepRecord record;
  record.planned_ms = now_ms;
  record.prefills = static_cast<int>(plan.prefills.size());
  for (const PrefillRow& row : plan.prefills)
    record.prefill_tokens += static_cast<int>(row.prompt.size());
  record.decodes = static_cast<int>(plan.decodes.size()) - padding;
  record.padding = padding;
  record.busy_slots = static_cast<int>(slots_.size()) - free_slots();
  steps_.push_back(record);
  in_flight_.push_back(std::move(step));
  return plan;
}

void RequestScheduler::receive(int request, std::int32_t token, int step, double now_ms) {
  RequestRecord& record = records_[request];
  record.tokens.push_back(token);
  if (record.tokens.size() == 1) {
    record.first_token_step = step;
    record.first_token_ms = now_ms;
  }
  record.stopped_at_eos = options_.eos_token_id >= 0 && token == options_.eos_token_id;
  if (record.stopped_at_eos ||
      static_cast<int>(record.tokens.size()) == requests_[request].max_new_tokens) {
    finished_[request] = true;
    ++finished_requests_;
    record.finish_step = step;
    record.finish_ms = now_ms;
  }
}

void RequestScheduler::finish_step(const std::vector<std::int32_t>& tokens, double now_ms) {
  if (in_flight_.empty()) throw std::logic_error("finish_step: no step is in flight");
  if (tokens.size() != in_flight_.front().row_requests.size()) {
    throw std::runtime_error("finish_step: the back-end returned " + std::to_string(tokens.size()) +
                             " tokens for step " + std::to_string(in_flight_.front().step) +
                             " of " + std::to_string(in_flight_.front().row_requests.size()) +
                             " rows");
  }
  const InFlight step = std::move(in_flight_.front());
  in_flight_.pop_front();
  StepRecord& record = steps_[step.step];
  record.finished_ms = now_ms;
  for (std::size_t row = 0; row < tokens.size(); ++row) {
    const int request = step.row_requests[row];
    if (request < 0) continue;  // padding
    if (finished_[request]) {   // produced EOS in an earlier step still in flight then
      --record.decodes;
      ++record.speculative;
      continue;
    }
    receive(request, tokens[row], step.step, now_ms);
  }
  release_slots();
}

// ---------------------------------------------------------------- the serving loop

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

SteadyClock::SteadyClock() : start_seconds_(steady_seconds()) {}

double SteadyClock::now_ms() { return (steady_seconds() - start_seconds_) * 1e3; }

void SteadyClock::wait_until_ms(double ms) {
  const double wait_ms = ms - now_ms();
  // A wait the trace's limits would have refused (kMaxArrivalMs), or one too long to
  // convert to the sleep's integer duration, is a caller's bug: refused, never slept.
  if (!(wait_ms <= kMaxArrivalMs))
    throw std::invalid_argument("serving clock: a wait of " + std::to_string(wait_ms) +
                                " ms is longer than the replay bound of " +
                                std::to_string(kMaxArrivalMs) + " ms");
  if (wait_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(wait_ms));
}

ServingResult serve_requests(const std::vector<Request>& requests, ServingBackend& backend,
                             const SchedulerOptions& options, ServingClock& clock) {
  RequestScheduler scheduler(requests, backend.slot_count(), backend.slot_capacity(), options);
  ServingResult result;
  result.slots = backend.slot_count();
  result.start_ms = clock.now_ms();
  while (!scheduler.drained()) {
    if (scheduler.steps_in_flight() < options.steps_in_flight) {
      const StepPlan plan = scheduler.plan_step(clock.now_ms());
      if (!plan.empty()) {
        backend.launch_step(plan);
        continue;  // with room for another step in flight, plan it before waiting
      }
    }
    if (scheduler.steps_in_flight() > 0) {
      const std::vector<std::int32_t> tokens = backend.finish_step();
      clock.step_finished();
      scheduler.finish_step(tokens, clock.now_ms());
      continue;
    }
    // Nothing runs and nothing is in flight: the next request has not arrived yet.
    const double before_ms = clock.now_ms();
    if (!(scheduler.next_arrival_ms() > before_ms)) {
      throw std::logic_error("serve_requests: requests wait at " + std::to_string(before_ms) +
                             " ms but the scheduler planned nothing");
    }
    clock.wait_until_ms(scheduler.next_arrival_ms());
    result.waiting_ms += clock.now_ms() - before_ms;
  }
  result.end_ms = clock.now_ms();
  result.requests = scheduler.records();
  result.steps = scheduler.steps();
  return result;
}

}  // namespace ladder
