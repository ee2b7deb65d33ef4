// .npy and .npz readers (see io/npy.h). The .npy layout is NumPy's format specification
// (numpy/lib/format.py's documentation): magic "\x93NUMPY", major and minor version bytes,
// a little-endian header length (2 bytes in version 1.0, 4 in 2.0 and 3.0), then the header:
// a Python dict literal padded with spaces and ended by '\n'; then the data.
#include "io/npy.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <new>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "core/atomic_file.h"
#include "core/mapped_file.h"
#include "core/text.h"
#include "io/zip_reader.h"
#include "tensoracle/errors.h"

namespace tensoracle::npy {

namespace {

using safetensors::Dtype;
using i64 = std::int64_t;

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr int kMaxRank = 64;  // NumPy's NPY_MAXDIMS
constexpr std::uint64_t kMaxHeader = 1u << 20;

// ---- the header dict ----------------------------------------------------------------------

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<i64> shape;
};

// A recursive-descent parser of exactly the literals NumPy writes: a dict of string keys to
// a string, True/False, or a tuple of non-negative integers. No nesting beyond that.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& where) : s_(text), where_(where) {}

  Header parse() {
    Header h;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    skip_space();
    expect('{');
    skip_space();
    while (peek() != '}') {
      std::string key = string_literal();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        if (seen_descr) fail("key 'descr' appears twice");
        seen_descr = true;
        if (peek() == '[') unsupported("a structured dtype (a list 'descr')");
        h.descr = string_literal();
      } else if (key == "fortran_order") {
        if (seen_fortran) fail("key 'fortran_order' appears twice");
        seen_fortran = true;
        h.fortran_order = boolean();
      } else if (key == "shape") {
        if (seen_shape) fail("key 'shape' appears twice");
        seen_shape = true;
        h.shape = tuple();
      } else {
        fail("unexpected key " + core::quote_name(key) + " (the header holds 'descr', 'fortran_order' and 'shape')");
      }
      skip_space();
      if (peek() == ',') {
        ++p_;
        skip_space();
      } else if (peek() != '}') {
        fail("expected ',' or '}' at header byte " + std::to_string(p_));
      }
    }
    ++p_;
    if (!seen_descr || !seen_fortran || !seen_shape)
      fail(std::string("the header lacks ") + (!seen_descr ? "'descr'" : !seen_fortran ? "'fortran_order'" : "'shape'"));
    // NumPy pads with spaces and ends the header with a newline.
    while (p_ < s_.size() && s_[p_] == ' ') ++p_;
    if (p_ + 1 != s_.size() || s_[p_] != '\n')
      fail("the header dict must be followed by spaces and one '\\n' ending the header");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw FormatError(where_ + "header: " + what); }
  [[noreturn]] void unsupported(const std::string& what) const {
    throw UnsupportedError(where_ + "header describes " + what + ", which tensoracle does not read");
  }
  char peek() const {
    if (p_ >= s_.size()) fail("ends inside the dict");
    return s_[p_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "' at header byte " + std::to_string(p_));
    ++p_;
  }
  void skip_space() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t')) ++p_;
  }
  std::string string_literal() {
    char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string at header byte " + std::to_string(p_));
    ++p_;
    std::size_t start = p_;
    while (peek() != q) {
      if (s_[p_] == '\\' || s_[p_] == '\n') fail("escapes and line breaks are not allowed in strings");
      ++p_;
      if (p_ - start > 256) fail("string longer than 256 bytes");
    }
    std::string v(s_.substr(start, p_ - start));
    ++p_;
    return v;
  }
  bool boolean() {
    if (s_.substr(p_, 4) == "True") {
      p_ += 4;
      return true;
    }
    if (s_.substr(p_, 5) == "False") {
      p_ += 5;
      return false;
    }
    fail("'fortran_order' must be True or False");
  }
  std::vector<i64> tuple() {
    expect('(');
    std::vector<i64> dims;
    skip_space();
    bool comma_after_last = false;
    while (peek() != ')') {
      if (!dims.empty() && !comma_after_last) fail("expected ',' between the dims of 'shape'");
      if (peek() < '0' || peek() > '9') fail("'shape' must be a tuple of non-negative integers");
      i64 v = 0;
      while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s_[p_] - '0', &v))
          fail("a dim of 'shape' does not fit 63 bits");
        ++p_;
      }
      dims.push_back(v);
      if (dims.size() > kMaxRank) fail("'shape' has more than " + std::to_string(kMaxRank) + " dims");
      skip_space();
      comma_after_last = false;
      if (peek() == ',') {
        ++p_;
        comma_after_last = true;
        skip_space();
      }
    }
    ++p_;
    // Python needs the comma of a 1-tuple: "(3)" is the integer 3, not a shape.
    if (dims.size() == 1 && !comma_after_last) fail("'shape' (N) is not a tuple: write (N,)");
    return dims;
  }

  std::string_view s_;
  std::size_t p_ = 0;
  const std::string& where_;
};

