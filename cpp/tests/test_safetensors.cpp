// safetensors reader and writer: round trips, layout, views, metadata, every dtype.
#include <gtest/gtest.h>

#include <numeric>

#include "st_helpers.h"
#include "tensoracle/safetensors.h"

namespace st = tensoracle::safetensors;
using tensoracle::testing::read_bytes;
using tensoracle::testing::st_bytes;
using tensoracle::testing::TempDir;

namespace {

std::string header_of(const std::vector<std::byte>& file) {
  std::uint64_t n;
  std::memcpy(&n, file.data(), 8);
  return std::string(reinterpret_cast<const char*>(file.data()) + 8, n);
}

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

}  // namespace

TEST(SafetensorsDtype, NamesBitsAndParsingAgree) {
  for (int i = 0; i < st::kDtypeCount; ++i) {
    auto d = static_cast<st::Dtype>(i);
    auto name = st::dtype_name(d);
    ASSERT_FALSE(name.empty());
    ASSERT_EQ(st::parse_dtype(name), d) << name;
  }
  EXPECT_EQ(st::dtype_bits(st::Dtype::F4), 4);
  EXPECT_EQ(st::dtype_bits(st::Dtype::F6_E3M2), 6);
  EXPECT_EQ(st::dtype_bits(st::Dtype::BF16), 16);
  EXPECT_EQ(st::dtype_bits(st::Dtype::C64), 64);
  EXPECT_EQ(st::parse_dtype("F8_E4M3FN"), std::nullopt);
  EXPECT_EQ(st::parse_dtype("f32"), std::nullopt);
}

// The exact bytes the official writer (safetensors 0.8.0, torch) produced for these tensors:
// sorted by dtype (I64 before F32 before F16), then by name; "__metadata__" first; spaces
// pad the header to a multiple of 8.
TEST(SafetensorsWriter, LayoutMatchesOfficialWriter) {
  std::vector<std::int64_t> a(2, 0);
  std::vector<float> b(2, 0.f), s(1, 1.5f), e;
  std::vector<std::uint16_t> c(1, 0);
  auto bytes = st::serialize({{"b", st::Dtype::F32, {2}, bytes_of(b)},
                              {"a", st::Dtype::I64, {2}, bytes_of(a)},
                              {"c", st::Dtype::F16, {1}, bytes_of(c)},
                              {"e", st::Dtype::F32, {0, 3}, bytes_of(e)},
                              {"s", st::Dtype::F32, {}, bytes_of(s)}},
                             st::Metadata{{"k", "v"}});
  EXPECT_EQ(header_of(bytes),
            R"({"__metadata__":{"k":"v"},"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]},)"
            R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[24,24]},)"
            R"("s":{"dtype":"F32","shape":[],"data_offsets":[24,28]},)"
            R"("c":{"dtype":"F16","shape":[1],"data_offsets":[28,30]}}   )");
  EXPECT_EQ(bytes.size(), 8 + 304 + 30u);
}

