// safetensors reader (validating parser over a memory map) and atomic writer.
#include "tensoracle/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "core/atomic_file.h"
#include "core/mapped_file.h"
#include "core/text.h"

static_assert(std::endian::native == std::endian::little,
              "tensoracle reads and writes little-endian data in place; big-endian hosts are "
              "not supported");

namespace tensoracle::safetensors {

using core::quote_name;

// ---------------------------------------------------------------------------------------
// dtypes

namespace {

struct DtypeRow {
  Dtype dtype;
  std::string_view name;
  int bits;
  int official_rank;  // position in the official package's Dtype enum: its writer's sort key
};

constexpr std::array<DtypeRow, kDtypeCount> kDtypes{{
    {Dtype::BOOL, "BOOL", 8, 0},        {Dtype::U8, "U8", 8, 4},
    {Dtype::I8, "I8", 8, 5},            {Dtype::F8_E5M2, "F8_E5M2", 8, 6},
    {Dtype::F8_E4M3, "F8_E4M3", 8, 7},  {Dtype::I16, "I16", 16, 11},
    {Dtype::U16, "U16", 16, 12},        {Dtype::F16, "F16", 16, 13},
    {Dtype::BF16, "BF16", 16, 14},      {Dtype::I32, "I32", 32, 15},
    {Dtype::U32, "U32", 32, 16},        {Dtype::F32, "F32", 32, 17},
    {Dtype::F64, "F64", 64, 19},        {Dtype::I64, "I64", 64, 20},
    {Dtype::U64, "U64", 64, 21},        {Dtype::F8_E8M0, "F8_E8M0", 8, 8},
    {Dtype::F4, "F4", 4, 1},            {Dtype::F6_E2M3, "F6_E2M3", 6, 2},
    {Dtype::F6_E3M2, "F6_E3M2", 6, 3},  {Dtype::C64, "C64", 64, 18},
    {Dtype::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8, 9},
    {Dtype::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8, 10},
}};

constexpr bool table_is_indexed_by_value() {
  for (int i = 0; i < kDtypeCount; ++i)
    if (static_cast<int>(kDtypes[i].dtype) != i) return false;
  return true;
}
static_assert(table_is_indexed_by_value());

const DtypeRow& row(Dtype d) noexcept { return kDtypes[static_cast<std::size_t>(d)]; }

}  // namespace

std::string_view dtype_name(Dtype dtype) noexcept { return row(dtype).name; }
int dtype_bits(Dtype dtype) noexcept { return row(dtype).bits; }

std::optional<Dtype> parse_dtype(std::string_view name) noexcept {
  for (const auto& r : kDtypes)
    if (r.name == name) return r.dtype;
  return std::nullopt;
}

std::uint64_t TensorInfo::numel() const noexcept {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

namespace {

// At most 16 dimensions are printed, so a message stays short whatever the input.
std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size() && i < 16; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() > 16) s += ", ... (" + std::to_string(shape.size()) + " dimensions)";
  return s + "]";
}

// Element count and byte length of a shape, or nullopt on overflow / a partial byte.
struct Extent {
  std::uint64_t numel = 1;
  std::optional<std::uint64_t> nbytes;  // nullopt: the bits do not fill whole bytes
  bool overflow = false;
};

Extent extent(Dtype dtype, const std::vector<std::int64_t>& shape) {
  Extent e;
  // The product of the non-zero dims, in bytes, must fit a signed 64-bit size even for an
  // empty tensor: readers (NumPy among them) size arrays from every dimension.
  std::int64_t span = std::max(1, dtype_bits(dtype) / 8);
  for (auto d : shape) {
    if (__builtin_mul_overflow(span, std::max<std::int64_t>(d, 1), &span)) {
      e.overflow = true;
      return e;
    }
  }
  for (auto d : shape) {
    if (__builtin_mul_overflow(e.numel, static_cast<std::uint64_t>(d), &e.numel)) {
      e.overflow = true;
      return e;
    }
  }
  std::uint64_t bits;
  if (__builtin_mul_overflow(e.numel, static_cast<std::uint64_t>(dtype_bits(dtype)), &bits)) {
    e.overflow = true;
    return e;
  }
  if (bits % 8 == 0) e.nbytes = bits / 8;
  return e;
}

}  // namespace

