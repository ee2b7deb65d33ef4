// convert_pth / inspect_pth on checkpoints built by hand (pth_helpers.h): layout, flattening,
// values, sharing, views, byte order, dtypes, refusals, atomic output. Real torch.save files
// are checked against torch and the official safetensors package in python/tests.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <bit>
#include <cmath>
#include <numeric>

#include "convert/checkpoint.h"
#include "convert/writer.h"
#include "core/numeric.h"
#include "pth_helpers.h"
#include "st_helpers.h"
#include "tensoracle/convert.h"
#include "tensoracle/safetensors.h"

namespace st = tensoracle::safetensors;
using namespace tensoracle;
using namespace tensoracle::testing;

namespace {

std::vector<float> iota_f32(std::size_t n, float start = 0) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Writes `bytes` as in.pth, converts to out.safetensors and opens it.
class ConvertTest : public ::testing::Test {
 protected:
  std::filesystem::path in() const { return dir.path / "in.pth"; }
  std::filesystem::path out() const { return dir.path / "out.safetensors"; }
  st::File convert(const Bytes& bytes, const ConvertOptions& o = {}) {
    write_bytes(in(), bytes);
    std::filesystem::remove(out());
    convert_pth(in(), out(), o);
    return st::File::open(out());
  }
  template <typename E>
  std::string error(const Bytes& bytes, const ConvertOptions& o = {}) {
    write_bytes(in(), bytes);
    std::filesystem::remove(out());
    try {
      convert_pth(in(), out(), o);
    } catch (const E& e) {
      EXPECT_FALSE(std::filesystem::exists(out()));
      EXPECT_EQ(dir.names(), std::vector<std::string>{"in.pth"}) << "a temporary file was left behind";
      return e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong exception: " << e.what();
      return "";
    }
    ADD_FAILURE() << "no exception";
    return "";
  }
  template <typename T>
  static std::vector<T> values(const st::File& f, std::string_view name) {
    auto b = f.view(name).bytes();
    std::vector<T> v(b.size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), b.data(), b.size());
    return v;
  }
  TempDir dir;
};

Bytes f32_storage(std::size_t n, float start = 0) { return bytes_of_values(iota_f32(n, start)); }

}  // namespace

TEST(ConvertOptions, DtypeNames) {
  EXPECT_EQ(parse_convert_dtype("keep"), ConvertDtype::kKeep);
  EXPECT_EQ(parse_convert_dtype("bfloat16"), ConvertDtype::kBFloat16);
  EXPECT_EQ(parse_convert_dtype("fp16"), ConvertDtype::kFloat16);
  EXPECT_EQ(parse_convert_dtype("float64"), std::nullopt);
  EXPECT_EQ(convert_dtype_name(ConvertDtype::kFloat32), "float32");
}

TEST_F(ConvertTest, StateDictWithNestedKeysAndValues) {
  Pickle p;
  p.proto(2).op('}').mark();
  p.str("model").op('}').mark();
  p.str("enc").empty_ordered_dict().mark().str("w").f32("0", {2, 3}).str("b").f32("1", {3}).op('u');
  p.op('u');
  p.str("epoch").integer(7);
  p.str("cfg").op('}').mark().str("lr").real(0.001).str("betas").real(0.9).real(0.999).op(0x86);
  p.str("name").str("r\xc3\xa9sum\xc3\xa9 \"q\"").str("nan").real(NAN).str("big").real(1e16).str("none").none().op('u');
  p.str("layers").op(']').mark().f32("2", {1}).integer(5).op('e');  // a list holding a tensor
  p.op('u').stop();
  CheckpointSpec s;
  s.storages = {{"0", f32_storage(6)}, {"1", f32_storage(3, 10)}, {"2", f32_storage(1, 42)}};
  st::File f = convert(checkpoint_bytes(p, s));
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.at("model.enc.w").shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(values<float>(f, "model.enc.w"), iota_f32(6));
  EXPECT_EQ(values<float>(f, "model.enc.b"), iota_f32(3, 10));
  EXPECT_EQ(values<float>(f, "layers.0"), std::vector<float>{42});
  const auto& m = f.metadata();
  EXPECT_EQ(m.at("format"), "pt");
  EXPECT_EQ(m.at("epoch"), "7");
  EXPECT_EQ(m.at("cfg"),
            "{\"lr\":0.001,\"betas\":[0.9,0.999],\"name\":\"r\xc3\xa9sum\xc3\xa9 \\\"q\\\"\",\"nan\":NaN,"
            "\"big\":1e+16,\"none\":null}");
  EXPECT_EQ(m.at("layers.1"), "5");
  EXPECT_EQ(m.size(), 4u);
}

