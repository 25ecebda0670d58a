// common/continuous_batching.hpp - serving a stream of requests from a fixed set of KV-cache
// slots: the scheduler, the back-end interface it drives, and the static-batching baseline.
//
// Notation: S slots, each a static KV cache of `capacity` positions (one row of the
// decode step). A request is a prompt of P tokens and a limit of N new tokens
// (common/request_trace.hpp); it needs P + N - 1 positions, since its last token is never
// fed back.
//
// Each step, the scheduler plans what the back-end runs:
//   1. release: a slot whose request produced EOS, or has already been given all N of its
//      steps, is free again (checked after every finished step, and before planning);
//   2. admission: requests that have arrived (arrival_ms <= now), in arrival order, take
//      the free slots, lowest slot first;
//   3. prefill: each admitted request's whole prompt is written into positions 0 .. P-1 of
//      its slot, and the greedy token after it is the request's first output token;
//   4. decode: every other busy slot feeds its last output token at its own position
//      (P + tokens so far - 1) and gets its next token.
// A request retires when its output ends with EOS (the EOS is part of the output) or
// holds N tokens: the rule of reference::generate() for a batch of one, so its tokens
// equal what the reference generates for that request alone.
//
// Why whole-prompt prefill in the admission step, not chunked prefill: prompts here are
// short next to outputs (P <= 64 against N up to 256 in the chapter's workload), so one
// prefill costs about what one decode step costs (the weights are read once either way)
// and delays the running rows by at most one step's worth of work. Chunking bounds that
// delay when prompts are thousands of tokens long, at the price of carrying partly
// prefilled slots across steps; it is not needed for correctness or for this workload.
// The back-end decides how the step's prefills and decodes run (one call per prefill
// before the batched decode, or all in one launch): they touch different slots.
//
// Static batching, the baseline (BatchingPolicy::static_batches): the same scheduler, but
// a batch of up to S arrived requests is admitted only once every slot is free, and a
// row that finished keeps being decoded (its tokens dropped) until the batch's last
// request finishes, as chapters 01-10 serve one batch and wait for its slowest row. Such
// padding rows stop at the slot's capacity.
//
// Two steps in flight (SchedulerOptions::steps_in_flight = 2): step k+1 is planned and
// launched before step k's tokens come back, so the host's work overlaps the device's.
// That needs no tokens from the host (each slot feeds its own last token, which stays in
// the back-end), and positions and limits are known in advance; only EOS is learned a
// step late. A request that produced EOS in step k is therefore decoded once more in
// step k+1; that speculative token is dropped, never part of the output.
//
// The back-end contract (ServingBackend), written for a GPU back-end that runs one decode
// step for all busy slots with per-row positions:
//   * launch_step(plan) starts a step and may return before it is done; finish_step()
//     waits for the oldest unfinished step and returns its tokens, prefills first, then
//     decodes, each in plan order. At most `steps_in_flight` steps are unfinished.
//   * steps run in launch order and each sees the effects of the ones before (one CUDA
//     stream does this): a slot released after its last launched decode may be prefilled
//     by the very next step.
//   * a slot appears at most once in a step. A prefill replaces whatever the slot held
//     and leaves its output token as the slot's last token; a decode row feeds the slot's
//     last token at `position`, writes keys and values there, attends over positions
//     0 .. position, and leaves its output as the slot's last token. Slots not in the plan
//     keep their contents (a fixed-shape GPU step may compute them and discard the result).
// A GPU back-end keeps the last tokens in device memory, so consecutive steps need no
// host round trip; the host only ships the prompts of new requests and the per-row
// positions (a few hundred bytes), and reads back one token per row.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <vector>

#include "common/config.hpp"
#include "common/request_trace.hpp"

namespace ladder {

// ---------------------------------------------------------------- the back-end interface

/// A newly admitted request: its prompt goes into positions 0 .. prompt.size()-1 of `slot`.
struct PrefillRow {
  int slot = 0;
  std::vector<std::int32_t> prompt;
};

/// A running request: its slot's last token is fed at `position`.
struct DecodeRow {
  int slot = 0;
  int position = 0;
};

/// One step's work. Its tokens come back as [prefills..., decodes...].
struct StepPlan {
  std::vector<PrefillRow> prefills;
  std::vector<DecodeRow> decodes;

