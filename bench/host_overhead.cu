// bench/host_overhead.cu - what each call of a decode step costs the HOST.
//
// A decode step at the default workload's sizes is a hundred or more launches of kernels
// that run for a few microseconds each. If the host needs longer to enqueue a call than the GPU
// needs to run it, the GPU waits between kernels, whatever the kernels' speed: the
// step is bound by the host's launch rate. This program times, on the host, the
// enqueueing of every kind of call the chapters make, at GPT-2 small shapes (B = 32
// unless --batch says otherwise): 200 calls back to back without waiting for the GPU,
// the median of 7 such rounds, divided by 200. Compare the column with the GPU time of
// the same kernels (any chapter's --kernel-profile) to see which side is the bottleneck.
//
// A second table times, the same way (a host clock, nothing tracing), what the host does
// in chapter 07's decode loop per step - enqueue the step (one graph launch between an
// event wait and an event record), then block until the step before has ended and read
// its flag - and in chapter 08's per generation (one launch of the whole generation, one
// wait), on the chapters' own graphs of GPT-2 small (random weights, N = 100), and the
// same step graph's launch with the GPU idle, to tell the graph's cost from the moment's
// (the launch inside the loop happens while the step before runs). A third
// reads the GPU's own gaps between steps - between chapter 07's step graphs, and inside
// chapter 08's WHILE node, which CUPTI does not trace: one-thread kernels at a decode
// step's start and end write the global timer (LoopStamps).
//
// Run:  build/current/bench/host_overhead [--batch B]
#include <cuda_runtime.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "common/benchmark.hpp"
#include "common/chapter_runner.hpp"
#include "common/config.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_event.hpp"
#include "common/cuda_graph.hpp"
#include "common/cuda_stream.hpp"
#include "common/device_allocator.hpp"
#include "common/device_info.hpp"
#include "common/device_model.hpp"
#include "common/greedy_decoding.hpp"
#include "common/nvtx.hpp"
#include "common/pinned_flag.hpp"
#include "common/prompts.hpp"
#include "common/step_context.hpp"
#include "common/weights.hpp"
#include "kernels/attention.cuh"
#include "kernels/cache_attention.cuh"
#include "kernels/decode_position.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/sampling.cuh"

namespace {

using namespace ladder;

constexpr int kCallsPerRound = 200;  // well inside the launch queue: the host never waits
constexpr int kRounds = 7;
constexpr int kC = 768;  // GPT-2 small
constexpr int kH = 12;
constexpr int kCapacity = 101;  // N = 100 with a BOS prompt
constexpr int kPosition = 50;   // halfway through the generation

// The shortest kernel there is: what any launch costs before it does anything.
__global__ void empty_kernel() {}

/// Host microseconds per call: kRounds rounds of kCallsPerRound calls, each round
/// timed from the first call to the return of the last (no synchronization inside).
double host_microseconds_per_call(cudaStream_t stream, const std::function<void()>& call) {
  for (int i = 0; i < 20; ++i) call();  // warm-up: first-launch costs, cuBLASLt plans
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> per_call;
  for (int round = 0; round < kRounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCallsPerRound; ++i) call();
    const auto stop = std::chrono::steady_clock::now();
    per_call.push_back(std::chrono::duration<double, std::micro>(stop - start).count() /
                       kCallsPerRound);
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return summarize(per_call).median;
}

// ---------------------------------------------------------------- chapters 07 and 08's loops
//
// The goal of chapter 07 is the host's time per decode step; the chapters' own host figure
// comes from a run under CUPTI's API trace, which slows every call it records. Here the
// host's side of chapter 07's loop (chapters/07_cuda_graphs/cuda_graphs.cpp, generate()) and
// of chapter 08's (chapters/08_device_loop/device_loop.cpp) is timed with a host clock and
// nothing tracing: GPT-2 small with the chapters' random weights (seed 0), B BOS rows,
// N = 100 new tokens, the chapters' buffers, kernels and calls (common/, kernels/), and
// their graphs captured as they capture them: the real decode step, not a stand-in.

constexpr int kNewTokens = 100;  // the default workload's N
constexpr int kWarmupGenerations = 2;
constexpr int kTimedGenerations = 10;

using Clock = std::chrono::steady_clock;

double microseconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

/// One generation's device memory as chapters 07 and 08 allocate it for B BOS prompts
/// (T = 1: capacity T + N positions), and their forward passes over it with their
/// launchers, on a StepContext: the prefill (step 0), a decode step, the argmax step. The
/// chapters allocate it anew for every generation, and the caching allocator hands back
/// the same addresses, so their graphs replay; the bench keeps one and rewind()s it.
class Generation {
 public:
  Generation(const DeviceModel& model, DeviceAllocator& allocator, int B, int N,
             cudaStream_t stream)
      : model_(model),
        config_(model.config()),
        B_(B),
        capacity_(1 + N),
        prompts_(bos_prompts(B, config_.bos_token_id)),
        sequence_(upload_prompt_tokens(allocator, prompts_, stream)),
        greedy_(allocator, prompts_, N, config_.eos_token_id, stream),
        layer_floats_(static_cast<std::size_t>(B) * capacity_ * config_.n_embd),
        keys_(allocator, config_.n_layer * layer_floats_, stream),
        values_(allocator, config_.n_layer * layer_floats_, stream),
        attention_workspace_(
            allocator,
            fused_decode_attention_workspace_bytes(B, config_.n_head, config_.n_embd, capacity_),
            stream),
        hidden_(allocator, rows(1), stream),
        normed_(allocator, rows(1), stream),
        qkv_(allocator, rows(3), stream),
        attended_(allocator, rows(1), stream),
        projected_(allocator, rows(1), stream),
        expanded_(allocator, rows(4), stream),
        logits_(allocator, static_cast<std::size_t>(B) * config_.vocab_size, stream),
        next_tokens_(allocator, static_cast<std::size_t>(B), stream),
        cursor_(allocator, 1, stream) {
    CUDA_CHECK(cudaMemsetAsync(attention_workspace_, 0, attention_workspace_.bytes(), stream));
    rewind(stream);
  }

