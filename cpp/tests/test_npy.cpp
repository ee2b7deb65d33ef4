// The .npy/.npz readers: files built byte by byte (NumPy's own files are tested from Python,
// python/tests/test_compare_cli.py), every dtype, Fortran order, and each rule's error.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <string>
#include <vector>

#include "io/npy.h"
#include "pth_helpers.h"
#include "st_helpers.h"
#include "tensoracle/errors.h"

namespace tensoracle {
namespace {

using safetensors::Dtype;
using testing::Bytes;
using testing::TempDir;
using testing::to_bytes;

// A .npy image: preamble, the header dict padded to a multiple of 64 and '\n', then data.
Bytes npy(const std::string& dict, const Bytes& data, int major = 1, bool pad = true) {
  std::string header = dict;
  std::size_t pre = major == 1 ? 10 : 12;
  if (pad)
    while ((pre + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const std::size_t n = header.size();
  out += static_cast<char>(n & 0xFF);
  out += static_cast<char>((n >> 8) & 0xFF);
  if (major > 1) {
    out += static_cast<char>((n >> 16) & 0xFF);
    out += static_cast<char>((n >> 24) & 0xFF);
  }
  Bytes b = to_bytes(out + header);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

template <typename T>
Bytes values(std::vector<T> v) {
  return testing::bytes_of_values(v);
}

// A File borrows its bytes and reads an array when asked: keep test images alive for good.
npy::File parse_kept(Bytes b, const char* name) {
  static std::deque<Bytes> kept;
  kept.push_back(std::move(b));
  return npy::File::parse_npy(kept.back(), name);
}

std::string error_of(const Bytes& b, bool zip = false) {
  try {
    if (zip) npy::File::parse_npz(b, "t.npz").read_all();
    else npy::File::parse_npy(b, "t.npy").read_all();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Npy, ReadsWhatNumpyWrites) {
  Bytes b = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", values<float>({1, 2, 3, 4, 5, 6}));
  npy::File f = npy::File::parse_npy(b, "x.npy");
  ASSERT_EQ(f.read_all().size(), 1u);
  const npy::Array a = f.read(0);
  EXPECT_EQ(a.name, "");
  EXPECT_EQ(a.dtype, Dtype::F32);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  ASSERT_EQ(a.data.size(), 24u);
  float v[6];
  std::memcpy(v, a.data.data(), 24);
  EXPECT_EQ(v[5], 6.0f);
  EXPECT_FALSE(f.is_npz());
}

TEST(Npy, EveryDtypeAndVersion) {
  struct Case {
    const char* descr;
    Dtype dtype;
    int size;
  };
  for (Case c : {Case{"<f8", Dtype::F64, 8}, {"<f4", Dtype::F32, 4}, {"<f2", Dtype::F16, 2}, {"|i1", Dtype::I8, 1},
                 {"<i2", Dtype::I16, 2}, {"<i4", Dtype::I32, 4}, {"<i8", Dtype::I64, 8}, {"|u1", Dtype::U8, 1},
                 {"<u2", Dtype::U16, 2}, {"<u4", Dtype::U32, 4}, {"<u8", Dtype::U64, 8}, {"|b1", Dtype::BOOL, 1},
                 {"<c8", Dtype::C64, 8}, {">i1", Dtype::I8, 1}, {"=f4", Dtype::F32, 4}}) {
    for (int major : {1, 2, 3}) {
      Bytes data(static_cast<std::size_t>(c.size) * 3, std::byte{0});
      std::string dict = std::string("{'descr': '") + c.descr + "', 'fortran_order': False, 'shape': (3,), }";
      npy::File f = parse_kept(npy(dict, data, major), "x.npy");
      EXPECT_EQ(f.read_all()[0].dtype, c.dtype) << c.descr;
      EXPECT_EQ(f.read_all()[0].data.size(), data.size()) << c.descr;
    }
  }
}

TEST(Npy, ShapesZeroDAndEmptyAndUnpadded) {
  npy::File f = parse_kept(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", values<double>({2.5})), "s");
  EXPECT_TRUE(f.read_all()[0].shape.empty());
  EXPECT_EQ(f.read_all()[0].data.size(), 8u);
  f = parse_kept(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", {}), "e");
  EXPECT_EQ(f.read_all()[0].shape, (std::vector<std::int64_t>{0, 5}));
  // Old writers padded to 16 bytes; key order and quotes vary; no trailing comma.
  f = parse_kept(npy("{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<i4\"}", values<std::int32_t>({1, 2}), 1, false), "o");
  EXPECT_EQ(f.read_all()[0].dtype, Dtype::I32);
}

TEST(Npy, FortranOrderIsTransposedToCOrder) {
  // A 2x3 array [[1, 2, 3], [4, 5, 6]] stored column by column.
  Bytes b = npy("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", values<std::int32_t>({1, 4, 2, 5, 3, 6}));
  npy::File f = npy::File::parse_npy(b, "f.npy");
  std::int32_t v[6];
  std::memcpy(v, f.read_all()[0].data.data(), sizeof v);
  EXPECT_EQ(std::vector<std::int32_t>(v, v + 6), (std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}));
  // 3-D: element (i, j, k) of shape (2, 2, 2) at Fortran offset i + 2j + 4k holds 100i + 10j + k.
  std::vector<std::int32_t> fortran(8);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 2; ++k) fortran[static_cast<std::size_t>(i + 2 * j + 4 * k)] = 100 * i + 10 * j + k;
  f = parse_kept(npy("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 2, 2), }", values(fortran)), "f3.npy");
  std::int32_t w[8];
  std::memcpy(w, f.read_all()[0].data.data(), sizeof w);
  EXPECT_EQ(std::vector<std::int32_t>(w, w + 8), (std::vector<std::int32_t>{0, 1, 10, 11, 100, 101, 110, 111}));
}

TEST(Npy, MalformedFilesAreFormatErrors) {
  const Bytes four = values<float>({1});
  auto dict = [](const std::string& shape, const std::string& extra = "") {
    return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", " + extra + "}";
  };
  struct Case {
    Bytes bytes;
    const char* words;
  };
  Bytes truncated = npy(dict("(1,)"), four);
  truncated.resize(20);
  Bytes trailing = npy(dict("(1,)"), four);
  trailing.push_back(std::byte{0});
  Bytes no_newline = npy(dict("(1,)"), four);
  no_newline[no_newline.size() - 5] = std::byte{' '};
  for (const Case& c : std::vector<Case>{
           {to_bytes("hello"), "not a .npy file"},
           {to_bytes("\x93NUMPY\x01"), "truncated in the preamble"},
           {truncated, "passes the end"},
           {trailing, "data is 5 bytes; shape and dtype need 4"},
           {npy(dict("(2,)"), four), "(truncated?)"},
           {no_newline, "followed by spaces and one '\\n'"},
           {npy(dict("(1)"), four), "write (N,)"},
           {npy(dict("(-1,)"), four), "non-negative integers"},
           {npy(dict("(1,)", "'extra': 1, "), four), "unexpected key 'extra'"},
           {npy("{'descr': '<f4', 'shape': (1,), }", four), "lacks 'fortran_order'"},
           {npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", four), "'descr' appears twice"},
           {npy("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}", four), "True or False"},
           {npy("{'descr': 'f4', 'fortran_order': False, 'shape': (1,)}", four), "byte order"},
           {npy(dict("(99999999999, 99999999999)"), four), "overflows"},
           {npy(dict("(99999999999999999999,)"), four), "does not fit 63 bits"},
           {npy("{'descr': '<f\\4', 'fortran_order': False, 'shape': (1,)}", four), "escapes"},
       }) {
    std::string e = error_of(c.bytes);
    EXPECT_NE(e.find(c.words), std::string::npos) << "wanted '" << c.words << "' in: " << e;
    EXPECT_EQ(e.rfind("[npy] t.npy: ", 0), 0u) << e;
  }
  EXPECT_THROW(npy::File::parse_npy(to_bytes("hello"), "t"), FormatError);
}

TEST(Npy, UnsupportedDtypesSayWhy) {
  auto with_descr = [](const std::string& d) {
    return npy("{'descr': '" + d + "', 'fortran_order': False, 'shape': (1,), }", Bytes(8, std::byte{0}));
  };
  EXPECT_THROW(npy::File::parse_npy(with_descr(">f4"), "t"), UnsupportedError);
  EXPECT_NE(error_of(with_descr(">f4")).find("big-endian"), std::string::npos);
  EXPECT_NE(error_of(with_descr("<V2")).find("bfloat16"), std::string::npos);
  EXPECT_NE(error_of(with_descr("|O")).find("pickle"), std::string::npos);
  EXPECT_NE(error_of(with_descr("<U2")).find("not supported"), std::string::npos);
  Bytes structured = npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", Bytes(4, std::byte{0}));
  EXPECT_THROW(npy::File::parse_npy(structured, "t"), UnsupportedError);
  Bytes v4 = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", Bytes(4, std::byte{0}), 4);
  EXPECT_THROW(npy::File::parse_npy(v4, "t"), UnsupportedError);
}

// Raw deflate of `data` (as zip stores it).
Bytes deflate(const Bytes& data) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  Bytes out(deflateBound(&z, data.size()));
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Sets every central directory entry's CRC-32 (the helper writes the stored bytes' CRC).
void set_crcs(Bytes& zip, const std::vector<std::uint32_t>& crcs) {
  std::size_t k = 0;
  for (std::size_t p = 0; p + 4 <= zip.size() && k < crcs.size(); ++p) {
    std::uint32_t sig;
    std::memcpy(&sig, zip.data() + p, 4);
    if (sig == 0x02014b50) std::memcpy(zip.data() + p + 16, &crcs[k++], 4);
  }
}

TEST(Npz, StoredAndDeflatedEntries) {
  Bytes a = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", values<float>({1, 2}));
  Bytes b = npy("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", values<std::int64_t>({7, 8, 9}));
  testing::ZipFileSpec sa{"a.npy", a}, sb{"dir/b.npy", deflate(b), 8};
  sb.uncompressed_size = b.size();
  Bytes zip = testing::zip_bytes({sa, sb});
  set_crcs(zip, {testing::crc32(a), testing::crc32(b)});
  npy::File f = npy::File::parse_npz(zip, "x.npz");
  EXPECT_TRUE(f.is_npz());
  ASSERT_EQ(f.read_all().size(), 2u);
  EXPECT_EQ(f.read_all()[0].name, "a");
  EXPECT_EQ(f.read_all()[1].name, "dir/b");
  EXPECT_EQ(f.read_all()[1].dtype, Dtype::I64);
  std::int64_t v[3];
  std::memcpy(v, f.read_all()[1].data.data(), sizeof v);
  EXPECT_EQ(v[2], 9);
}

TEST(Npz, DamagedArchivesAreFormatErrors) {
  Bytes a = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", values<float>({1, 2}));
  // A wrong CRC.
  Bytes zip = testing::zip_bytes({{"a.npy", a}});
  set_crcs(zip, {testing::crc32(a) ^ 1});
  EXPECT_NE(error_of(zip, true).find("entry 'a.npy': CRC-32 mismatch"), std::string::npos) << error_of(zip, true);
  // Not an .npy entry; a damaged .npy inside; a truncated deflate stream; another method.
  zip = testing::zip_bytes({{"a.txt", a}});
  EXPECT_NE(error_of(zip, true).find("np.savez names every entry NAME.npy"), std::string::npos);
  Bytes bad = a;
  bad.pop_back();
  zip = testing::zip_bytes({{"a.npy", bad}});
  EXPECT_NE(error_of(zip, true).find("[npz] t.npz: entry 'a.npy': data is 7 bytes"), std::string::npos) << error_of(zip, true);
  Bytes d = deflate(a);
  d.resize(d.size() / 2);
  zip = testing::zip_bytes({{"a.npy", d, 8}});
  EXPECT_NE(error_of(zip, true).find("deflate"), std::string::npos) << error_of(zip, true);
  zip = testing::zip_bytes({{"a.npy", a, 12}});
  EXPECT_THROW(npy::File::parse_npz(zip, "t.npz"), UnsupportedError);
  // The zip reader's own errors are reported as the .npz's.
  std::string e = error_of(to_bytes("PK\x03\x04 not really a zip"), true);
  EXPECT_EQ(e.rfind("[npz] t.npz: zip: ", 0), 0u) << e;
}

// A header declaring an absurd shape is a FormatError naming the file and entry, found before
// any memory is taken for the shape: the directory's size disagrees with the header, or (where
// the directory agrees with it) exceeds what deflate can make of the entry's bytes.
TEST(Npz, AbsurdShapesAreFormatErrorsBeforeAnyAllocation) {
  Bytes huge = npy("{'descr': '|u1', 'fortran_order': False, 'shape': (4000000000000,), }", Bytes(1 << 20, std::byte{0}));
  testing::ZipFileSpec e{"a.npy", deflate(huge), 8};
  e.uncompressed_size = huge.size();
  e.crc = testing::crc32(huge);
  std::string m = error_of(testing::zip_bytes({e}), true);
  EXPECT_NE(m.find("[npz] t.npz: entry 'a.npy': its .npy header needs 128 + 4000000000000 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("the zip directory declares 1048704 bytes"), std::string::npos) << m;
  e.uncompressed_size = 128 + 4000000000000;
  m = error_of(testing::zip_bytes({e}), true);
  EXPECT_NE(m.find("[npz] t.npz: entry 'a.npy': declares 4000000000128 bytes inflated from"), std::string::npos) << m;
  EXPECT_NE(m.find("more than deflate can expand (1032:1)"), std::string::npos) << m;
}

// The declared size is the size: an entry that inflates to less, or whose stream goes on past
// it, is refused; inflation stops one byte past the declared size.
TEST(Npz, DeclaredSizesAreEnforced) {
  Bytes a = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", values<float>({1, 2}));
  Bytes longer = a;
  longer.resize(a.size() + 4096, std::byte{0});
  testing::ZipFileSpec e{"a.npy", deflate(longer), 8};
  e.uncompressed_size = a.size();
  e.crc = testing::crc32(a);
  std::string m = error_of(testing::zip_bytes({e}), true);
  EXPECT_NE(m.find("entry 'a.npy': inflates beyond its declared size of " + std::to_string(a.size()) + " bytes"),
            std::string::npos) << m;
  e = {"a.npy", deflate(a), 8};
  e.uncompressed_size = a.size() + 8;
  e.crc = testing::crc32(a);
  m = error_of(testing::zip_bytes({e}), true);
  EXPECT_NE(m.find("entry 'a.npy': inflates to " + std::to_string(a.size()) + " bytes, but the zip directory declares " +
                   std::to_string(a.size() + 8)), std::string::npos) << m;
  Bytes b = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", values<float>({1, 2}));  // 4 bytes short
  e = {"a.npy", deflate(b), 8};
  e.uncompressed_size = b.size();
  e.crc = testing::crc32(b);
  m = error_of(testing::zip_bytes({e}), true);
  EXPECT_NE(m.find("entry 'a.npy': its .npy header needs " + std::to_string(a.size() - 8) + " + 12 bytes"), std::string::npos) << m;
  e.uncompressed_size = 30;
  m = error_of(testing::zip_bytes({e}), true);
  EXPECT_NE(m.find("entry 'a.npy': header length " + std::to_string(a.size() - 8 - 10) + " passes the end of the 30-byte file"),
            std::string::npos) << m;
}

// The compressed entries' declared sizes add up to at most Limits::max_inflated_bytes, checked
// when the archive is opened; stored entries (read in place) do not count.
TEST(Npz, TheTotalInflatedSizeIsCapped) {
  Bytes a = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (256,), }", Bytes(1024, std::byte{0}));
  testing::ZipFileSpec d1{"a.npy", deflate(a), 8}, d2{"b.npy", deflate(a), 8}, stored{"c.npy", a};
  d1.uncompressed_size = d2.uncompressed_size = a.size();
  d1.crc = d2.crc = testing::crc32(a);
  Bytes zip = testing::zip_bytes({d1, stored, d2});
  npy::Limits limits;
  limits.max_inflated_bytes = 2 * a.size() - 1;
  try {
    npy::File::parse_npz(zip, "t.npz", limits);
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[npz] t.npz: its compressed arrays inflate to more than the limit of " +
                     std::to_string(2 * a.size() - 1) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("reached at entry 'b.npy'"), std::string::npos) << m;
    EXPECT_NE(m.find("--max-inflated"), std::string::npos) << m;
  }
  limits.max_inflated_bytes = 2 * a.size();
  EXPECT_EQ(npy::File::parse_npz(zip, "t.npz", limits).read_all().size(), 3u);
}

// Arrays are read one at a time, each owning what it inflated: names are known at once, a
// damaged entry fails only when read, and an array outlives the File it came from.
TEST(Npz, ArraysAreReadOneAtATime) {
  Bytes a = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", values<float>({1, 2}));
  testing::ZipFileSpec good{"a.npy", deflate(a), 8}, bad{"b.npy", a};
  good.uncompressed_size = a.size();
  good.crc = testing::crc32(a);
  bad.crc = testing::crc32(a) ^ 1;
  Bytes zip = testing::zip_bytes({good, bad});
  npy::Array first;
  {
    npy::File f = npy::File::parse_npz(zip, "t.npz");
    EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b"}));
    first = f.read(0);
    EXPECT_THROW(f.read(1), FormatError);
  }
  ASSERT_NE(first.owner, nullptr);
  float v[2];
  std::memcpy(v, first.data.data(), sizeof v);
  EXPECT_EQ(v[1], 2.0f);
}

// ---- writing (tensoracle run --save-inputs / --save-outputs) ----------------------------------

TEST(NpyWrite, NpzRoundTripsThroughTheReader) {
  TempDir dir;
  const std::vector<float> f = {1.5f, -2.f, 3.25f, 0.f, 7.f, -1e-3f};
  const std::vector<std::int32_t> i = {4, -5};
  const std::uint8_t yes = 1;
  const std::vector<npy::NamedArray> arrays = {
      {"f", Dtype::F32, {2, 3}, std::as_bytes(std::span(f))},
      {"i", Dtype::I32, {2}, std::as_bytes(std::span(i))},
      {"scalar", Dtype::BOOL, {}, std::as_bytes(std::span(&yes, 1))},
      {"empty", Dtype::F32, {0, 4}, {}},
  };
  const auto path = dir.path / "out.npz";
  npy::write_npz(path, arrays, "test");
  npy::File file = npy::File::open(path);
  ASSERT_TRUE(file.is_npz());
  ASSERT_EQ(file.names(), (std::vector<std::string>{"f", "i", "scalar", "empty"}));
  for (std::size_t k = 0; k < arrays.size(); ++k) {
    npy::Array a = file.read(k);
    EXPECT_EQ(a.dtype, arrays[k].dtype) << arrays[k].name;
    EXPECT_EQ(a.shape, arrays[k].shape) << arrays[k].name;
    ASSERT_EQ(a.data.size(), arrays[k].data.size()) << arrays[k].name;
    if (!a.data.empty())  // an empty array's data may be null (memcmp must not see it)
      EXPECT_EQ(std::memcmp(a.data.data(), arrays[k].data.data(), a.data.size()), 0) << arrays[k].name;
  }
  // np.save's layout: the header padded to 64 bytes.
  const auto bytes = npy::npy_bytes(arrays[0], "");
  EXPECT_EQ((bytes.size() - f.size() * 4) % 64, 0u);
}

TEST(NpyWrite, RefusalsLeaveNothingBehind) {
  TempDir dir;
  const std::uint16_t h[2] = {0x3f80, 0x4000};
  const auto path = dir.path / "out.npz";
  try {
    npy::write_npz(path, {{"b", Dtype::BF16, {2}, std::as_bytes(std::span(h))}}, "run");
    FAIL() << "bfloat16 written to an .npz";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("array 'b' is BF16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(".safetensors"), std::string::npos) << e.what();
  }
  EXPECT_THROW(npy::write_npz(path, {{"a", Dtype::U16, {3}, std::as_bytes(std::span(h))}}, "run"), InvalidArgument);
  EXPECT_THROW(npy::write_npz(path, {{"a/b", Dtype::U16, {2}, std::as_bytes(std::span(h))}}, "run"), InvalidArgument);
  EXPECT_THROW(npy::write_npz(path, {{"a", Dtype::U16, {2}, std::as_bytes(std::span(h))},
                                     {"a", Dtype::U16, {2}, std::as_bytes(std::span(h))}}, "run"),
               InvalidArgument);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path));
}

}  // namespace
}  // namespace tensoracle
