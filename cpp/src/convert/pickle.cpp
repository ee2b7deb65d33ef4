// The restricted pickle machine (see pickle.h): its interpreter of the opcodes, with their stack,
// memo and objects (what the machine knows of torch is pickle_torch.cpp). Opcode semantics
// follow CPython's Modules/_pickle.c (the "fence" of the innermost MARK, POP discarding a mark,
// MEMOIZE using the memo's size); what torch.save never emits is refused rather than emulated.
#include "convert/pickle.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "convert/pickle_machine.h"
#include "core/text.h"
#include "tensoracle/errors.h"

namespace tensoracle::pth {


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

}  // namespace

Unpickled Machine::run() {
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

std::string Machine::here() const {
  const char* n = op_name(op_);
  return where_ + ": " + (n ? std::string(n) : hex_byte(op_)) + " at byte " + std::to_string(op_pos_);
}

void Machine::fail(const std::string& message) const {
  throw FormatError(here() + ": " + message);
}

void Machine::unsafe(const std::string& message) const {
  throw UnsafeCheckpointError(here() + ": " + message);
}

std::span<const std::byte> Machine::take(std::uint64_t n) {
  if (n > in_.size() - pos_)
    fail("needs " + std::to_string(n) + " bytes, but the pickle has only " +
         std::to_string(in_.size() - pos_) + " left (truncated?)");
  auto s = in_.subspan(pos_, static_cast<std::size_t>(n));
  pos_ += static_cast<std::size_t>(n);
  return s;
}

std::string_view Machine::line() {
  auto rest = std::string_view(reinterpret_cast<const char*>(in_.data()) + pos_, in_.size() - pos_);
  auto nl = rest.find('\n');
  if (nl == std::string_view::npos) fail("a text argument has no terminating newline (truncated?)");
  pos_ += nl + 1;
  return rest.substr(0, nl);
}

void Machine::push(Value v) {
  if (stack_.size() == stack_.capacity()) arena_->charge(sizeof(Value) * (stack_.size() + 16));
  stack_.push_back(v);
}

Value Machine::pop() {
  if (stack_.size() <= fence()) fail("stack underflow (nothing above the last MARK)");
  Value v = stack_.back();
  stack_.pop_back();
  return v;
}

Value& Machine::top() {
  if (stack_.size() <= fence()) fail("stack underflow (nothing above the last MARK)");
  return stack_.back();
}

std::vector<Value> Machine::pop_mark() {
  if (marks_.empty()) fail("no MARK on the stack");
  std::size_t m = marks_.back();
  marks_.pop_back();
  std::vector<Value> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
  stack_.resize(m);
  return items;
}

Value Machine::make_str(std::span<const std::byte> b, Kind kind) {
  Str* s = arena_->make<Str>();
  arena_->charge(b.size());
  s->s.assign(reinterpret_cast<const char*>(b.data()), b.size());
  if (kind == Kind::kStr && !core::valid_utf8(s->s))
    fail("string " + core::quote_name(s->s, 60) + " is not valid UTF-8");
  return Value::object(kind, s);
}

Value Machine::make_seq(Kind kind, std::vector<Value> items) {
  Seq* q = arena_->make<Seq>();
  arena_->charge(items.size() * sizeof(Value));
  q->items = std::move(items);
  return Value::object(kind, q);
}

Value Machine::make_dict(bool ordered) {
  Dict* d = arena_->make<Dict>();
  d->ordered = ordered;
  return Value::object(Kind::kDict, d);
}

Value Machine::make_int(const std::byte* p, std::size_t n) {
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

std::uint64_t Machine::key_of(Value v, int depth) {
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

std::uint64_t Machine::float_key(double re, double im) {
  if (im == 0 && std::isfinite(re) && re == std::trunc(re) && std::fabs(re) < 9.2e18)
    return arena_->intern("i" + std::to_string(static_cast<std::int64_t>(re)));
  char buf[48];
  std::snprintf(buf, sizeof buf, "f%016llx,%016llx",
                static_cast<unsigned long long>(std::bit_cast<std::uint64_t>(re)),
                static_cast<unsigned long long>(std::bit_cast<std::uint64_t>(im)));
  return arena_->intern(buf);
}

void Machine::set_item(Dict& d, Value k, Value v) {
  std::uint64_t id = key_of(k);
  auto [it, fresh] = d.index.emplace(id, d.items.size());
  if (fresh) {
    arena_->charge(2 * sizeof(Value) + 32);
    d.items.emplace_back(k, v);
  } else {
    d.items[it->second].second = v;  // Python keeps the first key object, takes the new value
  }
}

void Machine::add_member(Seq& s, Value v) {
  std::uint64_t id = key_of(v);
  if (s.members.emplace(id, s.items.size()).second) {
    arena_->charge(sizeof(Value) + 32);
    s.items.push_back(v);
  }
}

Dict& Machine::dict_target(const char* what) {
  Value& t = top();
  if (t.kind != Kind::kDict)
    fail(std::string(what) + " on a " + std::string(kind_name(t.kind)) + ", not a dict");
  return t.dict();
}

void Machine::step() {
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

std::vector<Value>& Machine::list_target() {
  Value& t = top();
  if (t.kind != Kind::kList) fail("appending to a " + std::string(kind_name(t.kind)) + ", not a list");
  return t.seq().items;
}

void Machine::memo_put(std::uint64_t index) {
  if (index > UINT32_MAX) fail("memo index " + std::to_string(index) + " is out of range");
  Value v = top();
  if (memo_.insert_or_assign(static_cast<std::uint32_t>(index), v).second) arena_->charge(64);
}

void Machine::memo_get(std::uint32_t index) {
  auto it = memo_.find(index);
  if (it == memo_.end()) fail("memo entry " + std::to_string(index) + " was never stored");
  push(it->second);
}

Unpickled unpickle(std::span<const std::byte> pickle, const std::string& where,
                   const RecordLookup& lookup, const Limits& limits) {
  Machine m(pickle, where, lookup, limits);
  return m.run();
}

}  // namespace tensoracle::pth
