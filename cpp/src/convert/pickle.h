// Internal: a restricted pickle virtual machine for the data.pkl of torch checkpoints.
//
//   pth::Limits limits{.max_memory = 256 << 20};
//   pth::Unpickled u = pth::unpickle(bytes, "[pth] model.pth: model/data.pkl", lookup, limits);
//   // u.root is the checkpoint (a Dict, usually); u.tensors every tensor it built.
//
// It interprets the opcodes of pickle protocols 2-5 that torch.save emits and nothing else.
// GLOBAL / STACK_GLOBAL resolve only names of a fixed table (kAllowedGlobals in pickle_torch.cpp:
// collections.OrderedDict, torch._utils._rebuild_tensor*, _rebuild_parameter*, torch
// storage classes and dtypes, torch.device, torch.Size, builtins set/frozenset/slice/complex,
// _codecs.encode), and REDUCE "calls" them by building plain values here — nothing is
// imported, looked up by attribute or executed. Persistent ids must be torch's storage
// references. Anything else throws UnsafeCheckpointError naming the global or opcode.
//
// Every object lives in an arena owned by the Unpickled result (no reference counting, so
// cycles leak nothing and destruction never recurses). The memory the machine uses (stack,
// memo, objects) is counted against Limits::max_memory: over it, UnsupportedError. Malformed
// input throws FormatError with the byte offset and opcode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensoracle/safetensors.h"

namespace tensoracle::pth {

// 128-bit integers (a GCC/Clang extension; __extension__ keeps -Wpedantic quiet).
__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 UInt128;
// Decimal text of `v`.
std::string int128_text(Int128 v);

// torch's dtypes, by their pickled names (torch.<name>). Values are internal.
enum class TorchDtype : std::uint8_t {
  kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kInt16, kInt8, kUInt8, kBool,
  kComplex64, kComplex128, kComplex32, kUInt16, kUInt32, kUInt64,
  kFloat8E4M3FN, kFloat8E5M2, kFloat8E4M3FNUZ, kFloat8E5M2FNUZ, kFloat8E8M0FNU, kFloat4E2M1FNx2,
  kQInt8, kQUInt8, kQInt32, kQUInt4x2, kQUInt2x4,
  kBits1x8, kBits2x4, kBits4x2, kBits8, kBits16,
  kInt1, kInt2, kInt3, kInt4, kInt5, kInt6, kInt7,
  kUInt1, kUInt2, kUInt3, kUInt4, kUInt5, kUInt6, kUInt7,
  kCount
};

struct TorchDtypeInfo {
  TorchDtype dtype;
  std::string_view name;          // "float32"
  int itemsize;                   // bytes per element, as torch's dtype.itemsize
  std::optional<safetensors::Dtype> st;  // nullopt: safetensors cannot hold it
  bool castable;                  // a floating type that --dtype converts (F64/F32/F16/BF16)
  int swap_unit;                  // bytes per byte-swapped word (complex: each half)
  std::string_view storage_class; // legacy typed storage class name, "" if none
};
const TorchDtypeInfo& dtype_info(TorchDtype dtype) noexcept;

enum class Kind : std::uint8_t {
  kNone, kBool, kInt, kBigInt, kFloat, kStr, kBytes, kTuple, kList, kSet, kFrozenSet, kDict,
  kGlobal, kStorage, kTensor, kDevice, kSlice, kComplex
};
std::string_view kind_name(Kind kind) noexcept;  // Python's type names: "int", "dict", ...

// The callables and classes of the allow list.
enum class GlobalId : std::uint8_t {
  kOrderedDict, kRebuildTensor, kRebuildTensorV2, kRebuildTensorV3, kRebuildParameter,
  kRebuildParameterWithState, kRebuildFromTypeV2, kTensorClass, kParameterClass,
  kStorageClass, kUntypedStorage, kDtype, kDevice, kSize, kSet, kFrozenSet, kSlice, kComplex,
  kCodecsEncode
};

struct Str;
struct BigInt;
struct Seq;
struct Dict;
struct Storage;
struct Tensor;
struct Device;
struct Slice;
struct Complex;

// A pickled value: a scalar held inline or a pointer to an arena object. Trivially copyable.
struct Value {
  Kind kind = Kind::kNone;
  union {
    bool b;
    std::int64_t i;
    double f;
    void* p;
    std::uint32_t g;  // GlobalId in bits 0-7, TorchDtype in bits 8-15
  } u{};

