// tests/support/golden_data.cpp - loading the golden files.
#include "tests/support/golden_data.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "tests/support/chapter_process.hpp"

namespace ladder::testing {

namespace {

void require_golden_file(const std::string& path) {
  if (!std::filesystem::exists(path))
    throw std::runtime_error("missing golden data " + path +
                             ": run `python3 scripts/make_golden_model.py` on a machine with "
                             "torch and transformers and commit tests/data/golden_model/");
}

}  // namespace

std::string golden_model_directory() { return test_data_path("golden_model"); }

nlohmann::json load_golden_json(const std::string& name) {
  const std::string path = golden_model_directory() + "/" + name;
  require_golden_file(path);
  std::ifstream file(path);
  return nlohmann::json::parse(file);
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