namespace detail {
void check_view(const TensorInfo& info, const void* data, std::string_view want_type,
                bool type_ok, std::size_t alignment) {
  if (!type_ok)
    throw InvalidArgument("[safetensors] tensor " + quote_name(info.name) + " has dtype " +
                          std::string(dtype_name(info.dtype)) + "; it cannot be viewed as " +
                          std::string(want_type));
  if (reinterpret_cast<std::uintptr_t>(data) % alignment != 0)
    throw InvalidArgument("[safetensors] tensor " + quote_name(info.name) +
                          ": data is not aligned to " + std::to_string(alignment) +
                          " bytes (the file's header length is not a multiple of 8); copy "
                          "bytes() instead of viewing in place");
}
}  // namespace detail

// ---------------------------------------------------------------------------------------
// reader

struct File::State {
  std::shared_ptr<core::MappedFile> map;  // null when parsing caller-held bytes
  std::span<const std::byte> bytes;
  std::string name;
  std::uint64_t header_size = 0;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string_view, std::size_t> index;
  Metadata metadata;
  bool has_metadata = false;
};

namespace {

using json = nlohmann::json;

// Builds TensorInfo entries from the header's JSON events without building a DOM, checking
// structure as it goes. Returning false stops the parser; `error` then says why.
class HeaderHandler : public nlohmann::json_sax<json> {
 public:
  std::vector<TensorInfo> tensors;
  Metadata metadata;
  bool has_metadata = false;
  std::string error;

  bool null() override { return value_error("null"); }
  bool boolean(bool) override { return value_error("a boolean"); }
  bool binary(binary_t&) override { return value_error("binary data"); }

  bool number_integer(number_integer_t v) override {
    // nlohmann reports "-0" here too: name it as written.
    std::string text = v == 0 ? std::string("-0") : std::to_string(v);
    if (where_ == Where::kShape)
      return fail(tensor_prefix() + "shape has negative dimension " + text);
    if (where_ == Where::kOffsets)
      return fail(tensor_prefix() + "data_offsets has negative offset " + text);
    return value_error("a number");
  }

  bool number_unsigned(number_unsigned_t v) override {
    if (where_ == Where::kShape) {
      if (v > static_cast<std::uint64_t>(INT64_MAX))
        return fail(tensor_prefix() + "shape dimension " + std::to_string(v) +
                    " overflows a signed 64-bit integer");
      cur().shape.push_back(static_cast<std::int64_t>(v));
      return true;
    }
    if (where_ == Where::kOffsets) {
      if (offsets_seen_ >= 2) return fail(tensor_prefix() + "data_offsets has more than 2 entries");
      (offsets_seen_ == 0 ? cur().begin : cur().end) = v;
      ++offsets_seen_;
      return true;
    }
    return value_error("a number");
  }

  bool number_float(number_float_t, const string_t& text) override {
    if (where_ == Where::kShape)
      return fail(tensor_prefix() + "shape dimension " + quote_name(text) +
                  " is not an integer in [0, 2^63)");
    if (where_ == Where::kOffsets)
      return fail(tensor_prefix() + "data_offsets entry " + quote_name(text) +
                  " is not an integer in [0, 2^64)");
    return value_error("a number");
  }

  bool string(string_t& s) override {
    if (where_ == Where::kMetadata) {
      metadata.emplace(std::move(pending_key_), std::move(s));
      return true;
    }
    if (where_ == Where::kTensor && field_ == Field::kDtype) {
      auto d = parse_dtype(s);
      if (!d)
        return fail(tensor_prefix() + "unknown dtype " + quote_name(s) +
                    " (known: BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F4, F6_E2M3, F6_E3M2, "
                    "F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, F16, BF16, F32, F64, C64)");
      cur().dtype = *d;
      return true;
    }
    return value_error("a string");
  }

  bool start_object(std::size_t) override {
    switch (where_) {
      case Where::kStart: where_ = Where::kRoot; return true;
      case Where::kRoot:
        if (pending_key_ == "__metadata__") {
          where_ = Where::kMetadata;
          has_metadata = true;
          return true;
        }
        where_ = Where::kTensor;
        tensors.push_back(TensorInfo{});
        cur().name = std::move(pending_key_);
        seen_fields_ = 0;
        return true;
      default: return value_error("an object");
    }
  }

