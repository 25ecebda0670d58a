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

}  // namespace ladder::testing
