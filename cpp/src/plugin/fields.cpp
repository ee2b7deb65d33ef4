// The plugin creator fields of tensoracle/network.h (PluginField): their type names, element
// sizes and typed constructors.
#include <cstring>

#include "tensoracle/network.h"

namespace tensoracle {

std::string_view plugin_field_type_name(PluginFieldType t) noexcept {
  switch (t) {
    case PluginFieldType::kINT32: return "int32";
    case PluginFieldType::kINT64: return "int64";
    case PluginFieldType::kFLOAT32: return "float32";
    case PluginFieldType::kFLOAT64: return "float64";
    case PluginFieldType::kSTRING: return "string";
    case PluginFieldType::kBYTES: return "bytes";
  }
  return "unknown";
}

std::size_t plugin_field_element_size(PluginFieldType t) noexcept {
  switch (t) {
    case PluginFieldType::kINT32: case PluginFieldType::kFLOAT32: return 4;
    case PluginFieldType::kINT64: case PluginFieldType::kFLOAT64: return 8;
    case PluginFieldType::kSTRING: case PluginFieldType::kBYTES: return 1;
  }
  return 0;
}

std::int64_t PluginField::count() const noexcept {
  const std::size_t es = plugin_field_element_size(type);
  return es == 0 ? 0 : static_cast<std::int64_t>(data.size() / es);
}

namespace {
template <typename T>
PluginField field_of(std::string name, PluginFieldType type, const T* values, std::size_t count) {
  PluginField f;
  f.name = std::move(name);
  f.type = type;
  f.data.resize(count * sizeof(T));
  if (count > 0) std::memcpy(f.data.data(), values, f.data.size());
  return f;
}
}  // namespace

PluginField PluginField::int32(std::string name, const std::vector<std::int32_t>& v) {
  return field_of(std::move(name), PluginFieldType::kINT32, v.data(), v.size());
}
PluginField PluginField::int64(std::string name, const std::vector<std::int64_t>& v) {
  return field_of(std::move(name), PluginFieldType::kINT64, v.data(), v.size());
}
PluginField PluginField::float32(std::string name, const std::vector<float>& v) {
  return field_of(std::move(name), PluginFieldType::kFLOAT32, v.data(), v.size());
}
PluginField PluginField::float64(std::string name, const std::vector<double>& v) {
  return field_of(std::move(name), PluginFieldType::kFLOAT64, v.data(), v.size());
}
PluginField PluginField::string(std::string name, std::string_view text) {
  return field_of(std::move(name), PluginFieldType::kSTRING, text.data(), text.size());
}
PluginField PluginField::bytes(std::string name, std::span<const std::byte> data) {
  return field_of(std::move(name), PluginFieldType::kBYTES, data.data(), data.size());
}

}  // namespace tensoracle