  /// Where a generation starts: no row finished, the cursor at the prompt's token.
  void rewind(cudaStream_t stream) const {
    const GreedyState& state = greedy_.state();
    CUDA_CHECK(cudaMemsetAsync(state.finished, 0, sizeof(std::int32_t) * B_, stream));
    CUDA_CHECK(cudaMemsetAsync(state.all_finished, 0, sizeof(std::int32_t), stream));
    const DecodePosition start{/*step=*/0, /*position=*/0};
    CUDA_CHECK(cudaMemcpyAsync(cursor_, &start, sizeof(start), cudaMemcpyHostToDevice, stream));
  }

  /// What a captured step or generation froze, as chapter 07's graph key lists it.
  GraphKey key() const {
    const GreedyState& state = greedy_.state();
    GraphKey key;
    key.add_size(B_).add_size(capacity_).add_size(state.max_steps).add_size(state.eos_id);
    key.add_addresses({cursor_, next_tokens_, keys_, values_, attention_workspace_, hidden_,
                       normed_, qkv_, attended_, projected_, expanded_, logits_,
                       state.forced_tokens, state.finished, state.all_finished,
                       state.output_tokens});
    return key;
  }

  /// Step 0: GPT-2 over the prompts, their keys and values left at cache position 0.
  const float* prefill(StepContext& step) {
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    launch_sequence_embedding(sequence_, model_.token_embedding(), model_.position_embedding(),
                              hidden_, B_, /*T=*/1, /*first_position=*/0, C, stream);
    layers(step, [&](int layer_index) {
      launch_store_kv_sequence(qkv_, layer_keys(layer_index), layer_values(layer_index),
                               /*first_position=*/0, /*T=*/1, capacity_, B_, config_.n_head, C,
                               stream);
      launch_causal_attention(qkv_, attended_, B_, /*T=*/1, config_.n_head, C, stream);
    });
    return lm_head(step);
  }

  /// A decode step: the tokens the step before chose, at the cursor's position.
  const float* decode_step(StepContext& step) {
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    launch_embedding_at_cursor(next_tokens_, cursor_, model_.token_embedding(),
                               model_.position_embedding(), hidden_, B_, C, stream);
    layers(step, [&](int layer_index) {
      launch_fused_decode_attention(qkv_, layer_keys(layer_index), layer_values(layer_index),
                                    cursor_, capacity_, attended_, attention_workspace_, B_,
                                    config_.n_head, C, stream);
    });
    return lm_head(step);
  }

  /// Chapter 07's argmax step (the cursor advances on the device).
  void argmax(const float* step_logits, cudaStream_t stream) {
    launch_argmax_step(step_logits, next_tokens_, greedy_.state(), cursor_, B_, config_.vocab_size,
                       stream);
  }
  /// Chapter 08's: the same, and it sets the WHILE loop's condition.
  void argmax_in_graph_loop(const float* step_logits, cudaGraphConditionalHandle another_step,
                            cudaStream_t stream) {
    launch_argmax_step_in_graph_loop(step_logits, next_tokens_, greedy_.state(), cursor_, B_,
                                     config_.vocab_size, another_step, stream);
  }

  const std::int32_t* all_finished() const { return greedy_.all_finished(); }
  const DecodePosition* cursor() const { return cursor_; }
  const float* logits() const { return logits_; }
  int batch() const { return B_; }
  int vocab_size() const { return config_.vocab_size; }

 private:
  std::size_t rows(int widths) const {
    return static_cast<std::size_t>(B_) * widths * config_.n_embd;
  }
  float* layer_keys(int layer_index) const { return keys_ + layer_index * layer_floats_; }
  float* layer_values(int layer_index) const { return values_ + layer_index * layer_floats_; }