TEST_F(ConvertTest, KeySelectionAndPrefixes) {
  Pickle p;
  p.proto(2).op('}').mark();
  p.str("state_dict").op('}').mark().str("module.a").f32("0", {2}).str("module.b.c").f32("1", {2}).str("step").integer(3).op('u');
  p.str("optimizer").op('}').op('u').stop();
  CheckpointSpec s;
  s.storages = {{"0", f32_storage(2)}, {"1", f32_storage(2)}};
  Bytes ck = checkpoint_bytes(p, s);
  ConvertOptions o;
  o.key = "state_dict";
  o.strip_prefix = "module.";
  st::File f = convert(ck, o);
  EXPECT_NE(f.find("a"), nullptr);
  EXPECT_NE(f.find("b.c"), nullptr);
  EXPECT_EQ(f.metadata().at("step"), "3");
  EXPECT_EQ(f.metadata().count("optimizer"), 0u);  // outside the selection

  o.key = "state_dict.module.b.c";  // a key with dots in it is matched whole
  EXPECT_NE(error<InvalidArgument>(ck, o).find("is a single tensor"), std::string::npos);
  o.key = "model";
  std::string m = error<InvalidArgument>(ck, o);
  EXPECT_NE(m.find("no key 'model' in the checkpoint (its keys: 'state_dict', 'optimizer')"), std::string::npos) << m;
  o.key = "state_dict.step";
  EXPECT_NE(error<InvalidArgument>(ck, o).find("is a int, not a dict of tensors"), std::string::npos);

  Pickle reserved;  // safetensors keeps this name for its metadata (found by fuzz_pth)
  reserved.proto(2).op('}').str("__metadata__").f32("0", {2}).op('s').stop();
  EXPECT_NE(error<UnsupportedError>(checkpoint_bytes(reserved, s)).find("reserves the name '__metadata__'"), std::string::npos);
  ConvertOptions strip_to_reserved;
  strip_to_reserved.strip_prefix = "x.";
  Pickle reserved2;
  reserved2.proto(2).op('}').str("x.__metadata__").f32("0", {2}).op('s').stop();
  EXPECT_NE(error<UnsupportedError>(checkpoint_bytes(reserved2, s), strip_to_reserved).find("'x.__metadata__'"), std::string::npos);

  Pickle q;  // prefix stripping that makes two names equal
  q.proto(2).op('}').mark().str("module.a").f32("0", {2}).str("a").f32("1", {2}).op('u').stop();
  ConvertOptions strip;
  strip.strip_prefix = "module.";
  m = error<InvalidArgument>(checkpoint_bytes(q, s), strip);
  EXPECT_NE(m.find("would both be named 'a'"), std::string::npos) << m;

  // A prefix no tensor name starts with (a typo) is an error naming it, not a silent no-op.
  ConvertOptions typo;
  typo.key = "state_dict";
  typo.strip_prefix = "modle.";
  m = error<InvalidArgument>(ck, typo);
  EXPECT_NE(m.find("no tensor name starts with the prefix 'modle.' (names such as 'module.a', 'module.b.c')"),
            std::string::npos)
      << m;
}

