// tests/support/safetensors_writer.cpp - builds safetensors bytes by hand (see the header).
#include "tests/support/safetensors_writer.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "tests/support/chapter_process.hpp"

namespace ladder::testing {

std::string float32_bytes(const std::vector<float>& values) {
  std::string bytes;
  for (const float value : values) {
    std::uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    for (int shift = 0; shift < 32; shift += 8) bytes += static_cast<char>((bits >> shift) & 0xFF);
  }
  return bytes;
}

std::string bits16_bytes(const std::vector<std::uint16_t>& values) {
  std::string bytes;
  for (const std::uint16_t bits : values) {
    bytes += static_cast<char>(bits & 0xFF);
    bytes += static_cast<char>(bits >> 8);
  }
  return bytes;
}

std::string safetensors_file_bytes(const std::vector<TensorToWrite>& tensors) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  std::string data;
  for (const TensorToWrite& tensor : tensors) {
    header[tensor.name] = {{"dtype", tensor.dtype},
                           {"shape", tensor.shape},
                           {"data_offsets", {data.size(), data.size() + tensor.bytes.size()}}};
    data += tensor.bytes;
  }
  return safetensors_file_bytes(header.dump(), data);
}

std::string safetensors_file_bytes(const std::string& header_json, const std::string& data) {
  std::string bytes;
  const std::uint64_t header_length = header_json.size();
  for (int shift = 0; shift < 64; shift += 8)
    bytes += static_cast<char>((header_length >> shift) & 0xFF);
  return bytes + header_json + data;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file) throw std::runtime_error(path + ": cannot write the test file");
}

ScratchDirectory::ScratchDirectory(const std::string& prefix)
    : path_(make_temporary_directory(prefix)) {}

ScratchDirectory::~ScratchDirectory() {
  std::error_code ignored;  // a destructor must not throw; a leftover temp folder is harmless
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace ladder::testing
