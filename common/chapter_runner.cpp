// common/chapter_runner.cpp - the part of every chapter that is not its decode loop.
#include "common/chapter_runner.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <utility>

#include "common/benchmark.hpp"
#include "common/bfloat16_device_model.hpp"
#include "common/cli.hpp"
#include "common/config.hpp"
#include "common/cuda_check.hpp"
#include "common/device_info.hpp"
#include "common/gpu_activity.hpp"
#include "common/nvtx.hpp"
#include "common/tokenizer.hpp"
#include "common/weights.hpp"
#include "kernels/launch_checks.hpp"

namespace ladder {

void LogitsRecorder::record(const float* device_logits, int batch, int vocab, cudaStream_t stream) {
  if (!enabled_) return;
  const std::size_t count = static_cast<std::size_t>(batch) * static_cast<std::size_t>(vocab);
  const std::size_t offset = values_.size();
  values_.resize(offset + count);
  CUDA_CHECK(cudaMemcpyAsync(values_.data() + offset, device_logits, count * sizeof(float),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  ++steps_;
}

void LogitsRecorder::record_host(const float* host_logits, int batch, int vocab) {
  if (!enabled_) return;
  values_.insert(values_.end(), host_logits,
                 host_logits + static_cast<std::size_t>(batch) * static_cast<std::size_t>(vocab));
  ++steps_;
}

std::vector<std::int32_t> download_generated_tokens(const std::int32_t* device_generated, int batch,
                                                    int capacity, int steps, cudaStream_t stream) {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(batch) * steps);
  if (tokens.empty()) return tokens;
  CUDA_CHECK(cudaMemcpy2DAsync(tokens.data(), sizeof(std::int32_t) * steps, device_generated,
                               sizeof(std::int32_t) * capacity, sizeof(std::int32_t) * steps, batch,
                               cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return tokens;
}

DeviceBuffer upload_forced_tokens(DeviceAllocator& allocator, const PromptBatch& prompts,
                                  int max_new_tokens, cudaStream_t stream) {
  if (prompts.forced_tokens.empty()) return DeviceBuffer();
  if (prompts.forced_length < max_new_tokens)
    throw std::invalid_argument("--force-tokens: rows hold " +
                                std::to_string(prompts.forced_length) + " ids but " +
                                std::to_string(max_new_tokens) + " steps may run");
  DeviceBuffer forced(
      allocator, static_cast<std::size_t>(prompts.batch) * max_new_tokens * sizeof(std::int32_t),
      stream);
  CUDA_CHECK(cudaMemcpy2DAsync(
      forced.as<void>(), sizeof(std::int32_t) * max_new_tokens, prompts.forced_tokens.data(),
      sizeof(std::int32_t) * prompts.forced_length, sizeof(std::int32_t) * max_new_tokens,
      prompts.batch, cudaMemcpyHostToDevice, stream));
  return forced;
}

void start_from_empty_cache(DeviceAllocator& allocator) {
  allocator.empty_cache();
  allocator.reset_peak_stats();
}

void fill_traced_columns(const GpuActivitySummary& activity, const GenerationOutput& traced,
                         BenchmarkRow& row) {
  const double steps = std::max(traced.launched_steps(), 1);
  row.kernels_per_step = static_cast<double>(activity.kernels) / steps;
  row.copies_per_step = static_cast<double>(activity.copies + activity.memsets) / steps;
  row.graph_launches_per_step = static_cast<double>(activity.graph_launches) / steps;
  row.host_seconds_per_step = activity.host_api_seconds / steps;
  row.host_calls_per_step.clear();
  for (const ApiCallTime& call : activity.api_call_times) {
    if (row.host_calls_per_step.size() == kHostCallsKept) break;
    row.host_calls_per_step.push_back({call.name, static_cast<double>(call.calls) / steps,
                                       call.seconds / steps, call.waits_for_the_gpu});
  }
  row.gpu_idle_per_step = activity.timeline.idle_seconds() / steps;
  row.gpu_idle_between_steps = activity.timeline.step_openings > 1
                                   ? activity.timeline.idle_between_steps_seconds /
                                         static_cast<double>(activity.timeline.step_openings - 1)
                                   : -1;
}

namespace {

/// Everything decided from the command line and the config before touching the GPU,
/// so bad input is refused on any machine.
struct Plan {
  RunOptions options;
  Gpt2Config config;
  int eos_token_id = 0;
  std::optional<Gpt2Tokenizer> tokenizer;
  std::vector<std::vector<std::int32_t>> prompt_rows;  ///< from --prompt or --prompt-file
  std::vector<std::vector<std::int32_t>> forced_rows;  ///< from --force-tokens
  std::string prompt_description;
  std::optional<Gpt2Weights> checkpoint;  ///< loaded up front so a bad file is refused anywhere
};

/// Throws "flag: 'path' holds R rows; --batch B needs B rows, or exactly one ..." unless
/// the file's rows fit every batch size of the run (row_count_problem).
void require_rows_for_every_batch(const char* flag, const std::string& path, std::size_t rows,
                                  const std::vector<int>& batch_sizes) {
  for (int batch : batch_sizes) {
    const std::string problem = row_count_problem(rows, batch);
    if (!problem.empty())
      throw std::invalid_argument(std::string(flag) + ": '" + path + "' " + problem);
  }
}

Plan make_plan(int argc, char** argv) {
  Plan plan;
  plan.options = parse_run_options(argc, argv);
  const RunOptions& options = plan.options;
  ChosenModel model = choose_model(options.weights_directory, options.config_file,
                                   options.model_name, options.eos_token_id);
  plan.config = model.config;
  plan.checkpoint = std::move(model.checkpoint);
  plan.eos_token_id = model.eos_token_id;

  if (!options.prompt_text.empty() || options.print_text) {
    const std::string directory = !options.tokenizer_directory.empty() ? options.tokenizer_directory
                                                                       : options.weights_directory;
    if (directory.empty())
      throw std::invalid_argument(
          "--prompt and --print-text need a tokenizer: pass --tokenizer DIR (vocab.json, "
          "merges.txt) or --weights DIR");
    plan.tokenizer = Gpt2Tokenizer::from_directory(directory);
  }
  if (!options.prompt_text.empty()) {
    plan.prompt_rows = {plan.tokenizer->encode(options.prompt_text)};
    if (plan.prompt_rows.front().empty())
      throw std::invalid_argument("--prompt: the text is empty after tokenization");
    for (std::int32_t id : plan.prompt_rows.front())
      if (id >= plan.config.vocab_size)
        throw std::invalid_argument("--prompt: the tokenizer produced id " + std::to_string(id) +
                                    ", outside the model's vocabulary");
    plan.prompt_description =
        "text (" + std::to_string(plan.prompt_rows.front().size()) + " tokens)";
  } else if (!options.prompt_file.empty()) {
    plan.prompt_rows = read_token_rows(options.prompt_file, plan.config.vocab_size);
    require_rows_for_every_batch("--prompt-file", options.prompt_file, plan.prompt_rows.size(),
                                 options.batch_sizes);
    plan.prompt_description = "file " + options.prompt_file;
  } else if (options.random_prompt_length > 0) {
    plan.prompt_description = "random, length " + std::to_string(options.random_prompt_length);
  } else {
    plan.prompt_description = "BOS only";
  }

  if (!options.forced_tokens_file.empty()) {
    plan.forced_rows = read_token_rows(options.forced_tokens_file, plan.config.vocab_size);
    require_rows_for_every_batch("--force-tokens", options.forced_tokens_file,
                                 plan.forced_rows.size(), options.batch_sizes);
    for (int new_tokens : options.new_token_counts)
      if (static_cast<int>(plan.forced_rows.front().size()) < new_tokens)
        throw std::invalid_argument("--force-tokens: rows hold " +
                                    std::to_string(plan.forced_rows.front().size()) +
                                    " ids, fewer than --new-tokens " + std::to_string(new_tokens));
  }

  const int prompt_length = !plan.prompt_rows.empty()
                                ? static_cast<int>(plan.prompt_rows.front().size())
                                : std::max(1, options.random_prompt_length);
  for (int new_tokens : options.new_token_counts) {
    if (static_cast<long long>(prompt_length) + new_tokens > plan.config.n_positions)
      throw std::invalid_argument("--new-tokens: a prompt of " + std::to_string(prompt_length) +
                                  " plus " + std::to_string(new_tokens) +
                                  " new tokens exceeds the model's " +
                                  std::to_string(plan.config.n_positions) + " positions");
  }
  return plan;
}

PromptBatch make_prompts(const Plan& plan, int batch) {
  PromptBatch prompts;
  if (!plan.prompt_rows.empty())
    prompts = prompts_from_rows(plan.prompt_rows, batch);
  else if (plan.options.random_prompt_length > 0)
    prompts = random_prompts(batch, plan.options.random_prompt_length, plan.config.vocab_size,
                             plan.eos_token_id, plan.options.seed);
  else
    prompts = bos_prompts(batch, plan.config.bos_token_id);
  if (!plan.forced_rows.empty()) {
    const PromptBatch forced = prompts_from_rows(plan.forced_rows, batch);
    prompts.forced_tokens = forced.tokens;
    prompts.forced_length = forced.length;
  }
  return prompts;
}

/// Where the model's configuration came from, for an error about it.
std::string model_source(const Plan& plan) {
  if (!plan.options.weights_directory.empty()) return plan.options.weights_directory;
  if (!plan.options.config_file.empty()) return plan.options.config_file;
  return "GPT-2 " + (plan.options.model_name.empty() ? "small" : plan.options.model_name);
}

/// Prints the usage when argv asks for it (--help, -h); says whether it did.
bool printed_usage(int argc, char** argv, const std::string& program) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::cout << run_options_usage(program);
      return true;
    }
  return false;
}

/// The title line's fields that come from the command line.
ReportHeader report_header(const ChapterInfo& chapter, const Plan& plan) {
  ReportHeader header;
  header.chapter = chapter.folder;
  header.title = chapter.title;
  header.precision = chapter.stored == StoredPrecision::bf16 ? "bf16"
                     : plan.options.allow_tf32               ? "tf32"
                                                             : "fp32";
  const std::string size =
      plan.options.model_name.empty() ? "" : "GPT-2 " + plan.options.model_name + " ";
  header.weights = plan.options.weights_directory.empty()
                       ? "random " + size + "(seed " + std::to_string(plan.options.seed) + ")"
                       : plan.options.weights_directory;
  header.prompts = plan.prompt_description;
  return header;
}

/// Adds timed run `run_index` to its row: its steps and host waits, its hash (which
/// must equal the first run's: a race would not), and the progress line.
void add_timed_run(const std::string& program, const RunOptions& options, int run_index,
                   const GenerationOutput& output, BenchmarkRow& row) {
  const std::string hash = hash_string(hash_tokens(output.tokens));
  if (run_index == 0) row.token_hash = hash;
  if (hash != row.token_hash)
    throw std::runtime_error("run " + std::to_string(run_index + 1) +
                             " generated different tokens than run 1 (a race?)");
  row.steps = output.steps;
  row.host_syncs_per_step =
      output.steps ? static_cast<double>(output.host_syncs) / output.steps : 0;
  if (!options.quiet)
    std::fprintf(stderr, "%s: batch %d, %d new tokens: run %d/%d %.4f s (%d steps)\n",
                 program.c_str(), row.batch, row.new_tokens, run_index + 1, options.runs,
                 row.seconds.back(), output.steps);
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
  if (!file) throw std::runtime_error("cannot write '" + path + "'");
}

void write_logits(const std::string& path, const LogitsRecorder& recorder, int steps, int batch,
                  int vocab) {
  if (recorder.steps() < steps)
    throw std::runtime_error("the decoder recorded " + std::to_string(recorder.steps()) +
                             " steps of logits but generated " + std::to_string(steps));
  std::ofstream file(path, std::ios::binary);
  // Steps a pipelined decoder ran past the stop point are not part of the output.
  const std::size_t count = static_cast<std::size_t>(steps) * batch * vocab;
  file.write(reinterpret_cast<const char*>(recorder.values().data()),
             static_cast<std::streamsize>(count * sizeof(float)));
  if (!file) throw std::runtime_error("cannot write '" + path + "'");
}

/// With --dump-logits, after the last configuration: one more run that records every
/// step's logits, which must generate what the timed runs did.
template <typename AnyDecoder>
void dump_logits_if_asked(AnyDecoder& decoder, const Plan& plan, const PromptBatch& prompts,
                          int new_tokens, const GenerationOutput& last_output) {
  const RunOptions& options = plan.options;
  if (options.logits_output.empty() || prompts.batch != options.batch_sizes.back() ||
      new_tokens != options.new_token_counts.back())
    return;
  LogitsRecorder recorder(true);
  const GenerationOutput recorded = decoder.generate(prompts, new_tokens, recorder);
  if (recorded.tokens != last_output.tokens)
    throw std::runtime_error("the run that recorded logits generated different tokens");
  write_logits(options.logits_output, recorder, recorded.steps, prompts.batch,
               plan.config.vocab_size);
}

/// The table, and the files the command line asked for.
void write_outputs(const Plan& plan, const ReportHeader& header,
                   const std::vector<BenchmarkRow>& rows, const GenerationOutput& last_output) {
  const RunOptions& options = plan.options;
  std::cout << (options.compact ? format_compact_table(header, rows, options.previous_step_times)
                                : format_table(header, rows));
  if (!options.json_output.empty()) write_text_file(options.json_output, format_json(header, rows));
  if (!options.tokens_output.empty())
    write_token_rows(options.tokens_output, last_output.tokens, last_output.batch,
                     last_output.steps);
  if (options.print_text && plan.tokenizer) {
    const auto begin = last_output.tokens.begin();
    std::cout << "row 0: "
              << plan.tokenizer->decode(std::vector<std::int32_t>(begin, begin + last_output.steps))
              << "\n";
  }
}

/// Every chapter's step - the prefill and each decode step - begins with the token
/// embedding, whose kernel names contain this: the trace measures the GPU's idle time
/// just before each of them, the gap between two steps.
constexpr const char* kStepOpeningKernel = "embedding";

/// --step-timeline: the kernels of the middle step that `activity` holds (a decode step
/// wherever the run generated two tokens or more), as step_timeline gives them.
void print_step_timeline(const GpuActivitySummary& activity, int batch, int new_tokens) {
  const std::uint64_t steps = activity.timeline.step_openings;
  const int step = static_cast<int>(steps / 2);
  const std::vector<TimelineRow> rows =
      step_timeline(activity.kernel_runs, kStepOpeningKernel, step);
  if (rows.empty()) {
    std::printf("batch %d, %d new tokens: the trace holds no step to show\n", batch, new_tokens);
    return;
  }
  double span_us = 0;
  for (const TimelineRow& kernel : rows) span_us += kernel.adds_us;
  std::printf(
      "batch %d, %d new tokens: step %d of the %llu traced (the prefill first), %zu kernels, "
      "%.1f us from the first one's start to the last one's end; each kernel from its start "
      "to its end, and the time its end adds past the kernels that started before it:\n",
      batch, new_tokens, step + 1, static_cast<unsigned long long>(steps), rows.size(), span_us);
  std::fputs(format_step_timeline(rows).c_str(), stdout);
}

/// One more run, untimed, with CUPTI recording what the GPU ran and when: launches,
/// copies and idle time per step; with `print_kernels` the kernels that took the most GPU
/// time, with `print_timeline` one step's kernels as they ran (print_step_timeline).
/// Leaves the columns empty (negative) when CUPTI is held by a tool.
void trace_one_run(Decoder& decoder, const PromptBatch& prompts, int new_tokens, bool print_kernels,
                   bool print_timeline, BenchmarkRow& row) {
  NvtxRange range("traced run");
  // The timed runs of later configurations left the decoder warm for the last one: a
  // graph chapter's cache holds that configuration's graph alone. One untraced run of
  // this configuration first, so the trace holds its steps and no capture or instantiation.
  LogitsRecorder no_logits;
  {
    NvtxRange warm_range("warm-up before the traced run");
    decoder.generate(prompts, new_tokens, no_logits);
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::optional<GpuActivityTrace> trace;
  try {
    trace.emplace(kStepOpeningKernel, /*keep_kernel_runs=*/print_timeline);
  } catch (const CudaError& error) {
    std::fprintf(stderr, "note: no GPU activity trace (%s); its columns stay empty\n",
                 error.what());
    row.kernels_per_step = row.copies_per_step = row.gpu_idle_per_step = -1;
    row.graph_launches_per_step = row.host_seconds_per_step = -1;
    row.gpu_idle_between_steps = -1;
    return;
  }
  const GenerationOutput traced = decoder.generate(prompts, new_tokens, no_logits);
  const GpuActivitySummary activity = trace->collect();
  fill_traced_columns(activity, traced, row);
  if (print_timeline) print_step_timeline(activity, prompts.batch, new_tokens);
  if (!print_kernels) return;
  const double steps = std::max(traced.launched_steps(), 1);
  std::printf(
      "batch %d, %d new tokens: GPU busy %.3f ms of %.3f ms per step; host inside CUDA calls "
      "that do not wait for the GPU %.3f ms per step (tracing adds to it); by kernel:\n",
      prompts.batch, new_tokens, activity.timeline.busy_seconds * 1e3 / steps,
      activity.timeline.span_seconds * 1e3 / steps, activity.host_api_seconds * 1e3 / steps);
  const std::size_t shown = std::min<std::size_t>(activity.kernel_times.size(), 12);
  for (std::size_t i = 0; i < shown; ++i) {
    const KernelTime& kernel = activity.kernel_times[i];
    std::printf("  %8.1f us/step %7.1f launches/step  %s\n", kernel.seconds * 1e6 / steps,
                static_cast<double>(kernel.launches) / steps, kernel.name.c_str());
  }
  std::printf("by CUDA call (host time from each call's start to its end):\n");
  for (const HostCallPerStep& call : row.host_calls_per_step)
    std::printf("  %8.1f us/step %7.1f calls/step  %s%s\n", call.seconds * 1e6, call.calls,
                call.name.c_str(), call.waits_for_the_gpu ? " (waits for the GPU)" : "");
}

int run(int argc, char** argv, const ChapterInfo& chapter, const DecoderFactory& factory) {
  const std::string program = chapter.folder;
  if (printed_usage(argc, argv, program)) return kExitSuccess;
  const Plan plan = make_plan(argc, argv);
  const RunOptions& options = plan.options;
  if (options.allow_tf32 && chapter.stored == StoredPrecision::bf16)
    throw std::invalid_argument(
        "--tf32: " + program + " multiplies bf16 values on the tensor cores; TF32 is an fp32 mode");
  if (chapter.stored == StoredPrecision::bf16) {
    // Refused before the device is touched, like Gpt2Config::validate()'s limits: a
    // model the bf16 kernels cannot run is a bad file (exit 1), not a failure half-way.
    const std::string problem = bfloat16_model_problem(plan.config);
    if (!problem.empty())
      throw std::runtime_error(model_source(plan) + ": not a model " + program +
                               "'s bf16 kernels can run: " + problem);
  }

  const DeviceInfo device = query_device_info();
  if (!options.quiet) std::cout << device_banner(device) << "\n";

  const Gpt2Weights random_weights =
      plan.checkpoint ? Gpt2Weights{} : random_gpt2_weights(plan.config, options.seed);
  const Gpt2Weights& weights = plan.checkpoint ? *plan.checkpoint : random_weights;
  const DeviceModel model(weights);
  const double bandwidth = measure_copy_bandwidth();
  std::unique_ptr<Decoder> decoder =
      factory(model, DecoderOptions{options.allow_tf32, plan.eos_token_id, &weights});
  const int value_bytes = chapter.stored == StoredPrecision::bf16 ? 2 : sizeof(float);

  ReportHeader header = report_header(chapter, plan);
  header.device = device_banner(device);
  header.allocator = decoder->allocator().name();
  header.copy_bandwidth = bandwidth;

  std::vector<BenchmarkRow> rows;
  GenerationOutput last_output;
  LogitsRecorder no_logits;
  // At least one untimed run per configuration, whatever --warmup says: a decoder's first
  // run of a shape captures and instantiates its graphs, has cuBLASLt choose algorithms
  // and fills the allocator's cache, none of which belongs in timed run 1.
  const int warmup_runs = std::max(options.warmup_runs, 1);
  for (int batch : options.batch_sizes) {
    const PromptBatch prompts = make_prompts(plan, batch);
    for (int new_tokens : options.new_token_counts) {
      BenchmarkRow row;
      row.batch = batch;
      row.new_tokens = new_tokens;
      row.prompt_length = prompts.length;
      start_from_empty_cache(decoder->allocator());
      for (int run_index = 0; run_index < warmup_runs; ++run_index) {
        NvtxRange range("warm-up run");
        decoder->generate(prompts, new_tokens, no_logits);
      }
      for (int run_index = 0; run_index < options.runs; ++run_index) {
        NvtxRange range("timed run");
        decoder->allocator().reset_peak_stats();
        CUDA_CHECK(cudaDeviceSynchronize());
        const auto start = std::chrono::steady_clock::now();
        GenerationOutput output = decoder->generate(prompts, new_tokens, no_logits);
        CUDA_CHECK(cudaDeviceSynchronize());
        const auto stop = std::chrono::steady_clock::now();
        row.seconds.push_back(std::chrono::duration<double>(stop - start).count());
        add_timed_run(program, options, run_index, output, row);
        row.memory = decoder->allocator().stats();
        row.allocations_per_step =
            output.steps ? static_cast<double>(output.loop_allocations) / output.steps : 0;
        last_output = std::move(output);
      }
      row.matmul_seconds_per_step = decoder->matmul_seconds_per_step(batch);
      row.time = summarize(row.seconds);
      row.floor_seconds =
          floor_bytes(plan.config, batch, prompts.length, row.steps, value_bytes) / bandwidth;
      rows.push_back(row);
      dump_logits_if_asked(*decoder, plan, prompts, new_tokens, last_output);
    }
  }

  // The traced runs come last: once CUPTI has traced API calls in a process, later
  // launches stay slower (measured: a B = 32 step 30% slower after a B = 1 trace), so
  // no timed run may follow one.
  for (BenchmarkRow& row : rows)
    trace_one_run(*decoder, make_prompts(plan, row.batch), row.new_tokens, options.kernel_profile,
                  options.step_timeline, row);

  write_outputs(plan, header, rows, last_output);
  return kExitSuccess;
}

/// The warm-up and timed runs of one configuration on the host; `last_output` is the
/// last timed run's. What only a GPU has (device memory, the HBM floor, the traced
/// launches and gaps) stays empty.
BenchmarkRow time_on_host(HostDecoder& decoder, const RunOptions& options,
                          const std::string& program, const PromptBatch& prompts, int new_tokens,
                          GenerationOutput& last_output) {
  BenchmarkRow row;
  row.batch = prompts.batch;
  row.new_tokens = new_tokens;
  row.prompt_length = prompts.length;
  row.device_memory_measured = false;
  row.floor_seconds = row.kernels_per_step = row.copies_per_step = -1;
  row.graph_launches_per_step = row.host_seconds_per_step = -1;
  row.gpu_idle_per_step = row.gpu_idle_between_steps = -1;
  LogitsRecorder no_logits;
  for (int run_index = 0; run_index < options.warmup_runs; ++run_index)
    decoder.generate(prompts, new_tokens, no_logits);
  for (int run_index = 0; run_index < options.runs; ++run_index) {
    const auto start = std::chrono::steady_clock::now();
    GenerationOutput output = decoder.generate(prompts, new_tokens, no_logits);
    const auto stop = std::chrono::steady_clock::now();
    row.seconds.push_back(std::chrono::duration<double>(stop - start).count());
    add_timed_run(program, options, run_index, output, row);
    last_output = std::move(output);
  }
  row.time = summarize(row.seconds);
  return row;
}

/// run() for a decoder on the host: no device is queried, no weights are uploaded,
/// nothing is synchronized or traced, and no CUDA call is made.
int run_on_host(int argc, char** argv, const ChapterInfo& chapter,
                const HostDecoderFactory& factory) {
  const std::string program = chapter.folder;
  if (printed_usage(argc, argv, program)) return kExitSuccess;
  const Plan plan = make_plan(argc, argv);
  const RunOptions& options = plan.options;
  if (options.allow_tf32)
    throw std::invalid_argument("--tf32: " + program +
                                " runs on the host in fp32 with double sums; TF32 is a GPU "
                                "tensor-core mode");
  if (options.kernel_profile || options.step_timeline)
    throw std::invalid_argument(
        std::string(options.kernel_profile ? "--kernel-profile: " : "--step-timeline: ") + program +
        " runs on the host and launches no kernels");

  const Gpt2Weights random_weights =
      plan.checkpoint ? Gpt2Weights{} : random_gpt2_weights(plan.config, options.seed);
  const std::unique_ptr<HostDecoder> decoder =
      factory(plan.checkpoint ? *plan.checkpoint : random_weights,
              DecoderOptions{/*allow_tf32=*/false, plan.eos_token_id});
  if (!options.quiet) std::cout << decoder->where() << "\n";
  ReportHeader header = report_header(chapter, plan);
  header.device = decoder->where();
  header.allocator = "none (host memory, not counted)";

  std::vector<BenchmarkRow> rows;
  GenerationOutput last_output;
  for (int batch : options.batch_sizes) {
    const PromptBatch prompts = make_prompts(plan, batch);
    for (int new_tokens : options.new_token_counts) {
      rows.push_back(time_on_host(*decoder, options, program, prompts, new_tokens, last_output));
      dump_logits_if_asked(*decoder, plan, prompts, new_tokens, last_output);
    }
  }
  write_outputs(plan, header, rows, last_output);
  return kExitSuccess;
}

/// Turns every error of `run` into one line and its exit code.
template <typename Run>
int exit_code_of(const ChapterInfo& chapter, const Run& run) {
  return exit_code_reporting_chapter_errors(chapter.folder.c_str(), run);
}

}  // namespace

int exit_code_reporting_chapter_errors(const char* program, const std::function<int()>& run) {
  return exit_code_reporting_errors(program, [&] {
    try {
      return run();
    } catch (const launch_checks::LaunchCheckFailure& error) {
      std::fprintf(stderr, "%s: error: internal: %s\n", program, error.what());
      return static_cast<int>(kExitRuntimeError);
    }
  });
}

int run_chapter(int argc, char** argv, const ChapterInfo& chapter, const DecoderFactory& factory) {
  return exit_code_of(chapter, [&] { return run(argc, argv, chapter, factory); });
}

int run_host_chapter(int argc, char** argv, const ChapterInfo& chapter,
                     const HostDecoderFactory& factory) {
  return exit_code_of(chapter, [&] { return run_on_host(argc, argv, chapter, factory); });
}

}  // namespace ladder