TEST_F(ConvertTest, ViewsAreWrittenContiguousAndSharingIsRecorded) {
  // x = arange(12).reshape(3, 4); view = x[:, 1:3]; t = x.t(); e = x[1].expand(2, 4); d = x
  Pickle p;
  p.proto(2).op('}').mark();
  p.str("x").tensor("FloatStorage", "0", 12, 0, {3, 4}, {4, 1});
  p.str("view").tensor("FloatStorage", "0", 12, 1, {3, 2}, {4, 1});
  p.str("t").tensor("FloatStorage", "0", 12, 0, {4, 3}, {1, 4});
  p.str("e").tensor("FloatStorage", "0", 12, 4, {2, 4}, {0, 1});
  p.str("alone").f32("1", {2});
  p.op('u').stop();
  CheckpointSpec s;
  s.storages = {{"0", f32_storage(12)}, {"1", f32_storage(2)}};
  st::File f = convert(checkpoint_bytes(p, s));
  EXPECT_EQ(values<float>(f, "x"), iota_f32(12));
  EXPECT_EQ(values<float>(f, "view"), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(values<float>(f, "t"), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(values<float>(f, "e"), (std::vector<float>{4, 5, 6, 7, 4, 5, 6, 7}));
  EXPECT_EQ(f.metadata().at("tensoracle.shared_storage"), R"({"archive/data/0":["x","view","t","e"]})");

  CheckpointInfo info = inspect_pth(in());
  ASSERT_EQ(info.tensors.size(), 5u);
  EXPECT_TRUE(info.tensors[0].contiguous);
  EXPECT_FALSE(info.tensors[1].contiguous);
  EXPECT_EQ(info.tensors[1].storage_offset, 1);
  EXPECT_EQ(info.tensors[1].shares_storage_with, (std::vector<std::string>{"x", "t", "e"}));
  EXPECT_TRUE(info.tensors[4].shares_storage_with.empty());
  EXPECT_EQ(info.archive, "archive");
  EXPECT_EQ(info.format_version, 3);
  EXPECT_EQ(info.storages, 2u);
  EXPECT_EQ(info.storage_bytes, 56u);
}

TEST_F(ConvertTest, TensorsOutsideTheirStorageAreRefused) {
  CheckpointSpec s;
  s.storages = {{"0", f32_storage(12)}};
  struct Case {
    std::int64_t offset;
    std::vector<std::int64_t> size, stride;
    const char* message;
  } cases[] = {
      {9, {4}, {1}, "reads up to element 12 (float32) of storage 'archive/data/0', which holds 48 bytes"},
      {0, {3, 5}, {4, 1}, "reads up to element 12"},
      {0, {2, 2}, {1, 1ll << 62}, "reads up to element"},
      {0, {5, 5}, {1, INT64_MAX}, "overflows 64 bits"},
      {-1, {1}, {1}, "negative storage offset -1"},
      {0, {-2}, {1}, "negative size -2 in dimension 0"},
      {0, {2}, {-1}, "negative stride -1 in dimension 0"},
      {0, {2, 2}, {1}, "size has 2 dimensions but stride has 1"},
      {0, {1ll << 32, 1ll << 32}, {0, 0}, "overflows"},
  };
  for (const auto& c : cases) {
    Pickle p;
    p.proto(2).op('}').str("w").tensor("FloatStorage", "0", 12, c.offset, c.size, c.stride).op('s').stop();
    std::string m = error<FormatError>(checkpoint_bytes(p, s));
    EXPECT_NE(m.find("[pth] "), std::string::npos) << m;
    EXPECT_NE(m.find("tensor 'w': "), std::string::npos) << m;
    EXPECT_NE(m.find(c.message), std::string::npos) << m;
  }
  // Tensors outside the selected key are checked too.
  Pickle p;
  p.proto(2).op('}').mark().str("a").op('}').str("w").f32("0", {12}).op('s');
  p.str("b").tensor("FloatStorage", "0", 12, 11, {2}, {1}).op('u').stop();
  ConvertOptions o;
  o.key = "a";
  EXPECT_NE(error<FormatError>(checkpoint_bytes(p, s), o).find("the tensor built at byte"), std::string::npos);
  // An empty tensor reads nothing, whatever its offset (as in torch).
  Pickle empty;
  empty.proto(2).op('}').str("e").tensor("FloatStorage", "0", 12, 50, {0, 3}, {3, 1}).op('s').stop();
  st::File f = convert(checkpoint_bytes(empty, s));
  EXPECT_EQ(f.at("e").shape, (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(f.at("e").nbytes(), 0u);
}

TEST_F(ConvertTest, BigEndianStoragesAreSwapped) {
  auto swapped = [](Bytes b, int unit) {
    for (std::size_t i = 0; i + unit <= b.size(); i += unit) std::reverse(b.begin() + i, b.begin() + i + unit);
    return b;
  };
  std::vector<std::int64_t> longs{1, -2, 1ll << 40};
  std::vector<std::uint16_t> halves{0x3C00, 0xC000};
  std::vector<float> complex{1.5f, -2.5f, 3.0f, 4.0f};  // two complex64
  Pickle p;
  p.proto(2).op('}').mark();
  p.str("f").tensor("FloatStorage", "0", 4, 0, {4}, {1});
  p.str("l").tensor("LongStorage", "1", 3, 0, {3}, {1});
  p.str("h").tensor("HalfStorage", "2", 2, 0, {2}, {1});
  p.str("c").tensor("ComplexFloatStorage", "3", 2, 0, {2}, {1});
  p.str("t").tensor("FloatStorage", "0", 4, 0, {2, 2}, {1, 2});  // a view of a swapped storage
  p.str("u").tensor("ByteStorage", "4", 3, 0, {3}, {1});
  p.op('u').stop();
  CheckpointSpec s;
  s.byteorder = "big";
  s.storages = {{"0", swapped(f32_storage(4, 1), 4)}, {"1", swapped(bytes_of_values(longs), 8)},
                {"2", swapped(bytes_of_values(halves), 2)}, {"3", swapped(bytes_of_values(complex), 4)},
                {"4", to_bytes("abc")}};
  st::File f = convert(checkpoint_bytes(p, s));
  EXPECT_EQ(values<float>(f, "f"), iota_f32(4, 1));
  EXPECT_EQ(values<std::int64_t>(f, "l"), longs);
  EXPECT_EQ(values<std::uint16_t>(f, "h"), halves);
  EXPECT_EQ(values<float>(f, "c"), complex);
  EXPECT_EQ(values<float>(f, "t"), (std::vector<float>{1, 3, 2, 4}));
  EXPECT_EQ(values<std::uint8_t>(f, "u"), (std::vector<std::uint8_t>{'a', 'b', 'c'}));
  EXPECT_EQ(inspect_pth(in()).byteorder, "big");
}

TEST_F(ConvertTest, ConjugateAndNegativeBits) {
  std::vector<float> c{1, 2, 3, -4};
  Pickle p;
  p.proto(2).op('}').mark();
  p.str("conj").global("torch._utils", "_rebuild_tensor_v2").mark().storage("ComplexFloatStorage", "0", 2).integer(0);
  p.tuple_of({2}).tuple_of({1}).boolean(false).empty_ordered_dict().op('}').str("conj").boolean(true).op('s').op('t').op('R');
  p.str("neg").global("torch._utils", "_rebuild_tensor_v2").mark().storage("FloatStorage", "1", 3).integer(0);
  p.tuple_of({3}).tuple_of({1}).boolean(false).empty_ordered_dict().op('}').str("neg").boolean(true).op('s').op('t').op('R');
  p.op('u').stop();
  CheckpointSpec s;
  s.storages = {{"0", bytes_of_values(c)}, {"1", f32_storage(3, 1)}};
  st::File f = convert(checkpoint_bytes(p, s));
  EXPECT_EQ(values<float>(f, "conj"), (std::vector<float>{1, -2, 3, 4}));
  EXPECT_EQ(values<float>(f, "neg"), (std::vector<float>{-1, -2, -3}));
}

TEST_F(ConvertTest, DtypeOption) {
  std::vector<double> d{0.1, -2.5, 1e10};
  std::vector<float> x{0.1f, -65504.f, 3.14159f, 1e-8f};
  std::vector<std::uint16_t> bf{0x3F80, 0xC040};  // 1.0, -3.0
  std::vector<std::int32_t> ints{1, 2};
  Pickle p;
  p.proto(2).op('}').mark();
  p.str("d").tensor("DoubleStorage", "0", 3, 0, {3}, {1});
  p.str("x").tensor("FloatStorage", "1", 4, 0, {4}, {1});
  p.str("xt").tensor("FloatStorage", "1", 4, 0, {2, 2}, {1, 2});
  p.str("bf").tensor("BFloat16Storage", "2", 2, 0, {2}, {1});
  p.str("i").tensor("IntStorage", "3", 2, 0, {2}, {1});
  p.op('u').stop();
  CheckpointSpec s;
  s.storages = {{"0", bytes_of_values(d)}, {"1", bytes_of_values(x)}, {"2", bytes_of_values(bf)}, {"3", bytes_of_values(ints)}};
  Bytes ck = checkpoint_bytes(p, s);

  ConvertOptions o;
  o.dtype = ConvertDtype::kFloat16;
  st::File f = convert(ck, o);
  EXPECT_EQ(f.at("d").dtype, st::Dtype::F16);
  EXPECT_EQ(f.at("i").dtype, st::Dtype::I32);  // integers are kept
  EXPECT_EQ(values<std::int32_t>(f, "i"), ints);
  auto h = values<std::uint16_t>(f, "x");
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(h[i], core::float_to_half(x[i])) << i;
  auto hd = values<std::uint16_t>(f, "d");
  for (std::size_t i = 0; i < d.size(); ++i) EXPECT_EQ(hd[i], core::float_to_half(static_cast<float>(d[i]))) << i;
  auto ht = values<std::uint16_t>(f, "xt");
  EXPECT_EQ(ht[1], core::float_to_half(x[2]));
  EXPECT_EQ(values<std::uint16_t>(f, "bf"), (std::vector<std::uint16_t>{0x3C00, 0xC200}));

  o.dtype = ConvertDtype::kBFloat16;
  f = convert(ck, o);
  auto b = values<std::uint16_t>(f, "x");
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(b[i], core::float_to_bf16(x[i])) << i;
  EXPECT_EQ(values<std::uint16_t>(f, "bf"), bf);

  o.dtype = ConvertDtype::kFloat32;
  f = convert(ck, o);
  EXPECT_EQ(values<float>(f, "d"), (std::vector<float>{0.1f, -2.5f, 1e10f}));
  EXPECT_EQ(values<float>(f, "bf"), (std::vector<float>{1.0f, -3.0f}));
  EXPECT_EQ(values<float>(f, "x"), x);
}

TEST_F(ConvertTest, NarrowAndUnsupportedDtypes) {
  Pickle p;
  p.proto(4).op('}').mark();
  p.str("f4").tensor_v3("float4_e2m1fn_x2", "0", 6, 0, {2, 3}, {3, 1});
  p.str("e8").tensor_v3("float8_e8m0fnu", "1", 2, 0, {2}, {1});
  p.str("u16").tensor_v3("uint16", "2", 4, 0, {2}, {1});
  p.str("scalar").tensor("LongStorage", "3", 1, 0, {}, {});
  p.op('u').stop();
  CheckpointSpec s;
  s.storages = {{"0", to_bytes("abcdef")}, {"1", to_bytes("xy")}, {"2", to_bytes("pqrs")}, {"3", Bytes(8, std::byte{9})}};
  st::File f = convert(checkpoint_bytes(p, s));
  EXPECT_EQ(f.at("f4").dtype, st::Dtype::F4);
  EXPECT_EQ(f.at("f4").shape, (std::vector<std::int64_t>{2, 6}));  // two values per byte
  EXPECT_EQ(f.at("e8").dtype, st::Dtype::F8_E8M0);
  EXPECT_EQ(f.at("u16").dtype, st::Dtype::U16);
  EXPECT_EQ(f.at("scalar").shape, std::vector<std::int64_t>{});
  EXPECT_EQ(f.at("scalar").nbytes(), 8u);

  Pickle c;
  c.proto(2).op('}').str("c128").tensor("ComplexDoubleStorage", "0", 1, 0, {1}, {1}).op('s').stop();
  CheckpointSpec s2;
  s2.storages = {{"0", Bytes(16)}};
  std::string m = error<UnsupportedError>(checkpoint_bytes(c, s2));
  EXPECT_NE(m.find("tensor 'c128': dtype complex128 has no safetensors equivalent"), std::string::npos) << m;
  CheckpointInfo info = inspect_pth(in());  // inspect lists it without refusing
  ASSERT_EQ(info.tensors.size(), 1u);
  EXPECT_EQ(info.tensors[0].torch_dtype, "complex128");
  EXPECT_EQ(info.tensors[0].dtype, std::nullopt);

  Pickle q;
  q.proto(2).op('}').str("q").global("torch._utils", "_rebuild_qtensor").op('s').stop();
  EXPECT_NE(error<UnsafeCheckpointError>(checkpoint_bytes(q, s2)).find("'torch._utils._rebuild_qtensor'"), std::string::npos);
}

TEST_F(ConvertTest, FilesThatAreNotZipCheckpoints) {
  Bytes legacy = to_bytes("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.\x80\x02M\xe9\x03.");
  EXPECT_NE(error<UnsupportedError>(legacy).find("legacy checkpoint format"), std::string::npos);
  EXPECT_NE(error<UnsupportedError>(to_bytes("\x80\x04N.")).find("bare pickle stream"), std::string::npos);
  Bytes tar(1024, std::byte{0});
  std::memcpy(tar.data() + 257, "ustar", 5);
  EXPECT_NE(error<UnsupportedError>(tar).find("tar archive"), std::string::npos);
  EXPECT_NE(error<FormatError>(Bytes{}).find("the file is empty"), std::string::npos);
  EXPECT_NE(error<FormatError>(to_bytes("{\"hello\": 1}")).find("not a torch checkpoint"), std::string::npos);

  Pickle p;
  p.proto(2).op('}').stop();
  CheckpointSpec ts;
  ts.extra = {{"archive/constants.pkl", to_bytes("x")}};
  EXPECT_NE(error<UnsupportedError>(checkpoint_bytes(p, ts)).find("TorchScript archive (torch.jit.save)"), std::string::npos);
  CheckpointSpec code;
  code.extra = {{"archive/code/__torch__/m.py", to_bytes("x"), 8}};
  EXPECT_NE(error<UnsupportedError>(checkpoint_bytes(p, code)).find("TorchScript code"), std::string::npos);
}

TEST_F(ConvertTest, ArchiveLayoutIsChecked) {
  Pickle p;
  p.proto(2).op('}').stop();
  EXPECT_NO_THROW(convert(checkpoint_bytes(p)));  // an empty dict: no tensors, metadata only
  CheckpointSpec v4;
  v4.version = "4\n";
  EXPECT_NE(error<UnsupportedError>(checkpoint_bytes(p, v4)).find("format version 4"), std::string::npos);
  CheckpointSpec bo;
  bo.byteorder = "middle";
  EXPECT_NE(error<FormatError>(checkpoint_bytes(p, bo)).find("not 'little' or 'big'"), std::string::npos);
  CheckpointSpec two;
  two.extra = {{"other/file", to_bytes("x")}};
  EXPECT_NE(error<FormatError>(checkpoint_bytes(p, two)).find("outside the archive's folder 'archive/'"), std::string::npos);
  std::vector<ZipFileSpec> no_pickle{{"archive/version", to_bytes("3\n")}};
  EXPECT_NE(error<FormatError>(zip_bytes(no_pickle)).find("has no 'archive/data.pkl'"), std::string::npos);
  CheckpointSpec deflated;  // a storage record someone re-zipped with compression
  Pickle w;
  w.proto(2).op('}').str("w").f32("0", {1}).op('s').stop();
  CheckpointSpec one;
  one.storages = {{"0", f32_storage(1)}};
  auto files = checkpoint_files(w, one);
  for (auto& f : files)
    if (f.name == "archive/data/0") f.method = 8;
  EXPECT_NE(error<UnsupportedError>(zip_bytes(files)).find("record 'archive/data/0' is compressed"), std::string::npos);
  // Any folder name (torch uses the file's stem).
  CheckpointSpec named;
  named.archive = "my model.v2";
  named.storages = {{"0", f32_storage(1)}};
  EXPECT_EQ(convert(checkpoint_bytes(w, named)).tensors().size(), 1u);
  // Storage records absent or of the wrong size.
  EXPECT_NE(error<FormatError>(checkpoint_bytes(w)).find("has no record 'data/0'"), std::string::npos);
  CheckpointSpec shortrec;
  shortrec.storages = {{"0", Bytes(3)}};
  EXPECT_NE(error<FormatError>(checkpoint_bytes(w, shortrec)).find("holds 3 bytes"), std::string::npos);
}

TEST_F(ConvertTest, TruncatedAndDamagedArchivesAreFormatErrors) {
  Pickle p;
  p.proto(2).op('}').mark().str("w").f32("0", {4}).str("epoch").integer(1).op('u').stop();
  CheckpointSpec s;
  s.storages = {{"0", f32_storage(4)}};
  Bytes ck = checkpoint_bytes(p, s);
  for (std::size_t n = 0; n < ck.size(); n += 7)
    error<FormatError>(Bytes(ck.begin(), ck.begin() + static_cast<std::ptrdiff_t>(n)));
  for (std::size_t i = 0; i < ck.size(); i += 3) {  // flipped bytes: converted or refused, never a crash
    Bytes c = ck;
    c[i] ^= std::byte{0x5a};
    write_bytes(in(), c);
    std::filesystem::remove(out());
    try {
      convert_pth(in(), out());
    } catch (const FormatError&) {
    } catch (const UnsupportedError&) {
    }
  }
}

TEST_F(ConvertTest, OutputIsAtomicAndNotOverwrittenByDefault) {
  Pickle p;
  p.proto(2).op('}').str("w").f32("0", {2}).op('s').stop();
  CheckpointSpec s;
  s.storages = {{"0", f32_storage(2)}};
  write_bytes(in(), checkpoint_bytes(p, s));
  write_bytes(out(), to_bytes("precious"));
  try {
    convert_pth(in(), out());
    ADD_FAILURE() << "overwrote";
  } catch (const IoError& e) {
    EXPECT_EQ(e.errno_value(), EEXIST);
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos);
  }
  EXPECT_EQ(read_bytes(out()), to_bytes("precious"));
  ConvertOptions o;
  o.overwrite = true;
  ConvertReport r = convert_pth(in(), out(), o);
  EXPECT_EQ(r.tensors, 1u);
  EXPECT_EQ(r.tensor_bytes, 8u);
  EXPECT_EQ(st::File::open(out()).tensors().size(), 1u);
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"in.pth", "out.safetensors"}));
}

