#include "tensoracle/types.h"

#include <cstring>

#include "tensoracle/errors.h"

namespace tensoracle {

namespace {
struct TypeRow {
  std::string_view name;
  std::size_t size;
  bool floating;
};
// Indexed by DataType value.
constexpr TypeRow kTypes[kDataTypeCount] = {
    {"float32", 4, true}, {"float16", 2, true}, {"int8", 1, false},  {"int32", 4, false}, {"bool", 1, false},
    {"uint8", 1, false},  {"fp8", 1, true},     {"bfloat16", 2, true}, {"int64", 8, false},
};
}  // namespace

bool is_valid(DataType t) noexcept { return static_cast<int>(t) >= 0 && static_cast<int>(t) < kDataTypeCount; }
std::string_view type_name(DataType t) noexcept { return is_valid(t) ? kTypes[static_cast<int>(t)].name : "invalid"; }
std::size_t element_size(DataType t) noexcept { return is_valid(t) ? kTypes[static_cast<int>(t)].size : 0; }
bool is_floating(DataType t) noexcept { return is_valid(t) && kTypes[static_cast<int>(t)].floating; }

std::optional<DataType> parse_type(std::string_view name) noexcept {
  for (int i = 0; i < kDataTypeCount; ++i)
    if (kTypes[i].name == name) return static_cast<DataType>(i);
  return std::nullopt;
}

Dims::Dims(std::initializer_list<std::int64_t> d) : Dims(std::span<const std::int64_t>(d.begin(), d.size())) {}

Dims::Dims(std::span<const std::int64_t> d) {
  if (d.size() > static_cast<std::size_t>(kMaxRank))
    throw InvalidArgument("[types] dims of rank " + std::to_string(d.size()) + " exceed the maximum rank " +
                          std::to_string(kMaxRank));
  rank_ = static_cast<int>(d.size());
  std::copy(d.begin(), d.end(), d_.begin());
}

bool Dims::all_known() const noexcept {
  for (auto v : *this)
    if (v < 0) return false;
  return true;
}

std::int64_t Dims::volume() const noexcept {
  std::int64_t n = 1;
  for (auto v : *this) {
    if (v < 0) return -1;
    if (__builtin_mul_overflow(n, v, &n)) return -1;
  }
  return n;
}

std::string Dims::str() const {
  std::string s = "(";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(d_[static_cast<std::size_t>(i)]);
  return s + (rank_ == 1 ? ",)" : ")");
}

bool operator==(const Dims& a, const Dims& b) noexcept {
  return a.rank_ == b.rank_ && std::equal(a.begin(), a.end(), b.begin());
}

Weights::Weights(DataType type, const void* values, std::int64_t count, std::shared_ptr<const void> owner)
    : type_(type), values_(values), count_(count), owner_(std::move(owner)) {
  if (!is_valid(type)) throw InvalidArgument("[types] weights: invalid data type " + std::to_string(static_cast<int>(type)));
  if (count < 0) throw InvalidArgument("[types] weights: negative count " + std::to_string(count));
}

Weights Weights::copy_of(DataType type, const void* values, std::int64_t count) {
  if (count < 0) throw InvalidArgument("[types] weights: negative count " + std::to_string(count));
  std::size_t n = static_cast<std::size_t>(count) * element_size(type);
  auto storage = std::shared_ptr<std::byte[]>(new std::byte[n > 0 ? n : 1]);
  if (n > 0) std::memcpy(storage.get(), values, n);
  const void* p = storage.get();
  return Weights(type, p, count, std::shared_ptr<const void>(storage, p));
}

}  // namespace tensoracle
