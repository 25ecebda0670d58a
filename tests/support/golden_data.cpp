// tests/support/golden_data.cpp - loading the golden files.
#include "tests/support/golden_data.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "tests/support/chapter_process.hpp"

namespace ladder::testing {

namespace {

void require_golden_file(const std::string& path,
                         const std::string& script = "make_golden_model.py",
                         const std::string& directory = "golden_model") {
  if (!std::filesystem::exists(path))
    throw std::runtime_error("missing golden data " + path + ": run `python3 scripts/" + script +
                             "` on a machine with torch and transformers and commit tests/data/" +
                             directory + "/");
}

nlohmann::json parse_json_file(const std::string& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file);
}

}  // namespace

std::string golden_model_directory() { return test_data_path("golden_model"); }

nlohmann::json load_golden_json(const std::string& name) {
  const std::string path = golden_model_directory() + "/" + name;
  require_golden_file(path);
  return parse_json_file(path);
}

std::string golden_bf16_directory() { return test_data_path("golden_model_bf16"); }

bool golden_bf16_present() {
  return std::filesystem::exists(golden_bf16_directory() + "/teacher_forced.json");
}

nlohmann::json load_golden_bf16_json(const std::string& name) {
  const std::string path = golden_bf16_directory() + "/" + name;
  require_golden_file(path, "make_golden_bf16.py", "golden_model_bf16");
  return parse_json_file(path);
}

Gpt2Weights load_golden_model() {
  require_golden_file(golden_model_directory() + "/config.json");
  require_golden_file(golden_model_directory() + "/model.safetensors");
  return load_gpt2_checkpoint(golden_model_directory());
}

int expected_stop_steps(const TokenRows& rows, int eos, int steps) {
  int stop = 0;
  for (const auto& row : rows) {
    const auto first = std::find(row.begin(), row.begin() + steps, eos);
    if (first == row.begin() + steps) return steps;
    stop = std::max(stop, static_cast<int>(first - row.begin()) + 1);
  }
  return stop;
}

std::vector<std::int32_t> flatten(const TokenRows& rows, int columns) {
  std::vector<std::int32_t> flat;
  for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.begin() + columns);
  return flat;
}

void write_rows(const std::string& path, const TokenRows& rows) {
  std::ofstream file(path);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) file << (i ? " " : "") << row[i];
    file << '\n';
  }
  if (!file) throw std::runtime_error("cannot write '" + path + "'");
}

GoldenGreedy load_golden_greedy(const std::string& name, const Gpt2Config& config) {
  const nlohmann::json golden = load_golden_json(name);
  GoldenGreedy greedy;
  greedy.prompts = golden.at("prompts").get<TokenRows>();
  greedy.max_new_tokens = golden.at("max_new_tokens").get<int>();
  greedy.eos = golden.value("eos_override", config.eos_token_id);
  const auto tokens = golden.at("tokens").get<TokenRows>();
  greedy.stop_steps = expected_stop_steps(tokens, greedy.eos, greedy.max_new_tokens);
  if (golden.contains("stop_steps") && golden.at("stop_steps").get<int>() != greedy.stop_steps)
    throw std::runtime_error(name + ": stop_steps disagrees with its tokens");
  greedy.hf_tokens = flatten(tokens, greedy.stop_steps);
  return greedy;
}

TeacherForcing teacher_forcing(const TokenRows& sequences, int vocab_size) {
  TeacherForcing forcing;
  std::vector<bool> used(static_cast<std::size_t>(vocab_size), false);
  for (const auto& sequence : sequences) {
    forcing.first_tokens.push_back({sequence.front()});
    forcing.continuations.emplace_back(sequence.begin() + 1, sequence.end());
    for (std::int32_t id : forcing.continuations.back()) used[static_cast<std::size_t>(id)] = true;
  }
  forcing.eos = static_cast<int>(std::find(used.begin(), used.end(), false) - used.begin());
  if (forcing.eos >= vocab_size)
    throw std::runtime_error("teacher forcing: the sequences use every id, none is left as EOS");
  return forcing;
}

}  // namespace ladder::testing
