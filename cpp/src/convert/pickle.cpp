// The restricted pickle machine (see pickle.h). Opcode semantics follow CPython's
// Modules/_pickle.c (the "fence" of the innermost MARK, POP discarding a mark, MEMOIZE using
// the memo's size); what torch.save never emits is refused rather than emulated.
#include "convert/pickle.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "core/text.h"
#include "tensoracle/errors.h"

namespace tensoracle::pth {

namespace st = tensoracle::safetensors;

// ---------------------------------------------------------------------------------------
// dtypes

namespace {

using D = TorchDtype;
constexpr std::size_t kDtypeCount = static_cast<std::size_t>(D::kCount);

constexpr std::array<TorchDtypeInfo, kDtypeCount> kDtypes{{
    {D::kFloat32, "float32", 4, st::Dtype::F32, true, 4, "FloatStorage"},
    {D::kFloat64, "float64", 8, st::Dtype::F64, true, 8, "DoubleStorage"},
    {D::kFloat16, "float16", 2, st::Dtype::F16, true, 2, "HalfStorage"},
    {D::kBFloat16, "bfloat16", 2, st::Dtype::BF16, true, 2, "BFloat16Storage"},
    {D::kInt64, "int64", 8, st::Dtype::I64, false, 8, "LongStorage"},
    {D::kInt32, "int32", 4, st::Dtype::I32, false, 4, "IntStorage"},
    {D::kInt16, "int16", 2, st::Dtype::I16, false, 2, "ShortStorage"},
    {D::kInt8, "int8", 1, st::Dtype::I8, false, 1, "CharStorage"},
    {D::kUInt8, "uint8", 1, st::Dtype::U8, false, 1, "ByteStorage"},
    {D::kBool, "bool", 1, st::Dtype::BOOL, false, 1, "BoolStorage"},
    {D::kComplex64, "complex64", 8, st::Dtype::C64, false, 4, "ComplexFloatStorage"},
    {D::kComplex128, "complex128", 16, std::nullopt, false, 8, "ComplexDoubleStorage"},
    {D::kComplex32, "complex32", 4, std::nullopt, false, 2, ""},
    {D::kUInt16, "uint16", 2, st::Dtype::U16, false, 2, ""},
    {D::kUInt32, "uint32", 4, st::Dtype::U32, false, 4, ""},
    {D::kUInt64, "uint64", 8, st::Dtype::U64, false, 8, ""},
    {D::kFloat8E4M3FN, "float8_e4m3fn", 1, st::Dtype::F8_E4M3, false, 1, ""},
    {D::kFloat8E5M2, "float8_e5m2", 1, st::Dtype::F8_E5M2, false, 1, ""},
    {D::kFloat8E4M3FNUZ, "float8_e4m3fnuz", 1, st::Dtype::F8_E4M3FNUZ, false, 1, ""},
    {D::kFloat8E5M2FNUZ, "float8_e5m2fnuz", 1, st::Dtype::F8_E5M2FNUZ, false, 1, ""},
    {D::kFloat8E8M0FNU, "float8_e8m0fnu", 1, st::Dtype::F8_E8M0, false, 1, ""},
    {D::kFloat4E2M1FNx2, "float4_e2m1fn_x2", 1, st::Dtype::F4, false, 1, ""},
    {D::kQInt8, "qint8", 1, std::nullopt, false, 1, "QInt8Storage"},
    {D::kQUInt8, "quint8", 1, std::nullopt, false, 1, "QUInt8Storage"},
    {D::kQInt32, "qint32", 4, std::nullopt, false, 4, "QInt32Storage"},
    {D::kQUInt4x2, "quint4x2", 1, std::nullopt, false, 1, "QUInt4x2Storage"},
    {D::kQUInt2x4, "quint2x4", 1, std::nullopt, false, 1, "QUInt2x4Storage"},
    {D::kBits1x8, "bits1x8", 1, std::nullopt, false, 1, ""},
    {D::kBits2x4, "bits2x4", 1, std::nullopt, false, 1, ""},
    {D::kBits4x2, "bits4x2", 1, std::nullopt, false, 1, ""},
    {D::kBits8, "bits8", 1, std::nullopt, false, 1, ""},
    {D::kBits16, "bits16", 2, std::nullopt, false, 2, ""},
    {D::kInt1, "int1", 1, std::nullopt, false, 1, ""},
    {D::kInt2, "int2", 1, std::nullopt, false, 1, ""},
    {D::kInt3, "int3", 1, std::nullopt, false, 1, ""},
    {D::kInt4, "int4", 1, std::nullopt, false, 1, ""},
    {D::kInt5, "int5", 1, std::nullopt, false, 1, ""},
    {D::kInt6, "int6", 1, std::nullopt, false, 1, ""},
    {D::kInt7, "int7", 1, std::nullopt, false, 1, ""},
    {D::kUInt1, "uint1", 1, std::nullopt, false, 1, ""},
    {D::kUInt2, "uint2", 1, std::nullopt, false, 1, ""},
    {D::kUInt3, "uint3", 1, std::nullopt, false, 1, ""},
    {D::kUInt4, "uint4", 1, std::nullopt, false, 1, ""},
    {D::kUInt5, "uint5", 1, std::nullopt, false, 1, ""},
    {D::kUInt6, "uint6", 1, std::nullopt, false, 1, ""},
    {D::kUInt7, "uint7", 1, std::nullopt, false, 1, ""},
}};

constexpr bool dtype_table_is_indexed() {
  for (std::size_t i = 0; i < kDtypeCount; ++i)
    if (static_cast<std::size_t>(kDtypes[i].dtype) != i) return false;
  return true;
}
static_assert(dtype_table_is_indexed());

}  // namespace

const TorchDtypeInfo& dtype_info(TorchDtype dtype) noexcept {
  auto i = static_cast<std::size_t>(dtype);
  return kDtypes[i < kDtypeCount ? i : 0];
}

std::string_view kind_name(Kind kind) noexcept {
  switch (kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt:
    case Kind::kBigInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kStr: return "str";
    case Kind::kBytes: return "bytes";
    case Kind::kTuple: return "tuple";
    case Kind::kList: return "list";
    case Kind::kSet: return "set";
    case Kind::kFrozenSet: return "frozenset";
    case Kind::kDict: return "dict";
    case Kind::kGlobal: return "global";
    case Kind::kStorage: return "storage";
    case Kind::kTensor: return "tensor";
    case Kind::kDevice: return "torch.device";
    case Kind::kSlice: return "slice";
    case Kind::kComplex: return "complex";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------
// the allow list

namespace {

struct NamedGlobal {
  std::string_view module, name;
  GlobalId id;
};

// Fixed entries; storage classes and dtypes are matched from the dtype table.
constexpr NamedGlobal kAllowedGlobals[] = {
    {"collections", "OrderedDict", GlobalId::kOrderedDict},
    {"torch._utils", "_rebuild_tensor", GlobalId::kRebuildTensor},
    {"torch._utils", "_rebuild_tensor_v2", GlobalId::kRebuildTensorV2},
    {"torch._utils", "_rebuild_tensor_v3", GlobalId::kRebuildTensorV3},
    {"torch._utils", "_rebuild_parameter", GlobalId::kRebuildParameter},
    {"torch._utils", "_rebuild_parameter_with_state", GlobalId::kRebuildParameterWithState},
    {"torch._tensor", "_rebuild_from_type_v2", GlobalId::kRebuildFromTypeV2},
    {"torch.tensor", "_rebuild_from_type_v2", GlobalId::kRebuildFromTypeV2},  // before torch 1.9
    {"torch._tensor", "Tensor", GlobalId::kTensorClass},
    {"torch.tensor", "Tensor", GlobalId::kTensorClass},
    {"torch", "Tensor", GlobalId::kTensorClass},
    {"torch.nn.parameter", "Parameter", GlobalId::kParameterClass},
    {"torch", "UntypedStorage", GlobalId::kUntypedStorage},
    {"torch.storage", "UntypedStorage", GlobalId::kUntypedStorage},
    {"torch", "device", GlobalId::kDevice},
    {"torch", "Size", GlobalId::kSize},
    {"builtins", "set", GlobalId::kSet},
    {"builtins", "frozenset", GlobalId::kFrozenSet},
    {"builtins", "slice", GlobalId::kSlice},
    {"builtins", "complex", GlobalId::kComplex},
    {"__builtin__", "set", GlobalId::kSet},  // protocol 2 writes Python 2 module names
    {"__builtin__", "frozenset", GlobalId::kFrozenSet},
    {"__builtin__", "slice", GlobalId::kSlice},
    {"__builtin__", "complex", GlobalId::kComplex},
    {"_codecs", "encode", GlobalId::kCodecsEncode},
};

std::optional<Value> find_global(std::string_view module, std::string_view name) {
  for (const auto& g : kAllowedGlobals)
    if (g.module == module && g.name == name) return Value::global(g.id);
  if (module == "torch" || module == "torch.cuda") {
    for (const auto& d : kDtypes) {
      if (!d.storage_class.empty() && d.storage_class == name)
        return Value::global(GlobalId::kStorageClass, d.dtype);
    }
  }
  if (module == "torch") {
    for (const auto& d : kDtypes)
      if (d.name == name) return Value::global(GlobalId::kDtype, d.dtype);
  }
  return std::nullopt;
}

}  // namespace

std::string global_name(Value g) {
  switch (g.global_id()) {
    case GlobalId::kStorageClass:
      return "torch." + std::string(dtype_info(g.global_dtype()).storage_class);
    case GlobalId::kDtype: return "torch." + std::string(dtype_info(g.global_dtype()).name);
    default: break;
  }
  for (const auto& e : kAllowedGlobals)
    if (e.id == g.global_id()) return std::string(e.module) + "." + std::string(e.name);
  return "?";
}

std::string int128_text(Int128 v) {
  if (v == 0) return "0";
  bool neg = v < 0;
  UInt128 u = neg ? -static_cast<UInt128>(v) : static_cast<UInt128>(v);
  std::string s;
  while (u) {
    s += static_cast<char>('0' + static_cast<int>(u % 10));
    u /= 10;
  }
  if (neg) s += '-';
  return {s.rbegin(), s.rend()};
}

// ---------------------------------------------------------------------------------------
// arena

class Arena {
 public:
  Arena(std::uint64_t limit, const std::string& where) : limit_(limit), where_(where) {}

  void charge(std::uint64_t n) {
    used_ += n;
    if (used_ > limit_)
      throw UnsupportedError(where_ + ": the pickle needs more than " + std::to_string(limit_ >> 20) +
                             " MiB of objects (the limit; raise it with the max_pickle_memory "
                             "option if the checkpoint is trusted to be this large)");
  }

  template <typename T>
  T* make() {
    charge(sizeof(T) + 32);
    return &std::get<std::deque<T>>(objects_).emplace_back();
  }

  // A small integer naming `canonical` (equal canonical texts, equal keys).
  std::uint64_t intern(std::string canonical) {
    auto it = interned_.find(canonical);
    if (it != interned_.end()) return it->second;
    charge(canonical.size() + 64);
    std::uint64_t id = interned_.size() + 1;
    interned_.emplace(std::move(canonical), id);
    return id;
  }

 private:
  std::uint64_t limit_;
  std::uint64_t used_ = 0;
  std::string where_;
  std::tuple<std::deque<Str>, std::deque<BigInt>, std::deque<Seq>, std::deque<Dict>,
             std::deque<Storage>, std::deque<Tensor>, std::deque<Device>, std::deque<Slice>,
             std::deque<Complex>>
      objects_;
  std::unordered_map<std::string, std::uint64_t> interned_;
};

// ---------------------------------------------------------------------------------------
// the machine

namespace {

// Opcodes (CPython's Lib/pickletools.py names them and says which protocol added each).
enum Op : std::uint8_t {
  MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', FLOAT = 'F', INT = 'I',
  BININT = 'J', BININT1 = 'K', LONG = 'L', BININT2 = 'M', NONE = 'N', PERSID = 'P',
  BINPERSID = 'Q', REDUCE = 'R', STRING = 'S', BINSTRING = 'T', SHORT_BINSTRING = 'U',
  UNICODE = 'V', BINUNICODE = 'X', APPEND = 'a', BUILD = 'b', GLOBAL = 'c', DICT = 'd',
  EMPTY_DICT = '}', APPENDS = 'e', GET = 'g', BINGET = 'h', INST = 'i', LONG_BINGET = 'j',
  LIST = 'l', EMPTY_LIST = ']', OBJ = 'o', PUT = 'p', BINPUT = 'q', LONG_BINPUT = 'r',
  SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')', SETITEMS = 'u', BINFLOAT = 'G',
  PROTO = 0x80, NEWOBJ = 0x81, EXT1 = 0x82, EXT2 = 0x83, EXT4 = 0x84, TUPLE1 = 0x85,
  TUPLE2 = 0x86, TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a, LONG4 = 0x8b,
  BINBYTES = 'B', SHORT_BINBYTES = 'C', SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d,
  BINBYTES8 = 0x8e, EMPTY_SET = 0x8f, ADDITEMS = 0x90, FROZENSET = 0x91, NEWOBJ_EX = 0x92,
  STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95, BYTEARRAY8 = 0x96, NEXT_BUFFER = 0x97,
  READONLY_BUFFER = 0x98,
};

const char* op_name(std::uint8_t op) {
  switch (op) {
#define TENSORACLE_OP(x) \
  case x: return #x;
    TENSORACLE_OP(MARK) TENSORACLE_OP(STOP) TENSORACLE_OP(POP) TENSORACLE_OP(POP_MARK)
    TENSORACLE_OP(DUP) TENSORACLE_OP(FLOAT) TENSORACLE_OP(INT) TENSORACLE_OP(BININT)
    TENSORACLE_OP(BININT1) TENSORACLE_OP(LONG) TENSORACLE_OP(BININT2) TENSORACLE_OP(NONE)
    TENSORACLE_OP(PERSID) TENSORACLE_OP(BINPERSID) TENSORACLE_OP(REDUCE) TENSORACLE_OP(STRING)
    TENSORACLE_OP(BINSTRING) TENSORACLE_OP(SHORT_BINSTRING) TENSORACLE_OP(UNICODE)
    TENSORACLE_OP(BINUNICODE) TENSORACLE_OP(APPEND) TENSORACLE_OP(BUILD) TENSORACLE_OP(GLOBAL)
    TENSORACLE_OP(DICT) TENSORACLE_OP(EMPTY_DICT) TENSORACLE_OP(APPENDS) TENSORACLE_OP(GET)
    TENSORACLE_OP(BINGET) TENSORACLE_OP(INST) TENSORACLE_OP(LONG_BINGET) TENSORACLE_OP(LIST)
    TENSORACLE_OP(EMPTY_LIST) TENSORACLE_OP(OBJ) TENSORACLE_OP(PUT) TENSORACLE_OP(BINPUT)
    TENSORACLE_OP(LONG_BINPUT) TENSORACLE_OP(SETITEM) TENSORACLE_OP(TUPLE)
    TENSORACLE_OP(EMPTY_TUPLE) TENSORACLE_OP(SETITEMS) TENSORACLE_OP(BINFLOAT)
    TENSORACLE_OP(PROTO) TENSORACLE_OP(NEWOBJ) TENSORACLE_OP(EXT1) TENSORACLE_OP(EXT2)
    TENSORACLE_OP(EXT4) TENSORACLE_OP(TUPLE1) TENSORACLE_OP(TUPLE2) TENSORACLE_OP(TUPLE3)
    TENSORACLE_OP(NEWTRUE) TENSORACLE_OP(NEWFALSE) TENSORACLE_OP(LONG1) TENSORACLE_OP(LONG4)
    TENSORACLE_OP(BINBYTES) TENSORACLE_OP(SHORT_BINBYTES) TENSORACLE_OP(SHORT_BINUNICODE)
    TENSORACLE_OP(BINUNICODE8) TENSORACLE_OP(BINBYTES8) TENSORACLE_OP(EMPTY_SET)
    TENSORACLE_OP(ADDITEMS) TENSORACLE_OP(FROZENSET) TENSORACLE_OP(NEWOBJ_EX)
    TENSORACLE_OP(STACK_GLOBAL) TENSORACLE_OP(MEMOIZE) TENSORACLE_OP(FRAME)
    TENSORACLE_OP(BYTEARRAY8) TENSORACLE_OP(NEXT_BUFFER) TENSORACLE_OP(READONLY_BUFFER)
#undef TENSORACLE_OP
    default: return nullptr;
  }
}

std::string hex_byte(std::uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}


class Machine {
 public:
  Machine(std::span<const std::byte> in, const std::string& where, const RecordLookup& lookup,
          const Limits& limits)
      : in_(in), where_(where), lookup_(lookup), limits_(limits),
        arena_(std::make_shared<Arena>(limits.max_memory, where)) {}

  Unpickled run() {
    Unpickled out;
    out.arena = arena_;
    while (true) {
      if (pos_ >= in_.size())
        throw FormatError(where_ + ": the pickle ends at byte " + std::to_string(pos_) +
                          " without a STOP opcode (truncated?)");
      op_pos_ = pos_;
      op_ = static_cast<std::uint8_t>(in_[pos_++]);
      if (op_ == STOP) {
        out.root = pop();
        if (!stack_.empty() || !marks_.empty())
          fail("STOP leaves " + std::to_string(stack_.size()) + " values and " +
               std::to_string(marks_.size()) + " marks on the stack");
        if (pos_ != in_.size())
          fail(std::to_string(in_.size() - pos_) + " bytes follow the STOP opcode");
        out.protocol = protocol_;
        out.tensors = std::move(tensors_);
        out.storages = std::move(storage_order_);
        return out;
      }
      step();
    }
  }

 private:
  // -- errors

  std::string here() const {
    const char* n = op_name(op_);
    return where_ + ": " + (n ? std::string(n) : hex_byte(op_)) + " at byte " + std::to_string(op_pos_);
  }
  [[noreturn]] void fail(const std::string& message) const {
    throw FormatError(here() + ": " + message);
  }
  [[noreturn]] void unsafe(const std::string& message) const {
    throw UnsafeCheckpointError(here() + ": " + message);
  }

  // -- input

  std::span<const std::byte> take(std::uint64_t n) {
    if (n > in_.size() - pos_)
      fail("needs " + std::to_string(n) + " bytes, but the pickle has only " +
           std::to_string(in_.size() - pos_) + " left (truncated?)");
    auto s = in_.subspan(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  template <typename T>
  T read_le() {
    T v;
    std::memcpy(&v, take(sizeof(T)).data(), sizeof(T));
    return v;
  }
  std::string_view line() {
    auto rest = std::string_view(reinterpret_cast<const char*>(in_.data()) + pos_, in_.size() - pos_);
    auto nl = rest.find('\n');
    if (nl == std::string_view::npos) fail("a text argument has no terminating newline (truncated?)");
    pos_ += nl + 1;
    return rest.substr(0, nl);
  }

  // -- stack

  std::size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Value v) {
    if (stack_.size() == stack_.capacity()) arena_->charge(sizeof(Value) * (stack_.size() + 16));
    stack_.push_back(v);
  }
  Value pop() {
    if (stack_.size() <= fence()) fail("stack underflow (nothing above the last MARK)");
    Value v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Value& top() {
    if (stack_.size() <= fence()) fail("stack underflow (nothing above the last MARK)");
    return stack_.back();
  }
  // The values above the innermost MARK, which is removed.
  std::vector<Value> pop_mark() {
    if (marks_.empty()) fail("no MARK on the stack");
    std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Value> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }

  // -- objects

  Value make_str(std::span<const std::byte> b, Kind kind) {
    Str* s = arena_->make<Str>();
    arena_->charge(b.size());
    s->s.assign(reinterpret_cast<const char*>(b.data()), b.size());
    if (kind == Kind::kStr && !core::valid_utf8(s->s))
      fail("string " + core::quote_name(s->s, 60) + " is not valid UTF-8");
    return Value::object(kind, s);
  }
  Value make_seq(Kind kind, std::vector<Value> items = {}) {
    Seq* q = arena_->make<Seq>();
    arena_->charge(items.size() * sizeof(Value));
    q->items = std::move(items);
    return Value::object(kind, q);
  }
  Value make_dict(bool ordered) {
    Dict* d = arena_->make<Dict>();
    d->ordered = ordered;
    return Value::object(Kind::kDict, d);
  }
  Value make_int(const std::byte* p, std::size_t n) {  // little-endian two's complement
    if (n == 0) return Value::integer(0);
    if (n > 16)
      throw UnsupportedError(here() + ": an integer of " + std::to_string(n) +
                             " bytes (wider than 128 bits) is not supported");
    UInt128 u = 0;
    for (std::size_t i = 0; i < n; ++i)
      u |= static_cast<UInt128>(static_cast<std::uint8_t>(p[i])) << (8 * i);
    if (n < 16 && (static_cast<std::uint8_t>(p[n - 1]) & 0x80))
      u |= ~static_cast<UInt128>(0) << (8 * n);  // sign-extend
    auto v = static_cast<Int128>(u);
    if (v >= INT64_MIN && v <= INT64_MAX) return Value::integer(static_cast<std::int64_t>(v));
    BigInt* b = arena_->make<BigInt>();
    b->v = v;
    return Value::object(Kind::kBigInt, b);
  }

  // -- hashing: every key and set member gets an interned id; equal values, equal ids
  // (Python's equality for the hashable types here: 1 == 1.0 == True).

  std::uint64_t key_of(Value v, int depth = 0) {
    if (depth > limits_.max_depth) fail("a key nests deeper than " + std::to_string(limits_.max_depth) + " levels");
    switch (v.kind) {
      case Kind::kNone: return arena_->intern("N");
      case Kind::kBool: return arena_->intern(v.u.b ? "i1" : "i0");
      case Kind::kInt: return arena_->intern("i" + std::to_string(v.u.i));
      case Kind::kBigInt: return arena_->intern("i" + int128_text(v.big().v));
      case Kind::kFloat: return float_key(v.u.f, 0.0);
      case Kind::kComplex: return float_key(v.complex().re, v.complex().im);
      case Kind::kStr:
      case Kind::kBytes: {
        Str& s = v.str();
        if (!s.key) s.key = arena_->intern((v.kind == Kind::kStr ? "s" : "b") + s.s);
        return s.key;
      }
      case Kind::kTuple:
      case Kind::kFrozenSet: {
        Seq& q = v.seq();
        if (!q.key) {
          std::vector<std::uint64_t> ids;
          ids.reserve(q.items.size());
          for (Value x : q.items) ids.push_back(key_of(x, depth + 1));
          if (v.kind == Kind::kFrozenSet) std::sort(ids.begin(), ids.end());
          std::string c = v.kind == Kind::kTuple ? "t" : "F";
          for (auto id : ids) c += std::to_string(id) + ",";
          q.key = arena_->intern(std::move(c));
        }
        return q.key;
      }
      case Kind::kGlobal: return arena_->intern("g" + std::to_string(v.u.g));
      case Kind::kDevice: {
        Device& d = v.device();
        if (!d.key) d.key = arena_->intern("d" + d.text);
        return d.key;
      }
      case Kind::kTensor:
      case Kind::kStorage:
        throw UnsupportedError(here() + ": a " + std::string(kind_name(v.kind)) +
                               " used as a dict key or set member is not supported");
      default:
        fail("unhashable type '" + std::string(kind_name(v.kind)) + "' used as a dict key or set member");
    }
  }
  std::uint64_t float_key(double re, double im) {
    if (im == 0 && std::isfinite(re) && re == std::trunc(re) && std::fabs(re) < 9.2e18)
      return arena_->intern("i" + std::to_string(static_cast<std::int64_t>(re)));
    char buf[48];
    std::snprintf(buf, sizeof buf, "f%016llx,%016llx",
                  static_cast<unsigned long long>(std::bit_cast<std::uint64_t>(re)),
                  static_cast<unsigned long long>(std::bit_cast<std::uint64_t>(im)));
    return arena_->intern(buf);
  }

  void set_item(Dict& d, Value k, Value v) {
    std::uint64_t id = key_of(k);
    auto [it, fresh] = d.index.emplace(id, d.items.size());
    if (fresh) {
      arena_->charge(2 * sizeof(Value) + 32);
      d.items.emplace_back(k, v);
    } else {
      d.items[it->second].second = v;  // Python keeps the first key object, takes the new value
    }
  }
  void add_member(Seq& s, Value v) {
    std::uint64_t id = key_of(v);
    if (s.members.emplace(id, s.items.size()).second) {
      arena_->charge(sizeof(Value) + 32);
      s.items.push_back(v);
    }
  }

  Dict& dict_target(const char* what) {
    Value& t = top();
    if (t.kind != Kind::kDict)
      fail(std::string(what) + " on a " + std::string(kind_name(t.kind)) + ", not a dict");
    return t.dict();
  }

  // -- opcodes

  void step() {
    switch (op_) {
      case PROTO: {
        auto v = static_cast<std::uint8_t>(take(1)[0]);
        if (v > 5) fail("pickle protocol " + std::to_string(v) + " is not supported (0 to 5 are)");
        if (protocol_ == 0) protocol_ = v;
        return;
      }
      case FRAME: {
        auto n = read_le<std::uint64_t>();
        if (n > in_.size() - pos_) fail("a frame of " + std::to_string(n) + " bytes extends past the end");
        return;
      }
      case MARK:
        if (marks_.size() == marks_.capacity()) arena_->charge(sizeof(std::size_t) * (marks_.size() + 16));
        marks_.push_back(stack_.size());
        return;
      case POP:
        if (stack_.size() > fence()) stack_.pop_back();
        else if (!marks_.empty()) marks_.pop_back();
        else fail("stack underflow");
        return;
      case POP_MARK: pop_mark(); return;
      case DUP: push(top()); return;
      case NONE: push(Value::none()); return;
      case NEWTRUE: push(Value::boolean(true)); return;
      case NEWFALSE: push(Value::boolean(false)); return;
      case BININT: push(Value::integer(read_le<std::int32_t>())); return;
      case BININT1: push(Value::integer(read_le<std::uint8_t>())); return;
      case BININT2: push(Value::integer(read_le<std::uint16_t>())); return;
      case LONG1: {
        auto n = read_le<std::uint8_t>();
        push(make_int(take(n).data(), n));
        return;
      }
      case LONG4: {
        auto n = read_le<std::int32_t>();
        if (n < 0) fail("negative byte count " + std::to_string(n));
        auto b = take(static_cast<std::uint64_t>(n));
        push(make_int(b.data(), b.size()));
        return;
      }
      case BINFLOAT: {
        auto bits = read_le<std::uint64_t>();
        push(Value::real(std::bit_cast<double>(__builtin_bswap64(bits))));  // big-endian
        return;
      }
      case SHORT_BINUNICODE: push(make_str(take(read_le<std::uint8_t>()), Kind::kStr)); return;
      case BINUNICODE: push(make_str(take(read_le<std::uint32_t>()), Kind::kStr)); return;
      case BINUNICODE8: push(make_str(take(read_le<std::uint64_t>()), Kind::kStr)); return;
      case SHORT_BINBYTES: push(make_str(take(read_le<std::uint8_t>()), Kind::kBytes)); return;
      case BINBYTES: push(make_str(take(read_le<std::uint32_t>()), Kind::kBytes)); return;
      case BINBYTES8:
      case BYTEARRAY8: push(make_str(take(read_le<std::uint64_t>()), Kind::kBytes)); return;
      case EMPTY_TUPLE: push(make_seq(Kind::kTuple)); return;
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        std::size_t n = op_ - TUPLE1 + 1u;
        std::vector<Value> items(n);
        for (std::size_t i = n; i-- > 0;) items[i] = pop();
        push(make_seq(Kind::kTuple, std::move(items)));
        return;
      }
      case TUPLE: push(make_seq(Kind::kTuple, pop_mark())); return;
      case EMPTY_LIST: push(make_seq(Kind::kList)); return;
      case LIST: push(make_seq(Kind::kList, pop_mark())); return;
      case APPEND: {
        Value v = pop();
        list_target().push_back(v);
        arena_->charge(sizeof(Value));
        return;
      }
      case APPENDS: {
        auto items = pop_mark();
        auto& l = list_target();
        arena_->charge(items.size() * sizeof(Value));
        l.insert(l.end(), items.begin(), items.end());
        return;
      }
      case EMPTY_DICT: push(make_dict(false)); return;
      case DICT: {
        auto items = pop_mark();
        if (items.size() % 2) fail("an odd number of values (" + std::to_string(items.size()) + ") for keys and values");
        Value d = make_dict(false);
        for (std::size_t i = 0; i < items.size(); i += 2) set_item(d.dict(), items[i], items[i + 1]);
        push(d);
        return;
      }
      case SETITEM: {
        Value v = pop();
        Value k = pop();
        set_item(dict_target("SETITEM"), k, v);
        return;
      }
      case SETITEMS: {
        auto items = pop_mark();
        if (items.size() % 2) fail("an odd number of values (" + std::to_string(items.size()) + ") for keys and values");
        Dict& d = dict_target("SETITEMS");
        for (std::size_t i = 0; i < items.size(); i += 2) set_item(d, items[i], items[i + 1]);
        return;
      }
      case EMPTY_SET: push(make_seq(Kind::kSet)); return;
      case ADDITEMS: {
        auto items = pop_mark();
        Value& t = top();
        if (t.kind != Kind::kSet) fail("ADDITEMS on a " + std::string(kind_name(t.kind)) + ", not a set");
        for (Value v : items) add_member(t.seq(), v);
        return;
      }
      case FROZENSET: {
        auto items = pop_mark();
        Value s = make_seq(Kind::kFrozenSet);
        for (Value v : items) add_member(s.seq(), v);
        push(s);
        return;
      }
      case BINPUT: memo_put(read_le<std::uint8_t>()); return;
      case LONG_BINPUT: memo_put(read_le<std::uint32_t>()); return;
      case MEMOIZE: memo_put(memo_.size()); return;
      case BINGET: memo_get(read_le<std::uint8_t>()); return;
      case LONG_BINGET: memo_get(read_le<std::uint32_t>()); return;
      case GLOBAL: {
        auto module = line();
        auto name = line();
        push(resolve(module, name));
        return;
      }
      case STACK_GLOBAL: {
        Value name = pop();
        Value module = pop();
        if (module.kind != Kind::kStr || name.kind != Kind::kStr)
          fail("module and name must be strings, got " + std::string(kind_name(module.kind)) +
               " and " + std::string(kind_name(name.kind)));
        push(resolve(module.str().s, name.str().s));
        return;
      }
      case BINPERSID: push(persistent_load(pop())); return;
      case REDUCE: {
        Value args = pop();
        Value callable = pop();
        push(call(callable, args));
        return;
      }
      case BUILD: {
        Value state = pop();
        build(top(), state);
        return;
      }
      case INST: case OBJ: case NEWOBJ: case NEWOBJ_EX:
        unsafe("creating objects of arbitrary classes is not allowed (the allow list builds "
               "only tensors, containers and plain values)");
      case EXT1: case EXT2: case EXT4:
        unsafe("the copyreg extension registry (which names arbitrary globals) is not allowed");
      case PERSID:
        unsafe("text persistent ids (protocol 0) are not allowed; torch writes BINPERSID");
      case NEXT_BUFFER: case READONLY_BUFFER:
        unsafe("out-of-band buffers (protocol 5) are not allowed in a checkpoint");
      case INT: case LONG: case FLOAT: case STRING: case BINSTRING: case SHORT_BINSTRING:
      case UNICODE: case GET: case PUT:
        unsafe("protocol 0/1 text opcodes are not among those tensoracle interprets "
               "(torch.save writes protocol 2 or later)");
      default:
        throw FormatError(where_ + ": byte " + std::to_string(op_pos_) + " (" + hex_byte(op_) +
                          ") is not a pickle opcode");
    }
  }

  std::vector<Value>& list_target() {
    Value& t = top();
    if (t.kind != Kind::kList) fail("appending to a " + std::string(kind_name(t.kind)) + ", not a list");
    return t.seq().items;
  }

  void memo_put(std::uint64_t index) {
    if (index > UINT32_MAX) fail("memo index " + std::to_string(index) + " is out of range");
    Value v = top();
    if (memo_.insert_or_assign(static_cast<std::uint32_t>(index), v).second) arena_->charge(64);
  }
  void memo_get(std::uint32_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo entry " + std::to_string(index) + " was never stored");
    push(it->second);
  }

  Value resolve(std::string_view module, std::string_view name) {
    if (auto g = find_global(module, name)) return *g;
    std::string full = std::string(module) + "." + std::string(name);
    if (!core::valid_utf8(full)) fail("global name is not valid UTF-8");
    unsafe("global " + core::quote_name(full) +
           " is not in the allow list: the checkpoint asks to import or call something other "
           "than torch's tensor rebuilders and plain containers. Nothing was run. If the file is "
           "trusted, load it with torch.load(weights_only=False) and save its tensors with "
           "torch.save or safetensors");
  }

  // ('storage', storage_class, key, location, numel) -> the Storage of that key.
  Value persistent_load(Value pid) {
    auto bad = [&](const std::string& why) -> Value {
      unsafe("persistent id is not a torch storage reference ('storage', storage class, key, "
             "location, size): " + why);
    };
    if (pid.kind != Kind::kTuple) return bad("it is a " + std::string(kind_name(pid.kind)));
    auto& f = pid.seq().items;
    if (f.size() != 5) return bad(std::to_string(f.size()) + " fields");
    if ((f[0].kind != Kind::kStr && f[0].kind != Kind::kBytes) || f[0].str().s != "storage")
      return bad("its first field is not 'storage'");
    if (f[1].kind != Kind::kGlobal ||
        (f[1].global_id() != GlobalId::kStorageClass && f[1].global_id() != GlobalId::kUntypedStorage))
      return bad("its second field is not a storage class");
    if (f[2].kind != Kind::kStr) return bad("its key is not a string");
    if ((f[3].kind != Kind::kStr && f[3].kind != Kind::kBytes)) return bad("its location is not a string");
    if (f[4].kind != Kind::kInt || f[4].u.i < 0) return bad("its size is not an integer >= 0");
    const std::string& key = f[2].str().s;
    if (key.empty() || key.size() > 256 || key.find('\0') != std::string::npos || key.find('/') != std::string::npos)
      fail("storage key " + core::quote_name(key) + " is not a valid record name");
    bool untyped = f[1].global_id() == GlobalId::kUntypedStorage;
    TorchDtype dtype = untyped ? TorchDtype::kUInt8 : f[1].global_dtype();
    auto numel = static_cast<std::uint64_t>(f[4].u.i);

    auto found = storages_.find(key);
    if (found != storages_.end()) {
      Storage& s = *found->second;
      if (s.untyped != untyped || s.dtype != dtype || s.numel != numel)
        fail("storage " + core::quote_name(key) + " is referenced as " + storage_text(untyped, dtype, numel) +
             " after " + storage_text(s.untyped, s.dtype, s.numel));
      return Value::object(Kind::kStorage, &s);
    }
    auto record = lookup_(key);
    if (!record)
      fail("storage " + core::quote_name(key) + " has no record " + core::quote_name("data/" + key) + " in the archive");
    std::uint64_t nbytes;
    if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(dtype_info(dtype).itemsize), &nbytes) ||
        nbytes != record->bytes.size())
      fail("storage " + core::quote_name(key) + " declares " + storage_text(untyped, dtype, numel) +
           ", but its record " + core::quote_name(record->name) + " holds " +
           std::to_string(record->bytes.size()) + " bytes");
    Storage* s = arena_->make<Storage>();
    arena_->charge(key.size() + record->name.size() + 64);
    s->key = key;
    s->record = record->name;
    s->location = f[3].str().s.substr(0, 64);
    s->dtype = dtype;
    s->untyped = untyped;
    s->numel = numel;
    s->data = record->bytes;
    storages_.emplace(key, s);
    storage_order_.push_back(s);
    return Value::object(Kind::kStorage, s);
  }
  static std::string storage_text(bool untyped, TorchDtype dtype, std::uint64_t numel) {
    if (untyped) return "UntypedStorage of " + std::to_string(numel) + " bytes";
    return std::string(dtype_info(dtype).storage_class) + " of " + std::to_string(numel) + " elements";
  }

  // -- REDUCE: the allowed callables, evaluated here

  const std::vector<Value>& args_of(Value args, const std::string& callee, std::size_t min, std::size_t max) {
    if (args.kind != Kind::kTuple)
      fail("arguments of " + callee + " are a " + std::string(kind_name(args.kind)) + ", not a tuple");
    auto& a = args.seq().items;
    if (a.size() < min || a.size() > max)
      fail(callee + " takes " + (min == max ? std::to_string(min) : std::to_string(min) + " to " + std::to_string(max)) +
           " arguments, got " + std::to_string(a.size()));
    return a;
  }
  [[noreturn]] void bad_arg(const std::string& callee, std::size_t i, const std::string& what, Value got) const {
    fail(callee + ": argument " + std::to_string(i + 1) + " must be " + what + ", got a " +
         std::string(kind_name(got.kind)));
  }
  std::vector<std::int64_t> int_tuple(const std::string& callee, std::size_t i, Value v) {
    if (v.kind != Kind::kTuple && v.kind != Kind::kList) bad_arg(callee, i, "a tuple of integers", v);
    std::vector<std::int64_t> out;
    out.reserve(v.seq().items.size());
    for (Value x : v.seq().items) {
      if (x.kind != Kind::kInt) bad_arg(callee, i, "a tuple of 64-bit integers", x);
      out.push_back(x.u.i);
    }
    arena_->charge(out.size() * 8);
    return out;
  }

  Value call(Value callable, Value args) {
    if (callable.kind != Kind::kGlobal)
      unsafe("REDUCE calls a " + std::string(kind_name(callable.kind)) +
             "; only allowed globals may be called");
    std::string name = global_name(callable);
    switch (callable.global_id()) {
      case GlobalId::kOrderedDict: {
        auto& a = args_of(args, name, 0, 1);
        Value d = make_dict(true);
        if (a.size() == 1) {
          if (!a[0].is_seq() && a[0].kind != Kind::kDict) bad_arg(name, 0, "a list of pairs", a[0]);
          if (a[0].kind == Kind::kDict) {
            for (auto& [k, v] : a[0].dict().items) set_item(d.dict(), k, v);
          } else {
            for (Value pair : a[0].seq().items) {
              if ((pair.kind != Kind::kTuple && pair.kind != Kind::kList) || pair.seq().items.size() != 2)
                bad_arg(name, 0, "a list of (key, value) pairs", pair);
              set_item(d.dict(), pair.seq().items[0], pair.seq().items[1]);
            }
          }
        }
        return d;
      }
      case GlobalId::kRebuildTensor:
      case GlobalId::kRebuildTensorV2:
      case GlobalId::kRebuildTensorV3: return rebuild_tensor(callable.global_id(), name, args);
      case GlobalId::kRebuildParameter:
      case GlobalId::kRebuildParameterWithState: {
        bool with_state = callable.global_id() == GlobalId::kRebuildParameterWithState;
        auto& a = args_of(args, name, with_state ? 4 : 3, with_state ? 4 : 3);
        if (a[0].kind != Kind::kTensor) bad_arg(name, 0, "a tensor", a[0]);
        if (a[1].kind != Kind::kBool) bad_arg(name, 1, "a bool", a[1]);
        if (a[2].kind != Kind::kDict && a[2].kind != Kind::kNone) bad_arg(name, 2, "a dict of hooks", a[2]);
        Tensor* t = arena_->make<Tensor>();
        *t = a[0].tensor();
        arena_->charge(16 * t->size.size());
        t->parameter = true;
        t->requires_grad = a[1].u.b;
        t->byte_pos = op_pos_;
        tensors_.push_back(t);
        return Value::object(Kind::kTensor, t);
      }
      case GlobalId::kRebuildFromTypeV2: {
        auto& a = args_of(args, name, 4, 4);
        if (a[0].kind != Kind::kGlobal) bad_arg(name, 0, "a tensor rebuild function", a[0]);
        auto f = a[0].global_id();
        if (f != GlobalId::kRebuildTensor && f != GlobalId::kRebuildTensorV2 && f != GlobalId::kRebuildTensorV3 &&
            f != GlobalId::kRebuildParameter && f != GlobalId::kRebuildParameterWithState)
          unsafe(name + " asks to call " + global_name(a[0]) + ", which is not a tensor rebuild function");
        if (a[1].kind != Kind::kGlobal ||
            (a[1].global_id() != GlobalId::kTensorClass && a[1].global_id() != GlobalId::kParameterClass))
          unsafe(name + " asks for a tensor subclass other than torch.Tensor and torch.nn.Parameter");
        if (a[3].kind != Kind::kDict && a[3].kind != Kind::kNone && a[3].kind != Kind::kTuple)
          bad_arg(name, 3, "the tensor's state (a dict)", a[3]);
        Value t = call(a[0], a[2]);
        if (a[1].global_id() == GlobalId::kParameterClass) t.tensor().parameter = true;
        return t;
      }
      case GlobalId::kDevice: {
        auto& a = args_of(args, name, 1, 2);
        if (a[0].kind != Kind::kStr || a[0].str().s.size() > 64) bad_arg(name, 0, "a short device string", a[0]);
        std::string text = a[0].str().s;
        if (a.size() == 2) {
          if (a[1].kind == Kind::kInt) text += ":" + std::to_string(a[1].u.i);
          else if (a[1].kind != Kind::kNone) bad_arg(name, 1, "an integer device index", a[1]);
        }
        Device* d = arena_->make<Device>();
        d->text = std::move(text);
        return Value::object(Kind::kDevice, d);
      }
      case GlobalId::kSize: {
        auto& a = args_of(args, name, 0, 1);
        if (a.empty()) return make_seq(Kind::kTuple);
        int_tuple(name, 0, a[0]);  // checks every entry is an integer
        return make_seq(Kind::kTuple, a[0].seq().items);
      }
      case GlobalId::kSet:
      case GlobalId::kFrozenSet: {
        auto& a = args_of(args, name, 0, 1);
        Value s = make_seq(callable.global_id() == GlobalId::kSet ? Kind::kSet : Kind::kFrozenSet);
        if (a.size() == 1) {
          if (!a[0].is_seq()) bad_arg(name, 0, "a list of members", a[0]);
          for (Value v : a[0].seq().items) add_member(s.seq(), v);
        }
        return s;
      }
      case GlobalId::kSlice: {
        auto& a = args_of(args, name, 1, 3);
        Slice* s = arena_->make<Slice>();
        if (a.size() == 1) s->stop = a[0];
        else {
          s->start = a[0];
          s->stop = a[1];
          if (a.size() == 3) s->step = a[2];
        }
        return Value::object(Kind::kSlice, s);
      }
      case GlobalId::kComplex: {
        auto& a = args_of(args, name, 0, 2);
        auto num = [&](std::size_t i) -> double {
          Value v = a[i];
          if (v.kind == Kind::kFloat) return v.u.f;
          if (v.kind == Kind::kInt) return static_cast<double>(v.u.i);
          if (v.kind == Kind::kBool) return v.u.b ? 1.0 : 0.0;
          bad_arg(name, i, "a number", v);
        };
        Complex* c = arena_->make<Complex>();
        if (a.size() > 0) c->re = num(0);
        if (a.size() > 1) c->im = num(1);
        return Value::object(Kind::kComplex, c);
      }
      case GlobalId::kCodecsEncode: {
        // Protocol 2 pickles bytes as _codecs.encode(text, 'latin1'): code points 0-255.
        auto& a = args_of(args, name, 2, 2);
        if (a[0].kind != Kind::kStr) bad_arg(name, 0, "a string", a[0]);
        if (a[1].kind != Kind::kStr || (a[1].str().s != "latin1" && a[1].str().s != "latin-1"))
          fail(name + " is allowed only with the encoding 'latin1'");
        std::string out;
        const std::string& s = a[0].str().s;
        for (std::size_t i = 0; i < s.size(); ++i) {
          auto c = static_cast<unsigned char>(s[i]);
          if (c < 0x80) out += static_cast<char>(c);
          else if ((c == 0xC2 || c == 0xC3) && i + 1 < s.size()) {
            out += static_cast<char>(((c & 0x1F) << 6) | (static_cast<unsigned char>(s[++i]) & 0x3F));
          } else {
            fail(name + ": a character above U+00FF cannot be encoded as latin1");
          }
        }
        Str* b = arena_->make<Str>();
        arena_->charge(out.size());
        b->s = std::move(out);
        return Value::object(Kind::kBytes, b);
      }
      case GlobalId::kTensorClass:
      case GlobalId::kParameterClass:
      case GlobalId::kStorageClass:
      case GlobalId::kUntypedStorage:
      case GlobalId::kDtype: break;
    }
    unsafe("REDUCE calls " + core::quote_name(name) +
           ", which the allow list admits only as a value, not as a function");
  }

  // _rebuild_tensor(storage, offset, size, stride)
  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])
  // _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype[, metadata])
  Value rebuild_tensor(GlobalId id, const std::string& name, Value args) {
    std::size_t min = id == GlobalId::kRebuildTensor ? 4 : id == GlobalId::kRebuildTensorV2 ? 6 : 7;
    std::size_t max = id == GlobalId::kRebuildTensor ? 4 : min + 1;
    auto& a = args_of(args, name, min, max);
    if (a[0].kind != Kind::kStorage) bad_arg(name, 0, "a storage (persistent id)", a[0]);
    if (a[1].kind != Kind::kInt) bad_arg(name, 1, "an integer offset", a[1]);
    Tensor* t = arena_->make<Tensor>();
    t->storage = &a[0].storage();
    t->dtype = t->storage->dtype;
    t->offset = a[1].u.i;
    t->size = int_tuple(name, 2, a[2]);
    t->stride = int_tuple(name, 3, a[3]);
    t->byte_pos = op_pos_;
    if (id != GlobalId::kRebuildTensor) {
      if (a[4].kind != Kind::kBool) bad_arg(name, 4, "a bool (requires_grad)", a[4]);
      t->requires_grad = a[4].u.b;
      if (a[5].kind != Kind::kDict && a[5].kind != Kind::kNone) bad_arg(name, 5, "a dict of hooks", a[5]);
    }
    std::size_t meta = 6;
    if (id == GlobalId::kRebuildTensorV3) {
      if (a[6].kind != Kind::kGlobal || a[6].global_id() != GlobalId::kDtype) bad_arg(name, 6, "a torch dtype", a[6]);
      t->dtype = a[6].global_dtype();
      meta = 7;
    }
    if (a.size() > meta && a[meta].kind != Kind::kNone) {
      if (a[meta].kind != Kind::kDict) bad_arg(name, meta, "a dict of tensor metadata", a[meta]);
      for (auto& [k, v] : a[meta].dict().items) {
        if (k.kind == Kind::kStr && v.kind == Kind::kBool && k.str().s == "conj") t->conj = v.u.b;
        else if (k.kind == Kind::kStr && v.kind == Kind::kBool && k.str().s == "neg") t->neg = v.u.b;
        else
          throw UnsupportedError(here() + ": tensor metadata " +
                                 (k.kind == Kind::kStr ? core::quote_name(k.str().s) : std::string("of another kind")) +
                                 " is not supported (only the conj and neg bits are)");
      }
    }
    tensors_.push_back(t);
    return Value::object(Kind::kTensor, t);
  }

  // BUILD: only the attribute dict torch pickles with a state dict's OrderedDict (its
  // _metadata); the state is dropped. Anything else would call __setstate__.
  void build(Value& target, Value state) {
    if (target.kind == Kind::kDict && target.dict().ordered) {
      bool ok = state.kind == Kind::kDict || state.kind == Kind::kNone;
      if (state.kind == Kind::kTuple && state.seq().items.size() == 2) {
        ok = true;
        for (Value s : state.seq().items) ok = ok && (s.kind == Kind::kDict || s.kind == Kind::kNone);
      }
      if (!ok) fail("the state of an OrderedDict must be a dict, got a " + std::string(kind_name(state.kind)));
      return;
    }
    unsafe("BUILD on a " + std::string(kind_name(target.kind)) +
           " would call its __setstate__; only a state dict's attributes are allowed");
  }

  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
  std::size_t op_pos_ = 0;
  std::uint8_t op_ = 0;
  int protocol_ = 0;
  const std::string& where_;
  const RecordLookup& lookup_;
  Limits limits_;
  std::shared_ptr<Arena> arena_;
  std::vector<Value> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint32_t, Value> memo_;
  std::unordered_map<std::string, Storage*> storages_;
  std::vector<const Storage*> storage_order_;
  std::vector<const Tensor*> tensors_;
};

}  // namespace

Unpickled unpickle(std::span<const std::byte> pickle, const std::string& where,
                   const RecordLookup& lookup, const Limits& limits) {
  Machine m(pickle, where, lookup, limits);
  return m.run();
}

}  // namespace tensoracle::pth
