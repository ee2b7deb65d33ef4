// Cubins: SHA-256 against known digests, and the CUDA ELF reader on built and damaged files
// (python/tests/test_cubin_cli.py runs NVRTC for real).
#include <gtest/gtest.h>

#include "core/sha256.h"
#include "cubin_elf.h"
#include "tensoracle/cubin.h"
#include "tensoracle/errors.h"

using namespace tensoracle;

namespace {

std::span<const std::byte> text(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

template <class F>
void expect_format_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(core::Sha256::hex(text("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(core::Sha256::hex(text("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(core::Sha256::hex(text("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // Fed in uneven pieces: the same digest as in one piece.
  std::string million(1000000, 'a');
  core::Sha256 s;
  for (std::size_t at = 0; at < million.size();) {
    std::size_t n = std::min<std::size_t>(million.size() - at, 1 + at % 97);
    s.update(text(million.substr(at, n)));
    at += n;
  }
  std::string hex;
  for (auto b : s.finish()) hex += "0123456789abcdef"[b >> 4], hex += "0123456789abcdef"[b & 15];
  EXPECT_EQ(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Cubin, ReadsArchitectureAndKernelsButNotDeviceFunctions) {
  auto elf = tensoracle::testing::cuda_elf(90, {"add_one", "_Z5scaleIfEvPT_S0_"}, {"$add_one$_Z6helperf"});
  auto info = cubin::inspect(elf);
  EXPECT_EQ(info.arch, "sm_90");
  EXPECT_EQ(info.kernels, (std::vector<std::string>{"_Z5scaleIfEvPT_S0_", "add_one"}));
  EXPECT_EQ(info.size, elf.size());
  EXPECT_EQ(info.sha256, core::Sha256::hex(elf));
  EXPECT_EQ(cubin::inspect(tensoracle::testing::cuda_elf(120, {"k"})).arch, "sm_120");
  EXPECT_EQ(cubin::inspect(tensoracle::testing::cuda_elf(75, {"k"}, {}, 7)).arch, "sm_75");  // the older ABI's flags
}

TEST(Cubin, DamagedFilesAreFormatErrorsNamingTheProblem) {
  const auto good = tensoracle::testing::cuda_elf(86, {"add_one"});
  expect_format_error([&] { cubin::inspect(std::span(good).first(40)); }, "no ELF header");
  auto bad = good;
  bad[18] = std::byte{62};  // x86-64
  expect_format_error([&] { cubin::inspect(bad); }, "not CUDA");
  bad = good;
  bad[4] = std::byte{1};  // 32-bit
  expect_format_error([&] { cubin::inspect(bad); }, "64-bit");
  bad = good;
  bad[40] = std::byte{0xff}, bad[41] = std::byte{0xff}, bad[42] = std::byte{0xff};  // section table far away
  expect_format_error([&] { cubin::inspect(bad); }, "section table");
  // A kernel symbol whose name is empty (found by fuzz_cubin).
  expect_format_error([&] { cubin::inspect(tensoracle::testing::cuda_elf(90, {""})); }, "has no name");
  // Every truncation is an error, never a crash; so is every single flipped byte (or it parses).
  for (std::size_t n = 0; n < good.size(); ++n) EXPECT_THROW(cubin::inspect(std::span(good).first(n)), FormatError) << n;
  for (std::size_t i = 0; i < good.size(); ++i) {
    bad = good;
    bad[i] ^= std::byte{0xA5};
    try {
      cubin::inspect(bad);
    } catch (const FormatError&) {
    }
  }
}
