// common/safetensors.cpp - header validation and on-demand reads (see safetensors.hpp).
#include "common/safetensors.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "common/bfloat16.hpp"

namespace ladder {

namespace {

// The safetensors library refuses headers above 100 MB; so does this reader, so a
// corrupt length cannot make it allocate gigabytes.
constexpr std::uint64_t max_header_bytes = 100'000'000;

// Tensors are decoded in chunks of this many elements, so reading a large tensor
// needs only a small staging buffer.
constexpr std::size_t elements_per_chunk = std::size_t{1} << 20;

// Every dtype the safetensors format defines with a whole number of bytes. Knowing
// their sizes lets open() check every entry, even those read_as_float refuses.
std::size_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, std::size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  const auto found = sizes.find(dtype);
  return found == sizes.end() ? 0 : found->second;
}

std::uint32_t load_little_endian_32(const unsigned char* bytes) {
  return std::uint32_t{bytes[0]} | std::uint32_t{bytes[1]} << 8 | std::uint32_t{bytes[2]} << 16 |
         std::uint32_t{bytes[3]} << 24;
}

std::uint16_t load_little_endian_16(const unsigned char* bytes) {
  return static_cast<std::uint16_t>(bytes[0] | bytes[1] << 8);
}

float float_from_bits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// IEEE half (1 sign, 5 exponent, 10 mantissa bits) to float; every half is exact in float.
float half_to_float(std::uint16_t half) {
  const std::uint32_t sign = std::uint32_t{half & 0x8000u} << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1Fu;
  const std::uint32_t mantissa = half & 0x3FFu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 0x1F) return float_from_bits(sign | 0x7F800000u | mantissa << 13);  // inf, NaN
  return float_from_bits(sign | (exponent + 127 - 15) << 23 | mantissa << 13);
}

std::uint64_t read_unsigned(const nlohmann::json& value, const std::string& what) {
  if (!value.is_number_unsigned())
    throw std::runtime_error(what + " must be a non-negative integer, got " + value.dump());
  return value.get<std::uint64_t>();
}

TensorInfo parse_entry(const std::string& name, const nlohmann::json& entry,
                       std::uint64_t data_section_bytes) {
  const std::string where = "tensor \"" + name + "\": ";
  if (!entry.is_object()) throw std::runtime_error(where + "entry is not a JSON object");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(field)) throw std::runtime_error(where + "missing \"" + field + "\"");

  TensorInfo info;
  if (!entry["dtype"].is_string())
    throw std::runtime_error(where + "dtype must be a string, got " + entry["dtype"].dump());
  info.dtype = entry["dtype"].get<std::string>();
  info.bytes_per_element = dtype_size(info.dtype);
  if (info.bytes_per_element == 0)
    throw std::runtime_error(where + "unknown dtype \"" + info.dtype + "\"");

  const nlohmann::json& shape = entry["shape"];
  if (!shape.is_array())
    throw std::runtime_error(where + "shape must be an array, got " + shape.dump());
  std::uint64_t elements = 1;
  for (const nlohmann::json& dimension : shape) {
    const std::uint64_t size = read_unsigned(dimension, where + "each shape dimension");
    if (size != 0 && elements > std::numeric_limits<std::uint64_t>::max() / size / 8)
      throw std::runtime_error(where + "shape " + shape.dump() + " is too large");
    elements *= size;
    info.shape.push_back(static_cast<std::int64_t>(size));
  }

  const nlohmann::json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    throw std::runtime_error(where + "data_offsets must be [begin, end], got " + offsets.dump());
  info.data_begin = read_unsigned(offsets[0], where + "data_offsets[0]");
  info.data_end = read_unsigned(offsets[1], where + "data_offsets[1]");
  if (info.data_end < info.data_begin || info.data_end > data_section_bytes)
    throw std::runtime_error(where + "data_offsets " + offsets.dump() +
                             " fall outside the data section of " +
                             std::to_string(data_section_bytes) + " bytes (truncated file?)");
  const std::uint64_t expected_bytes = elements * info.bytes_per_element;
  if (info.data_end - info.data_begin != expected_bytes)
    throw std::runtime_error(where + "data_offsets " + offsets.dump() + " span " +
                             std::to_string(info.data_end - info.data_begin) +
                             " bytes, but shape " + shape.dump() + " of " + info.dtype + " needs " +
                             std::to_string(expected_bytes));
  return info;
}

void require_no_overlap(const std::map<std::string, TensorInfo>& tensors) {
  std::vector<std::pair<const std::string*, const TensorInfo*>> by_offset;
  by_offset.reserve(tensors.size());
  for (const auto& [name, info] : tensors) by_offset.emplace_back(&name, &info);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return a.second->data_begin < b.second->data_begin;
  });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const auto& [previous_name, previous] = by_offset[i - 1];
    const auto& [name, info] = by_offset[i];
    if (info->data_begin < previous->data_end)
      throw std::runtime_error("tensors \"" + *previous_name + "\" and \"" + *name +
                               "\" overlap in the data section");
  }
}

}  // namespace

