#include "core/digest.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <memory>
#include <new>
#include <vector>

#include "core/mapped_file.h"

namespace tensoracle::core {

namespace {

std::string hex128(const XXH128_hash_t& h) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "xxh3-128:";
  for (unsigned char b : c.digest) {
    s += kHex[b >> 4];
    s += kHex[b & 0xF];
  }
  return s;
}

}  // namespace

HashCounters& hash_counters() {
  static HashCounters c;
  return c;
}

std::string digest_of_file(int fd, const std::filesystem::path& path, const std::string& component,
                           const std::string& what, std::uint64_t* bytes_read) {
#ifdef POSIX_FADV_SEQUENTIAL
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  if (!state) throw std::bad_alloc();
  XXH3_128bits_reset(state.get());
  constexpr std::size_t kChunk = std::size_t{4} << 20;
  std::vector<unsigned char> buf(kChunk);
  std::uint64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      core::throw_io_error(component, "cannot read " + what, path, errno);
    }
    if (n == 0) break;
    XXH3_128bits_update(state.get(), buf.data(), static_cast<std::size_t>(n));
    total += static_cast<std::uint64_t>(n);
  }
  if (bytes_read != nullptr) *bytes_read = total;
  return hex128(XXH3_128bits_digest(state.get()));
}

std::string digest_of_bytes(std::span<const std::byte> bytes) { return hex128(XXH3_128bits(bytes.data(), bytes.size())); }

std::string hash_file(int fd, const std::filesystem::path& path, const std::string& component,
                      const std::string& what) {
  std::uint64_t total = 0;
  std::string d = digest_of_file(fd, path, component, what, &total);
  hash_counters().files_hashed.fetch_add(1);
  hash_counters().bytes_hashed.fetch_add(total);
  return d;
}

}  // namespace tensoracle::core
