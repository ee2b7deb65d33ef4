// Test helpers: torch-like checkpoints built by hand — a zip writer laid out as torch's
// (miniz) writer lays out archives, and a pickle assembler. Real torch.save files are tested
// from Python (python/tests/test_convert.py); these build the cases torch cannot write
// (big-endian, zip64 past 4 GiB, hostile pickles, damaged archives).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tensoracle::testing {

using Bytes = std::vector<std::byte>;

inline Bytes to_bytes(std::string_view s) {
  Bytes b(s.size());
  if (!s.empty()) std::memcpy(b.data(), s.data(), s.size());
  return b;
}

template <typename T>
Bytes bytes_of_values(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

inline std::uint32_t crc32(const Bytes& b) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::byte x : b) {
    c ^= static_cast<std::uint8_t>(x);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

// ---------------------------------------------------------------------------------------
// zip

struct ZipFileSpec {
  ZipFileSpec(std::string n, Bytes d, std::uint16_t m = 0) : name(std::move(n)), data(std::move(d)), method(m) {}
  std::string name;
  Bytes data;
  std::uint16_t method = 0;
  std::uint16_t flags = 0x0808;               // data descriptor + UTF-8, as torch
  std::optional<std::uint64_t> declared_size;  // central directory size (default: real)
  std::optional<std::uint64_t> uncompressed_size;  // central directory's (default: declared_size)
  std::optional<std::uint32_t> crc;                // central directory's (default: the data's)
  std::uint64_t hole = 0;  // zero bytes appended to the data (a sparse hole in write_zip_file)
};

struct ZipOptions {
  bool zip64_extras = false;  // sizes and offsets in zip64 extra fields for every entry
  bool zip64_end = true;      // zip64 end record + locator (torch always writes them)
  std::string comment;
  std::uint16_t eocd_disk = 0;
  std::optional<std::uint16_t> eocd_entries;  // override the EOCD's entry counts
};

// Pieces of a zip: bytes, or holes of zeros (written sparse to files).
struct ZipPieces {
  std::vector<std::pair<Bytes, std::uint64_t>> pieces;  // (bytes, then a hole of N zeros)
  std::uint64_t size = 0;
  void put(const Bytes& b) {
    pieces.emplace_back(b, 0);
    size += b.size();
  }
  void hole(std::uint64_t n) {
    pieces.emplace_back(Bytes{}, n);
    size += n;
  }
};

namespace detail {
inline void le(Bytes& b, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFF));
}
}  // namespace detail