  bool key(string_t& k) override {
    switch (where_) {
      case Where::kRoot:
        if (!root_keys_.insert(k).second)
          return fail("duplicate key " + quote_name(k) + " in the header");
        pending_key_ = std::move(k);
        return true;
      case Where::kMetadata:
        if (metadata.count(k)) return fail("__metadata__: duplicate key " + quote_name(k));
        pending_key_ = std::move(k);
        return true;
      case Where::kTensor: {
        Field f;
        if (k == "dtype") f = Field::kDtype;
        else if (k == "shape") f = Field::kShape;
        else if (k == "data_offsets") f = Field::kOffsets;
        else return fail(tensor_prefix() + "unknown field " + quote_name(k) + " (expected dtype, shape, data_offsets)");
        unsigned bit = 1u << static_cast<unsigned>(f);
        if (seen_fields_ & bit) return fail(tensor_prefix() + "duplicate field " + quote_name(k));
        seen_fields_ |= bit;
        field_ = f;
        return true;
      }
      default: return fail("unexpected key");  // unreachable: keys only occur in objects
    }
  }

  bool end_object() override {
    switch (where_) {
      case Where::kRoot: where_ = Where::kDone; return true;
      case Where::kMetadata: where_ = Where::kRoot; return true;
      case Where::kTensor:
        for (auto [f, name] : {std::pair{Field::kDtype, "dtype"}, {Field::kShape, "shape"},
                               {Field::kOffsets, "data_offsets"}})
          if (!(seen_fields_ & (1u << static_cast<unsigned>(f))))
            return fail(tensor_prefix() + "missing field '" + name + "'");
        where_ = Where::kRoot;
        return true;
      default: return fail("unexpected end of object");
    }
  }

  bool start_array(std::size_t) override {
    if (where_ == Where::kTensor && field_ == Field::kShape) {
      where_ = Where::kShape;
      return true;
    }
    if (where_ == Where::kTensor && field_ == Field::kOffsets) {
      where_ = Where::kOffsets;
      offsets_seen_ = 0;
      return true;
    }
    return value_error("an array");
  }

  bool end_array() override {
    if (where_ == Where::kShape) {
      where_ = Where::kTensor;
      return true;
    }
    if (where_ == Where::kOffsets) {
      if (offsets_seen_ != 2)
        return fail(tensor_prefix() + "data_offsets has " + std::to_string(offsets_seen_) +
                    " entries, not 2");
      where_ = Where::kTensor;
      return true;
    }
    return fail("unexpected end of array");
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    if (error.empty()) {
      // nlohmann's text ends with the offending token, which may hold raw bytes: escape it.
      std::string what = ex.what();
      auto p = what.find("] ");
      if (p != std::string::npos) what = what.substr(p + 2);
      auto q = quote_name(what, 300);
      std::string context;
      if (where_ == Where::kShape) context = tensor_prefix() + "shape dimension is not a valid number: ";
      else if (where_ == Where::kOffsets) context = tensor_prefix() + "data_offsets entry is not a valid number: ";
      else if (where_ == Where::kTensor) context = tensor_prefix();
      else if (where_ == Where::kMetadata) context = "__metadata__: ";
      error = context + "header is not valid JSON (at byte " + std::to_string(position) + "): " +
              q.substr(1, q.size() - 2);
    }
    return false;
  }

 private:
  enum class Where { kStart, kRoot, kMetadata, kTensor, kShape, kOffsets, kDone };
  enum class Field { kDtype = 0, kShape = 1, kOffsets = 2 };

  TensorInfo& cur() { return tensors.back(); }
  std::string tensor_prefix() { return "tensor " + quote_name(cur().name) + ": "; }

  bool fail(std::string message) {
    if (error.empty()) error = std::move(message);
    return false;
  }