// The dtype of a 'descr' like '<f4'.
Dtype parse_descr(const std::string& descr, const std::string& where) {
  auto unsupported = [&](const std::string& why) -> Dtype {
    throw UnsupportedError(where + "dtype " + core::quote_name(descr) + " " + why);
  };
  if (descr.size() < 2) throw FormatError(where + "header: 'descr' " + core::quote_name(descr) + " is not a dtype");
  char order = descr[0];
  std::string_view code = std::string_view(descr).substr(1);
  if (order != '<' && order != '>' && order != '|' && order != '=')
    throw FormatError(where + "header: 'descr' " + core::quote_name(descr) +
                      " does not start with a byte order (<, >, |, =)");
  struct Row {
    std::string_view code;
    Dtype dtype;
  };
  static constexpr Row kRows[] = {
      {"f8", Dtype::F64}, {"f4", Dtype::F32}, {"f2", Dtype::F16},  {"i1", Dtype::I8},
      {"i2", Dtype::I16}, {"i4", Dtype::I32}, {"i8", Dtype::I64},  {"u1", Dtype::U8},
      {"u2", Dtype::U16}, {"u4", Dtype::U32}, {"u8", Dtype::U64},  {"b1", Dtype::BOOL},
      {"c8", Dtype::C64},
  };
  for (const Row& r : kRows) {
    if (code != r.code) continue;
    if (order == '>' && safetensors::dtype_bits(r.dtype) > 8)
      return unsupported("is big-endian; save the array little-endian (arr.astype(arr.dtype.newbyteorder('<')))");
    return r.dtype;
  }
  if (code[0] == 'V')
    return unsupported("is raw bytes (void). np.save writes ml_dtypes' bfloat16 and float8 arrays this way "
                       "and loses their type: save them with tensoracle.safetensors.save_file instead");
  if (code[0] == 'O') return unsupported("holds Python objects, which would need pickle (never loaded)");
  return unsupported("is not supported (float64/32/16, int8..64, uint8..64, bool and complex64 are)");
}

// C order from Fortran order: element (i0, ..., ik) sits at Σ i_j · Π_{m<j} shape_m.
void to_c_order(std::span<const std::byte> data, const std::vector<i64>& shape, std::size_t elem, std::byte* out) {
  const int rank = static_cast<int>(shape.size());
  std::vector<i64> f_stride(shape.size()), index(shape.size(), 0);
  i64 s = 1;
  for (int j = 0; j < rank; ++j) {
    f_stride[j] = s;
    s *= shape[j];
  }
  const i64 n = s;
  i64 src = 0;
  for (i64 k = 0; k < n; ++k) {
    std::memcpy(out + k * elem, data.data() + src * elem, elem);
    for (int j = rank - 1; j >= 0; --j) {  // advance the C-order index; keep src in step
      if (++index[j] < shape[j]) {
        src += f_stride[j];
        break;
      }
      src -= (shape[j] - 1) * f_stride[j];
      index[j] = 0;
    }
  }
}

// Where the data of a .npy image lies, from its preamble and header alone.
struct Layout {
  Dtype dtype{};
  std::vector<i64> shape;
  bool fortran_order = false;
  std::uint64_t count = 0;        // elements
  std::uint64_t elem = 0;         // bytes per element
  std::uint64_t data_offset = 0;  // preamble + header
  std::uint64_t data_bytes = 0;   // count × elem
};

