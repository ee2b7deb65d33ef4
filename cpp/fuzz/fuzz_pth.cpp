// libFuzzer target: a whole .pth file — the strict zip reader, the archive's layout and
// records, the pickle, storages and tensors — converted in memory (fuzz_pth_common.h). The
// zip reader's own guarantee is checked first: every entry it accepts lies inside the input.
// The input size modulo 4 picks the --dtype option.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_pth_common.h"
#include "io/zip_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
  try {
    auto zip = tensoracle::io::ZipArchive::parse(input, "fuzz.pth");
    for (const auto& e : zip.entries()) {
      tensoracle::fuzz::check(e.data_offset <= size && e.size <= size - e.data_offset);
      tensoracle::fuzz::check(zip.find(e.name) == &e);
    }
  } catch (const tensoracle::FormatError&) {
  } catch (const tensoracle::UnsupportedError&) {
  }
  tensoracle::fuzz::convert_in_memory(input, static_cast<tensoracle::ConvertDtype>(size % 4));
  return 0;
}