std::int64_t TensorInfo::element_count() const {
  std::int64_t count = 1;
  for (const std::int64_t size : shape) count *= size;
  return count;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error(path + ": cannot open the safetensors file");
  std::error_code size_error;
  const std::uint64_t file_bytes = std::filesystem::file_size(path, size_error);
  if (size_error)
    throw std::runtime_error(path + ": cannot read the file size: " + size_error.message());

  const std::string where = path + ": ";
  if (file_bytes < 8)
    throw std::runtime_error(where + "not a safetensors file: " + std::to_string(file_bytes) +
                             " bytes, too short for the 8-byte header length (truncated file?)");
  unsigned char length_bytes[8];
  file.read(reinterpret_cast<char*>(length_bytes), sizeof length_bytes);
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | length_bytes[i];
  if (header_bytes > file_bytes - 8 || header_bytes > max_header_bytes)
    throw std::runtime_error(where + "header length " + std::to_string(header_bytes) +
                             " runs past the end of the " + std::to_string(file_bytes) +
                             "-byte file (truncated or not a safetensors file)");

  std::string header(static_cast<std::size_t>(header_bytes), '\0');
  if (!file.read(header.data(), static_cast<std::streamsize>(header_bytes)))
    throw std::runtime_error(where + "cannot read the " + std::to_string(header_bytes) +
                             "-byte header");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(header);
  } catch (const nlohmann::json::parse_error& error) {
    throw std::runtime_error(where + "the header is not valid JSON (" + error.what() + ")");
  }
  if (!json.is_object()) throw std::runtime_error(where + "the header is not a JSON object");

  SafetensorsFile result;
  result.path_ = path;
  result.data_section_start_ = 8 + header_bytes;
  const std::uint64_t data_section_bytes = file_bytes - result.data_section_start_;
  try {
    for (const auto& [name, entry] : json.items()) {
      if (name == "__metadata__") continue;
      result.tensors_.emplace(name, parse_entry(name, entry, data_section_bytes));
    }
    require_no_overlap(result.tensors_);
  } catch (const std::runtime_error& error) {
    throw std::runtime_error(where + error.what());
  }
  return result;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end())
    throw std::runtime_error(path_ + ": no tensor named \"" + name + "\"");
  return found->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> result;
  result.reserve(tensors_.size());
  for (const auto& entry : tensors_) result.push_back(entry.first);
  return result;
}

std::vector<float> SafetensorsFile::read_as_float(const std::string& name) const {
  std::vector<float> values(static_cast<std::size_t>(info(name).element_count()));
  read_as_float(name, values.data());
  return values;
}

void SafetensorsFile::read_as_float(const std::string& name, float* destination) const {
  const TensorInfo& tensor = info(name);
  const std::string where = path_ + ": tensor \"" + name + "\": ";
  if (tensor.dtype != "F32" && tensor.dtype != "F16" && tensor.dtype != "BF16")
    throw std::runtime_error(where + "dtype " + tensor.dtype +
                             " cannot be read as floats (F32, F16 and BF16 can)");

  std::ifstream file(path_, std::ios::binary);
  if (!file) throw std::runtime_error(where + "cannot reopen the file");
  file.seekg(static_cast<std::streamoff>(data_section_start_ + tensor.data_begin));

  const auto elements = static_cast<std::size_t>(tensor.element_count());
  std::vector<unsigned char> staging(std::min(elements, elements_per_chunk) *
                                     tensor.bytes_per_element);
  for (std::size_t first = 0; first < elements; first += elements_per_chunk) {
    const std::size_t count = std::min(elements_per_chunk, elements - first);
    if (!file.read(reinterpret_cast<char*>(staging.data()),
                   static_cast<std::streamsize>(count * tensor.bytes_per_element)))
      throw std::runtime_error(where + "the file ended inside the tensor's data (truncated?)");
    const unsigned char* bytes = staging.data();
    float* out = destination + first;
    if (tensor.dtype == "F32") {
      for (std::size_t i = 0; i < count; ++i)
        out[i] = float_from_bits(load_little_endian_32(bytes + 4 * i));
    } else if (tensor.dtype == "F16") {
      for (std::size_t i = 0; i < count; ++i)
        out[i] = half_to_float(load_little_endian_16(bytes + 2 * i));
    } else {
      for (std::size_t i = 0; i < count; ++i)
        out[i] = bfloat16_bits_to_float(load_little_endian_16(bytes + 2 * i));
    }
  }
}

}  // namespace ladder