  /// The twelve layers over the B rows of hidden_, with the chapters' fusions (chapter
  /// 05): ln_1 alone before the first, every later LayerNorm with the residual add before
  /// it, bias and GELU in the products' epilogues.
  template <typename Attention>
  void layers(StepContext& step, const Attention& attend) {
    const cudaStream_t stream = step.stream();
    const int C = config_.n_embd;
    const float eps = config_.layer_norm_epsilon;
    launch_layernorm(hidden_, model_.layer(0).ln_1_weight, model_.layer(0).ln_1_bias, normed_, B_,
                     C, eps, stream);
    for (int layer_index = 0; layer_index < config_.n_layer; ++layer_index) {
      const DeviceLayer layer = model_.layer(layer_index);
      step.linear(normed_, layer.qkv_weight, layer.qkv_bias, qkv_, B_, C, 3 * C,
                  LinearEpilogue::kBias);
      attend(layer_index);
      step.linear(attended_, layer.attn_proj_weight, layer.attn_proj_bias, projected_, B_, C, C,
                  LinearEpilogue::kBias);
      launch_residual_layernorm(hidden_, projected_, layer.ln_2_weight, layer.ln_2_bias, normed_,
                                B_, C, eps, stream);
      step.linear(normed_, layer.fc_weight, layer.fc_bias, expanded_, B_, C, 4 * C,
                  LinearEpilogue::kBiasGelu);
      step.linear(expanded_, layer.mlp_proj_weight, layer.mlp_proj_bias, projected_, B_, 4 * C, C,
                  LinearEpilogue::kBias);
      const bool last = layer_index + 1 == config_.n_layer;
      const DeviceLayer next = model_.layer(last ? layer_index : layer_index + 1);
      launch_residual_layernorm(hidden_, projected_, last ? model_.ln_f_weight() : next.ln_1_weight,
                                last ? model_.ln_f_bias() : next.ln_1_bias, normed_, B_, C, eps,
                                stream);
    }
  }

  /// The tied LM head over ln_f's output (T = 1: each row's only position).
  const float* lm_head(StepContext& step) {
    step.lm_head(normed_, model_.token_embedding(), logits_, B_, config_.n_embd,
                 config_.vocab_size);
    return logits_;
  }

