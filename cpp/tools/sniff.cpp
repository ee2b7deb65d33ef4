#include "tools/sniff.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "tensoracle/errors.h"

namespace tensoracle::tools {

FileKind sniff(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return FileKind::kDirectory;
  std::ifstream f(path, std::ios::binary);
  if (!f) return FileKind::kMissing;
  std::string head(512, '\0');
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(f.gcount()));
  const std::string_view h(head);
  if (h.size() >= 9 && h[8] == '{') return FileKind::kSafetensors;
  if (h.starts_with("\x93NUMPY")) return FileKind::kNpy;
  if (h.starts_with(std::string_view("PK\x03\x04", 4))) {
    // The first local file header's name: bytes 30.. of length at 26 (little-endian).
    if (h.size() >= 30) {
      const std::size_t n = static_cast<unsigned char>(h[26]) | (static_cast<unsigned char>(h[27]) << 8);
      const std::string_view name = h.substr(30, std::min(n, h.size() - std::min<std::size_t>(30, h.size())));
      if (name.ends_with(".npy")) return FileKind::kNpz;
    }
    return FileKind::kTorchZip;
  }
  if (!h.empty() && static_cast<unsigned char>(h[0]) == 0x80) return FileKind::kTorchLegacy;
  // A serialized ModelProto starts with ir_version (field 1, a varint of a small number), then
  // the next field in number order: producer_name (2) ... graph (7), opset_import (8).
  if (h.size() >= 3 && h[0] == 0x08 && h[1] >= 1 && h[1] <= 32 &&
      std::string_view("\x12\x1a\x22\x28\x32\x3a\x42").find(h[2]) != std::string_view::npos)
    return FileKind::kOnnx;
  if (path.ends_with(".onnx")) return FileKind::kOnnx;
  if (!h.empty() && std::all_of(h.begin(), h.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u >= 0x20 || c == '\n' || c == '\r' || c == '\t';
      }))
    return FileKind::kText;
  return FileKind::kOther;
}

std::string describe(FileKind kind) {
  switch (kind) {
    case FileKind::kMissing: return "missing";
    case FileKind::kDirectory: return "a directory";
    case FileKind::kSafetensors: return "a safetensors file";
    case FileKind::kTorchZip: return "a zip archive (a torch checkpoint?)";
    case FileKind::kTorchLegacy: return "a pickle (a legacy torch checkpoint?)";
    case FileKind::kNpy: return "a NumPy array (.npy)";
    case FileKind::kNpz: return "a NumPy archive (.npz)";
    case FileKind::kOnnx: return "an ONNX model (build an engine from it with `tensoracle build MODEL.onnx`)";
    case FileKind::kText: return "a text file";
    case FileKind::kOther: return "not a file format tensoracle knows";
  }
  return "unknown";
}

void require_kind(const std::string& command, const std::string& path, std::initializer_list<FileKind> accepted,
                  const std::string& expects) {
  const FileKind kind = sniff(path);
  if (std::find(accepted.begin(), accepted.end(), kind) != accepted.end()) return;
  if (kind == FileKind::kMissing) throw InvalidArgument("[" + command + "] " + path + ": no such file (or not readable)");
  throw InvalidArgument("[" + command + "] " + path + " is " + describe(kind) + "; " + command + " reads " + expects);
}

}  // namespace tensoracle::tools