// Parses the preamble and header at the start of `b`, which must hold them (it may hold only a
// prefix of the image). `where` prefixes messages ("[npy] FILE: ").
Layout parse_layout(std::span<const std::byte> b, const std::string& where) {
  auto fail = [&](const std::string& what) -> void { throw FormatError(where + what); };
  if (!looks_like_npy(b)) fail("not a .npy file (it does not start with \\x93NUMPY)");
  if (b.size() < 10) fail("truncated in the preamble (" + std::to_string(b.size()) + " bytes)");
  const auto major = std::to_integer<unsigned>(b[6]), minor = std::to_integer<unsigned>(b[7]);
  if (major < 1 || major > 3 || minor != 0)
    throw UnsupportedError(where + "format version " + std::to_string(major) + "." + std::to_string(minor) +
                           " is not one of 1.0, 2.0, 3.0");
  std::uint64_t header_len, start;
  if (major == 1) {
    header_len = std::to_integer<unsigned>(b[8]) | std::to_integer<unsigned>(b[9]) << 8;
    start = 10;
  } else {
    if (b.size() < 12) fail("truncated in the preamble (" + std::to_string(b.size()) + " bytes)");
    std::uint32_t v;
    std::memcpy(&v, b.data() + 8, 4);
    header_len = v;
    start = 12;
  }
  if (header_len > kMaxHeader) fail("header length " + std::to_string(header_len) + " exceeds 1 MiB");
  if (header_len > b.size() - start)
    fail("header length " + std::to_string(header_len) + " passes the end of the " + std::to_string(b.size()) +
         "-byte file (truncated?)");
  std::string_view text(reinterpret_cast<const char*>(b.data() + start), header_len);
  if (major < 3) {
    for (char c : text)
      if (static_cast<unsigned char>(c) > 0x7E) fail("header is not ASCII (format versions 1 and 2)");
  } else if (!core::valid_utf8(text)) {
    fail("header is not valid UTF-8");
  }
  if (text.find('\0') != std::string_view::npos) fail("header holds a NUL byte");
  Header h = HeaderParser(text, where).parse();

  Layout l;
  l.dtype = parse_descr(h.descr, where);
  l.shape = std::move(h.shape);
  l.fortran_order = h.fortran_order;
  l.count = 1;
  for (i64 d : l.shape)
    if (__builtin_mul_overflow(l.count, static_cast<std::uint64_t>(d), &l.count)) fail("shape's element count overflows");
  l.elem = static_cast<std::uint64_t>(safetensors::dtype_bits(l.dtype) / 8);
  if (__builtin_mul_overflow(l.count, l.elem, &l.data_bytes)) fail("shape's byte count overflows");
  l.data_offset = start + header_len;
  return l;
}

// " (1.5 GiB)", " (12.0 MiB)" after a byte count; nothing below 1 MiB.
std::string gib(std::uint64_t n) {
  if (n < (1u << 20)) return "";
  char b[32];
  if (n >= (1u << 30)) std::snprintf(b, sizeof b, " (%.1f GiB)", static_cast<double>(n) / static_cast<double>(1u << 30));
  else std::snprintf(b, sizeof b, " (%.1f MiB)", static_cast<double>(n) / static_cast<double>(1u << 20));
  return b;
}

// Memory for `n` bytes of array data; IoError ENOMEM naming the array when the system refuses.
std::shared_ptr<std::byte[]> allocate(std::uint64_t n, const std::string& where, const std::string& file) {
  try {
    if (n > std::numeric_limits<std::size_t>::max()) throw std::bad_alloc();
    return std::shared_ptr<std::byte[]>(new std::byte[std::max<std::size_t>(static_cast<std::size_t>(n), 1)]);
  } catch (const std::bad_alloc&) {
    throw IoError(where + "cannot allocate " + std::to_string(n) + " bytes" + gib(n) +
                      " for this array: out of memory (free memory, or compare smaller files)",
                  ENOMEM, file);
  }
}

// One whole .npy image. `where` prefixes messages ("[npy] FILE: "). The data is borrowed from
// `b` unless it had to be transposed: then `owned` holds it.
Array parse_one(std::span<const std::byte> b, const std::string& where, const std::string& file,
                std::shared_ptr<std::byte[]>& owned) {
  Layout l = parse_layout(b, where);
  const std::uint64_t have = b.size() - l.data_offset;
  if (have != l.data_bytes)
    throw FormatError(where + "data is " + std::to_string(have) + " bytes; shape and dtype need " +
                      std::to_string(l.data_bytes) + (have < l.data_bytes ? " (truncated?)" : ""));
  Array a;
  a.dtype = l.dtype;
  a.shape = std::move(l.shape);
  a.data = b.subspan(static_cast<std::size_t>(l.data_offset));
  if (l.fortran_order && a.shape.size() > 1 && l.count > 1) {
    owned = allocate(a.data.size(), where, file);
    to_c_order(a.data, a.shape, static_cast<std::size_t>(l.elem), owned.get());
    a.data = {owned.get(), a.data.size()};
  }
  return a;
}