  const DeviceModel& model_;
  const Gpt2Config config_;
  const int B_;
  const int capacity_;
  const PromptBatch prompts_;
  const TypedBuffer<std::int32_t> sequence_;
  const GreedyBuffers greedy_;
  const std::size_t layer_floats_;
  const TypedBuffer<float> keys_;
  const TypedBuffer<float> values_;
  const TypedBuffer<char> attention_workspace_;
  const TypedBuffer<float> hidden_, normed_, qkv_, attended_, projected_, expanded_, logits_;
  const TypedBuffer<std::int32_t> next_tokens_;
  const TypedBuffer<DecodePosition> cursor_;
};

// ---------------------------------------------------------------- the GPU's gap between steps
//
// CUPTI does not always follow the kernels of a WHILE node's body, so
// chapter 08's idle time between steps is read here from the GPU's own clock: one-thread
// kernels inside the loop's body write %globaltimer (nanoseconds, the same clock on every
// multiprocessor) as the body starts and twice as it ends. The two stamps at the end are
// one kernel boundary apart, so they measure what any boundary between two dependent
// kernels of the graph costs (with a stamp kernel's own run); the end of one step's last
// stamp to the next step's first is the same plus whatever the WHILE node adds between
// two passes of its body; the first stamp to the second is the step's own kernels, which
// says whether they run slower inside the body than in chapter 07's step graph. Chapter
// 07's decode steps carry the same three stamps (before the copy of the finished flag), so
// its gap between steps - the flag's copy, the event from one stream to the other, the
// next step's graph starting - is read the same way.

/// Writes the global timer at times[*count] and counts (one thread: <<<1, 1>>>).
__global__ void stamp_kernel(unsigned long long* times, unsigned int* count,
                             unsigned int capacity) {
  unsigned long long now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  const unsigned int index = *count;
  if (index < capacity) times[index] = now;
  *count = index + 1;
}

/// Three series of global-timer stamps on the device, one per stamp point of the body.
struct LoopStamps {
  static constexpr int kSeries = 3;  ///< the body's start, its end, one boundary after it
  LoopStamps(DeviceAllocator& allocator, int capacity, cudaStream_t stream)
      : capacity(capacity),
        times(allocator, static_cast<std::size_t>(kSeries) * capacity, stream),
        counts(allocator, kSeries, stream) {}
  void stamp(int series, cudaStream_t stream) const {
    stamp_kernel<<<1, 1, 0, stream>>>(times + static_cast<std::size_t>(series) * capacity,
                                      counts + series, static_cast<unsigned int>(capacity));
    CUDA_CHECK_LAUNCH(stream);
  }
  void reset(cudaStream_t stream) const {
    CUDA_CHECK(cudaMemsetAsync(counts, 0, counts.bytes(), stream));
  }
  /// Each series' stamps, in nanoseconds, as many as were written (at most capacity).
  std::array<std::vector<unsigned long long>, kSeries> download(cudaStream_t stream) const {
    std::array<unsigned int, kSeries> written{};
    CUDA_CHECK(
        cudaMemcpyAsync(written.data(), counts, counts.bytes(), cudaMemcpyDeviceToHost, stream));
    std::vector<unsigned long long> all(static_cast<std::size_t>(kSeries) * capacity);
    CUDA_CHECK(cudaMemcpyAsync(all.data(), times, times.bytes(), cudaMemcpyDeviceToHost, stream));
    synchronize_stage(stream, "the loop's stamps");
    std::array<std::vector<unsigned long long>, kSeries> series;
    for (int s = 0; s < kSeries; ++s) {
      const auto first = all.begin() + static_cast<std::ptrdiff_t>(s) * capacity;
      series[s].assign(first, first + std::min<unsigned int>(written[s], capacity));
    }
    return series;
  }
  const int capacity;
  const TypedBuffer<unsigned long long> times;
  const TypedBuffer<unsigned int> counts;
};

/// What each of chapter 07's two streams owns (its StepStream): step i runs on stream i % 2.
struct PingPongStream {
  explicit PingPongStream(DeviceAllocator& allocator)
      : context(allocator, /*allow_tf32=*/false), step_done(cudaEventDisableTiming) {}
  StepContext context;
  CudaEvent step_done;
  PinnedFlag all_finished;
  GraphCache<CudaGraphExec> decode_graph;
};

/// Host microseconds of the replayed steps of chapter 07's generations.
struct StepTimes {
  std::vector<double> enqueue;  ///< from the step's first call to its event record's return
  std::vector<double> launch;   ///< of which cudaGraphLaunch
  std::vector<double> wait;     ///< the wait for step i - 1 and the read of its flag
  std::vector<double> whole;    ///< the two: one iteration of the loop
  int steps = 0;                ///< steps the last generation ran
};

/// One generation as chapter 07's generate() runs it: step i enqueued on stream i % 2
/// behind step i - 1's event (step 0 the plain prefill; a decode step one graph launch,
/// captured the first time on each stream), then the wait for step i - 1 and its flag
/// in pinned memory, stopping when it is set. Each replayed step's host times go to
/// `times` (null: a warm-up generation). With `stamps`, each decode step also writes the
/// global timer as it starts and, twice, before its flag's copy (for print_step_gaps only:
/// the streams' graphs must then be captured with them).
void chapter07_generation(Generation& generation, std::array<PingPongStream, 2>& streams,
                          const GraphKey& frozen, LogitsRecorder& logits, StepTimes* times,
                          const LoopStamps* stamps = nullptr) {
  const int B = generation.batch();
  const int V = generation.vocab_size();
  generation.rewind(streams[0].context.stream());
  int steps = kNewTokens;
  int last_enqueued = 0;
  for (int step = 0; step < kNewTokens; ++step) {
    PingPongStream& current = streams[step % 2];
    const PingPongStream& previous = streams[(step + 1) % 2];
    bool replayed = false;
    double launch_microseconds = 0.0;
    const Clock::time_point started = Clock::now();
    {
      NvtxRange step_range("step");
      const cudaStream_t step_stream = current.context.stream();
      if (step > 0) CUDA_CHECK(cudaStreamWaitEvent(step_stream, previous.step_done.get(), 0));
      const auto enqueue_step = [&] {
        const bool stamped = stamps != nullptr && step > 0;
        if (stamped) stamps->stamp(0, step_stream);  // the decode step starts
        const float* step_logits = step == 0 ? generation.prefill(current.context)
                                             : generation.decode_step(current.context);
        generation.argmax(step_logits, step_stream);
        if (stamped) {
          stamps->stamp(1, step_stream);  // the step's kernels are done
          stamps->stamp(2, step_stream);  // one kernel boundary later
        }
        CUDA_CHECK(cudaMemcpyAsync(current.all_finished.get(), generation.all_finished(),
                                   sizeof(std::int32_t), cudaMemcpyDeviceToHost, step_stream));
      };
      if (step == 0) {
        enqueue_step();
      } else if (const CudaGraphExec* graph = current.decode_graph.find(frozen)) {
        const Clock::time_point launching = Clock::now();
        graph->launch(step_stream);
        launch_microseconds = microseconds(launching, Clock::now());
        replayed = true;
      } else {
        enqueue_step();
        current.decode_graph.store(
            frozen,
            CudaGraphExec(capture_graph(step_stream, enqueue_step, "decode step"), "decode step"));
      }
      logits.record(generation.logits(), B, V, step_stream);
      CUDA_CHECK(cudaEventRecord(current.step_done.get(), step_stream));
      last_enqueued = step;
    }
    const Clock::time_point enqueued = Clock::now();
    if (step == 0) continue;
    bool finished = false;
    {
      NvtxRange check_range("check previous step");
      synchronize_stage(previous.step_done.get(), "step " + std::to_string(step - 1));
      finished = *previous.all_finished.get() != 0;
    }
    const Clock::time_point checked = Clock::now();
    if (times != nullptr && replayed) {
      times->enqueue.push_back(microseconds(started, enqueued));
      times->launch.push_back(launch_microseconds);
      times->wait.push_back(microseconds(enqueued, checked));
      times->whole.push_back(microseconds(started, checked));
    }
    if (finished) {
      steps = step;
      break;
    }
  }
  synchronize_stage(streams[last_enqueued % 2].step_done.get(), "the last step");
  if (times != nullptr) times->steps = steps;
}

/// Host microseconds of cudaGraphLaunch of chapter 07's decode step with nothing queued
/// before it (the GPU idle, the step rewound to position 0 before each launch): set
/// against the same call inside the loop, where the step before is still running, it says
/// whether the loop's launch time is the graph's or the moment's.
std::vector<double> idle_launch_microseconds(const Generation& generation, PingPongStream& stream,
                                             const GraphKey& frozen) {
  constexpr int kWarmupLaunches = 5;
  constexpr int kTimedLaunches = 50;
  const CudaGraphExec* graph = stream.decode_graph.find(frozen);
  if (graph == nullptr)
    throw std::logic_error("idle_launch_microseconds: chapter 07's step was never captured");
  const cudaStream_t s = stream.context.stream();
  std::vector<double> times;
  for (int launch = 0; launch < kWarmupLaunches + kTimedLaunches; ++launch) {
    generation.rewind(s);
    synchronize_stage(s, "the rewind before a lone decode step");
    const Clock::time_point launching = Clock::now();
    graph->launch(s);
    const double elapsed = microseconds(launching, Clock::now());
    synchronize_stage(s, "a lone decode step");
    if (launch >= kWarmupLaunches) times.push_back(elapsed);
  }
  return times;
}

/// Host microseconds of chapter 08's generations, per generation.
struct GenerationTimes {
  std::vector<double> launch;  ///< the graph's lookup and cudaGraphLaunch
  std::vector<double> wait;    ///< blocked in the wait for the whole generation
  std::vector<double> whole;   ///< launch, wait and the read of the cursor (the steps run)
  std::vector<double> steps;   ///< steps each generation ran
};

/// Chapter 08's generation graph, as its generate() captures it the first time: two plain
/// steps (cuBLASLt's plans, every kernel loaded), the state they changed put back, then the
/// prefill and its argmax followed by a WHILE node whose body is a decode step and its
/// argmax, the argmax setting the loop's condition. With `stamps`, the body also writes
/// the global timer as it starts and, twice, as it ends (for print_step_gaps only).
CudaGraphExec capture_chapter08_generation(Generation& generation, StepContext& step,
                                           const LoopStamps* stamps = nullptr) {
  const cudaStream_t stream = step.stream();
  generation.argmax(generation.prefill(step), stream);
  generation.argmax(generation.decode_step(step), stream);
  generation.rewind(stream);
  CudaGraph graph = CudaGraph::create();
  const cudaGraphConditionalHandle another_step = create_condition(graph, /*initial=*/0);
  cudaGraph_t loop_body = nullptr;
  capture_into_graph(
      graph.get(), stream,
      [&] {
        generation.argmax_in_graph_loop(generation.prefill(step), another_step, stream);
        loop_body = add_while_node(stream, another_step);
      },
      "generation");
  capture_into_graph(
      loop_body, stream,
      [&] {
        if (stamps != nullptr) stamps->stamp(0, stream);  // the body starts
        generation.argmax_in_graph_loop(generation.decode_step(step), another_step, stream);
        if (stamps != nullptr) {
          stamps->stamp(1, stream);  // the body's kernels are done
          stamps->stamp(2, stream);  // one kernel boundary later
        }
      },
      "decode loop body");
  return CudaGraphExec(graph, "generation");
}

/// One generation as chapter 08's generate() runs it once its graph exists: the graph
/// looked up and launched, one wait, the cursor read back for the steps that ran.
void chapter08_generation(Generation& generation, GraphCache<CudaGraphExec>& generation_graph,
                          const GraphKey& frozen, cudaStream_t stream, GenerationTimes* times) {
  generation.rewind(stream);
  const Clock::time_point started = Clock::now();
  const CudaGraphExec* graph = generation_graph.find(frozen);
  if (graph == nullptr) throw std::logic_error("chapter 08's generation graph was not captured");
  graph->launch(stream);
  const Clock::time_point launched = Clock::now();
  synchronize_stage(stream, "the generation graph");
  const Clock::time_point waited = Clock::now();
  DecodePosition end{};
  CUDA_CHECK(
      cudaMemcpyAsync(&end, generation.cursor(), sizeof(end), cudaMemcpyDeviceToHost, stream));
  const Clock::time_point read = Clock::now();
  if (times == nullptr) return;
  times->launch.push_back(microseconds(started, launched));
  times->wait.push_back(microseconds(launched, waited));
  times->whole.push_back(microseconds(started, read));
  times->steps.push_back(end.step);
}

/// The median of `values` divided by `divisor`.
double median_over(const std::vector<double>& values, double divisor) {
  return summarize(values).median / divisor;
}

/// Microseconds from the stamps of consecutive steps (LoopStamps' three series): a step's
/// kernels, from its start to its end; within a step, its end to one kernel boundary later;
/// between steps, that to the next step's start.
struct StepGaps {
  std::vector<double> kernels;
  std::vector<double> boundary;
  std::vector<double> between_steps;
  void add(const std::array<std::vector<unsigned long long>, LoopStamps::kSeries>& series) {
    const auto& [starts, ends, afters] = series;
    for (std::size_t i = 0; i < afters.size() && i < ends.size(); ++i) {
      if (i < starts.size()) kernels.push_back(static_cast<double>(ends[i] - starts[i]) * 1e-3);
      boundary.push_back(static_cast<double>(afters[i] - ends[i]) * 1e-3);
      if (i + 1 < starts.size())
        between_steps.push_back(static_cast<double>(starts[i + 1] - afters[i]) * 1e-3);
    }
  }
};

/// Prints the third table: the GPU's gaps between steps, from chapter 07's decode steps
/// and from chapter 08's WHILE body, each stamping the global timer (LoopStamps).
void print_step_gaps(Generation& generation, StepContext& step, DeviceAllocator& allocator,
                     const GraphKey& frozen) {
  // Chapter 07: its own two streams, whose step graphs are captured with the stamps.
  std::array<PingPongStream, 2> streams{{PingPongStream(allocator), PingPongStream(allocator)}};
  const cudaStream_t first_stream = streams[0].context.stream();
  const LoopStamps stamps07(allocator, kNewTokens, first_stream);
  LogitsRecorder logits;  // disabled
  StepGaps chapter07;
  for (int run = 0; run < kWarmupGenerations + kTimedGenerations; ++run) {
    stamps07.reset(first_stream);  // before step 0, which every later step waits for
    chapter07_generation(generation, streams, frozen, logits, nullptr, &stamps07);
    const auto series = stamps07.download(first_stream);  // after the last step's wait
    if (run >= kWarmupGenerations) chapter07.add(series);
  }

  // Chapter 08: the generation graph with a stamped body.
  const cudaStream_t stream = step.stream();
  const LoopStamps stamps08(allocator, kNewTokens, stream);
  const CudaGraphExec stamped = capture_chapter08_generation(generation, step, &stamps08);
  StepGaps chapter08;
  for (int run = 0; run < kWarmupGenerations + kTimedGenerations; ++run) {
    generation.rewind(stream);
    stamps08.reset(stream);
    stamped.launch(stream);
    const auto series = stamps08.download(stream);
    if (run >= kWarmupGenerations) chapter08.add(series);
  }
  for (const StepGaps* gaps : {&chapter07, &chapter08})
    if (gaps->boundary.empty() || gaps->between_steps.empty())
      throw std::runtime_error("a stamped generation ran fewer than two decode steps");

  const auto row = [](const char* what, const std::vector<double>& values) {
    const Summary summary = summarize(values);
    std::printf("| %s | %.2f | %.2f | %.2f |\n", what, summary.mean, summary.median, summary.min);
  };
  std::printf(
      "\nThe GPU's gaps between steps (global timer written by one-thread kernels at a decode "
      "step's start and twice at its end; chapter 07 %zu, chapter 08 %zu steps of %d "
      "generations; a stamp kernel's own run is in every row):\n\n"
      "| from one stamp to the next | mean us | median us | min us |\n|---|--:|--:|--:|\n",
      chapter07.between_steps.size(), chapter08.between_steps.size(), kTimedGenerations);
  row("chapter 07, one step's kernels: its start to its end", chapter07.kernels);
  row("chapter 07, two kernels of one step's graph: one kernel boundary", chapter07.boundary);
  row("chapter 07, the end of one step to the start of the next: the flag's copy, the event, "
      "the next graph",
      chapter07.between_steps);
  row("chapter 08, one step's kernels in the body: its start to its end", chapter08.kernels);
  row("chapter 08, two kernels of one step's body: one kernel boundary", chapter08.boundary);
  row("chapter 08, the end of one step's body to the start of the next: the loop's boundary",
      chapter08.between_steps);
  std::printf(
      "\n(Over a kernel boundary, chapter 07's steps add %.2f us a step and chapter 08's loop "
      "%.2f us: the mean of each chapter's second row less its first's. The gap between steps "
      "is at most the second row.)\n",
      summarize(chapter07.between_steps).mean - summarize(chapter07.boundary).mean,
      summarize(chapter08.between_steps).mean - summarize(chapter08.boundary).mean);
  const double kernels_difference =
      summarize(chapter08.kernels).median - summarize(chapter07.kernels).median;
  const double step_difference =
      summarize(chapter08.kernels).median + summarize(chapter08.boundary).median +
      summarize(chapter08.between_steps).median -
      (summarize(chapter07.kernels).median + summarize(chapter07.boundary).median +
       summarize(chapter07.between_steps).median);
  const auto longer_or_shorter = [](double difference) {
    return difference < 0 ? "shorter" : "longer";
  };
  std::printf(
      "(A step's kernels take %.2f us %s inside chapter 08's WHILE body than in chapter "
      "07's step graph (medians), and a whole step, the three rows' medians summed, %.2f us "
      "%s.)\n",
      std::fabs(kernels_difference), longer_or_shorter(kernels_difference),
      std::fabs(step_difference), longer_or_shorter(step_difference));
}

/// Prints the second table: chapter 07's loop per step, chapter 08's per generation.
void print_chapter_loops(int B) {
  const Gpt2Config config;
  const DeviceModel model(random_gpt2_weights(config, /*seed=*/0));
  const std::unique_ptr<DeviceAllocator> allocator = make_device_allocator("caching");
  std::array<PingPongStream, 2> streams{{PingPongStream(*allocator), PingPongStream(*allocator)}};
  Generation generation(model, *allocator, B, kNewTokens, streams[0].context.stream());
  const GraphKey frozen = generation.key();
  LogitsRecorder logits;  // disabled, as in the chapters' timed runs: record() returns

  StepTimes chapter07;
  for (int run = 0; run < kWarmupGenerations + kTimedGenerations; ++run)
    chapter07_generation(generation, streams, frozen, logits,
                         run < kWarmupGenerations ? nullptr : &chapter07);

  const std::vector<double> idle_launch = idle_launch_microseconds(generation, streams[1], frozen);

  require_conditional_nodes();
  StepContext step(*allocator, /*allow_tf32=*/false);
  GraphCache<CudaGraphExec> generation_graph;
  generation_graph.store(frozen, capture_chapter08_generation(generation, step));
  GenerationTimes chapter08;
  for (int run = 0; run < kWarmupGenerations + kTimedGenerations; ++run)
    chapter08_generation(generation, generation_graph, frozen, step.stream(),
                         run < kWarmupGenerations ? nullptr : &chapter08);
  const double steps08 = summarize(chapter08.steps).median;

  struct Row {
    const char* what;
    double microseconds_per_step;
  };
  const Row rows[] = {
      {"chapter 07's step: enqueue (cudaStreamWaitEvent, cudaGraphLaunch, cudaEventRecord)",
       median_over(chapter07.enqueue, 1.0)},
      {"chapter 07's step: of which cudaGraphLaunch of the decode step",
       median_over(chapter07.launch, 1.0)},
      {"chapter 07's decode step launched alone, the GPU idle: cudaGraphLaunch",
       median_over(idle_launch, 1.0)},
      {"chapter 07's step: blocked waiting for step i - 1 (cudaEventSynchronize), its flag read",
       median_over(chapter07.wait, 1.0)},
      {"chapter 07's step: the loop's whole iteration (enqueue + wait)",
       median_over(chapter07.whole, 1.0)},
      {"chapter 08's generation: one cudaGraphLaunch, / steps run",
       median_over(chapter08.launch, steps08)},
      {"chapter 08's generation: blocked in cudaStreamSynchronize, / steps run",
       median_over(chapter08.wait, steps08)},
      {"chapter 08's generation: launch + wait + cursor read, / steps run",
       median_over(chapter08.whole, steps08)},
  };
  std::printf(
      "\nThe host's side of chapter 07's decode loop and chapter 08's generation, B = %d, "
      "N = %d, GPT-2 small, random weights (host clock, no tracing; chapter 07: median "
      "over the replayed steps of %d generations, chapter 08: median of %d generations, "
      "after %d warm-up generations each):\n\n| what the host does | host us per step |\n"
      "|---|--:|\n",
      B, kNewTokens, kTimedGenerations, kTimedGenerations, kWarmupGenerations);
  for (const Row& row : rows) std::printf("| %s | %.2f |\n", row.what, row.microseconds_per_step);
  std::printf(
      "\n(Steps run: chapter 07 %d, chapter 08 %.0f of N = %d. Chapter 08's whole launch: "
      "%.2f us, once per generation.)\n",
      chapter07.steps, steps08, kNewTokens, summarize(chapter08.launch).median);
  print_step_gaps(generation, step, *allocator, frozen);
}

int run(int argc, char** argv) {
  const int B = bench::parse_batch(argc, argv, "host_overhead");
  std::printf("%s\n", device_banner(query_device_info()).c_str());
  const CudaStream stream;
  const cudaStream_t s = stream.get();
  bench::DeviceScratch scratch;

  float* x = scratch.floats(static_cast<std::size_t>(B) * 4 * kC);
  float* residual = scratch.floats(static_cast<std::size_t>(B) * kC);
  float* out = scratch.floats(static_cast<std::size_t>(B) * 4 * kC);
  float* qkv = scratch.floats(static_cast<std::size_t>(B) * 3 * kC);
  float* weight = scratch.floats(static_cast<std::size_t>(kC) * 4 * kC);
  float* bias = scratch.floats(4 * kC);
  const std::size_t cache_size = static_cast<std::size_t>(B) * kCapacity * kC;
  float* keys = scratch.floats(cache_size);
  float* values = scratch.floats(cache_size);
  float* grown_keys = scratch.floats(cache_size);
  float* grown_values = scratch.floats(cache_size);
  auto* workspace = scratch.floats(
      fused_decode_attention_workspace_bytes(B, kH, kC, kCapacity) / sizeof(float) + 1);
  auto* cursor = reinterpret_cast<DecodePosition*>(scratch.floats(2));
  const DecodePosition at_position{0, kPosition};
  CUDA_CHECK(cudaMemcpy(cursor, &at_position, sizeof(at_position), cudaMemcpyHostToDevice));
  float* lt_workspace = scratch.floats(LtMatmul::kRecommendedWorkspaceBytes / sizeof(float));
  LtMatmul lt(lt_workspace, LtMatmul::kRecommendedWorkspaceBytes);
  LtMatmul lt_in_kernel(lt_workspace, LtMatmul::kRecommendedWorkspaceBytes,
                        /*allow_tf32=*/false, SplitKReduction::kInsideTheKernel);
  LtMatmul lt_no_split(lt_workspace, LtMatmul::kRecommendedWorkspaceBytes,
                       /*allow_tf32=*/false, SplitKReduction::kNoSplit);
  std::unique_ptr<DeviceAllocator> caching = make_device_allocator("caching");
  std::unique_ptr<DeviceAllocator> expandable = make_device_allocator("expandable");
  int flag_host = 0;
  int* pinned_flag = nullptr;
  CUDA_CHECK(cudaMallocHost(&pinned_flag, sizeof(int)));
  const std::unique_ptr<int, decltype(&cudaFreeHost)> pinned_guard(pinned_flag, &cudaFreeHost);
  const float eps = 1e-5f;
  const std::size_t activation_bytes = static_cast<std::size_t>(B) * kC * sizeof(float);

  struct Case {
    const char* name;
    std::function<void()> call;
  };
  const std::vector<Case> cases = {
      {"empty kernel <<<1, 32>>>", [&] { empty_kernel<<<1, 32, 0, s>>>(); }},
      {"launch_add_bias [B, 3C]", [&] { launch_add_bias(qkv, bias, B, 3 * kC, s); }},
      {"launch_layernorm [B, C]",
       [&] { launch_layernorm(residual, bias, bias, out, B, kC, eps, s); }},
      {"launch_residual_layernorm [B, C]",
       [&] { launch_residual_layernorm(residual, x, bias, bias, out, B, kC, eps, s); }},
      {"launch_grow_kv_cache (L = 50)",
       [&] {
         launch_grow_kv_cache(qkv, keys, values, grown_keys, grown_values, kPosition, B, kH, kC, s);
       }},
      {"launch_decode_attention (L = 51)",
       [&] {
         launch_decode_attention(qkv, 3 * kC, keys, values, out, B, kPosition + 1, kCapacity, kH,
                                 kC, s);
       }},
      {"launch_fused_decode_attention (p = 50)",
       [&] {
         launch_fused_decode_attention(qkv, keys, values, cursor, kCapacity, out, workspace, B, kH,
                                       kC, s);
       }},
      {"cuBLASLt: LtMatmul::linear C -> 3C, bias",
       [&] { lt.linear(x, weight, bias, out, B, kC, 3 * kC, LinearEpilogue::kBias, s); }},
      {"cuBLASLt: LtMatmul::linear C -> 4C, bias + GELU",
       [&] { lt.linear(x, weight, bias, out, B, kC, 4 * kC, LinearEpilogue::kBiasGelu, s); }},
      {"cuBLASLt, split-K summed in the kernel: C -> 3C, bias",
       [&] { lt_in_kernel.linear(x, weight, bias, out, B, kC, 3 * kC, LinearEpilogue::kBias, s); }},
      {"cuBLASLt, split-K summed in the kernel: C -> 4C, bias + GELU",
       [&] {
         lt_in_kernel.linear(x, weight, bias, out, B, kC, 4 * kC, LinearEpilogue::kBiasGelu, s);
       }},
      {"cuBLASLt, no split: C -> 3C, bias",
       [&] { lt_no_split.linear(x, weight, bias, out, B, kC, 3 * kC, LinearEpilogue::kBias, s); }},
      {"cuBLASLt, no split: C -> 4C, bias + GELU",
       [&] {
         lt_no_split.linear(x, weight, bias, out, B, kC, 4 * kC, LinearEpilogue::kBiasGelu, s);
       }},
      {"cudaMemcpyAsync device to device, [B, C]",
       [&] {
         CUDA_CHECK(cudaMemcpyAsync(out, residual, activation_bytes, cudaMemcpyDeviceToDevice, s));
       }},
      {"caching allocator: allocate + free [B, C]",
       [&] { DeviceBuffer buffer(*caching, activation_bytes, s); }},
      {"expandable allocator: allocate + free [B, C]",
       [&] { DeviceBuffer buffer(*expandable, activation_bytes, s); }},
      {"NVTX range push + pop", [&] { NvtxRange range("bench"); }},
      {"flag to pageable host + cudaStreamSynchronize",
       [&] {
         CUDA_CHECK(cudaMemcpyAsync(&flag_host, cursor, sizeof(int), cudaMemcpyDeviceToHost, s));
         CUDA_CHECK(cudaStreamSynchronize(s));
       }},
      {"flag to pinned host + cudaStreamSynchronize",
       [&] {
         CUDA_CHECK(cudaMemcpyAsync(pinned_flag, cursor, sizeof(int), cudaMemcpyDeviceToHost, s));
         CUDA_CHECK(cudaStreamSynchronize(s));
       }},
  };

  std::printf(
      "\nHost time to enqueue one call, B = %d, GPT-2 small shapes (median of %d rounds "
      "of %d calls):\n\n| call | host us per call |\n|---|--:|\n",
      B, kRounds, kCallsPerRound);
  for (const Case& test_case : cases)
    std::printf("| %s | %.2f |\n", test_case.name, host_microseconds_per_call(s, test_case.call));
  std::printf("\n(The two flag reads include the round trip to the GPU and back.)\n");
  print_chapter_loops(B);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ladder::bench::run_bench("host_overhead", [&] { return run(argc, argv); });
}