  bool empty() const { return prefills.empty() && decodes.empty(); }
  std::size_t rows() const { return prefills.size() + decodes.size(); }
};

/// What runs the model for the scheduler (contract above). Implementations:
/// ReferenceBackend (common/reference_backend.hpp, the CPU reference in fp32 or in its
/// bf16 mode).
class ServingBackend {
 public:
  virtual ~ServingBackend() = default;
  virtual int slot_count() const = 0;
  virtual int slot_capacity() const = 0;  ///< positions per slot
  /// Starts one step. Throws std::invalid_argument on a plan that breaks the contract.
  virtual void launch_step(const StepPlan& plan) = 0;
  /// Waits for the oldest launched step; its greedy tokens, [prefills..., decodes...].
  virtual std::vector<std::int32_t> finish_step() = 0;
};

/// Throws std::invalid_argument, one line, for a plan no back-end of `slots` slots of
/// `capacity` positions can run: a slot outside [0, slots), a slot twice in the step, a
/// prompt that is empty or longer than a slot, a decode position outside [0, capacity).
/// Every back-end calls it before touching a slot (what the plan must agree with in the
/// back-end's own state, such as a slot's length, each checks itself).
void check_step_plan(const StepPlan& plan, int slots, int capacity);

/// Bytes of a KV cache of `slots` x `capacity` positions: keys and values of every
/// layer, n_embd values each, `bytes_per_value` bytes a value (4 for fp32, 2 for bf16).
double kv_cache_bytes(const Gpt2Config& config, int slots, int capacity, int bytes_per_value);

/// Throws std::invalid_argument, one line saying what to ask for instead, unless
/// 1 <= slots, 1 <= capacity <= n_positions and the cache fits in `bytes_available`.
void require_slots_fit(const Gpt2Config& config, int slots, int capacity, int bytes_per_value,
                       double bytes_available);

// ---------------------------------------------------------------- the scheduler

enum class BatchingPolicy {
  continuous,      ///< a free slot takes the next arrived request at once
  static_batches,  ///< batches of up to S, each waiting for its longest request
};

struct SchedulerOptions {
  BatchingPolicy policy = BatchingPolicy::continuous;
  int eos_token_id = -1;    ///< a request stops after producing it; negative: never
  int steps_in_flight = 1;  ///< 1: plan after the tokens are back; 2: one step ahead
};

/// One request's service: its output and when things happened to it. A step's tokens
/// are known when it finishes, so first_token_ms and finish_ms are finish times.
struct RequestRecord {
  std::vector<std::int32_t> tokens;  ///< generated ids, the EOS included
  bool stopped_at_eos = false;
  int slot = -1;           ///< the slot it was served in
  int arrival_step = -1;   ///< the first step planned after it arrived
  int admitted_step = -1;  ///< the step that ran its prefill
  int first_token_step = -1;
  int finish_step = -1;  ///< the step that produced its last token
  double arrival_ms = 0;
  double admitted_ms = 0;  ///< when its prefill step was planned
  double first_token_ms = 0;
  double finish_ms = 0;

  /// Steps launched from its arrival to its last token, both included.
  int latency_steps() const { return finish_step + 1 - arrival_step; }
  double latency_ms() const { return finish_ms - arrival_ms; }
};

/// One step's rows. `decodes` and `speculative` are settled when the step finishes.
struct StepRecord {
  double planned_ms = 0;
  double finished_ms = 0;
  int prefills = 0;
  int prefill_tokens = 0;
  int decodes = 0;      ///< decode rows whose token a request keeps
  int speculative = 0;  ///< decode rows of requests that had produced EOS (token dropped)
  int padding = 0;      ///< static batching: rows of finished requests waiting for the batch
  int busy_slots = 0;   ///< slots holding a request when the step was planned
};

/// The scheduler's state between steps. serve_requests() below runs the whole loop;
/// a chapter that interleaves its own work calls plan_step / finish_step itself.
class RequestScheduler {
 public:
  /// `requests` in arrival order (arrival_ms non-decreasing). Throws
  /// std::invalid_argument with one line naming the request and the problem, for an
  /// empty trace, a request that does not fit a slot of `capacity` positions, or bad
  /// options.
  RequestScheduler(std::vector<Request> requests, int slots, int capacity,
                   const SchedulerOptions& options);