// ---- .npz -------------------------------------------------------------------------------------

// The zip reader names its component [pth]; errors here concern an .npz.
template <typename F>
auto with_npz_messages(F&& f) {
  auto rename = [](const char* what) {
    std::string m = what;
    if (m.rfind("[pth] ", 0) == 0) m.replace(0, 6, "[npz] ");
    return m;
  };
  try {
    return f();
  } catch (const UnsupportedError& e) {
    throw UnsupportedError(rename(e.what()));
  } catch (const UnsafeCheckpointError&) {
    throw;
  } catch (const FormatError& e) {
    throw FormatError(rename(e.what()));
  }
}

// A raw deflate stream, inflated piece by piece into the caller's buffers.
class Inflater {
 public:
  Inflater(std::span<const std::byte> in, const std::string& where) : in_(in), where_(where) {
    if (inflateInit2(&z_, -MAX_WBITS) != Z_OK) throw FormatError(where_ + "zlib could not start inflating");
  }
  ~Inflater() { inflateEnd(&z_); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Inflates into `out` until it is full or the stream ends; returns the bytes written.
  std::size_t fill(std::span<std::byte> out) {
    std::size_t produced = 0;
    while (produced < out.size() && !ended_) {
      constexpr std::size_t kStep = std::numeric_limits<uInt>::max();
      z_.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in_.data() + in_done_));
      z_.avail_in = static_cast<uInt>(std::min(in_.size() - in_done_, kStep));
      z_.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
      z_.avail_out = static_cast<uInt>(std::min(out.size() - produced, kStep));
      const uInt avail_in = z_.avail_in, avail_out = z_.avail_out;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      const std::size_t used = avail_in - z_.avail_in, made = avail_out - z_.avail_out;
      in_done_ += used;
      produced += made;
      if (rc == Z_STREAM_END) {
        ended_ = true;
      } else if (rc == Z_BUF_ERROR && in_done_ == in_.size()) {
        throw FormatError(where_ + "deflate stream ends early (truncated?)");
      } else if ((rc != Z_OK && rc != Z_BUF_ERROR) || (used == 0 && made == 0)) {
        throw FormatError(where_ + "deflate data is damaged (zlib: " + (z_.msg ? z_.msg : std::to_string(rc)) + ")");
      }
    }
    return produced;
  }
  bool ended() const noexcept { return ended_; }
  std::size_t consumed() const noexcept { return in_done_; }

 private:
  std::span<const std::byte> in_;
  const std::string& where_;
  z_stream z_{};
  std::size_t in_done_ = 0;
  bool ended_ = false;
};

// Inflates a deflated entry that the directory says holds `declared` bytes: the .npy header
// first, which must need exactly that many; then the rest into memory of exactly that size;
// one byte more is an error. Nothing larger than the header is allocated before the header
// and the directory agree.
std::shared_ptr<std::byte[]> inflate_entry(std::span<const std::byte> in, std::uint64_t declared,
                                           const std::string& where, const std::string& file) {
  Inflater z(in, where);
  std::vector<std::byte> head(static_cast<std::size_t>(std::min<std::uint64_t>(declared, 12 + kMaxHeader)));
  const std::size_t got = z.fill(head);
  const std::string says = "the zip directory declares " + std::to_string(declared) + " bytes";
  if (got < head.size()) throw FormatError(where + "inflates to " + std::to_string(got) + " bytes, but " + says + " (damaged archive)");
  const Layout l = parse_layout({head.data(), got}, where);
  std::uint64_t need;
  if (__builtin_add_overflow(l.data_offset, l.data_bytes, &need) || need != declared)
    throw FormatError(where + "its .npy header needs " + std::to_string(l.data_offset) + " + " +
                      std::to_string(l.data_bytes) + " bytes (header, then shape × element size), but " + says +
                      " (damaged or hostile archive)");
  auto out = allocate(declared, where, file);
  std::memcpy(out.get(), head.data(), got);
  head = {};
  const std::size_t rest = z.fill({out.get() + got, static_cast<std::size_t>(declared) - got});
  if (got + rest < declared)
    throw FormatError(where + "inflates to " + std::to_string(got + rest) + " bytes, but " + says + " (damaged archive)");
  std::byte probe;
  if (!z.ended() && z.fill({&probe, 1}) != 0)
    throw FormatError(where + "inflates beyond its declared size of " + std::to_string(declared) +
                      " bytes (damaged or hostile archive); inflation stopped there");
  if (z.consumed() != in.size())
    throw FormatError(where + std::to_string(in.size() - z.consumed()) + " bytes follow the end of the deflate stream");
  return out;
}

