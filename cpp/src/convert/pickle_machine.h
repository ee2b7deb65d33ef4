// Internal to the .pth converter's pickle machine (pickle.h): the arena its objects live in and
// the machine itself. The interpreter of the opcodes is pickle.cpp; what the machine knows of
// torch (the dtypes, the allow list of globals, storages' persistent ids, the callables REDUCE
// evaluates and BUILD) is pickle_torch.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "convert/pickle.h"
#include "tensoracle/errors.h"

namespace tensoracle::pth {


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

// Runs one pickle (unpickle()).
class Machine {
 public:
  Machine(std::span<const std::byte> in, const std::string& where, const RecordLookup& lookup,
          const Limits& limits)
      : in_(in), where_(where), lookup_(lookup), limits_(limits),
        arena_(std::make_shared<Arena>(limits.max_memory, where)) {}

  Unpickled run();

 private:
  // -- errors

  std::string here() const;
  [[noreturn]] void fail(const std::string& message) const;
  [[noreturn]] void unsafe(const std::string& message) const;

  // -- input

  std::span<const std::byte> take(std::uint64_t n);
  template <typename T>
  T read_le() {
    T v;
    std::memcpy(&v, take(sizeof(T)).data(), sizeof(T));
    return v;
  }
  std::string_view line();

  // -- stack

  std::size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Value v);
  Value pop();
  Value& top();
  // The values above the innermost MARK, which is removed.
  std::vector<Value> pop_mark();

  // -- objects

  Value make_str(std::span<const std::byte> b, Kind kind);
  Value make_seq(Kind kind, std::vector<Value> items = {});
  Value make_dict(bool ordered);
  Value make_int(const std::byte* p, std::size_t n);  // little-endian two's complement

  // -- hashing: every key and set member gets an interned id; equal values, equal ids
  // (Python's equality for the hashable types here: 1 == 1.0 == True).

  std::uint64_t key_of(Value v, int depth = 0);
  std::uint64_t float_key(double re, double im);
  void set_item(Dict& d, Value k, Value v);
  void add_member(Seq& s, Value v);
  Dict& dict_target(const char* what);

  // -- opcodes

  void step();
  std::vector<Value>& list_target();
  void memo_put(std::uint64_t index);
  void memo_get(std::uint32_t index);

  // -- the torch side (pickle_torch.cpp)

  // GLOBAL / STACK_GLOBAL: the allow list's value for `module.name`, else UnsafeCheckpointError.
  Value resolve(std::string_view module, std::string_view name);

  // ('storage', storage_class, key, location, numel) -> the Storage of that key.
  Value persistent_load(Value pid);
  static std::string storage_text(bool untyped, TorchDtype dtype, std::uint64_t numel);

  // -- REDUCE: the allowed callables, evaluated here

  const std::vector<Value>& args_of(Value args, const std::string& callee, std::size_t min, std::size_t max);
  [[noreturn]] void bad_arg(const std::string& callee, std::size_t i, const std::string& what, Value got) const;
  std::vector<std::int64_t> int_tuple(const std::string& callee, std::size_t i, Value v);
  Value call(Value callable, Value args);

  // _rebuild_tensor(storage, offset, size, stride)
  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])
  // _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype[, metadata])
  Value rebuild_tensor(GlobalId id, const std::string& name, Value args);

  // BUILD: only the attribute dict torch pickles with a state dict's OrderedDict (its
  // _metadata); the state is dropped. Anything else would call __setstate__.
  void build(Value& target, Value state);

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

}  // namespace tensoracle::pth
