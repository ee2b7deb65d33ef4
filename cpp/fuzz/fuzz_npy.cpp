// libFuzzer target: the .npy and .npz readers (io/npy.h) on arbitrary bytes, and
// compare_outputs on every array they accept.
//
// Inputs starting like a zip archive ("PK") go to parse_npz, the rest to parse_npy (the
// way `tensoracle compare` chooses). FormatError and UnsupportedError are the acceptable
// outcomes for a bad input; any other exception escapes and aborts, so libFuzzer records
// the input. The .npz reader runs with an inflation cap of 1 MiB (Limits), so that the fuzzer
// reaches the caps; arrays are read one at a time, as compare reads them. On success the
// reader's guarantees are checked, trapping on a violation:
//   - each array's bytes are shape × element size, and every byte is read (ASan checks the
//     bounds: data points into the input or into buffers the File owns);
//   - npz names are what was left of "NAME.npy", known before any array is read;
//   - what deflated entries inflate to stays within the cap;
//   - compare_outputs accepts the array against itself (or refuses its dtype with
//     UnsupportedError) and finds no difference.
// Error messages must name the component and the file, and stay short.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "io/npy.h"
#include "tensoracle/compare.h"
#include "tensoracle/errors.h"

namespace npy = tensoracle::npy;
namespace st = tensoracle::safetensors;

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void check_message(const tensoracle::Error& e, bool zip, std::size_t size) {
  std::string_view m = e.what();
  std::string_view prefix = zip ? "[npz] fuzz.npz: " : "[npy] fuzz.npy: ";
  check(m.substr(0, prefix.size()) == prefix);
  check(m.size() <= 4096 + 2 * size);
}

volatile std::uint64_t g_sink;

// Caps small enough that the fuzzer reaches them: inflation beyond 1 MiB in all is refused.
constexpr std::uint64_t kFuzzMaxInflated = 1 << 20;

void check_array(const npy::Array& a, bool zip, std::uint64_t& sum, std::uint64_t& inflated) {
  check(zip ? !a.name.empty() : a.name.empty());  // npz: "x.npy" gives "x" (".npy" is refused)
  unsigned __int128 n = 1;
  for (std::int64_t d : a.shape) {
    check(d >= 0);
    n *= static_cast<std::uint64_t>(d);
  }
  check(n * static_cast<unsigned>(st::dtype_bits(a.dtype) / 8) == a.data.size());
  inflated += a.data.size();
  for (std::byte b : a.data) sum += static_cast<std::uint8_t>(b);
  tensoracle::ArrayView v{a.data.data(), a.dtype, a.shape};
  try {
    tensoracle::CompareOptions o;
    o.atol = 0;
    o.rtol = 0;
    tensoracle::OutputComparison c = tensoracle::compare_outputs(v, v, o);
    check(c.element_count == static_cast<std::int64_t>(n));
    check(c.candidate_nonfinite_count == c.reference_nonfinite_count);
    if (c.max_absolute_error) check(*c.max_absolute_error == 0);
    if (c.candidate_nonfinite_count == 0) check(c.outside_tolerance_count == 0);
  } catch (const tensoracle::UnsupportedError&) {
    check(a.dtype == st::Dtype::C64);
  }
}

// Reads the arrays one at a time, as compare does; an array that fails to read is an error
// with the file's prefix, and the others still read.
void check_file(const npy::File& f, bool zip, std::size_t size) {
  check(f.is_npz() == zip);
  check(zip || f.size() == 1);
  check(f.names().size() == f.size());
  std::uint64_t sum = 0, total = 0;
  for (std::size_t i = 0; i < f.size(); ++i) {
    try {
      npy::Array a = f.read(i);
      check(a.name == f.names()[i]);
      check_array(a, zip, sum, total);
    } catch (const tensoracle::FormatError& e) {
      check_message(e, zip, size);
    } catch (const tensoracle::UnsupportedError& e) {
      check_message(e, zip, size);
    }
  }
  // Stored entries are read in place; only deflated ones count, so this bounds them loosely:
  // what was read cannot exceed the input plus the inflation cap.
  check(total <= size + kFuzzMaxInflated);
  g_sink = sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
  const bool zip = npy::looks_like_zip(input);
  try {
    npy::Limits limits;
    limits.max_inflated_bytes = kFuzzMaxInflated;
    npy::File f = zip ? npy::File::parse_npz(input, "fuzz.npz", limits) : npy::File::parse_npy(input, "fuzz.npy");
    check_file(f, zip, size);
  } catch (const tensoracle::FormatError& e) {
    check_message(e, zip, size);
  } catch (const tensoracle::UnsupportedError& e) {
    check_message(e, zip, size);
  }
  return 0;
}