std::uint32_t crc_of(std::span<const std::byte> bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const std::size_t step = std::min<std::size_t>(bytes.size() - done, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), static_cast<uInt>(step));
    done += step;
  }
  return static_cast<std::uint32_t>(crc);
}

constexpr std::string_view kSuffix = ".npy";

}  // namespace

struct File::Zip {
  io::ZipArchive archive;
};

File::File() = default;
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

bool looks_like_npy(std::span<const std::byte> bytes) noexcept {
  return bytes.size() >= kMagic.size() && std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) == 0;
}

bool looks_like_zip(std::span<const std::byte> bytes) noexcept {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), "PK", 2) == 0;
}

File File::parse_npy(std::span<const std::byte> bytes, std::string display_name) {
  File f;
  f.name_ = std::move(display_name);
  f.bytes_ = bytes;
  const std::string where = "[npy] " + f.name_ + ": ";
  Layout l = parse_layout(bytes, where);  // the whole check, without transposing anything
  const std::uint64_t have = bytes.size() - l.data_offset;
  if (have != l.data_bytes)
    throw FormatError(where + "data is " + std::to_string(have) + " bytes; shape and dtype need " +
                      std::to_string(l.data_bytes) + (have < l.data_bytes ? " (truncated?)" : ""));
  f.names_.emplace_back();
  return f;
}