// overwrite (--force) replaces only a regular file: a FIFO or a symbolic link to a device
// stays as it was, and the error names the path.
TEST_F(ConvertTest, OverwriteReplacesOnlyRegularFiles) {
  Pickle p;
  p.proto(2).op('}').str("w").f32("0", {2}).op('s').stop();
  CheckpointSpec s;
  s.storages = {{"0", f32_storage(2)}};
  write_bytes(in(), checkpoint_bytes(p, s));
  ConvertOptions o;
  o.overwrite = true;
  ASSERT_EQ(::mkfifo(out().c_str(), 0600), 0);
  try {
    convert_pth(in(), out(), o);
    ADD_FAILURE() << "replaced a FIFO";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(out().string() + ": exists and is a FIFO"), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::filesystem::symlink_status(out()).type(), std::filesystem::file_type::fifo);
  std::filesystem::remove(out());
  std::filesystem::create_symlink("/dev/null", out());
  EXPECT_THROW(convert_pth(in(), out(), o), IoError);
  EXPECT_TRUE(std::filesystem::is_symlink(out()));
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"in.pth", "out.safetensors"}));
}

TEST_F(ConvertTest, ProgressIsReported) {
  Pickle p;
  p.proto(2).op('}').mark().str("a").f32("0", {1000}).str("b").tensor("FloatStorage", "0", 1000, 0, {10, 100}, {1, 10}).op('u').stop();
  CheckpointSpec s;
  s.storages = {{"0", f32_storage(1000)}};
  write_bytes(in(), checkpoint_bytes(p, s));
  std::vector<ConvertProgress> seen;
  ConvertOptions o;
  o.progress = [&](const ConvertProgress& x) { seen.push_back(x); };
  convert_pth(in(), out(), o);
  ASSERT_FALSE(seen.empty());
  for (std::size_t i = 1; i < seen.size(); ++i) EXPECT_GE(seen[i].bytes_done, seen[i - 1].bytes_done);
  EXPECT_EQ(seen.back().bytes_done, 8000u);
  EXPECT_EQ(seen.back().bytes_total, 8000u);
  EXPECT_EQ(seen.back().tensors_done, 2u);
  EXPECT_EQ(seen.back().tensors_total, 2u);
}

