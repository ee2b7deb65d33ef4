// The restricted pickle machine: opcodes of protocols 2-5, the allow list, limits.
#include <gtest/gtest.h>

#include <cmath>

#include "convert/pickle.h"
#include "pth_helpers.h"
#include "tensoracle/errors.h"

using namespace tensoracle::pth;
using namespace tensoracle::testing;
using tensoracle::FormatError;
using tensoracle::UnsafeCheckpointError;
using tensoracle::UnsupportedError;

namespace {

// Storage records "0".."9", 64 bytes each.
std::vector<std::byte> g_records(64, std::byte{1});
RecordLookup lookup = [](std::string_view key) -> std::optional<Record> {
  if (key.size() == 1 && key[0] >= '0' && key[0] <= '9') return Record{"archive/data/" + std::string(key), g_records};
  return std::nullopt;
};

Unpickled run(const Pickle& p, Limits limits = {}) { return unpickle(p.bytes(), "[pth] t.pth: archive/data.pkl", lookup, limits); }

template <typename E>
std::string error_of(const Pickle& p, Limits limits = {}) {
  try {
    run(p, limits);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception";
  return "";
}

const Value& item(const Value& dict, std::string_view key) {
  for (auto& [k, v] : dict.dict().items)
    if (k.kind == Kind::kStr && k.str().s == key) return v;
  throw std::runtime_error("no key " + std::string(key));
}

}  // namespace

TEST(Pickle, DtypeTableIsConsistent) {
  for (int i = 0; i < static_cast<int>(TorchDtype::kCount); ++i) {
    const auto& d = dtype_info(static_cast<TorchDtype>(i));
    EXPECT_EQ(static_cast<int>(d.dtype), i);
    EXPECT_GT(d.itemsize, 0) << d.name;
    if (d.st && tensoracle::safetensors::dtype_bits(*d.st) >= 8) {
      EXPECT_EQ(tensoracle::safetensors::dtype_bits(*d.st) / 8, d.itemsize) << d.name;
    }
  }
}

TEST(Pickle, ScalarsAndContainersProtocol2) {
  Pickle p;
  p.proto(2).op('}').mark();
  p.str("none").none();
  p.str("true").boolean(true);
  p.str("small").integer(7);
  p.str("medium").integer(1000);
  p.str("negative").integer(-5);
  p.str("long").integer(1ll << 40);
  p.str("float").real(0.1);
  p.str("list").op(']').mark().integer(1).integer(2).op('e');
  p.str("tuple").integer(1).integer(2).op(0x86);
  p.str("bytes").global("_codecs", "encode").str("ab\xc3\xbf").str("latin1").op(0x86).op('R');
  p.op('u').stop();
  Unpickled u = run(p);
  ASSERT_EQ(u.root.kind, Kind::kDict);
  EXPECT_EQ(u.protocol, 2);
  EXPECT_EQ(item(u.root, "none").kind, Kind::kNone);
  EXPECT_TRUE(item(u.root, "true").u.b);
  EXPECT_EQ(item(u.root, "small").u.i, 7);
  EXPECT_EQ(item(u.root, "medium").u.i, 1000);
  EXPECT_EQ(item(u.root, "negative").u.i, -5);
  EXPECT_EQ(item(u.root, "long").u.i, 1ll << 40);
  EXPECT_EQ(item(u.root, "float").u.f, 0.1);
  EXPECT_EQ(item(u.root, "list").seq().items.size(), 2u);
  EXPECT_EQ(item(u.root, "tuple").kind, Kind::kTuple);
  EXPECT_EQ(item(u.root, "bytes").kind, Kind::kBytes);
  EXPECT_EQ(item(u.root, "bytes").str().s, "ab\xff");
}

TEST(Pickle, Protocol4And5Opcodes) {
  Pickle p;
  p.proto(5).op(0x95).le(60, 8);  // FRAME
  p.op('}').op(0x94);             // EMPTY_DICT MEMOIZE (memo 0)
  p.mark();
  p.short_str("set").op(0x8f).mark().integer(1).integer(2).integer(1).op(0x90);  // EMPTY_SET ADDITEMS
  p.short_str("frozen").mark().integer(3).op(0x91);                              // FROZENSET
  p.short_str("u8").op(0x8d).le(2, 8).raw("hi");                                 // BINUNICODE8
  p.short_str("b8").op(0x96).le(1, 8).raw("z");                                  // BYTEARRAY8
  p.short_str("sb").op('C').le(1, 1).raw("y");                                   // SHORT_BINBYTES
  p.short_str("od").stack_global("collections", "OrderedDict").op(')').op('R');
  p.short_str("big").op(0x8a).le(9, 1).le(0, 8).le(1, 1);                        // 2^64 in LONG1
  p.short_str("neg").op(0x8a).le(1, 1).le(0xFF, 1);                              // -1
  p.short_str("l4").op(0x8b).le(2, 4).le(0x0100, 2);                             // 256 in LONG4
  p.short_str("again").op('h').le(0, 1);                                         // BINGET 0: the dict itself
  p.op('u').stop();
  Unpickled u = run(p);
  EXPECT_EQ(u.protocol, 5);
  EXPECT_EQ(item(u.root, "set").seq().items.size(), 2u);  // 1, 2 (the second 1 is a duplicate)
  EXPECT_EQ(item(u.root, "frozen").kind, Kind::kFrozenSet);
  EXPECT_EQ(item(u.root, "u8").str().s, "hi");
  EXPECT_EQ(item(u.root, "b8").kind, Kind::kBytes);
  EXPECT_TRUE(item(u.root, "od").dict().ordered);
  ASSERT_EQ(item(u.root, "big").kind, Kind::kBigInt);
  EXPECT_EQ(int128_text(item(u.root, "big").big().v), "18446744073709551616");
  EXPECT_EQ(item(u.root, "neg").u.i, -1);
  EXPECT_EQ(item(u.root, "l4").u.i, 256);
  EXPECT_EQ(item(u.root, "again").u.p, u.root.u.p);  // a cycle, owned by the arena: no leak
}

TEST(Pickle, StackOpcodes) {
  Pickle p;
  p.proto(2).mark().integer(1).integer(2).op('1');      // POP_MARK discards both
  p.integer(9).op('0');                                  // POP
  p.mark().integer(1).op('l');                           // LIST
  p.op('2').op(0x86);                                    // DUP, TUPLE2: ([1], [1])
  p.stop();
  Unpickled u = run(p);
  ASSERT_EQ(u.root.kind, Kind::kTuple);
  auto& t = u.root.seq().items;
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].u.p, t[1].u.p);  // the same list, as in Python
}

