// .npy and .npz readers (see io/npy.h). The .npy layout is NumPy's format specification
// (numpy/lib/format.py's documentation): magic "\x93NUMPY", major and minor version bytes,
// a little-endian header length (2 bytes in version 1.0, 4 in 2.0 and 3.0), then the header:
// a Python dict literal padded with spaces and ended by '\n'; then the data.
#include "io/npy.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "convert/zip_reader.h"
#include "core/mapped_file.h"
#include "core/text.h"
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
std::shared_ptr<std::byte[]> to_c_order(std::span<const std::byte> data, const std::vector<i64>& shape,
                                        std::size_t elem) {
  auto out = std::shared_ptr<std::byte[]>(new std::byte[std::max<std::size_t>(data.size(), 1)]);
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
    std::memcpy(out.get() + k * elem, data.data() + src * elem, elem);
    for (int j = rank - 1; j >= 0; --j) {  // advance the C-order index; keep src in step
      if (++index[j] < shape[j]) {
        src += f_stride[j];
        break;
      }
      src -= (shape[j] - 1) * f_stride[j];
      index[j] = 0;
    }
  }
  return out;
}

struct Parsed {
  Array array;
  std::shared_ptr<std::byte[]> owned;  // set when the data had to be reordered
};

// One .npy image. `where` prefixes messages ("[npy] FILE: ").
Parsed parse_one(std::span<const std::byte> b, const std::string& where) {
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

  Parsed out;
  Array& a = out.array;
  a.dtype = parse_descr(h.descr, where);
  a.shape = h.shape;
  std::uint64_t n = 1;
  for (i64 d : h.shape)
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) fail("shape's element count overflows");
  const std::uint64_t elem = static_cast<std::uint64_t>(safetensors::dtype_bits(a.dtype) / 8);
  std::uint64_t bytes;
  if (__builtin_mul_overflow(n, elem, &bytes)) fail("shape's byte count overflows");
  const std::uint64_t have = b.size() - start - header_len;
  if (have != bytes)
    fail("data is " + std::to_string(have) + " bytes; shape and dtype need " + std::to_string(bytes) +
         (have < bytes ? " (truncated?)" : ""));
  a.data = b.subspan(start + header_len);
  if (h.fortran_order && h.shape.size() > 1 && n > 1) {
    out.owned = to_c_order(a.data, a.shape, elem);
    a.data = {out.owned.get(), a.data.size()};
  }
  return out;
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

// Inflates a raw deflate stream that must hold a whole .npy image.
std::shared_ptr<std::byte[]> inflate_entry(std::span<const std::byte> in, const std::string& where,
                                           std::size_t& out_size) {
  // Deflate expands at most ~1032:1 (a 258-byte match per 2 bits): more is malformed input.
  const std::uint64_t bound = static_cast<std::uint64_t>(in.size()) * 1032 + 1024;
  std::vector<std::byte> out;
  out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(bound, std::max<std::uint64_t>(in.size() * 4, 1 << 16))));
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw FormatError(where + "zlib could not start inflating");
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&z};
  std::size_t in_done = 0, produced = 0;
  for (;;) {
    const std::size_t step = std::numeric_limits<uInt>::max();
    z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data() + in_done));
    z.avail_in = static_cast<uInt>(std::min(in.size() - in_done, step));
    if (produced == out.size()) {
      if (out.size() >= bound) throw FormatError(where + "inflates past " + std::to_string(bound) + " bytes, more than its compressed size allows");
      out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(bound, out.size() * 2)));
    }
    z.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    z.avail_out = static_cast<uInt>(std::min(out.size() - produced, step));
    const uInt avail_in = z.avail_in, avail_out = z.avail_out;
    int rc = inflate(&z, Z_NO_FLUSH);
    in_done += avail_in - z.avail_in;
    produced += avail_out - z.avail_out;
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && z.avail_in == 0 && in_done == in.size())
      throw FormatError(where + "deflate stream ends early (truncated?)");
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      throw FormatError(where + "deflate data is damaged (zlib: " + (z.msg ? z.msg : std::to_string(rc)) + ")");
  }
  if (in_done != in.size())
    throw FormatError(where + std::to_string(in.size() - in_done) + " bytes follow the end of the deflate stream");
  auto owned = std::shared_ptr<std::byte[]>(new std::byte[std::max<std::size_t>(produced, 1)]);
  std::memcpy(owned.get(), out.data(), produced);
  out_size = produced;
  return owned;
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

}  // namespace

bool looks_like_npy(std::span<const std::byte> bytes) noexcept {
  return bytes.size() >= kMagic.size() && std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) == 0;
}

bool looks_like_zip(std::span<const std::byte> bytes) noexcept {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), "PK", 2) == 0;
}

File File::parse_npy(std::span<const std::byte> bytes, std::string display_name) {
  File f;
  f.name_ = std::move(display_name);
  Parsed p = parse_one(bytes, "[npy] " + f.name_ + ": ");
  if (p.owned) f.owned_.push_back(std::move(p.owned));
  f.arrays_.push_back(std::move(p.array));
  return f;
}

File File::parse_npz(std::span<const std::byte> bytes, std::string display_name) {
  File f;
  f.npz_ = true;
  f.name_ = std::move(display_name);
  const std::string file_where = "[npz] " + f.name_ + ": ";
  pth::ZipArchive zip = with_npz_messages([&] { return pth::ZipArchive::parse(bytes, f.name_); });
  for (const pth::ZipEntry& e : zip.entries()) {
    const std::string where = file_where + "entry " + core::quote_name(e.name) + ": ";
    constexpr std::string_view kSuffix = ".npy";
    if (e.name.size() <= kSuffix.size() || e.name.compare(e.name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
      throw FormatError(where + "not an array (np.savez names every entry NAME.npy)");
    std::span<const std::byte> image = zip.data(e);
    if (e.method == 8) {
      std::size_t size = 0;
      auto owned = inflate_entry(image, where, size);
      image = {owned.get(), size};
      f.owned_.push_back(std::move(owned));
    } else if (e.method != 0) {
      throw UnsupportedError(where + "compression method " + std::to_string(e.method) +
                             " (tensoracle reads stored and deflated entries, as np.savez and "
                             "np.savez_compressed write)");
    }
    if (std::uint32_t crc = crc_of(image); crc != e.crc32)
      throw FormatError(where + "CRC-32 mismatch (damaged archive)");
    Parsed p = parse_one(image, where);
    p.array.name = e.name.substr(0, e.name.size() - kSuffix.size());
    if (p.owned) f.owned_.push_back(std::move(p.owned));
    f.arrays_.push_back(std::move(p.array));
  }
  return f;
}

File File::open(const std::filesystem::path& path) {
  auto map = std::make_shared<core::MappedFile>(path, false, "npy");
  std::span<const std::byte> bytes = map->bytes();
  File f;
  if (looks_like_npy(bytes)) {
    f = parse_npy(bytes, path.string());
  } else if (looks_like_zip(bytes)) {
    f = parse_npz(bytes, path.string());
  } else {
    throw FormatError("[npy] " + path.string() +
                      ": neither a .npy file (\\x93NUMPY) nor an .npz archive (a zip file)");
  }
  f.mapping_ = std::move(map);
  return f;
}

}  // namespace tensoracle::npy
