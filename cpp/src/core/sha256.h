// Internal: SHA-256 (FIPS 180-4), for the digests a cubin manifest records — a format other
// tools check with sha256sum, unlike the XXH3 digests of engines and cache identities.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace tensoracle::core {

class Sha256 {
 public:
  Sha256();
  void update(std::span<const std::byte> bytes);
  std::array<std::uint8_t, 32> finish();  // the digest; the object is spent
  static std::string hex(std::span<const std::byte> bytes);  // digest of `bytes`, 64 lowercase hex digits

 private:
  void block(const std::uint8_t* p);
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buf_{};
  std::size_t used_ = 0;
  std::uint64_t total_ = 0;
};

}  // namespace tensoracle::core
