// tests/support/safetensors_writer.hpp - safetensors files and scratch folders for the
// loader tests.
//
// The writer is deliberately independent of common/safetensors.cpp (it builds the
// bytes by hand), so a reader bug cannot hide behind a matching writer bug. It can
// also write malformed files: any header text with any data section.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ladder::testing {

/// One tensor to write: its dtype as the file names it and its raw little-endian bytes.
struct TensorToWrite {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};

/// Little-endian bytes of fp32 values.
std::string float32_bytes(const std::vector<float>& values);
/// Little-endian bytes of 16-bit patterns (fp16 or bf16 bit patterns, as given).
std::string bits16_bytes(const std::vector<std::uint16_t>& values);

/// A well-formed file: the tensors packed in the given order, with a "__metadata__" entry.
std::string safetensors_file_bytes(const std::vector<TensorToWrite>& tensors);
/// A file with exactly this header text and data section (for malformed headers).
std::string safetensors_file_bytes(const std::string& header_json, const std::string& data);

void write_file(const std::string& path, const std::string& bytes);

/// A fresh folder under the system's temporary directory, removed with everything in
/// it when this goes out of scope.
class ScratchDirectory {
 public:
  explicit ScratchDirectory(const std::string& prefix);
  ~ScratchDirectory();
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;

  const std::string& path() const { return path_; }
  /// path() + "/" + name
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace ladder::testing