TEST(SafetensorsWriter, OrderFollowsOfficialDtypeRanking) {
  // Official order, widest first: U64 I64 F64 C64 F32 U32 I32 BF16 F16 U16 I16 F8_E5M2FNUZ
  // F8_E4M3FNUZ F8_E8M0 F8_E4M3 F8_E5M2 I8 U8 F6_E3M2 F6_E2M3 F4 BOOL (observed from
  // safetensors 0.8.0 with torch 2.13).
  std::vector<st::Dtype> expected = {
      st::Dtype::U64, st::Dtype::I64, st::Dtype::F64, st::Dtype::C64, st::Dtype::F32,
      st::Dtype::U32, st::Dtype::I32, st::Dtype::BF16, st::Dtype::F16, st::Dtype::U16,
      st::Dtype::I16, st::Dtype::F8_E5M2FNUZ, st::Dtype::F8_E4M3FNUZ, st::Dtype::F8_E8M0,
      st::Dtype::F8_E4M3, st::Dtype::F8_E5M2,
      st::Dtype::I8, st::Dtype::U8, st::Dtype::F6_E3M2, st::Dtype::F6_E2M3, st::Dtype::F4,
      st::Dtype::BOOL};
  std::vector<std::byte> zeros(64);
  std::vector<st::TensorData> in;
  for (int i = 0; i < st::kDtypeCount; ++i) {
    auto d = static_cast<st::Dtype>(i);
    std::int64_t n = 8;  // 8 elements fill whole bytes for every dtype (F6: 6 bytes)
    in.push_back({"t" + std::string(st::dtype_name(d)), d, {n},
                  std::span(zeros).first(static_cast<std::size_t>(n * st::dtype_bits(d) / 8))});
  }
  auto bytes = st::serialize(in);
  auto f = st::File::parse(bytes, "order");
  ASSERT_EQ(f.tensors().size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(f.tensors()[i].dtype, expected[i]) << i;
}

TEST(SafetensorsWriter, RoundTripsEveryDtypeThroughAFile) {
  TempDir dir;
  std::vector<std::vector<std::byte>> payloads;
  std::vector<st::TensorData> in;
  for (int i = 0; i < st::kDtypeCount; ++i) {
    auto d = static_cast<st::Dtype>(i);
    std::vector<std::int64_t> shape = {3, 4};  // 12 elements: whole bytes for F4 and F6 too
    std::size_t nbytes = 12 * st::dtype_bits(d) / 8;
    std::vector<std::byte> p(nbytes);
    for (std::size_t k = 0; k < nbytes; ++k) p[k] = std::byte((k * 31 + i * 7) & 0xFF);
    payloads.push_back(std::move(p));
    in.push_back({std::string(st::dtype_name(d)), d, shape, payloads.back()});
  }
  auto path = dir.path / "all.safetensors";
  st::save_file(path, in, st::Metadata{{"format", "pt"}, {"ünïcødé", "välue \"quoted\"\n"}});
  EXPECT_EQ(dir.names(), std::vector<std::string>{"all.safetensors"});  // no temporary left

  auto f = st::File::open(path);
  EXPECT_EQ(f.header_size() % 8, 0u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("ünïcødé"), "välue \"quoted\"\n");
  ASSERT_EQ(f.tensors().size(), in.size());
  for (const auto& t : in) {
    const st::TensorInfo* info = f.find(t.name);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(info->dtype, t.dtype);
    EXPECT_EQ(info->shape, t.shape);
    auto b = f.view(*info).bytes();
    ASSERT_EQ(b.size(), t.data.size());
    EXPECT_TRUE(std::equal(b.begin(), b.end(), t.data.begin())) << t.name;
    // Aligned for their element type, since the header is padded and widest types come first.
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % std::max(1, st::dtype_bits(t.dtype) / 8), 0u);
  }
  // serialize() and save_file() produce the same bytes.
  EXPECT_EQ(read_bytes(path), st::serialize(in, st::Metadata{{"format", "pt"}, {"ünïcødé", "välue \"quoted\"\n"}}));
}

TEST(SafetensorsReader, TypedViewsAreZeroCopy) {
  std::vector<float> w(6);
  std::iota(w.begin(), w.end(), 1.f);
  std::vector<std::int64_t> ids = {-1, 5};
  auto bytes = st::serialize({{"w", st::Dtype::F32, {2, 3}, bytes_of(w)},
                              {"ids", st::Dtype::I64, {2}, bytes_of(ids)}});
  auto f = st::File::parse(bytes, "mem");
  auto wv = f.view("w").as<float>();
  ASSERT_EQ(wv.size(), 6u);
  EXPECT_EQ(wv[5], 6.f);
  EXPECT_GE(reinterpret_cast<const std::byte*>(wv.data()), bytes.data());
  EXPECT_LT(reinterpret_cast<const std::byte*>(wv.data()), bytes.data() + bytes.size());
  EXPECT_EQ(f.view("ids").as<std::int64_t>()[0], -1);
  EXPECT_EQ(f.view("w").as_bits<std::uint32_t>()[0], 0x3F800000u);
  EXPECT_THROW(f.view("w").as<std::int32_t>(), tensoracle::InvalidArgument);
  EXPECT_THROW(f.view("w").as_bits<std::uint16_t>(), tensoracle::InvalidArgument);
  try {
    f.view("missing");
    FAIL();
  } catch (const tensoracle::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "[safetensors] mem: no tensor named 'missing'");
  }
}

TEST(SafetensorsReader, MisalignedDataIsReportedNotReadUnaligned) {
  // A header of 55 bytes puts the data section at offset 63: legal, but not aligned for F32.
  auto bytes = st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  auto f = st::File::parse(bytes, "odd");
  ASSERT_NE(f.data_offset() % 4, 0u);
  try {
    f.view("a").as<float>();
    FAIL();
  } catch (const tensoracle::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("not aligned"), std::string::npos);
  }
  EXPECT_EQ(f.view("a").bytes().size(), 4u);  // bytes are always available
}