  static Value none() { return {}; }
  static Value boolean(bool v) { Value x; x.kind = Kind::kBool; x.u.b = v; return x; }
  static Value integer(std::int64_t v) { Value x; x.kind = Kind::kInt; x.u.i = v; return x; }
  static Value real(double v) { Value x; x.kind = Kind::kFloat; x.u.f = v; return x; }
  static Value object(Kind k, void* p) { Value x; x.kind = k; x.u.p = p; return x; }
  static Value global(GlobalId id, TorchDtype d = TorchDtype::kUInt8) {
    Value x;
    x.kind = Kind::kGlobal;
    x.u.g = static_cast<std::uint32_t>(id) | (static_cast<std::uint32_t>(d) << 8);
    return x;
  }

  GlobalId global_id() const noexcept { return static_cast<GlobalId>(u.g & 0xFF); }
  TorchDtype global_dtype() const noexcept { return static_cast<TorchDtype>((u.g >> 8) & 0xFF); }
  Str& str() const noexcept { return *static_cast<Str*>(u.p); }        // kStr, kBytes
  BigInt& big() const noexcept { return *static_cast<BigInt*>(u.p); }
  Seq& seq() const noexcept { return *static_cast<Seq*>(u.p); }        // tuple, list, sets
  Dict& dict() const noexcept { return *static_cast<Dict*>(u.p); }
  Storage& storage() const noexcept { return *static_cast<Storage*>(u.p); }
  Tensor& tensor() const noexcept { return *static_cast<Tensor*>(u.p); }
  Device& device() const noexcept { return *static_cast<Device*>(u.p); }
  Slice& slice() const noexcept { return *static_cast<Slice*>(u.p); }
  Complex& complex() const noexcept { return *static_cast<Complex*>(u.p); }
  bool is_seq() const noexcept {
    return kind == Kind::kTuple || kind == Kind::kList || kind == Kind::kSet ||
           kind == Kind::kFrozenSet;
  }
};

struct Str {
  std::string s;
  std::uint64_t key = 0;  // interned hash key, 0 until first used as a key
};
struct BigInt {
  Int128 v = 0;  // integers of 9 to 16 bytes
};
struct Seq {
  std::vector<Value> items;
  std::uint64_t key = 0;            // tuples and frozensets used as keys
  std::unordered_map<std::uint64_t, std::size_t> members;  // sets: key -> index
};
struct Dict {
  std::vector<std::pair<Value, Value>> items;  // insertion order
  std::unordered_map<std::uint64_t, std::size_t> index;  // interned key -> position
  bool ordered = false;  // an OrderedDict
};
struct Storage {
  std::string key;        // the persistent id's key: record "<archive>/data/<key>"
  std::string record;     // the zip entry's name
  std::string location;   // "cpu", "cuda:0" (ignored: data is copied, not placed)
  TorchDtype dtype{};     // the storage class's dtype (kUInt8 for UntypedStorage)
  bool untyped = false;
  std::uint64_t numel = 0;   // elements of dtype (bytes for UntypedStorage)
  std::span<const std::byte> data;  // the record's bytes (numel × itemsize of them)
};
struct Tensor {
  const Storage* storage = nullptr;
  TorchDtype dtype{};
  std::int64_t offset = 0;              // in elements of dtype
  std::vector<std::int64_t> size, stride;
  bool requires_grad = false;
  bool parameter = false;
  bool conj = false;  // torch's conjugate bit (complex): data holds the unconjugated values
  bool neg = false;   // torch's negative bit: data holds the values negated
  std::size_t byte_pos = 0;  // where in data.pkl it was built (for messages)
};
struct Device {
  std::string text;  // "cpu", "cuda:1"
  std::uint64_t key = 0;
};
struct Slice {
  Value start, stop, step;
};
struct Complex {
  double re = 0, im = 0;
};

struct Limits {
  std::uint64_t max_memory = 256ull << 20;  // bytes of stack, memo and objects
  int max_depth = 256;                      // nesting of hashed keys and of traversals
};

// A storage record found in the archive for a persistent id's key.
struct Record {
  std::string name;
  std::span<const std::byte> bytes;
};
using RecordLookup = std::function<std::optional<Record>(std::string_view key)>;

class Arena;

// The result: the root value and everything it refers to.
struct Unpickled {
  Value root;
  int protocol = 0;                      // of the PROTO opcode (0 if none)
  std::vector<const Tensor*> tensors;    // every tensor built, in build order
  std::vector<const Storage*> storages;  // every storage referenced, in first-use order
  std::shared_ptr<Arena> arena;          // owns all objects
};

// Runs `pickle`. `where` prefixes messages ("[pth] FILE: ARCHIVE/data.pkl"). `lookup` finds
// the record of a storage key (nullopt: missing, a FormatError).
Unpickled unpickle(std::span<const std::byte> pickle, const std::string& where,
                   const RecordLookup& lookup, const Limits& limits);

// The module-qualified name of an allowed global ("torch._utils._rebuild_tensor_v2").
std::string global_name(Value global);

}  // namespace tensoracle::pth