TEST(Pickle, DictKeysFollowPythonEquality) {
  Pickle p;
  p.proto(2).op('}').mark().integer(1).str("a").real(1.0).str("b").boolean(true).str("c").op('u').stop();
  Unpickled u = run(p);
  ASSERT_EQ(u.root.dict().items.size(), 1u);  // 1 == 1.0 == True
  EXPECT_EQ(u.root.dict().items[0].first.kind, Kind::kInt);  // the first key object stays
  EXPECT_EQ(u.root.dict().items[0].second.str().s, "c");      // the last value wins
}

TEST(Pickle, HostileGlobalsAreRefusedByName) {
  const std::pair<const char*, const char*> globals[] = {
      {"posix", "system"},        {"os", "system"},           {"builtins", "eval"},
      {"builtins", "exec"},       {"builtins", "getattr"},    {"__builtin__", "eval"},
      {"subprocess", "Popen"},    {"torch", "load"},          {"torch.nn.modules.linear", "Linear"},
      {"numpy.core.multiarray", "_reconstruct"},              {"collections", "OrderedDict.__class__"},
      {"torch._utils", "_rebuild_tensor_v2.__globals__"},     {"torch._utils", "_rebuild_qtensor"},
      {"evil.module", "FloatStorage"},                        {"copyreg", "_reconstructor"},
  };
  for (auto [module, name] : globals) {
    std::string full = std::string(module) + "." + name;
    Pickle a;
    a.proto(2).global(module, name).mark().str("touch /tmp/x").op('t').op('R').stop();
    std::string m = error_of<UnsafeCheckpointError>(a);
    EXPECT_NE(m.find("global '" + full + "' is not in the allow list"), std::string::npos) << m;
    EXPECT_NE(m.find("GLOBAL at byte 2"), std::string::npos) << m;
    Pickle b;  // the same through STACK_GLOBAL (protocol 4)
    b.proto(4).stack_global(module, name).stop();
    m = error_of<UnsafeCheckpointError>(b);
    EXPECT_NE(m.find("'" + full + "'"), std::string::npos) << m;
  }
}