  bool value_error(const char* what) {
    switch (where_) {
      case Where::kStart: return fail(std::string("header is ") + what + ", not a JSON object");
      case Where::kRoot:
        if (pending_key_ == "__metadata__")
          return fail(std::string("__metadata__ is ") + what + ", not an object of strings");
        return fail("tensor " + quote_name(pending_key_) + ": entry is " + what + ", not an object");
      case Where::kMetadata:
        return fail("__metadata__ " + quote_name(pending_key_) + ": value is " + what +
                    ", not a string (metadata must map strings to strings)");
      case Where::kTensor:
        switch (field_) {
          case Field::kDtype: return fail(tensor_prefix() + "dtype is " + what + ", not a string");
          case Field::kShape: return fail(tensor_prefix() + "shape is " + what + ", not an array of integers");
          case Field::kOffsets: return fail(tensor_prefix() + "data_offsets is " + what + ", not an array of 2 integers");
        }
        break;
      case Where::kShape: return fail(tensor_prefix() + "shape holds " + what + ", not only integers");
      case Where::kOffsets: return fail(tensor_prefix() + "data_offsets holds " + what + ", not only integers");
      case Where::kDone: break;
    }
    return fail(std::string("unexpected ") + what + " in the header");
  }

  Where where_ = Where::kStart;
  Field field_ = Field::kDtype;
  unsigned seen_fields_ = 0;
  int offsets_seen_ = 0;
  std::string pending_key_;
  std::unordered_set<std::string> root_keys_;
};

[[noreturn]] void format_error(const std::string& file, const std::string& message) {
  throw FormatError("[safetensors] " + file + ": " + message);
}

std::string offsets_text(const TensorInfo& t) {
  return "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
}

void validate_tensors(const std::string& file, std::vector<TensorInfo>& tensors,
                      std::uint64_t data_size) {
  for (const auto& t : tensors) {
    auto prefix = "tensor " + quote_name(t.name) + ": ";
    Extent e = extent(t.dtype, t.shape);
    if (e.overflow)
      format_error(file, prefix + "shape " + shape_text(t.shape) + " of " +
                             std::string(dtype_name(t.dtype)) + " overflows 64-bit sizes (its dimensions multiply past 2^63 bytes)");
    if (!e.nbytes)
      format_error(file, prefix + "shape " + shape_text(t.shape) + " holds " +
                             std::to_string(e.numel) + " elements of " +
                             std::string(dtype_name(t.dtype)) + " (" +
                             std::to_string(dtype_bits(t.dtype)) +
                             " bits each), which do not fill whole bytes");
    if (t.end < t.begin) format_error(file, prefix + offsets_text(t) + " end before begin");
    if (t.end > data_size)
      format_error(file, prefix + offsets_text(t) + " extend beyond the data section (" +
                             std::to_string(data_size) + " bytes)");
    if (t.end - t.begin != *e.nbytes)
      format_error(file, prefix + offsets_text(t) + " hold " + std::to_string(t.end - t.begin) +
                             " bytes, but shape " + shape_text(t.shape) + " of " +
                             std::string(dtype_name(t.dtype)) + " needs " +
                             std::to_string(*e.nbytes));
  }
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::uint64_t covered = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : tensors) {
    if (t.begin > covered)
      format_error(file, "bytes [" + std::to_string(covered) + ", " + std::to_string(t.begin) +
                             ") of the data section belong to no tensor (a hole before tensor " +
                             quote_name(t.name) + ")");
    if (t.begin < covered)
      format_error(file, "tensor " + quote_name(t.name) + " " + offsets_text(t) +
                             " overlaps tensor " + quote_name(prev->name) + " " + offsets_text(*prev));
    covered = t.end;
    if (t.end > t.begin || prev == nullptr) prev = &t;
  }
  if (covered != data_size)
    format_error(file, "the data section has " + std::to_string(data_size) +
                           " bytes but the tensors cover only " + std::to_string(covered) +
                           " (trailing bytes after the last tensor)");
}

