// tensoracle/types.h — element types, dimensions and weights shared by every module.
//
//   using namespace tensoracle;
//   Dims d{16, 32};                          // rank 2; -1 marks a dynamic dim of an input
//   DataType t = DataType::kBF16;            // TensorRT's names and values
//   std::size_t bytes = volume(d) * element_size(t);
//   std::vector<float> w(d.volume());
//   Weights owned = Weights::copy_of(DataType::kFLOAT, w.data(), w.size());
//
// Weights hold bytes that are either owned (shared, immutable) or borrowed from a longer-lived
// owner such as a mapped safetensors file (no copy from disk to engine).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tensoracle {

// Element types, with TensorRT's names and numeric values (append-only: values are stored in
// engine files).
enum class DataType : std::int32_t {
  kFLOAT = 0,  // fp32 (never TF32)
  kHALF = 1,   // fp16
  kINT8 = 2,
  kINT32 = 3,
  kBOOL = 4,
  kUINT8 = 5,
  kFP8 = 6,    // fp8 e4m3fn
  kBF16 = 7,
  kINT64 = 8,
};

inline constexpr int kDataTypeCount = 9;

// "float32", "float16", "bfloat16", "int8", "int32", "bool", "uint8", "fp8", "int64".
std::string_view type_name(DataType t) noexcept;
std::optional<DataType> parse_type(std::string_view name) noexcept;
std::size_t element_size(DataType t) noexcept;
bool is_floating(DataType t) noexcept;  // float32, float16, bfloat16, fp8
bool is_valid(DataType t) noexcept;

// Up to 8 dimensions. In a network input, -1 marks a dimension fixed only at execution time.
class Dims {
 public:
  static constexpr int kMaxRank = 8;

  Dims() = default;
  Dims(std::initializer_list<std::int64_t> d);
  explicit Dims(std::span<const std::int64_t> d);  // throws InvalidArgument above kMaxRank

  int rank() const noexcept { return rank_; }
  std::int64_t operator[](int i) const noexcept { return d_[static_cast<std::size_t>(i)]; }
  std::int64_t& operator[](int i) noexcept { return d_[static_cast<std::size_t>(i)]; }
  const std::int64_t* begin() const noexcept { return d_.data(); }
  const std::int64_t* end() const noexcept { return d_.data() + rank_; }
  std::vector<std::int64_t> vec() const { return {begin(), end()}; }

  bool all_known() const noexcept;    // no -1
  std::int64_t volume() const noexcept;  // product (1 for rank 0); -1 if any dim is -1
  std::string str() const;            // "(16, 32)"

  friend bool operator==(const Dims& a, const Dims& b) noexcept;

 private:
  int rank_ = 0;
  std::array<std::int64_t, kMaxRank> d_{};
};

// Typed bytes for a constant: owned or borrowed. Copies share the bytes.
class Weights {
 public:
  Weights() = default;
  // Borrows `count` elements at `values`; `owner` keeps them alive (may be null when the caller
  // guarantees the bytes outlive every use, e.g. static data).
  Weights(DataType type, const void* values, std::int64_t count, std::shared_ptr<const void> owner);
  // Copies the bytes into owned storage.
  static Weights copy_of(DataType type, const void* values, std::int64_t count);

  DataType type() const noexcept { return type_; }
  std::int64_t count() const noexcept { return count_; }
  const void* values() const noexcept { return values_; }
  std::span<const std::byte> bytes() const noexcept {
    return {static_cast<const std::byte*>(values_), static_cast<std::size_t>(count_) * element_size(type_)};
  }
  const std::shared_ptr<const void>& owner() const noexcept { return owner_; }

 private:
  DataType type_ = DataType::kFLOAT;
  const void* values_ = nullptr;
  std::int64_t count_ = 0;
  std::shared_ptr<const void> owner_;
};

}  // namespace tensoracle
