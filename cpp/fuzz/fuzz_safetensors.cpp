// libFuzzer target: tensoracle::safetensors::File::parse on arbitrary bytes.
//
// Only FormatError is an acceptable outcome for a bad input; any other exception escapes and
// aborts, so libFuzzer records the input. On success every tensor's bytes are read (under
// ASan, so a view outside the input is caught) and the reader's guarantees are checked,
// trapping on a violation:
//   - tensors are in data-offset order and cover the data section contiguously;
//   - nbytes() == end - begin == shape × element bits / 8, and views point inside the input;
//   - names are unique and find() returns each tensor;
//   - the file re-serializes (serialize() must accept everything parse() accepted) and the
//     result parses back to the same tensors and metadata.
// Error messages must start with "[safetensors] fuzz.safetensors: " and must not be much
// longer than the input (no amplification).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/text.h"
#include "tensoracle/errors.h"
#include "tensoracle/safetensors.h"

namespace st = tensoracle::safetensors;

namespace {

constexpr std::string_view kName = "fuzz.safetensors";
constexpr std::string_view kPrefix = "[safetensors] fuzz.safetensors: ";

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void check_message(const tensoracle::FormatError& e, std::size_t input_size) {
  std::string_view m = e.what();
  check(m.substr(0, kPrefix.size()) == kPrefix);
  check(m.size() <= 4096 + 2 * input_size);
}

// Bytes of `numel` elements of `dtype`, or nullopt on overflow / partial byte.
std::optional<std::uint64_t> expected_nbytes(const st::TensorInfo& t) {
  unsigned __int128 bits = static_cast<unsigned>(st::dtype_bits(t.dtype));
  for (std::int64_t d : t.shape) {
    if (d < 0) return std::nullopt;
    bits *= static_cast<std::uint64_t>(d);
    if (bits > (static_cast<unsigned __int128>(1) << 70)) return std::nullopt;
  }
  if (bits % 8 != 0 || bits / 8 > UINT64_MAX) return std::nullopt;
  return static_cast<std::uint64_t>(bits / 8);
}

volatile std::uint64_t g_sink;

void check_file(const st::File& f, std::span<const std::byte> input) {
  check(f.file_size() == input.size());
  check(f.raw().data() == input.data() && f.raw().size() == input.size());
  check(f.header_size() <= st::kMaxHeaderBytes);
  check(f.data_offset() == 8 + f.header_size());
  check(f.data_offset() <= input.size());
  std::uint64_t header_length;
  std::memcpy(&header_length, input.data(), 8);
  check(header_length == f.header_size());
  check(input[8] == std::byte{'{'});
#ifdef TENSORACLE_FUZZ_STRICT_HEADER
  // The whole header must be UTF-8 JSON. Off by default: a NUL byte after the root object
  // ends nlohmann's input, so bytes after it are not checked today (known issue).
  std::string_view header(reinterpret_cast<const char*>(input.data()) + 8, f.header_size());
  check(header.find('\0') == std::string_view::npos);
  check(tensoracle::core::valid_utf8(header));
#endif
  const std::uint64_t data_size = input.size() - f.data_offset();
  if (!f.has_metadata()) check(f.metadata().empty());
  for (const auto& [k, v] : f.metadata())
    check(tensoracle::core::valid_utf8(k) && tensoracle::core::valid_utf8(v));

  std::uint64_t covered = 0, sum = 0;
  std::set<std::string_view> names;
  const st::TensorInfo* prev = nullptr;
  for (const st::TensorInfo& t : f.tensors()) {
    check(static_cast<int>(t.dtype) < st::kDtypeCount);
    check(st::parse_dtype(st::dtype_name(t.dtype)) == t.dtype);
    check(t.name != "__metadata__");
    check(tensoracle::core::valid_utf8(t.name));
    check(names.insert(t.name).second);
    check(f.find(t.name) == &t);
    check(&f.at(t.name) == &t);
    // Contiguous cover, in (begin, end, name) order.
    check(t.begin == covered);
    check(t.end >= t.begin);
    check(t.nbytes() == t.end - t.begin);
    if (prev) check(std::tie(prev->begin, prev->end, prev->name) < std::tie(t.begin, t.end, t.name));
    covered = t.end;
    prev = &t;
    auto want = expected_nbytes(t);
    check(want.has_value() && *want == t.nbytes());
    if (dtype_bits(t.dtype) % 8 == 0)
      check(t.numel() == t.nbytes() / static_cast<std::uint64_t>(st::dtype_bits(t.dtype) / 8));
    // The view lies inside the input; read every byte (ASan checks the bounds).
    std::span<const std::byte> b = f.view(t).bytes();
    check(b.size() == t.nbytes());
    check(b.data() == input.data() + f.data_offset() + t.begin);
    for (std::byte x : b) sum += static_cast<std::uint8_t>(x);
    // The view by name is the same view.
    check(f.view(t.name).bytes().data() == b.data());
  }
  check(covered == data_size);
  g_sink = sum;

  // Round trip: everything the reader accepts, the writer must write, and the result must
  // read back to the same tensors. (Offsets differ: the writer orders by dtype, then name.)
  std::vector<st::TensorData> data;
  for (const st::TensorInfo& t : f.tensors())
    data.push_back({t.name, t.dtype, t.shape, f.view(t).bytes()});
  std::vector<std::byte> again = st::serialize(data, f.metadata());
  st::File g = st::File::parse(again, std::string(kName));  // must not throw
  check(g.tensors().size() == f.tensors().size());
  check(g.metadata() == f.metadata());
  for (const st::TensorInfo& t : f.tensors()) {
    const st::TensorInfo* u = g.find(t.name);
    check(u != nullptr);
    check(u->dtype == t.dtype && u->shape == t.shape && u->nbytes() == t.nbytes());
    auto x = f.view(t).bytes(), y = g.view(*u).bytes();
    check(x.empty() || std::memcmp(x.data(), y.data(), x.size()) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
  std::optional<st::File> file;
  try {
    file.emplace(st::File::parse(input, std::string(kName)));
  } catch (const tensoracle::FormatError& e) {
    check_message(e, size);
    return 0;
  }
  check_file(*file, input);
  return 0;
}