std::shared_ptr<File::State> parse_state(std::span<const std::byte> bytes, std::string name) {
  auto st = std::make_shared<File::State>();
  st->bytes = bytes;
  st->name = std::move(name);
  const std::string& file = st->name;
  if (bytes.size() < 8)
    format_error(file, "file is " + std::to_string(bytes.size()) +
                           " bytes, shorter than the 8-byte header length");
  std::uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxHeaderBytes)
    format_error(file, "header length " + std::to_string(n) + " exceeds the limit of " +
                           std::to_string(kMaxHeaderBytes) + " bytes");
  if (n > bytes.size() - 8)
    format_error(file, "header length " + std::to_string(n) +
                           " extends beyond the end of the file (" +
                           std::to_string(bytes.size()) + " bytes)");
  st->header_size = n;
  auto header = std::string_view(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  if (header.empty() || header.front() != '{')
    format_error(file, "header does not start with '{' (it must be a JSON object)");
  // A raw NUL is never valid JSON, and nlohmann's lexer would take it for the end of input.
  if (auto nul = header.find('\0'); nul != std::string_view::npos)
    format_error(file, "header holds a NUL byte at byte " + std::to_string(nul) + " (it must be JSON text)");

  HeaderHandler h;
  bool ok = json::sax_parse(header.begin(), header.end(), &h, json::input_format_t::json, true);
  if (!ok) format_error(file, h.error.empty() ? "header is not valid JSON" : h.error);

  st->tensors = std::move(h.tensors);
  st->metadata = std::move(h.metadata);
  st->has_metadata = h.has_metadata;
  validate_tensors(file, st->tensors, bytes.size() - 8 - n);
  st->index.reserve(st->tensors.size());
  for (std::size_t i = 0; i < st->tensors.size(); ++i) st->index.emplace(st->tensors[i].name, i);
  return st;
}

}  // namespace

File File::open(const std::filesystem::path& path, MapMode mode) {
  auto map = std::make_shared<core::MappedFile>(path, mode == MapMode::kCopyOnWrite, "safetensors");
  auto st = parse_state(map->bytes(), path.string());
  st->map = std::move(map);
  return File(std::move(st));
}

File File::parse(std::span<const std::byte> bytes, std::string display_name) {
  return File(parse_state(bytes, std::move(display_name)));
}

const std::string& File::display_name() const noexcept { return state_->name; }
std::uint64_t File::file_size() const noexcept { return state_->bytes.size(); }
std::uint64_t File::header_size() const noexcept { return state_->header_size; }
const std::vector<TensorInfo>& File::tensors() const noexcept { return state_->tensors; }
const Metadata& File::metadata() const noexcept { return state_->metadata; }
bool File::has_metadata() const noexcept { return state_->has_metadata; }
std::span<const std::byte> File::raw() const noexcept { return state_->bytes; }

const TensorInfo* File::find(std::string_view name) const noexcept {
  auto it = state_->index.find(name);
  return it == state_->index.end() ? nullptr : &state_->tensors[it->second];
}

const TensorInfo& File::at(std::string_view name) const {
  if (const TensorInfo* t = find(name)) return *t;
  throw InvalidArgument("[safetensors] " + state_->name + ": no tensor named " + quote_name(name));
}

TensorView File::view(std::string_view name) const { return view(at(name)); }

TensorView File::view(const TensorInfo& info) const {
  return TensorView(&info, state_->bytes.data() + data_offset() + info.begin);
}

// ---------------------------------------------------------------------------------------
// writer

