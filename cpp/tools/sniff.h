// What a file given to the `tensoracle` program really is, from its first bytes, so that a
// wrong file gets "this is an ONNX model; inspect reads ..." instead of a parser's complaint
// about a header length.
#pragma once

#include <string>

namespace tensoracle::tools {

enum class FileKind {
  kMissing,      // no such file (or not readable)
  kDirectory,
  kSafetensors,  // 8-byte header length, then '{' (engines are safetensors files too)
  kTorchZip,     // a zip archive whose first entry is not a NumPy array: a torch checkpoint
  kTorchLegacy,  // a pickle (0x80 first): torch's legacy format, or another pickle
  kNpy,          // "\x93NUMPY"
  kNpz,          // a zip archive of .npy files
  kOnnx,         // a protobuf ModelProto (ir_version first) or a .onnx name
  kText,         // printable text
  kOther,
};

FileKind sniff(const std::string& path);
// "an ONNX model", "a NumPy array (.npy)", "a text file", ... (for messages).
std::string describe(FileKind kind);
// Throws InvalidArgument "[<command>] <path>: no such file" / "<path> is <what>; <command>
// reads <expects>" unless the file is one of `accepted` (kOther: bytes no sniffer knows, left to
// the command's readers, whose messages say what is damaged).
void require_kind(const std::string& command, const std::string& path, std::initializer_list<FileKind> accepted,
                  const std::string& expects);

}  // namespace tensoracle::tools
