// tensoracle/safetensors.h — read and write safetensors files.
//
//   namespace st = tensoracle::safetensors;
//
//   // Read: the file is memory-mapped and its header validated; nothing else is read.
//   st::File file = st::File::open("model.safetensors");
//   for (const st::TensorInfo& t : file.tensors())            // in data-offset order
//     std::cout << t.name << " " << st::dtype_name(t.dtype) << "\n";
//   std::span<const float> w = file.view("encoder.weight").as<float>();   // zero copy
//   std::string fmt = file.metadata().at("format");
//
//   // Write: atomically (temporary file, fsync, rename, fsync of the folder).
//   std::vector<float> bias(16, 0.f);
//   st::save_file("out.safetensors",
//                 {{"bias", st::Dtype::F32, {16}, std::as_bytes(std::span(bias))}},
//                 {{"format", "np"}});
//
// The format: an 8-byte little-endian header length N, N bytes of UTF-8 JSON (an object
// mapping tensor names to {"dtype", "shape", "data_offsets": [begin, end]} plus an optional
// "__metadata__" string→string map), then the data section. Offsets are relative to the
// data section, which the tensors must cover exactly, without holes or overlaps.
//
// Reading treats every file as untrusted: any violation throws FormatError naming the file,
// the tensor and the rule; no input crashes, hangs, or allocates more than a small multiple
// of the header size (itself limited to 100 MB). Files are little-endian; so is every host
// tensoracle supports (checked at compile time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tensoracle/errors.h"

namespace tensoracle::safetensors {

// Element types of the safetensors format. Values are explicit and append-only (they are
// stable identifiers, not the official package's ordering).
enum class Dtype : std::uint8_t {
  BOOL = 0,
  U8 = 1,
  I8 = 2,
  F8_E5M2 = 3,
  F8_E4M3 = 4,
  I16 = 5,
  U16 = 6,
  F16 = 7,
  BF16 = 8,
  I32 = 9,
  U32 = 10,
  F32 = 11,
  F64 = 12,
  I64 = 13,
  U64 = 14,
  F8_E8M0 = 15,   // scale format of MX block quantization
  F4 = 16,        // float4 e2m1, two elements per byte, the first in the low nibble
  F6_E2M3 = 17,   // float6, four elements in three bytes
  F6_E3M2 = 18,
  C64 = 19,       // complex64: two float32
  F8_E4M3FNUZ = 20,  // fp8 variants without negative zero (AMD)
  F8_E5M2FNUZ = 21,
};

inline constexpr int kDtypeCount = 22;

// The format's name of a dtype ("F32", "BF16", ...).
std::string_view dtype_name(Dtype dtype) noexcept;
// The dtype of a format name; nullopt for names the format does not define.
std::optional<Dtype> parse_dtype(std::string_view name) noexcept;
// Bits per element: 1-byte types 8, F4 4, F6_* 6, C64 64.
int dtype_bits(Dtype dtype) noexcept;

// Largest header accepted, as the official reader: 100,000,000 bytes.
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// One tensor's entry in the header.
struct TensorInfo {
  std::string name;
  Dtype dtype{};
  std::vector<std::int64_t> shape;  // each >= 0; empty for a 0-d (scalar) tensor
  std::uint64_t begin = 0;          // byte offsets relative to the data section
  std::uint64_t end = 0;