namespace {

// One tensor to lay out, from either kind of input.
struct Item {
  const std::string* name;
  Dtype dtype;
  const std::vector<std::int64_t>* shape;
  std::optional<std::uint64_t> given_bytes;  // TensorData: the span's size, checked
  std::size_t index;                          // in the caller's vector
  std::uint64_t nbytes = 0;                   // from the shape (set by layout)
};

struct Layout {
  std::string header;       // padded JSON, without the 8-byte length
  std::vector<Item> order;  // data section order
};

Layout layout(std::vector<Item> items, const std::optional<Metadata>& metadata) {
  Layout out;
  std::unordered_set<std::string_view> names;
  for (auto& t : items) {
    const std::string& name = *t.name;
    auto prefix = "[safetensors] tensor " + quote_name(name) + ": ";
    if (!core::valid_utf8(name))
      throw InvalidArgument("[safetensors] tensor name " + quote_name(name) + " is not valid UTF-8");
    if (name == "__metadata__")
      throw InvalidArgument(prefix + "the name is reserved for the metadata entry");
    if (!names.insert(name).second) throw InvalidArgument(prefix + "duplicate name");
    if (static_cast<int>(t.dtype) >= kDtypeCount)
      throw InvalidArgument(prefix + "invalid dtype value " + std::to_string(static_cast<int>(t.dtype)));
    for (auto d : *t.shape)
      if (d < 0) throw InvalidArgument(prefix + "negative dimension in shape " + shape_text(*t.shape));
    Extent e = extent(t.dtype, *t.shape);
    if (e.overflow) throw InvalidArgument(prefix + "shape " + shape_text(*t.shape) + " overflows");
    if (!e.nbytes)
      throw InvalidArgument(prefix + "shape " + shape_text(*t.shape) + " of " +
                            std::string(dtype_name(t.dtype)) + " does not fill whole bytes");
    if (t.given_bytes && *e.nbytes != *t.given_bytes)
      throw InvalidArgument(prefix + "shape " + shape_text(*t.shape) + " of " +
                            std::string(dtype_name(t.dtype)) + " needs " +
                            std::to_string(*e.nbytes) + " bytes, got " +
                            std::to_string(*t.given_bytes));
    t.nbytes = *e.nbytes;
  }
  for (const auto& [k, v] : metadata.value_or(Metadata{}))
    if (!core::valid_utf8(k) || !core::valid_utf8(v))
      throw InvalidArgument("[safetensors] metadata entry " + quote_name(k) + " is not valid UTF-8");

  out.order = std::move(items);
  std::stable_sort(out.order.begin(), out.order.end(), [](const Item& a, const Item& b) {
    int ra = row(a.dtype).official_rank, rb = row(b.dtype).official_rank;
    if (ra != rb) return ra > rb;
    return *a.name < *b.name;
  });

  std::string& h = out.header;
  h = "{";
  bool first = true;
  if (metadata) {
    h += "\"__metadata__\":{";
    bool mfirst = true;
    for (const auto& [k, v] : *metadata) {
      if (!mfirst) h += ',';
      mfirst = false;
      core::append_json_string(h, k);
      h += ':';
      core::append_json_string(h, v);
    }
    h += '}';
    first = false;
  }
  std::uint64_t offset = 0;
  for (const Item& t : out.order) {
    if (!first) h += ',';
    first = false;
    core::append_json_string(h, *t.name);
    h += ":{\"dtype\":\"";
    h += dtype_name(t.dtype);
    h += "\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape->size(); ++i) {
      if (i) h += ',';
      h += std::to_string((*t.shape)[i]);
    }
    h += "],\"data_offsets\":[";
    h += std::to_string(offset) + "," + std::to_string(offset + t.nbytes) + "]}";
    offset += t.nbytes;
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
  if (h.size() > kMaxHeaderBytes)
    throw InvalidArgument("[safetensors] the header would be " + std::to_string(h.size()) +
                          " bytes, above the format's limit of " + std::to_string(kMaxHeaderBytes));
  return out;
}

Layout layout(const std::vector<TensorData>& tensors, const std::optional<Metadata>& metadata) {
  std::vector<Item> items;
  items.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i)
    items.push_back({&tensors[i].name, tensors[i].dtype, &tensors[i].shape, tensors[i].data.size(), i});
  return layout(std::move(items), metadata);
}

Layout layout(const std::vector<TensorSource>& tensors, const std::optional<Metadata>& metadata) {
  std::vector<Item> items;
  items.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].write)
      throw InvalidArgument("[safetensors] tensor " + quote_name(tensors[i].name) + ": no write function");
    items.push_back({&tensors[i].name, tensors[i].dtype, &tensors[i].shape, std::nullopt, i});
  }
  return layout(std::move(items), metadata);
}

std::array<std::byte, 8> length_prefix(std::uint64_t n) {
  std::array<std::byte, 8> b;
  std::memcpy(b.data(), &n, 8);
  return b;
}

// Reads `length` bytes at `offset` of `fd` in chunks of at most 1 MiB, passing each to `put`.
template <typename Put>
void read_range(int fd, std::uint64_t offset, std::uint64_t length, Put&& put) {
  std::vector<std::byte> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(length, std::uint64_t{1} << 20)));
  while (length > 0) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(length, buffer.size()));
    ssize_t n = ::pread(fd, buffer.data(), want, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw IoError("[safetensors] cannot read the data to copy: " + std::string(std::strerror(errno)), errno, "");
    if (n == 0) throw IoError("[safetensors] the data to copy ends early (was its file truncated?)", EIO, "");
    put(std::span(buffer).first(static_cast<std::size_t>(n)));
    offset += static_cast<std::uint64_t>(n);
    length -= static_cast<std::uint64_t>(n);
  }
}