TEST(SafetensorsReader, EmptyScalarAndEmptyFiles) {
  // No tensors at all, with and without metadata.
  auto f0 = st::File::parse(st_bytes("{}"), "empty");
  EXPECT_TRUE(f0.tensors().empty());
  EXPECT_FALSE(f0.has_metadata());
  auto f1 = st::File::parse(st_bytes(R"({"__metadata__":{}})"), "meta");
  EXPECT_TRUE(f1.has_metadata());
  EXPECT_TRUE(f1.metadata().empty());
  // Several empty tensors may share an offset, including the end of the data section.
  auto f2 = st::File::parse(
      st_bytes(R"({"z1":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
               R"("s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
               R"("z2":{"dtype":"BF16","shape":[4,0,2],"data_offsets":[8,8]}})",
               8),
      "shapes");
  ASSERT_EQ(f2.tensors().size(), 3u);
  EXPECT_EQ(f2.at("s").numel(), 1u);
  EXPECT_TRUE(f2.at("s").shape.empty());
  EXPECT_EQ(f2.at("z2").numel(), 0u);
  EXPECT_EQ(f2.tensors()[0].name, "z1");  // offset order, then name
}

TEST(SafetensorsReader, ToleratesWhitespaceAndAnyKeyOrder) {
  auto bytes = st_bytes(
      "{ \"b\" : { \"data_offsets\" : [ 4 , 8 ] , \"shape\" : [ 1 ] , \"dtype\" : \"I32\" } ,\n"
      "  \"a\" : {\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}\t\r\n   ",
      8);
  auto f = st::File::parse(bytes, "ws");
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "a");
  EXPECT_EQ(f.tensors()[1].name, "b");
}

TEST(SafetensorsWriter, RejectsBadTensorsWithoutWriting) {
  TempDir dir;
  auto path = dir.path / "bad.safetensors";
  std::vector<float> four(4);
  auto expect_invalid = [&](std::vector<st::TensorData> in, const char* needle) {
    try {
      st::save_file(path, in);
      FAIL() << needle;
    } catch (const tensoracle::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_TRUE(dir.names().empty());
  };
  expect_invalid({{"x", st::Dtype::F32, {3}, bytes_of(four)}}, "needs 12 bytes, got 16");
  expect_invalid({{"x", st::Dtype::F32, {4}, bytes_of(four)}, {"x", st::Dtype::F32, {4}, bytes_of(four)}},
                 "duplicate name");
  expect_invalid({{"__metadata__", st::Dtype::F32, {4}, bytes_of(four)}}, "reserved");
  expect_invalid({{"x", st::Dtype::F32, {-4}, bytes_of(four)}}, "negative dimension");
  expect_invalid({{"x", st::Dtype::F4, {3}, {}}}, "does not fill whole bytes");
  expect_invalid({{std::string("bad\xff"), st::Dtype::F32, {4}, bytes_of(four)}}, "not valid UTF-8");
  std::vector<std::byte> none;
  expect_invalid({{"x", st::Dtype::F32, {INT64_MAX, INT64_MAX}, none}}, "overflows");
}

TEST(SafetensorsWriter, ReplacesAnExistingFileAtomically) {
  TempDir dir;
  auto path = dir.path / "w.safetensors";
  std::vector<float> v1(2, 1.f), v2(3, 2.f);
  st::save_file(path, {{"v", st::Dtype::F32, {2}, bytes_of(v1)}});
  auto before = st::File::open(path);  // a reader holding the old mapping
  st::save_file(path, {{"v", st::Dtype::F32, {3}, bytes_of(v2)}});
  EXPECT_EQ(before.view("v").as<float>().size(), 2u);  // old mapping intact
  EXPECT_EQ(before.view("v").as<float>()[1], 1.f);
  EXPECT_EQ(st::File::open(path).view("v").as<float>()[2], 2.f);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"w.safetensors"});
}

TEST(SafetensorsReader, CopyOnWriteMappingNeverChangesTheFile) {
  TempDir dir;
  auto path = dir.path / "cow.safetensors";
  std::vector<float> v(4, 1.f);
  st::save_file(path, {{"v", st::Dtype::F32, {4}, bytes_of(v)}});
  auto original = read_bytes(path);
  {
    auto f = st::File::open(path, st::MapMode::kCopyOnWrite);
    auto span = f.view("v").as<float>();
    const_cast<float&>(span[0]) = 42.f;  // allowed by the private writable mapping
    EXPECT_EQ(f.view("v").as<float>()[0], 42.f);
  }
  EXPECT_EQ(read_bytes(path), original);
}