  std::uint64_t numel() const noexcept;  // product of shape (1 for 0-d); validated not to overflow
  std::uint64_t nbytes() const noexcept { return end - begin; }
};

using Metadata = std::map<std::string, std::string>;

// C++ element type of a dtype, for TensorView::as<T>(): float, double, bool, the fixed-width
// integers. 16-bit and 8-bit floats have no standard C++ type here; view them with
// as_bits<std::uint16_t>() / as_bits<std::uint8_t>().
template <typename T>
struct dtype_of;
template <> struct dtype_of<bool> { static constexpr Dtype value = Dtype::BOOL; };
template <> struct dtype_of<std::uint8_t> { static constexpr Dtype value = Dtype::U8; };
template <> struct dtype_of<std::int8_t> { static constexpr Dtype value = Dtype::I8; };
template <> struct dtype_of<std::int16_t> { static constexpr Dtype value = Dtype::I16; };
template <> struct dtype_of<std::uint16_t> { static constexpr Dtype value = Dtype::U16; };
template <> struct dtype_of<std::int32_t> { static constexpr Dtype value = Dtype::I32; };
template <> struct dtype_of<std::uint32_t> { static constexpr Dtype value = Dtype::U32; };
template <> struct dtype_of<std::int64_t> { static constexpr Dtype value = Dtype::I64; };
template <> struct dtype_of<std::uint64_t> { static constexpr Dtype value = Dtype::U64; };
template <> struct dtype_of<float> { static constexpr Dtype value = Dtype::F32; };
template <> struct dtype_of<double> { static constexpr Dtype value = Dtype::F64; };

namespace detail {
// Throws InvalidArgument naming the tensor when `want` does not match or the data is misaligned.
void check_view(const TensorInfo& info, const void* data, std::string_view want_type,
                bool type_ok, std::size_t alignment);
}  // namespace detail

// A tensor's bytes inside a mapped file: valid while the File (or a copy of it) lives.
class TensorView {
 public:
  TensorView(const TensorInfo* info, const std::byte* data) : info_(info), data_(data) {}

  const TensorInfo& info() const noexcept { return *info_; }
  std::span<const std::byte> bytes() const noexcept { return {data_, info_->nbytes()}; }

  // The elements as T; T must be the dtype's C++ type (dtype_of<T>). Throws InvalidArgument
  // on another dtype, or when the data is not aligned for T (files whose header length is
  // not a multiple of 8, written by other tools, can be).
  template <typename T>
  std::span<const T> as() const {
    detail::check_view(*info_, data_, typeid(T).name(), dtype_of<T>::value == info_->dtype,
                       alignof(T));
    return {reinterpret_cast<const T*>(data_), static_cast<std::size_t>(info_->numel())};
  }

  // The elements' bit patterns as an unsigned integer of the element's width, for any dtype
  // of 8, 16, 32 or 64 bits (e.g. BF16 as std::uint16_t).
  template <typename U>
  std::span<const U> as_bits() const {
    static_assert(std::is_unsigned_v<U> && std::is_integral_v<U> && !std::is_same_v<U, bool>);
    detail::check_view(*info_, data_, typeid(U).name(),
                       dtype_bits(info_->dtype) == static_cast<int>(sizeof(U) * 8), alignof(U));
    return {reinterpret_cast<const U*>(data_), static_cast<std::size_t>(info_->numel())};
  }

 private:
  const TensorInfo* info_;
  const std::byte* data_;
};

// How File::open maps the file.
enum class MapMode {
  kReadOnly,     // PROT_READ: writes through a view are impossible
  kCopyOnWrite,  // private writable mapping: writes change this process's pages, never the file
};

// A validated safetensors file. Copies share the mapping; the mapping is released when the
// last copy is destroyed. Thread-safe for concurrent reads.
//
// Lifetime hazard shared by every memory-mapped reader: if another process truncates the
// file while it is mapped, touching the lost pages raises SIGBUS. Replace files atomically
// (save_file does) instead of rewriting them in place.
class File {
 public:
  // Maps and validates `path`. Throws IoError when the file cannot be opened or mapped,
  // FormatError when it is not a valid safetensors file (or not a regular file).
  static File open(const std::filesystem::path& path, MapMode mode = MapMode::kReadOnly);

  // Validates bytes held by the caller, which must outlive the File and its views.
  // `display_name` names the source in error messages.
  static File parse(std::span<const std::byte> bytes, std::string display_name);

  const std::string& display_name() const noexcept;
  std::uint64_t file_size() const noexcept;
  std::uint64_t header_size() const noexcept;  // N, the JSON header's length in bytes
  std::uint64_t data_offset() const noexcept { return 8 + header_size(); }

  // Tensors ordered by data offset (then name, for empty tensors sharing an offset).
  const std::vector<TensorInfo>& tensors() const noexcept;
  const Metadata& metadata() const noexcept;
  bool has_metadata() const noexcept;  // the header has a "__metadata__" entry (maybe empty)

