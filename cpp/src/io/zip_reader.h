// Internal: a strict reader of the zip archives torch.save writes, over bytes held by the
// caller (a memory-mapped file); the .pth converter (convert/checkpoint.cpp) and the .npz
// reader (io/npy.cpp, which renames the messages' component) use it. Only what torch writes
// is accepted: one disk, stored (uncompressed) entries, no encryption; zip64 end records and
// extra fields where sizes or offsets pass 4 GiB. Everything is bounds-checked with
// overflow-safe arithmetic; any violation throws FormatError "[pth] NAME: zip: ..."
// (UnsupportedError for a compressed or encrypted entry, which is valid zip that torch never
// writes).
//
//   ZipArchive zip = ZipArchive::parse(bytes, "model.pth");
//   if (const ZipEntry* e = zip.find("model/data.pkl")) use(zip.data(*e));
//
// The archive keeps pointers into `bytes`: the caller keeps them alive. CRC-32s are not
// checked (the conversion's safety does not depend on them; see docs/architecture.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tensoracle::io {

struct ZipEntry {
  std::string name;
  std::uint64_t header_offset = 0;  // local file header
  std::uint64_t data_offset = 0;    // first byte of the entry's data
  std::uint64_t size = 0;           // bytes in the archive (compressed size)
  std::uint64_t uncompressed_size = 0;  // as the central directory says (= size when stored)
  std::uint16_t method = 0;         // 0: stored, the data is the record's content
  std::uint32_t crc32 = 0;          // as the central directory says (not verified)
  bool zip64 = false;               // the central directory entry has a zip64 extra field
};

class ZipArchive {
 public:
  // Parses the central directory of `bytes`; `display_name` names the file in messages.
  static ZipArchive parse(std::span<const std::byte> bytes, std::string display_name);

  // Entries in central-directory order.
  const std::vector<ZipEntry>& entries() const noexcept { return entries_; }
  // nullptr when absent.
  const ZipEntry* find(std::string_view name) const noexcept;
  // The entry's bytes in the archive (inside the parsed span): its content when method == 0.
  std::span<const std::byte> data(const ZipEntry& entry) const noexcept {
    return bytes_.subspan(entry.data_offset, entry.size);
  }
  bool zip64() const noexcept { return zip64_; }  // a zip64 end of central directory exists
  const std::string& display_name() const noexcept { return name_; }

 private:
  std::span<const std::byte> bytes_;
  std::string name_;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, std::size_t> index_;
  bool zip64_ = false;
};

}  // namespace tensoracle::io