TEST_F(ConvertTest, DeepAndSelfReferentialStructures) {
  Pickle deep;
  deep.proto(2).op('}').str("x").op(']');
  for (int i = 0; i < 300; ++i) deep.op(0x85);  // (((([],),),),) 300 deep: no hashing involved
  deep.op('s').stop();
  EXPECT_NE(error<FormatError>(checkpoint_bytes(deep)).find("nests deeper than 256 levels"), std::string::npos);
  Pickle cycle;  // l = []; l.append(l); {'l': l}
  cycle.proto(2).op('}').str("l").op(']').op('q').le(0, 1).op('h').le(0, 1).op('a').op('s').stop();
  EXPECT_NE(error<FormatError>(checkpoint_bytes(cycle)).find("or a container holds itself"), std::string::npos);
  Pickle bare;
  bare.proto(2).f32("0", {1}).stop();
  CheckpointSpec s;
  s.storages = {{"0", f32_storage(1)}};
  EXPECT_NE(error<UnsupportedError>(checkpoint_bytes(bare, s)).find("a single tensor, not a dict"), std::string::npos);
}

TEST_F(ConvertTest, Zip64PastFourGiB) {
  // An unreferenced 4.5 GiB record (a sparse hole) puts the real records past 4 GiB: their
  // offsets need zip64 extra fields. Only a few kilobytes are really written or read.
  Pickle p;
  p.proto(2).op('}').str("w").f32("0", {4}).op('s').stop();
  CheckpointSpec s;
  s.storages = {{"0", f32_storage(4, 5)}};
  auto files = checkpoint_files(p, s);
  ZipFileSpec big{"archive/data/99", {}};
  big.hole = 4608ull << 20;
  files.insert(files.begin(), big);
  write_zip_file(in(), files);
  struct stat sb {};
  ASSERT_EQ(::stat(in().c_str(), &sb), 0);
  ASSERT_GT(sb.st_size, 4ll << 30);
  convert_pth(in(), out());
  st::File f = st::File::open(out());
  EXPECT_EQ(values<float>(f, "w"), iota_f32(4, 5));
}