  /// The next step's plan at time `now_ms`, which becomes in flight; an empty plan, and no
  /// step, when nothing can run before more requests arrive or a step finishes. Throws
  /// std::logic_error when steps_in_flight steps are already in flight.
  StepPlan plan_step(double now_ms);

  /// Takes the tokens of the oldest step in flight, finished at `now_ms`. Throws
  /// std::runtime_error when their number does not match the step's rows.
  void finish_step(const std::vector<std::int32_t>& tokens, double now_ms);

  /// Every request has finished and no step is in flight.
  bool drained() const { return finished_requests_ == requests_.size() && in_flight_.empty(); }
  /// Arrival time of the first request not admitted yet; +infinity when none is left.
  double next_arrival_ms() const;
  int steps_in_flight() const { return static_cast<int>(in_flight_.size()); }
  int free_slots() const;
  int slot_count() const { return static_cast<int>(slots_.size()); }

  const std::vector<RequestRecord>& records() const { return records_; }
  const std::vector<StepRecord>& steps() const { return steps_; }

 private:
  struct Slot {
    int request = -1;  ///< the request it holds (or, padding a static batch, held); -1 free
    int next_position = 0;
  };
  struct InFlight {
    int step = 0;
    std::vector<int> row_requests;  ///< per plan row; -1 for padding
  };

  bool request_done_issuing(int request) const;
  void release_slots();
  void admit(int slot, int request, double now_ms, StepPlan& plan, InFlight& step);
  void receive(int request, std::int32_t token, int step, double now_ms);

  std::vector<Request> requests_;
  std::vector<RequestRecord> records_;
  std::vector<int> issued_;  ///< per request: tokens the launched steps will produce
  std::vector<bool> finished_;
  std::vector<Slot> slots_;
  std::vector<StepRecord> steps_;
  std::deque<InFlight> in_flight_;
  SchedulerOptions options_;
  int capacity_ = 0;
  std::size_t next_waiting_ = 0;  ///< first request not admitted yet
  std::size_t next_unseen_ = 0;   ///< first request no plan has seen arrive
  std::size_t finished_requests_ = 0;
};

// ---------------------------------------------------------------- the serving loop

/// Where the serving loop reads the time. A chapter uses SteadyClock; tests use
/// SimulatedClock, so every time they check is exact.
class ServingClock {
 public:
  virtual ~ServingClock() = default;
  virtual double now_ms() = 0;
  /// Called when nothing can run until `ms` (the next arrival).
  virtual void wait_until_ms(double ms) = 0;
  /// Called after each finished step.
  virtual void step_finished() {}
};

/// Wall time since construction (std::chrono::steady_clock); waits by sleeping. A wait
/// longer than kMaxArrivalMs (common/request_trace.hpp) throws std::invalid_argument.
class SteadyClock : public ServingClock {
 public:
  SteadyClock();
  double now_ms() override;
  void wait_until_ms(double ms) override;

 private:
  double start_seconds_ = 0;
};

/// Time that advances by a fixed `ms_per_step` per finished step and jumps when waiting.
class SimulatedClock : public ServingClock {
 public:
  explicit SimulatedClock(double ms_per_step) : ms_per_step_(ms_per_step) {}
  double now_ms() override { return now_ms_; }
  void wait_until_ms(double ms) override { now_ms_ = ms > now_ms_ ? ms : now_ms_; }
  void step_finished() override { now_ms_ += ms_per_step_; }

 private:
  double ms_per_step_;
  double now_ms_ = 0;
};

struct ServingResult {
  int slots = 0;
  std::vector<RequestRecord> requests;  ///< in trace order
  std::vector<StepRecord> steps;
  double start_ms = 0;
  double end_ms = 0;
  double waiting_ms = 0;  ///< time with no step in flight, waiting for arrivals
};

/// Serves every request of `requests` on `backend` until the queue drains.
ServingResult serve_requests(const std::vector<Request>& requests, ServingBackend& backend,
                             const SchedulerOptions& options, ServingClock& clock);

}  // namespace ladder
