// What the pickle machine (pickle.h, pickle_machine.h) knows of torch: its dtypes and storage
// classes, the allow list of globals GLOBAL / STACK_GLOBAL may name, the persistent ids of
// storages, and what REDUCE "calls" and BUILD does, each building plain values here.
#include "convert/pickle.h"

#include <array>
#include <string>
#include <vector>

#include "convert/pickle_machine.h"
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

// ---------------------------------------------------------------------------------------
// the machine's torch side

Value Machine::resolve(std::string_view module, std::string_view name) {
  if (auto g = find_global(module, name)) return *g;
  std::string full = std::string(module) + "." + std::string(name);
  if (!core::valid_utf8(full)) fail("global name is not valid UTF-8");
  unsafe("global " + core::quote_name(full) +
         " is not in the allow list: the checkpoint asks to import or call something other "
         "than torch's tensor rebuilders and plain containers. Nothing was run. If the file is "
         "trusted, load it with torch.load(weights_only=False) and save its tensors with "
         "torch.save or safetensors");
}

Value Machine::persistent_load(Value pid) {
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

std::string Machine::storage_text(bool untyped, TorchDtype dtype, std::uint64_t numel) {
  if (untyped) return "UntypedStorage of " + std::to_string(numel) + " bytes";
  return std::string(dtype_info(dtype).storage_class) + " of " + std::to_string(numel) + " elements";
}

const std::vector<Value>& Machine::args_of(Value args, const std::string& callee, std::size_t min, std::size_t max) {
  if (args.kind != Kind::kTuple)
    fail("arguments of " + callee + " are a " + std::string(kind_name(args.kind)) + ", not a tuple");
  auto& a = args.seq().items;
  if (a.size() < min || a.size() > max)
    fail(callee + " takes " + (min == max ? std::to_string(min) : std::to_string(min) + " to " + std::to_string(max)) +
         " arguments, got " + std::to_string(a.size()));
  return a;
}

void Machine::bad_arg(const std::string& callee, std::size_t i, const std::string& what, Value got) const {
  fail(callee + ": argument " + std::to_string(i + 1) + " must be " + what + ", got a " +
       std::string(kind_name(got.kind)));
}

std::vector<std::int64_t> Machine::int_tuple(const std::string& callee, std::size_t i, Value v) {
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

Value Machine::call(Value callable, Value args) {
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

Value Machine::rebuild_tensor(GlobalId id, const std::string& name, Value args) {
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

void Machine::build(Value& target, Value state) {
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

}  // namespace tensoracle::pth
