// common/benchmark.cpp - statistics, hashes, the HBM floor, the table and the JSON.
#include "common/benchmark.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "common/cuda_check.hpp"

namespace ladder {

Summary summarize(std::vector<double> values) {
  if (values.empty()) throw std::invalid_argument("summarize: no values");
  Summary summary;
  const double count = static_cast<double>(values.size());
  summary.mean = std::accumulate(values.begin(), values.end(), 0.0) / count;
  double squares = 0;
  for (double value : values) squares += (value - summary.mean) * (value - summary.mean);
  summary.std = std::sqrt(squares / count);
  std::sort(values.begin(), values.end());
  summary.min = values.front();
  summary.max = values.back();
  const std::size_t middle = values.size() / 2;
  summary.median = values.size() % 2 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
  return summary;
}

std::uint64_t hash_tokens(const std::vector<std::int32_t>& tokens) {
  std::uint64_t hash = 0xCBF29CE484222325ull;
  for (std::int32_t token : tokens) {
    auto bits = static_cast<std::uint32_t>(token);
    for (int byte = 0; byte < 4; ++byte) {
      hash ^= (bits >> (8 * byte)) & 0xFFu;
      hash *= 0x100000001B3ull;
    }
  }
  return hash;
}

std::string hash_string(std::uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

double floor_bytes(const Gpt2Config& config, int batch, int prompt_length, int steps,
                   int value_bytes) {
  const double C = config.n_embd;
  // Every weight once, except the embedding tables, of which a step reads only the B
  // rows it looks up; then the token embedding again, whole, as the tied LM head.
  const double position_table = static_cast<double>(config.n_positions) * C;
  const double weights = static_cast<double>(config.parameter_count()) - position_table;
  const double logits = static_cast<double>(batch) * config.vocab_size;
  double stored_values = 0;
  for (int step = 0; step < steps; ++step) {
    // The token fed at this step attends over every position up to its own: the keys
    // and values of all layers for prompt_length + step positions.
    const double cached_positions = prompt_length + step;
    const double cache = 2.0 * config.n_layer * batch * cached_positions * C;
    stored_values += weights + cache;
  }
  return stored_values * value_bytes + logits * steps * sizeof(float);
}

namespace {

std::string short_bytes(std::size_t bytes) { return format_bytes(static_cast<double>(bytes)); }

/// `value` printed with `format`, or "-" when there is nothing to print.
std::string measured(bool present, const char* format, double value) {
  if (!present) return "-";
  char text[32];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

/// A number from the traced run, or "-" when there was no trace (negative).
std::string traced(double value) { return measured(value >= 0, "%.1f", value); }

}  // namespace

std::string format_table(const ReportHeader& header, const std::vector<BenchmarkRow>& rows) {
  std::ostringstream out;
  out << "chapter " << header.chapter << " (" << header.title << ") | " << header.precision
      << " | weights: " << header.weights << " | prompts: " << header.prompts
      << " | allocator: " << header.allocator << "\n";
  char line[640];
  const char* heading =
      "%5s %5s %5s | %8s %7s %8s %8s %8s | %7s %9s | %8s %7s | %10s %10s %5s | %6s %6s %7s %7s "
      "%7s %7s %7s %7s | %s\n";
  std::snprintf(line, sizeof line, heading, "batch", "new", "steps", "mean s", "std s", "min s",
                "max s", "median s", "ms/step", "tokens/s", "floor ms", "x floor", "peak alloc",
                "peak resv", "frag", "alloc/", "syncs/", "kernel/", "graphs/", "copies/", "host us",
                "idle us", "gap us", "tokens hash");
  out << line;
  std::snprintf(line, sizeof line, heading, "", "", "", "", "", "", "", "", "", "", "", "", "", "",
                "", "step", "step", "step", "step", "step", "/step", "/step", "/step", "");
  out << line;
  for (const BenchmarkRow& row : rows) {
    const bool memory = row.device_memory_measured;
    std::snprintf(
        line, sizeof line,
        "%5d %5d %5d | %8.4f %7.4f %8.4f %8.4f %8.4f | %7.3f %9.0f | %8s %7s | "
        "%10s %10s %5s | %6s %6.2f %7s %7s %7s %7s %7s %7s | %s\n",
        row.batch, row.new_tokens, row.steps, row.time.mean, row.time.std, row.time.min,
        row.time.max, row.time.median, row.milliseconds_per_step(), row.tokens_per_second(),
        measured(row.floor_seconds >= 0, "%.2f", row.floor_seconds * 1e3).c_str(),
        measured(row.floor_seconds >= 0, "%.2f",
                 row.floor_seconds > 0 ? row.time.median / row.floor_seconds : 0.0)
            .c_str(),
        memory ? short_bytes(row.memory.peak_allocated_bytes).c_str() : "-",
        memory ? short_bytes(row.memory.peak_reserved_bytes).c_str() : "-",
        measured(memory, "%.0f%%", 100.0 * row.memory.fragmentation()).c_str(),
        measured(memory, "%.1f", row.allocations_per_step).c_str(), row.host_syncs_per_step,
        traced(row.kernels_per_step).c_str(), traced(row.graph_launches_per_step).c_str(),
        traced(row.copies_per_step).c_str(), traced(row.host_seconds_per_step * 1e6).c_str(),
        traced(row.gpu_idle_per_step * 1e6).c_str(),
        traced(row.gpu_idle_between_steps * 1e6).c_str(), row.token_hash.c_str());
    out << line;
  }
  for (const BenchmarkRow& row : rows) {
    if (row.matmul_seconds_per_step < 0 || row.steps == 0) continue;
    const double step = row.time.median / row.steps;
    std::snprintf(line, sizeof line,
                  "batch %d, %d new tokens: the step's matmuls alone take %.3f ms; the whole step "
                  "%.3f ms, %+.0f%% on top of them\n",
                  row.batch, row.new_tokens, row.matmul_seconds_per_step * 1e3, step * 1e3,
                  100.0 * (step / row.matmul_seconds_per_step - 1.0));
    out << line;
  }
  if (header.copy_bandwidth > 0)
    std::snprintf(line, sizeof line,
                  "copy bandwidth measured in this run: %.2f TB/s (read + write)\n",
                  header.copy_bandwidth * 1e-12);
  else
    std::snprintf(line, sizeof line, "no GPU used: no copy bandwidth, no HBM floor\n");
  out << line;
  return out.str();
}

namespace {

nlohmann::json traced_json(double value) {
  return value >= 0 ? nlohmann::json(value) : nlohmann::json(nullptr);
}

/// `value`, or null when it was not measured.
template <typename Value>
nlohmann::json measured_json(bool present, Value value) {
  return present ? nlohmann::json(value) : nlohmann::json(nullptr);
}

/// The traced run's calls, most host time first, or null when no run was traced.
nlohmann::json host_calls_json(const BenchmarkRow& row) {
  if (row.host_seconds_per_step < 0) return nullptr;
  nlohmann::json calls = nlohmann::json::array();
  for (const HostCallPerStep& call : row.host_calls_per_step)
    calls.push_back({{"call", call.name},
                     {"calls", call.calls},
                     {"s", call.seconds},
                     {"waits_for_the_gpu", call.waits_for_the_gpu}});
  return calls;
}

}  // namespace

std::string format_json(const ReportHeader& header, const std::vector<BenchmarkRow>& rows) {
  nlohmann::json document = {
      {"chapter", header.chapter},     {"title", header.title},
      {"device", header.device},       {"precision", header.precision},
      {"weights", header.weights},     {"prompts", header.prompts},
      {"allocator", header.allocator}, {"copy_bandwidth_bytes_per_s", header.copy_bandwidth},
  };
  // Each configuration's memory columns start from an empty allocator cache
  // (start_from_empty_cache); results without this field predate that.
  document["memory_from_empty_cache"] = true;
  nlohmann::json configurations = nlohmann::json::array();
  for (const BenchmarkRow& row : rows) {
    const bool memory = row.device_memory_measured;
    configurations.push_back({
        {"batch", row.batch},
        {"new_tokens", row.new_tokens},
        {"prompt_length", row.prompt_length},
        {"steps", row.steps},
        {"seconds", row.seconds},
        {"mean_s", row.time.mean},
        {"std_s", row.time.std},
        {"min_s", row.time.min},
        {"max_s", row.time.max},
        {"median_s", row.time.median},
        {"ms_per_step", row.milliseconds_per_step()},
        {"tokens_per_s", row.tokens_per_second()},
        {"floor_s", measured_json(row.floor_seconds >= 0, row.floor_seconds)},
        {"peak_allocated_bytes", measured_json(memory, row.memory.peak_allocated_bytes)},
        {"peak_reserved_bytes", measured_json(memory, row.memory.peak_reserved_bytes)},
        {"fragmentation", measured_json(memory, row.memory.fragmentation())},
        {"driver_allocations", measured_json(memory, row.memory.driver_allocations)},
        {"allocations_per_step", measured_json(memory, row.allocations_per_step)},
        {"host_syncs_per_step", row.host_syncs_per_step},
        {"kernels_per_step", traced_json(row.kernels_per_step)},
        {"graph_launches_per_step", traced_json(row.graph_launches_per_step)},
        {"host_api_s_per_step", traced_json(row.host_seconds_per_step)},
        {"host_api_calls_per_step", host_calls_json(row)},
        {"copies_per_step", traced_json(row.copies_per_step)},
        {"gpu_idle_s_per_step", traced_json(row.gpu_idle_per_step)},
        {"gpu_idle_between_steps_s", traced_json(row.gpu_idle_between_steps)},
        {"matmul_s_per_step", row.matmul_seconds_per_step >= 0
                                  ? nlohmann::json(row.matmul_seconds_per_step)
                                  : nlohmann::json(nullptr)},
        {"token_hash", row.token_hash},
    });
  }
  document["configurations"] = configurations;
  return document.dump(2) + "\n";
}

StepTimes parse_step_times(const std::string& json_text, const std::string& source) {
  const nlohmann::json document = nlohmann::json::parse(json_text, nullptr, false);
  const auto refuse = [&](const std::string& problem) {
    return std::runtime_error(source + ": " + problem + "; give a chapter's --json output");
  };
  if (document.is_discarded()) throw refuse("not JSON");
  if (!document.is_object() || !document.contains("configurations") ||
      !document["configurations"].is_array())
    throw refuse("no \"configurations\" array");
  StepTimes times;
  for (const nlohmann::json& row : document["configurations"]) {
    if (!row.is_object() || !row.contains("batch") || !row.contains("new_tokens") ||
        !row.contains("ms_per_step") || !row["batch"].is_number_integer() ||
        !row["new_tokens"].is_number_integer() || !row["ms_per_step"].is_number())
      throw refuse("a configuration without batch, new_tokens and ms_per_step");
    times[{row["batch"].get<int>(), row["new_tokens"].get<int>()}] =
        row["ms_per_step"].get<double>();
  }
  return times;
}

StepTimes read_step_times(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error(path + ": cannot be read");
  std::ostringstream text;
  text << file.rdbuf();
  return parse_step_times(text.str(), path);
}

std::string format_compact_table(const ReportHeader& header, const std::vector<BenchmarkRow>& rows,
                                 const StepTimes& previous) {
  constexpr std::size_t kColumns = 100;
  std::string title = header.chapter + " | " + header.precision + " | prompts: " + header.prompts;
  if (title.size() > kColumns) title = title.substr(0, kColumns - 3) + "...";
  std::ostringstream out;
  out << title << "\n";
  char line[160];
  const char* heading = "%5s %5s %9s %10s %8s %7s  %s\n";
  std::snprintf(line, sizeof line, heading, "B", "N", "ms/step", "tokens/s", "x floor", "x prev",
                "tokens hash");
  out << line;
  for (const BenchmarkRow& row : rows) {
    const double ms = row.milliseconds_per_step();
    const auto before = previous.find({row.batch, row.new_tokens});
    const bool known = before != previous.end() && before->second > 0;
    std::snprintf(line, sizeof line, "%5d %5d %9.3f %10.0f %8s %7s  %s\n", row.batch,
                  row.new_tokens, ms, row.tokens_per_second(),
                  measured(row.floor_seconds > 0, "%.2f",
                           row.floor_seconds > 0 ? row.time.median / row.floor_seconds : 0.0)
                      .c_str(),
                  measured(known, "%.2f", known ? ms / before->second : 0.0).c_str(),
                  row.token_hash.c_str());
    out << line;
  }
  return out.str();
}

}  // namespace ladder