File File::parse_npz(std::span<const std::byte> bytes, std::string display_name, const Limits& limits) {
  File f;
  f.npz_ = true;
  f.name_ = std::move(display_name);
  f.bytes_ = bytes;
  const std::string file_where = "[npz] " + f.name_ + ": ";
  f.zip_ = std::make_unique<Zip>(Zip{with_npz_messages([&] { return io::ZipArchive::parse(bytes, f.name_); })});
  std::uint64_t inflated = 0;
  for (const io::ZipEntry& e : f.zip_->archive.entries()) {
    const std::string where = file_where + "entry " + core::quote_name(e.name) + ": ";
    if (e.name.size() <= kSuffix.size() || e.name.compare(e.name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
      throw FormatError(where + "not an array (np.savez names every entry NAME.npy)");
    if (e.method == 8) {
      std::uint64_t most;
      if (__builtin_mul_overflow(e.size, kMaxInflateRatio, &most) || __builtin_add_overflow(most, 1024, &most))
        most = std::numeric_limits<std::uint64_t>::max();
      if (e.uncompressed_size > most)
        throw FormatError(where + "declares " + std::to_string(e.uncompressed_size) + " bytes inflated from " +
                          std::to_string(e.size) + ", more than deflate can expand (" + std::to_string(kMaxInflateRatio) +
                          ":1): damaged or hostile archive");
      inflated += e.uncompressed_size;
      if (inflated > limits.max_inflated_bytes)
        throw FormatError(file_where + "its compressed arrays inflate to more than the limit of " +
                          std::to_string(limits.max_inflated_bytes) + " bytes" + gib(limits.max_inflated_bytes) +
                          " in all (the zip directory says; reached at entry " + core::quote_name(e.name) +
                          "): raise it with `tensoracle compare --max-inflated SIZE` if the file is trusted, "
                          "or save the arrays with np.savez (uncompressed: read in place, no limit)");
    } else if (e.method != 0) {
      throw UnsupportedError(where + "compression method " + std::to_string(e.method) +
                             " (tensoracle reads stored and deflated entries, as np.savez and "
                             "np.savez_compressed write)");
    }
    f.names_.push_back(e.name.substr(0, e.name.size() - kSuffix.size()));
  }
  return f;
}

Array File::read(std::size_t i) const {
  if (i >= names_.size())
    throw InvalidArgument("[npy] " + name_ + ": array " + std::to_string(i) + " of " + std::to_string(names_.size()));
  std::shared_ptr<std::byte[]> owned;
  Array a;
  if (!npz_) {
    a = parse_one(bytes_, "[npy] " + name_ + ": ", name_, owned);
    a.owner = owned ? std::shared_ptr<const void>(owned) : mapping_;
    return a;
  }
  const io::ZipEntry& e = zip_->archive.entries()[i];
  const std::string where = "[npz] " + name_ + ": entry " + core::quote_name(e.name) + ": ";
  std::span<const std::byte> image = zip_->archive.data(e);
  std::shared_ptr<std::byte[]> inflated;
  if (e.method == 8) {
    inflated = inflate_entry(image, e.uncompressed_size, where, name_);
    image = {inflated.get(), static_cast<std::size_t>(e.uncompressed_size)};
  }
  if (std::uint32_t crc = crc_of(image); crc != e.crc32) throw FormatError(where + "CRC-32 mismatch (damaged archive)");
  a = parse_one(image, where, name_, owned);
  a.name = names_[i];
  if (owned) a.owner = owned;
  else if (inflated) a.owner = inflated;
  else a.owner = mapping_;
  return a;
}

std::vector<Array> File::read_all() const {
  std::vector<Array> out;
  for (std::size_t i = 0; i < names_.size(); ++i) out.push_back(read(i));
  return out;
}

File File::open(const std::filesystem::path& path, const Limits& limits) {
  auto map = std::make_shared<core::MappedFile>(path, false, "npy");
  std::span<const std::byte> bytes = map->bytes();
  File f;
  if (looks_like_npy(bytes)) {
    f = parse_npy(bytes, path.string());
  } else if (looks_like_zip(bytes)) {
    f = parse_npz(bytes, path.string(), limits);
  } else {
    throw FormatError("[npy] " + path.string() +
                      ": neither a .npy file (\\x93NUMPY) nor an .npz archive (a zip file)");
  }
  f.mapping_ = std::move(map);
  return f;
}

namespace {

// NumPy's descr of a dtype it has natively; empty for the others.
std::string_view descr_of(Dtype d) {
  switch (d) {
    case Dtype::F64: return "<f8";
    case Dtype::F32: return "<f4";
    case Dtype::F16: return "<f2";
    case Dtype::I8: return "|i1";
    case Dtype::I16: return "<i2";
    case Dtype::I32: return "<i4";
    case Dtype::I64: return "<i8";
    case Dtype::U8: return "|u1";
    case Dtype::U16: return "<u2";
    case Dtype::U32: return "<u4";
    case Dtype::U64: return "<u8";
    case Dtype::BOOL: return "|b1";
    default: return {};
  }
}

void put16(std::vector<std::byte>& out, std::uint32_t v) {
  out.push_back(std::byte(v & 0xff));
  out.push_back(std::byte((v >> 8) & 0xff));
}
void put32(std::vector<std::byte>& out, std::uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}
void put_text(std::vector<std::byte>& out, std::string_view text) {
  for (char c : text) out.push_back(static_cast<std::byte>(c));
}

}  // namespace

std::vector<std::byte> npy_bytes(const NamedArray& a, const std::string& where) {
  const std::string label = where + (a.name.empty() ? std::string("the array") : "array " + core::quote_name(a.name));
  const std::string_view descr = descr_of(a.dtype);
  if (descr.empty())
    throw UnsupportedError(label + " is " + std::string(safetensors::dtype_name(a.dtype)) +
                           ", which NumPy's .npy/.npz files hold only as raw bytes (losing the type): write a "
                           ".safetensors file instead");
  std::uint64_t count = 1;
  for (std::int64_t d : a.shape) {
    if (d < 0) throw InvalidArgument(label + ": negative dimension " + std::to_string(d));
    if (d != 0 && count > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(d))
      throw InvalidArgument(label + ": the shape's element count overflows");
    count *= static_cast<std::uint64_t>(d);
  }
  const std::uint64_t want = count * static_cast<std::uint64_t>(safetensors::dtype_bits(a.dtype) / 8);
  if (a.data.size() != want)
    throw InvalidArgument(label + ": " + std::to_string(a.data.size()) + " bytes of data for " +
                          std::to_string(want) + " (shape × element size)");
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < a.shape.size(); ++i) header += (i ? ", " : "") + std::to_string(a.shape[i]);
  header += a.shape.size() == 1 ? ",), }" : "), }";
  // magic (6) + version (2) + header length (2) + header + '\n', a multiple of 64.
  const std::size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  if (total - 10 > 0xffff) throw UnsupportedError(label + ": a rank this large does not fit a version 1.0 header");
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::vector<std::byte> out;
  out.reserve(total + a.data.size());
  put_text(out, "\x93NUMPY");
  out.push_back(std::byte{1});
  out.push_back(std::byte{0});
  put16(out, static_cast<std::uint32_t>(header.size()));
  put_text(out, header);
  out.insert(out.end(), a.data.begin(), a.data.end());
  return out;
}

void write_npz(const std::filesystem::path& path, const std::vector<NamedArray>& arrays, const std::string& component) {
  const std::string where = "[" + component + "] " + path.string() + ": ";
  std::vector<std::string> seen;
  for (const NamedArray& a : arrays) {
    if (a.name.empty() || a.name.find('/') != std::string::npos || a.name.find('\0') != std::string::npos)
      throw InvalidArgument(where + "array name " + core::quote_name(a.name) +
                            " cannot name an .npz entry (empty, or holds '/' or NUL)");
    if (std::find(seen.begin(), seen.end(), a.name) != seen.end())
      throw InvalidArgument(where + "two arrays are named " + core::quote_name(a.name));
    seen.push_back(a.name);
  }
  constexpr std::uint64_t kLimit = 0xffffffffu;
  std::vector<std::byte> central;
  std::uint64_t offset = 0;
  core::AtomicFile out(path, component);
  for (const NamedArray& a : arrays) {
    const std::vector<std::byte> body = npy_bytes(a, where);
    const std::string entry = a.name + ".npy";
    if (entry.size() > 0xffff) throw InvalidArgument(where + "array name " + core::quote_name(a.name) + " is too long");
    if (offset + 30 + entry.size() + body.size() > kLimit)
      throw UnsupportedError(where + "the archive would pass 4 GiB, which .npz files written here cannot hold (no "
                             "zip64): write a .safetensors file instead");
    const std::uint32_t crc = crc_of(body);
    const auto size = static_cast<std::uint32_t>(body.size());
    std::vector<std::byte> local;
    put32(local, 0x04034b50);  // local file header
    put16(local, 20);          // version needed: 2.0
    put16(local, 0);           // flags
    put16(local, 0);           // stored
    put16(local, 0);           // time
    put16(local, 0x21);        // date: 1980-01-01
    put32(local, crc);
    put32(local, size);
    put32(local, size);
    put16(local, static_cast<std::uint32_t>(entry.size()));
    put16(local, 0);
    put_text(local, entry);
    out.write(local);
    out.write(body);
    put32(central, 0x02014b50);  // central directory header
    put16(central, 20);          // made by: 2.0
    put16(central, 20);
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put16(central, 0x21);
    put32(central, crc);
    put32(central, size);
    put32(central, size);
    put16(central, static_cast<std::uint32_t>(entry.size()));
    put16(central, 0);  // extra
    put16(central, 0);  // comment
    put16(central, 0);  // disk
    put16(central, 0);  // internal attributes
    put32(central, 0);  // external attributes
    put32(central, static_cast<std::uint32_t>(offset));
    put_text(central, entry);
    offset += local.size() + body.size();
  }
  if (arrays.size() > 0xffff || offset + central.size() + 22 > kLimit)
    throw UnsupportedError(where + "too many arrays or bytes for an .npz without zip64: write a .safetensors file instead");
  std::vector<std::byte> end;
  put32(end, 0x06054b50);  // end of central directory
  put16(end, 0);
  put16(end, 0);
  put16(end, static_cast<std::uint32_t>(arrays.size()));
  put16(end, static_cast<std::uint32_t>(arrays.size()));
  put32(end, static_cast<std::uint32_t>(central.size()));
  put32(end, static_cast<std::uint32_t>(offset));
  put16(end, 0);
  out.write(central);
  out.write(end);
  out.commit();
}

}  // namespace tensoracle::npy
