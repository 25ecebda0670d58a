// tests/support/chapter_process.hpp - running a chapter executable from a test.
//
// The chapter tests treat every chapter as a black box: the same command line a
// reader types, the generated ids and logits read back from the dump files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ladder::testing {

/// Every chapter target this build has, in ladder order ("00_cpu_reference", ...).
std::vector<std::string> chapter_names();

/// The prologue, which decodes on the host with the CPU reference and needs no GPU.
inline const std::string kHostChapter = "00_cpu_reference";

/// chapter_names() without kHostChapter: the chapters that need a GPU.
std::vector<std::string> gpu_chapter_names();

/// The chapters that store their numbers in bf16, in ladder order: checked against the
/// CPU reference's bf16 mode.
std::vector<std::string> bf16_chapter_names();

/// chapter_names() without the bf16 chapters: the chapters that emit fp32's tokens.
std::vector<std::string> fp32_chapter_names();

/// The most rows `chapter` decodes in one batch: 64 for the chapters that hold a whole
/// batch in one persistent kernel, unbounded (INT_MAX) for the others.
int chapter_batch_limit(const std::string& chapter);

/// Path of a file under tests/data.
std::string test_data_path(const std::string& relative);

/// A fresh, empty folder under the system's temporary directory.
std::string make_temporary_directory(const std::string& prefix);

struct ProcessResult {
  int exit_code = -1;
  std::string output;  ///< stdout and stderr together
};

/// Runs `chapter` with `arguments` (each passed as one argument) and an optional
/// environment prefix such as "CUDA_VISIBLE_DEVICES=-1".
ProcessResult run_chapter_process(const std::string& chapter,
                                  const std::vector<std::string>& arguments,
                                  const std::string& environment = "");

/// What a chapter generated, read back from --dump-tokens / --dump-logits files.
struct ChapterOutput {
  int batch = 0;
  int steps = 0;
  std::vector<std::int32_t> tokens;  ///< [batch, steps]
  std::vector<float> logits;         ///< [steps, batch, vocab], empty if not dumped
};

/// Runs `chapter` once (no warm-up, one timed run) with `arguments` plus the dump
/// flags, and reads the dumps back. Fails the current test if the process fails.
ChapterOutput generate_with_chapter(const std::string& chapter,
                                    const std::vector<std::string>& arguments, int vocab_size,
                                    bool with_logits);

}  // namespace ladder::testing