inline ZipPieces zip_pieces(const std::vector<ZipFileSpec>& files, const ZipOptions& o = {}) {
  using detail::le;
  ZipPieces z;
  struct Written {
    std::uint64_t offset, size, usize;
    std::uint32_t crc;
  };
  std::vector<Written> written;
  for (const auto& f : files) {
    std::uint64_t offset = z.size;
    Bytes h;
    le(h, 0x04034b50, 4);
    le(h, 0x2d, 2);
    le(h, f.flags, 2);
    le(h, f.method, 2);
    le(h, 0, 4);   // time, date
    le(h, 0, 4);   // crc (in the data descriptor)
    le(h, 0, 4);   // sizes (in the data descriptor)
    le(h, 0, 4);
    le(h, f.name.size(), 2);
    // torch pads the local extra field ("FB") so that data starts on a 64-byte boundary
    std::uint64_t base = offset + 30 + f.name.size() + 4;
    std::uint64_t pad = (64 - base % 64) % 64;
    le(h, 4 + pad, 2);
    for (char c : f.name) h.push_back(static_cast<std::byte>(c));
    le(h, 0x4246, 2);  // "FB"
    le(h, pad, 2);
    for (std::uint64_t i = 0; i < pad; ++i) h.push_back(std::byte{'Z'});
    h.insert(h.end(), f.data.begin(), f.data.end());
    z.put(h);
    std::uint64_t size = f.data.size() + f.hole;
    if (f.hole) z.hole(f.hole);
    std::uint32_t crc = f.crc ? *f.crc : f.hole ? 0 : crc32(f.data);
    Bytes d;
    le(d, 0x08074b50, 4);
    le(d, crc, 4);
    bool big = size >= 0xFFFFFFFFu || offset >= 0xFFFFFFFFu;
    le(d, size, big ? 8 : 4);
    le(d, size, big ? 8 : 4);
    z.put(d);
    written.push_back({offset, f.declared_size.value_or(size), f.uncompressed_size.value_or(f.declared_size.value_or(size)), crc});
  }
  std::uint64_t cd_offset = z.size;
  Bytes cd;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto& f = files[i];
    const auto& w = written[i];
    bool x = o.zip64_extras || w.size >= 0xFFFFFFFFu || w.usize >= 0xFFFFFFFFu || w.offset >= 0xFFFFFFFFu;
    le(cd, 0x02014b50, 4);
    le(cd, 0x031e, 2);
    le(cd, 0x2d, 2);
    le(cd, f.flags, 2);
    le(cd, f.method, 2);
    le(cd, 0, 4);
    le(cd, w.crc, 4);
    le(cd, x ? 0xFFFFFFFFu : w.size, 4);   // compressed
    le(cd, x ? 0xFFFFFFFFu : w.usize, 4);  // uncompressed
    le(cd, f.name.size(), 2);
    le(cd, x ? 28 : 0, 2);
    le(cd, 0, 2);  // comment
    le(cd, 0, 2);  // disk
    le(cd, 0, 2);  // internal attributes
    le(cd, 0, 4);  // external attributes
    le(cd, x ? 0xFFFFFFFFu : w.offset, 4);
    for (char c : f.name) cd.push_back(static_cast<std::byte>(c));
    if (x) {
      le(cd, 0x0001, 2);
      le(cd, 24, 2);
      le(cd, w.usize, 8);  // the zip64 field: uncompressed first
      le(cd, w.size, 8);
      le(cd, w.offset, 8);
    }
  }
  z.put(cd);
  std::uint64_t n = files.size();
  Bytes end;
  bool placeholders = cd_offset >= 0xFFFFFFFFu;
  if (o.zip64_end) {
    std::uint64_t z64 = z.size;
    le(end, 0x06064b50, 4);
    le(end, 44, 8);
    le(end, 0x031e, 2);
    le(end, 0x2d, 2);
    le(end, 0, 4);
    le(end, 0, 4);
    le(end, n, 8);
    le(end, n, 8);
    le(end, cd.size(), 8);
    le(end, cd_offset, 8);
    le(end, 0x07064b50, 4);
    le(end, 0, 4);
    le(end, z64, 8);
    le(end, 1, 4);
  }
  le(end, 0x06054b50, 4);
  le(end, o.eocd_disk, 2);
  le(end, 0, 2);
  le(end, o.eocd_entries.value_or(static_cast<std::uint16_t>(n)), 2);
  le(end, o.eocd_entries.value_or(static_cast<std::uint16_t>(n)), 2);
  le(end, cd.size(), 4);
  le(end, placeholders ? 0xFFFFFFFFu : cd_offset, 4);
  le(end, o.comment.size(), 2);
  for (char c : o.comment) end.push_back(static_cast<std::byte>(c));
  z.put(end);
  return z;
}

inline Bytes zip_bytes(const std::vector<ZipFileSpec>& files, const ZipOptions& o = {}) {
  ZipPieces z = zip_pieces(files, o);
  Bytes out;
  for (const auto& [b, hole] : z.pieces) {
    out.insert(out.end(), b.begin(), b.end());
    out.insert(out.end(), hole, std::byte{0});
  }
  return out;
}

// Writes the archive to `path`, holes as sparse regions (seek past them, then truncate).
inline void write_zip_file(const std::filesystem::path& path, const std::vector<ZipFileSpec>& files,
                           const ZipOptions& o = {}) {
  ZipPieces z = zip_pieces(files, o);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path.string());
  off_t at = 0;
  for (const auto& [b, hole] : z.pieces) {
    if (!b.empty() && ::pwrite(fd, b.data(), b.size(), at) != static_cast<ssize_t>(b.size()))
      throw std::runtime_error("cannot write " + path.string());
    at += static_cast<off_t>(b.size() + hole);
  }
  if (::ftruncate(fd, at) != 0) throw std::runtime_error("cannot size " + path.string());
  ::close(fd);
}

// ---------------------------------------------------------------------------------------
// pickle