// Where streamed bytes go: a file being written atomically, or memory.
struct FileOut {
  core::AtomicFile& file;
  void bytes(std::span<const std::byte> b) { file.write(b); }
  void copy(int fd, std::uint64_t offset, std::uint64_t length) { file.copy_from(fd, offset, length); }
};
struct MemoryOut {
  std::vector<std::byte>& out;
  void bytes(std::span<const std::byte> b) { out.insert(out.end(), b.begin(), b.end()); }
  void copy(int fd, std::uint64_t offset, std::uint64_t length) {
    read_range(fd, offset, length, [this](std::span<const std::byte> b) { bytes(b); });
  }
};

// Forwards one tensor's bytes to `out`, holding the source to its byte length.
template <typename Out>
class CountingSink final : public ByteSink {
 public:
  CountingSink(Out& out, const Item& item) : out_(out), item_(item) {}
  void write(std::span<const std::byte> bytes) override {
    take(bytes.size());
    out_.bytes(bytes);
  }
  void write_from_file(int fd, std::uint64_t offset, std::uint64_t length) override {
    take(length);
    out_.copy(fd, offset, length);
  }
  void take(std::uint64_t n) {
    if (n > item_.nbytes - written_)
      throw InvalidArgument("[safetensors] tensor " + quote_name(*item_.name) + ": its source wrote more than " +
                            std::to_string(item_.nbytes) + " bytes");
    written_ += n;
  }
  void finish() const {
    if (written_ != item_.nbytes)
      throw InvalidArgument("[safetensors] tensor " + quote_name(*item_.name) + ": its source wrote " +
                            std::to_string(written_) + " of its " + std::to_string(item_.nbytes) + " bytes");
  }

 private:
  Out& out_;
  const Item& item_;
  std::uint64_t written_ = 0;
};

template <typename Out>
void stream_tensors(const Layout& l, const std::vector<TensorSource>& tensors, Out& out) {
  for (const Item& t : l.order) {
    CountingSink<Out> sink(out, t);
    tensors[t.index].write(sink);
    sink.finish();
  }
}

}  // namespace

void ByteSink::write_from_file(int fd, std::uint64_t offset, std::uint64_t length) {
  read_range(fd, offset, length, [this](std::span<const std::byte> b) { write(b); });
}

std::vector<std::byte> serialize(const std::vector<TensorData>& tensors, const std::optional<Metadata>& metadata) {
  Layout l = layout(tensors, metadata);
  std::size_t total = 8 + l.header.size();
  for (const Item& t : l.order) total += t.nbytes;
  std::vector<std::byte> out(total);
  std::byte* p = out.data();
  auto put = [&p](std::span<const std::byte> b) {
    if (!b.empty()) std::memcpy(p, b.data(), b.size());
    p += b.size();
  };
  put(length_prefix(l.header.size()));
  put(std::as_bytes(std::span(l.header)));
  for (const Item& t : l.order) put(tensors[t.index].data);
  return out;
}

void save_file(const std::filesystem::path& path, const std::vector<TensorData>& tensors,
               const std::optional<Metadata>& metadata) {
  Layout l = layout(tensors, metadata);
  core::AtomicFile out(path, "safetensors");
  out.write(length_prefix(l.header.size()));
  out.write(std::as_bytes(std::span(l.header)));
  for (const Item& t : l.order) out.write(tensors[t.index].data);
  out.commit();
}

void save_file_streaming(const std::filesystem::path& path, const std::vector<TensorSource>& tensors,
                         const std::optional<Metadata>& metadata, bool replace_existing) {
  Layout l = layout(tensors, metadata);
  core::AtomicFile out(path, "safetensors");
  out.write(length_prefix(l.header.size()));
  out.write(std::as_bytes(std::span(l.header)));
  FileOut sink{out};
  stream_tensors(l, tensors, sink);
  out.commit(replace_existing ? core::AtomicFile::Replace::kYes : core::AtomicFile::Replace::kNo);
}

std::vector<std::byte> serialize_streaming(const std::vector<TensorSource>& tensors,
                                           const std::optional<Metadata>& metadata) {
  Layout l = layout(tensors, metadata);
  std::vector<std::byte> out;
  MemoryOut sink{out};
  sink.bytes(length_prefix(l.header.size()));
  sink.bytes(std::as_bytes(std::span(l.header)));
  stream_tensors(l, tensors, sink);
  return out;
}

}  // namespace tensoracle::safetensors
