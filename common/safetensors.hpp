// common/safetensors.hpp - a small reader for the safetensors checkpoint format.
//
// The format (https://huggingface.co/docs/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON mapping each tensor name to
// {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, then the data
// section; offsets count bytes from the start of the data section, and tensors are
// stored row-major, little-endian. An optional "__metadata__" entry holds free-form
// strings and is ignored.
//
// open() reads and validates the header only (every entry well formed, offsets
// inside the file, sizes matching shape * dtype, no two tensors overlapping);
// tensor data is read on demand, one tensor at a time, so a 500 MB checkpoint is
// never held twice in memory. Every error is a std::runtime_error whose one line
// names the file, the tensor and what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ladder {

/// One tensor's entry in a safetensors header.
struct TensorInfo {
  std::string dtype;  ///< as written in the file: "F32", "F16", "BF16", "I64", ...
  std::size_t bytes_per_element = 0;
  std::vector<std::int64_t> shape;  ///< empty for a scalar
  std::uint64_t data_begin = 0;     ///< byte offset of the first byte, from the data section start
  std::uint64_t data_end = 0;       ///< one past the last byte

  std::int64_t element_count() const;
};

class SafetensorsFile {
 public:
  /// Reads and validates the header; throws std::runtime_error naming the path on a
  /// missing, truncated or malformed file.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  /// Throws std::runtime_error naming the file and the tensor if there is no such tensor.
  const TensorInfo& info(const std::string& name) const;
  /// Every tensor name, sorted ("__metadata__" is not a tensor).
  std::vector<std::string> names() const;

  /// The tensor's elements as fp32, row-major; F16 and BF16 are widened exactly.
  /// Other dtypes are refused with a message naming the tensor and its dtype.
  std::vector<float> read_as_float(const std::string& name) const;
  /// The same, written to `destination`, which must hold info(name).element_count() floats.
  void read_as_float(const std::string& name, float* destination) const;

 private:
  std::string path_;
  std::uint64_t data_section_start_ = 0;  ///< 8 + header length
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace ladder
