// Internal: XXH3-128 content digests, "xxh3-128:<32 hex digits>", of bytes and of whole files:
// what the engine cache keys weight files and engines by (cache/digest_memo.h remembers them
// across processes) and the plugin registry identifies libraries by (plugin/registry.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace tensoracle::core {

// Process-wide counts of hash_file, for tests and benchmarks (cache::read_counts reports them).
struct HashCounters {
  std::atomic<std::uint64_t> files_hashed{0};
  std::atomic<std::uint64_t> bytes_hashed{0};
};
HashCounters& hash_counters();

// XXH3-128 of a whole file, by read(2) in large chunks; `fd` is at offset 0.
// `what` names the file in messages ("the weight file"); `component` prefixes them ("cache").
// Throws IoError when it cannot be read. Counted in hash_counters().
std::string hash_file(int fd, const std::filesystem::path& path, const std::string& component, const std::string& what);
// The same, not counted (the cache's own engine files); `bytes_read` (may be null) gets the size.
std::string digest_of_file(int fd, const std::filesystem::path& path, const std::string& component,
                           const std::string& what, std::uint64_t* bytes_read = nullptr);
// "xxh3-128:<32 hex digits>" of `bytes`.
std::string digest_of_bytes(std::span<const std::byte> bytes);

}  // namespace tensoracle::core
