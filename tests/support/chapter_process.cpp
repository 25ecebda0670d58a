// tests/support/chapter_process.cpp - spawning chapters and reading their dumps.
#include "tests/support/chapter_process.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>

#include "common/prompts.hpp"

namespace ladder::testing {

namespace {

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

std::vector<std::string> split_names(const std::string& comma_separated) {
  std::vector<std::string> names;
  std::stringstream list(comma_separated);
  std::string name;
  while (std::getline(list, name, ',')) names.push_back(name);
  return names;
}

}  // namespace

std::vector<std::string> chapter_names() { return split_names(LADDER_CHAPTERS); }

std::vector<std::string> bf16_chapter_names() {
  const std::vector<std::string> built = chapter_names();
  std::vector<std::string> names;
  for (const std::string& name : split_names(LADDER_BF16_CHAPTERS))
    if (std::find(built.begin(), built.end(), name) != built.end()) names.push_back(name);
  return names;
}

std::vector<std::string> fp32_chapter_names() {
  const std::vector<std::string> bf16 = bf16_chapter_names();
  std::vector<std::string> names;
  for (const std::string& name : chapter_names())
    if (std::find(bf16.begin(), bf16.end(), name) == bf16.end()) names.push_back(name);
  return names;
}

int chapter_batch_limit(const std::string& chapter) {
  const std::vector<std::string> limited = split_names(LADDER_64_ROW_CHAPTERS);
  return std::find(limited.begin(), limited.end(), chapter) != limited.end()
             ? 64
             : std::numeric_limits<int>::max();
}

std::vector<std::string> gpu_chapter_names() {
  std::vector<std::string> names = chapter_names();
  names.erase(std::remove(names.begin(), names.end(), kHostChapter), names.end());
  return names;
}

std::string test_data_path(const std::string& relative) {
  return std::string(LADDER_TEST_DATA_DIR) + "/" + relative;
}

std::string make_temporary_directory(const std::string& prefix) {
  static std::atomic<int> counter{0};
  std::random_device entropy;
  const auto path = std::filesystem::temp_directory_path() /
                    (prefix + "-" + std::to_string(entropy()) + "-" + std::to_string(counter++));
  std::filesystem::create_directories(path);
  return path.string();
}

ProcessResult run_chapter_process(const std::string& chapter,
                                  const std::vector<std::string>& arguments,
                                  const std::string& environment) {
  const std::string directory = make_temporary_directory("ladder-run");
  const std::string log = directory + "/output.txt";
  std::string command = environment.empty() ? "" : environment + " ";
  command += shell_quote(std::string(LADDER_CHAPTER_BINARY_DIR) + "/" + chapter);
  for (const std::string& argument : arguments) command += " " + shell_quote(argument);
  command += " > " + shell_quote(log) + " 2>&1";
  const int status = std::system(command.c_str());
  ProcessResult result;
  result.exit_code = (status != -1 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
  result.output = read_file(log);
  std::filesystem::remove_all(directory);
  return result;
}

ChapterOutput generate_with_chapter(const std::string& chapter,
                                    const std::vector<std::string>& arguments, int vocab_size,
                                    bool with_logits) {
  const std::string directory = make_temporary_directory("ladder-" + chapter);
  std::vector<std::string> full = arguments;
  full.insert(full.end(), {"--runs", "1", "--warmup", "0", "--quiet", "--dump-tokens",
                           directory + "/tokens.txt"});
  if (with_logits) full.insert(full.end(), {"--dump-logits", directory + "/logits.bin"});
  const ProcessResult run = run_chapter_process(chapter, full);
  if (run.exit_code != 0)
    throw std::runtime_error(chapter + " exited with " + std::to_string(run.exit_code) + ": " +
                             run.output);

  ChapterOutput output;
  const auto rows = read_token_rows(directory + "/tokens.txt", vocab_size);
  output.batch = static_cast<int>(rows.size());
  output.steps = static_cast<int>(rows.front().size());
  for (const auto& row : rows) output.tokens.insert(output.tokens.end(), row.begin(), row.end());
  if (with_logits) {
    const std::string bytes = read_file(directory + "/logits.bin");
    const std::size_t expected =
        static_cast<std::size_t>(output.steps) * output.batch * vocab_size * sizeof(float);
    if (bytes.size() != expected)
      throw std::runtime_error(chapter + " dumped " + std::to_string(bytes.size()) +
                               " bytes of logits, expected " + std::to_string(expected));
    output.logits.resize(expected / sizeof(float));
    std::memcpy(output.logits.data(), bytes.data(), expected);
  }
  std::filesystem::remove_all(directory);
  return output;
}

}  // namespace ladder::testing