class Pickle {
 public:
  Pickle& raw(std::initializer_list<int> bytes) {
    for (int b : bytes) b_.push_back(static_cast<std::byte>(b));
    return *this;
  }
  Pickle& raw(std::string_view s) {
    for (char c : s) b_.push_back(static_cast<std::byte>(c));
    return *this;
  }
  Pickle& op(int o) { return raw({o}); }
  Pickle& le(std::uint64_t v, int n) {
    detail::le(b_, v, n);
    return *this;
  }
  Pickle& proto(int v = 2) { return raw({0x80, v}); }
  Pickle& stop() { return op('.'); }
  Pickle& mark() { return op('('); }
  Pickle& none() { return op('N'); }
  Pickle& boolean(bool v) { return op(v ? 0x88 : 0x89); }
  Pickle& str(std::string_view s) {  // BINUNICODE
    op('X').le(s.size(), 4);
    return raw(s);
  }
  Pickle& short_str(std::string_view s) {  // SHORT_BINUNICODE (protocol 4)
    op(0x8c).le(s.size(), 1);
    return raw(s);
  }
  Pickle& integer(std::int64_t v) {
    if (v >= 0 && v < 256) return op('K').le(static_cast<std::uint64_t>(v), 1);
    if (v >= 0 && v < 65536) return op('M').le(static_cast<std::uint64_t>(v), 2);
    if (v >= INT32_MIN && v <= INT32_MAX) return op('J').le(static_cast<std::uint32_t>(v), 4);
    return op(0x8a).le(8, 1).le(static_cast<std::uint64_t>(v), 8);  // LONG1
  }
  Pickle& real(double v) {
    std::uint64_t bits;
    std::memcpy(&bits, &v, 8);
    op('G');
    for (int i = 7; i >= 0; --i) b_.push_back(static_cast<std::byte>((bits >> (8 * i)) & 0xFF));
    return *this;
  }
  Pickle& global(std::string_view module, std::string_view name) {
    op('c').raw(module).raw("\n").raw(name).raw("\n");
    return *this;
  }
  Pickle& stack_global(std::string_view module, std::string_view name) {
    short_str(module).short_str(name);
    return op(0x93);
  }
  Pickle& tuple_of(const std::vector<std::int64_t>& v) {
    if (v.empty()) return op(')');
    mark();
    for (auto x : v) integer(x);
    return op('t');
  }
  Pickle& empty_ordered_dict() { return global("collections", "OrderedDict").op(')').op('R'); }
  // ('storage', torch.<cls>, key, 'cpu', numel) BINPERSID
  Pickle& storage(std::string_view cls, std::string_view key, std::int64_t numel,
                  std::string_view module = "torch") {
    mark().str("storage").global(module, cls).str(key).str("cpu").integer(numel).op('t');
    return op('Q');
  }
  // torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())
  Pickle& tensor(std::string_view cls, std::string_view key, std::int64_t numel, std::int64_t offset,
                 const std::vector<std::int64_t>& size, const std::vector<std::int64_t>& stride) {
    global("torch._utils", "_rebuild_tensor_v2").mark();
    storage(cls, key, numel).integer(offset).tuple_of(size).tuple_of(stride).boolean(false).empty_ordered_dict();
    return op('t').op('R');
  }
  // ..._v3(UntypedStorage, offset, size, stride, False, OrderedDict(), torch.<dtype>)
  Pickle& tensor_v3(std::string_view dtype, std::string_view key, std::int64_t nbytes, std::int64_t offset,
                    const std::vector<std::int64_t>& size, const std::vector<std::int64_t>& stride) {
    global("torch._utils", "_rebuild_tensor_v3").mark();
    storage("UntypedStorage", key, nbytes, "torch.storage").integer(offset).tuple_of(size).tuple_of(stride);
    boolean(false).empty_ordered_dict().global("torch", dtype);
    return op('t').op('R');
  }
  // A contiguous float32 tensor of `shape` on storage `key` (numel elements, offset 0).
  Pickle& f32(std::string_view key, const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<std::int64_t> stride(shape.size());
    std::int64_t s = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
      stride[i] = s;
      s *= shape[i];
    }
    return tensor("FloatStorage", key, n, 0, shape, stride);
  }
  const Bytes& bytes() const { return b_; }

 private:
  Bytes b_;
};

// A checkpoint laid out as torch.save lays it out.
struct CheckpointSpec {
  std::string archive = "archive";
  std::string byteorder = "little";  // "" for none
  std::string version = "3\n";       // "" for none
  std::vector<std::pair<std::string, Bytes>> storages;  // key -> bytes
  std::vector<ZipFileSpec> extra;                       // more entries (after the data)
};

inline std::vector<ZipFileSpec> checkpoint_files(const Pickle& pkl, const CheckpointSpec& s) {
  std::vector<ZipFileSpec> f;
  auto add = [&](std::string name, Bytes data) { f.push_back({s.archive + "/" + name, std::move(data)}); };
  add("data.pkl", pkl.bytes());
  add(".format_version", to_bytes("1"));
  add(".storage_alignment", to_bytes("64"));
  if (!s.byteorder.empty()) add("byteorder", to_bytes(s.byteorder));
  for (const auto& [k, v] : s.storages) add("data/" + k, v);
  if (!s.version.empty()) add("version", to_bytes(s.version));
  add(".data/serialization_id", to_bytes("1234567890123456789012345678901234567890"));
  for (const auto& e : s.extra) f.push_back(e);
  return f;
}

inline Bytes checkpoint_bytes(const Pickle& pkl, const CheckpointSpec& s = {}, const ZipOptions& o = {}) {
  return zip_bytes(checkpoint_files(pkl, s), o);
}

}  // namespace tensoracle::testing