TEST(Pickle, OpcodesThatCallCodeAreRefused) {
  const std::pair<int, const char*> ops[] = {
      {'i', "INST"},       {'o', "OBJ"},         {0x81, "NEWOBJ"},      {0x92, "NEWOBJ_EX"},
      {0x82, "EXT1"},      {0x83, "EXT2"},       {0x84, "EXT4"},        {'P', "PERSID"},
      {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"}, {'I', "INT"},   {'S', "STRING"},
      {'g', "GET"},        {'p', "PUT"},         {'V', "UNICODE"},      {'T', "BINSTRING"},
  };
  for (auto [code, name] : ops) {
    Pickle p;
    p.proto(2).integer(1).op(code).raw("0\n").stop();
    std::string m = error_of<UnsafeCheckpointError>(p);
    EXPECT_NE(m.find(std::string(name) + " at byte 4"), std::string::npos) << m;
  }
}

TEST(Pickle, OnlyAllowedFunctionsAreCalled) {
  Pickle a;  // a dtype is allowed as a value, not as a function
  a.proto(2).global("torch", "float32").op(')').op('R').stop();
  EXPECT_NE(error_of<UnsafeCheckpointError>(a).find("'torch.float32', which the allow list admits only as a value"), std::string::npos);
  Pickle b;  // calling a string
  b.proto(2).str("os.system").op(')').op('R').stop();
  EXPECT_NE(error_of<UnsafeCheckpointError>(b).find("REDUCE calls a str"), std::string::npos);
  Pickle c;  // BUILD on a list would call __setstate__
  c.proto(2).op(']').op('}').op('b').stop();
  EXPECT_NE(error_of<UnsafeCheckpointError>(c).find("BUILD on a list"), std::string::npos);
  Pickle d;  // BUILD with a state dict on an OrderedDict: a state_dict's _metadata, dropped
  d.proto(2).empty_ordered_dict().op('}').op('b').stop();
  EXPECT_EQ(run(d).root.kind, Kind::kDict);
  Pickle e;  // _rebuild_from_type_v2 with a function outside the rebuilders
  e.proto(2).global("torch._tensor", "_rebuild_from_type_v2").mark();
  e.global("collections", "OrderedDict").global("torch", "Tensor").op(')').none().op('t').op('R').stop();
  EXPECT_NE(error_of<UnsafeCheckpointError>(e).find("not a tensor rebuild function"), std::string::npos);
  Pickle f;  // _codecs.encode with another codec
  f.proto(2).global("_codecs", "encode").str("x").str("rot13").op(0x86).op('R').stop();
  EXPECT_NE(error_of<FormatError>(f).find("only with the encoding 'latin1'"), std::string::npos);
}

TEST(Pickle, PersistentIdsMustBeStorages) {
  Pickle a;
  a.proto(2).mark().str("module").global("torch", "FloatStorage").str("0").str("cpu").integer(1).op('t').op('Q').stop();
  EXPECT_NE(error_of<UnsafeCheckpointError>(a).find("persistent id is not a torch storage reference"), std::string::npos);
  Pickle b;
  b.proto(2).str("storage").op('Q').stop();
  EXPECT_NE(error_of<UnsafeCheckpointError>(b).find("it is a str"), std::string::npos);
  Pickle c;
  c.proto(2).mark().str("storage").global("collections", "OrderedDict").str("0").str("cpu").integer(1).op('t').op('Q').stop();
  EXPECT_NE(error_of<UnsafeCheckpointError>(c).find("not a storage class"), std::string::npos);
  Pickle d;  // 16 float32 = 64 bytes: fine
  d.proto(2).storage("FloatStorage", "0", 16).stop();
  EXPECT_EQ(run(d).root.kind, Kind::kStorage);
  Pickle e;  // 17 float32 do not fit the 64-byte record
  e.proto(2).storage("FloatStorage", "0", 17).stop();
  EXPECT_NE(error_of<FormatError>(e).find("holds 64 bytes"), std::string::npos);
  Pickle f;
  f.proto(2).storage("FloatStorage", "x", 16).stop();
  EXPECT_NE(error_of<FormatError>(f).find("has no record 'data/x'"), std::string::npos);
  Pickle g;  // one key, two types
  g.proto(2).storage("FloatStorage", "0", 16).storage("LongStorage", "0", 8).op(0x86).stop();
  EXPECT_NE(error_of<FormatError>(g).find("referenced as LongStorage of 8 elements after FloatStorage of 16"), std::string::npos);
  Pickle h;  // legacy CUDA storage classes name the same dtypes
  h.proto(2).storage("HalfStorage", "1", 32, "torch.cuda").stop();
  EXPECT_EQ(run(h).root.storage().dtype, TorchDtype::kFloat16);
}

TEST(Pickle, TensorRebuilders) {
  Pickle p;
  p.proto(2).mark();
  p.tensor("FloatStorage", "0", 16, 2, {2, 3}, {3, 1});
  p.tensor_v3("float8_e5m2", "1", 64, 0, {8}, {1});
  p.global("torch._utils", "_rebuild_parameter").mark().f32("2", {16}).boolean(true).empty_ordered_dict().op('t').op('R');
  p.global("torch._tensor", "_rebuild_from_type_v2").mark().global("torch._utils", "_rebuild_tensor_v2").global("torch._tensor", "Tensor");
  p.mark().storage("FloatStorage", "3", 16).integer(0).tuple_of({16}).tuple_of({1}).boolean(false).empty_ordered_dict().op('t');
  p.op('}').op('t').op('R');
  p.op('l').stop();
  Unpickled u = run(p);
  auto& l = u.root.seq().items;
  ASSERT_EQ(l.size(), 4u);
  const Tensor& a = l[0].tensor();
  EXPECT_EQ(a.dtype, TorchDtype::kFloat32);
  EXPECT_EQ(a.offset, 2);
  EXPECT_EQ(a.size, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(l[1].tensor().dtype, TorchDtype::kFloat8E5M2);
  EXPECT_TRUE(l[1].tensor().storage->untyped);
  EXPECT_TRUE(l[2].tensor().parameter);
  EXPECT_TRUE(l[2].tensor().requires_grad);
  EXPECT_EQ(l[3].tensor().size, (std::vector<std::int64_t>{16}));
  EXPECT_EQ(u.storages.size(), 4u);
}

TEST(Pickle, TensorArgumentsAreChecked) {
  Pickle a;  // size is not a tuple
  a.proto(2).global("torch._utils", "_rebuild_tensor_v2").mark().storage("FloatStorage", "0", 16).integer(0);
  a.str("x").tuple_of({1}).boolean(false).empty_ordered_dict().op('t').op('R').stop();
  EXPECT_NE(error_of<FormatError>(a).find("torch._utils._rebuild_tensor_v2: argument 3 must be a tuple of integers"), std::string::npos);
  Pickle b;  // too few arguments
  b.proto(2).global("torch._utils", "_rebuild_tensor_v2").mark().integer(0).op('t').op('R').stop();
  EXPECT_NE(error_of<FormatError>(b).find("takes 6 to 7 arguments, got 1"), std::string::npos);
  Pickle c;  // tensor metadata other than conj/neg
  c.proto(2).global("torch._utils", "_rebuild_tensor_v2").mark().storage("FloatStorage", "0", 16).integer(0);
  c.tuple_of({1}).tuple_of({1}).boolean(false).empty_ordered_dict().op('}').str("weird").boolean(true).op('s').op('t').op('R').stop();
  EXPECT_NE(error_of<UnsupportedError>(c).find("tensor metadata 'weird'"), std::string::npos);
}

TEST(Pickle, MalformedStreams) {
  Pickle base;
  base.proto(2).op('}').mark().str("a").f32("0", {16}).str("b").op(']').integer(1).op('a').op('u').stop();
  const auto& full = base.bytes();
  ASSERT_NO_THROW(run(base));
  for (std::size_t n = 0; n < full.size(); ++n) {  // every truncation
    std::span<const std::byte> cut(full.data(), n);
    EXPECT_THROW(unpickle(cut, "[pth] t", lookup, {}), FormatError) << n;
  }
  Pickle trailing = base;
  trailing.integer(1);
  EXPECT_NE(error_of<FormatError>(trailing).find("bytes follow the STOP opcode"), std::string::npos);
  Pickle unknown;
  unknown.proto(2).op(0xff).stop();
  EXPECT_NE(error_of<FormatError>(unknown).find("byte 2 (0xff) is not a pickle opcode"), std::string::npos);
  Pickle memo;
  memo.proto(2).op('j').le(12345, 4).stop();
  EXPECT_NE(error_of<FormatError>(memo).find("memo entry 12345 was never stored"), std::string::npos);
  Pickle underflow;
  underflow.proto(2).mark().op('0').op('0').stop();  // POP discards the mark, then underflows
  EXPECT_NE(error_of<FormatError>(underflow).find("stack underflow"), std::string::npos);
  Pickle leftover;
  leftover.proto(2).integer(1).integer(2).stop();
  EXPECT_NE(error_of<FormatError>(leftover).find("STOP leaves 1 values"), std::string::npos);
  Pickle fence;  // TUPLE2 may not take values below the innermost MARK
  fence.proto(2).integer(1).mark().integer(2).op(0x86).stop();
  EXPECT_NE(error_of<FormatError>(fence).find("stack underflow"), std::string::npos);
  Pickle proto6;
  proto6.raw({0x80, 6}).none().stop();
  EXPECT_NE(error_of<FormatError>(proto6).find("pickle protocol 6 is not supported"), std::string::npos);
  Pickle frame;
  frame.proto(4).op(0x95).le(1000, 8).none().stop();
  EXPECT_NE(error_of<FormatError>(frame).find("extends past the end"), std::string::npos);
  Pickle utf8;
  utf8.proto(2).op('X').le(1, 4).raw({0xff}).stop();
  EXPECT_NE(error_of<FormatError>(utf8).find("not valid UTF-8"), std::string::npos);
  Pickle huge_str;  // a length far past the end
  huge_str.proto(2).op(0x8d).le(~0ull, 8).stop();
  EXPECT_NE(error_of<FormatError>(huge_str).find("truncated"), std::string::npos);
  Pickle unhashable;
  unhashable.proto(2).op('}').op(']').integer(1).op('s').stop();
  EXPECT_NE(error_of<FormatError>(unhashable).find("unhashable type 'list'"), std::string::npos);
  Pickle wide;  // a 17-byte integer
  wide.proto(2).op(0x8a).le(17, 1);
  for (int i = 0; i < 17; ++i) wide.le(1, 1);
  wide.stop();
  EXPECT_NE(error_of<UnsupportedError>(wide).find("wider than 128 bits"), std::string::npos);
}

TEST(Pickle, MemoryLimit) {
  Pickle p;
  p.proto(2).mark();
  for (int i = 0; i < 20000; ++i) p.op(']');  // 20,000 lists
  p.op('l').stop();
  Limits small;
  small.max_memory = 1 << 20;
  EXPECT_NE(error_of<UnsupportedError>(p, small).find("more than 1 MiB of objects"), std::string::npos);
  EXPECT_NO_THROW(run(p));  // within the default limit
  Pickle memo;  // memo entries count too
  memo.proto(2).none();
  for (std::uint32_t i = 0; i < 40000; ++i) memo.op('r').le(i, 4);
  memo.stop();
  EXPECT_THROW(run(memo, small), UnsupportedError);
}

TEST(Pickle, DeepKeysHitTheDepthLimit) {
  Pickle p;
  p.proto(2).op('}').op(')');
  for (int i = 0; i < 1000; ++i) p.op(0x85);  // ((((...),),),) 1000 deep
  p.none().op('s').stop();
  EXPECT_NE(error_of<FormatError>(p).find("nests deeper than 256 levels"), std::string::npos);
}