  // nullptr when no tensor has that name.
  const TensorInfo* find(std::string_view name) const noexcept;
  // Throws InvalidArgument "[safetensors] FILE: no tensor named 'x'".
  const TensorInfo& at(std::string_view name) const;
  TensorView view(std::string_view name) const;
  TensorView view(const TensorInfo& info) const;  // info must come from this File

  // The raw file bytes (the mapping), for callers that hash or copy the whole file.
  std::span<const std::byte> raw() const noexcept;

  struct State;  // implementation; public for the parser only

 private:
  explicit File(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  std::shared_ptr<const State> state_;
};

// A tensor to write: its bytes are borrowed for the duration of the call.
struct TensorData {
  std::string name;
  Dtype dtype{};
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;
};

// Writes `tensors` and `metadata` to `path` atomically: a temporary file in the same folder,
// fsync, rename over `path`, fsync of the folder. On any failure the temporary file is
// removed, `path` is left as it was, and IoError (system call failed) or InvalidArgument
// (bad tensor: duplicate or "__metadata__" name, invalid UTF-8, negative dims, byte length
// not shape × element size) is thrown. `metadata`: nullopt writes no "__metadata__" entry,
// an empty map writes an empty one (as the official writer does for None and {}).
//
// The layout follows the official writer, so files are byte-identical to its output for the
// same tensors (and at most one metadata entry): tensors sorted by the official writer's dtype
// order (widest types first, so each stays aligned), then by name; "__metadata__" first in the header; header padded with spaces to a
// multiple of 8 bytes so every tensor is aligned for its type.
void save_file(const std::filesystem::path& path, const std::vector<TensorData>& tensors,
               const std::optional<Metadata>& metadata = std::nullopt);

// The same bytes as save_file writes, in memory.
std::vector<std::byte> serialize(const std::vector<TensorData>& tensors,
                                 const std::optional<Metadata>& metadata = std::nullopt);

// Streaming writes, for data that is produced (read, gathered, converted) while the file is
// written, so it never has to be in memory at once:
//
//   st::save_file_streaming("out.safetensors",
//       {{"w", st::Dtype::F32, {1024, 1024}, [&](st::ByteSink& out) {
//          for (auto chunk : chunks) out.write(chunk);   // 4 MiB in all, in order
//        }}});
//
// The header is written first (every size follows from the shapes), then each tensor's
// bytes in data-section order, each by one call of its `write` function.

// Receives one tensor's bytes, in order. Both functions throw InvalidArgument if the tensor's
// byte length would be exceeded, IoError if a file cannot be read or written.
class ByteSink {
 public:
  virtual void write(std::span<const std::byte> bytes) = 0;
  // The same as write() of `length` bytes at `offset` of the open file `fd`, copied by the
  // kernel where it can (copy_file_range, when the destination is a file): no pass through
  // this process's memory. `fd` is only read (pread semantics: its file offset is unchanged).
  virtual void write_from_file(int fd, std::uint64_t offset, std::uint64_t length);

 protected:
  ~ByteSink() = default;
};

// A tensor whose bytes come from a function, called exactly once during the write; it must
// write exactly shape × element size bytes (InvalidArgument otherwise). Exceptions it throws
// abort the write and propagate.
struct TensorSource {
  std::string name;
  Dtype dtype{};
  std::vector<std::int64_t> shape;
  std::function<void(ByteSink& out)> write;
};

// As save_file, with the bytes of each tensor streamed from its source. The layout (and so
// the bytes) are those save_file writes for the same tensors and metadata. With
// `replace_existing` false, an existing `path` is never replaced: IoError with EEXIST
// (checked atomically when the file is put in place; nothing else is changed).
void save_file_streaming(const std::filesystem::path& path, const std::vector<TensorSource>& tensors,
                         const std::optional<Metadata>& metadata = std::nullopt,
                         bool replace_existing = true);

// The same bytes as save_file_streaming writes, in memory.
std::vector<std::byte> serialize_streaming(const std::vector<TensorSource>& tensors,
                                           const std::optional<Metadata>& metadata = std::nullopt);

}  // namespace tensoracle::safetensors
