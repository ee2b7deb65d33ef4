// libFuzzer target: the restricted pickle machine and everything after it. The input is a
// data.pkl; it is wrapped in a torch-like archive (tests/pth_helpers.h) whose storage records
// data/0 .. data/8 hold 0, 64, 128, ..., 8192 bytes (make_pth_seeds.py writes seeds that use
// them), then converted in memory (fuzz_pth_common.h). The input size modulo 4 picks the
// --dtype option, so casts and the buffered path are fuzzed too.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_pth_common.h"
#include "pth_helpers.h"

namespace {

const tensoracle::testing::CheckpointSpec& spec() {
  static const tensoracle::testing::CheckpointSpec s = [] {
    tensoracle::testing::CheckpointSpec c;
    c.storages.emplace_back("0", tensoracle::testing::Bytes{});
    for (int k = 1; k <= 8; ++k) {
      tensoracle::testing::Bytes b(std::size_t{32} << k);
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(i * 131 + k);
      c.storages.emplace_back(std::to_string(k), std::move(b));
    }
    return c;
  }();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<tensoracle::testing::ZipFileSpec> files;
  files.push_back({"archive/data.pkl", tensoracle::testing::Bytes(reinterpret_cast<const std::byte*>(data),
                                                                   reinterpret_cast<const std::byte*>(data) + size)});
  for (const auto& [key, bytes] : spec().storages) files.push_back({"archive/data/" + key, bytes});
  files.push_back({"archive/byteorder", tensoracle::testing::to_bytes(size % 8 == 7 ? "big" : "little")});
  files.push_back({"archive/version", tensoracle::testing::to_bytes("3\n")});
  tensoracle::testing::Bytes archive = tensoracle::testing::zip_bytes(files);
  tensoracle::fuzz::convert_in_memory(archive, static_cast<tensoracle::ConvertDtype>(size % 4));
  return 0;
}
