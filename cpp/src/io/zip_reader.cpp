// Strict zip reader (see zip_reader.h). Record layouts are those of PKWARE's APPNOTE.TXT:
// end of central directory (EOCD), zip64 EOCD locator and record, central directory file
// headers, local file headers, zip64 extended information extra field (0x0001).
#include "io/zip_reader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/text.h"
#include "tensoracle/errors.h"

namespace tensoracle::io {

namespace {

constexpr std::uint32_t kLocalSig = 0x04034b50;
constexpr std::uint32_t kCentralSig = 0x02014b50;
constexpr std::uint32_t kEocdSig = 0x06054b50;
constexpr std::uint32_t kZip64EocdSig = 0x06064b50;
constexpr std::uint32_t kZip64LocatorSig = 0x07064b50;
constexpr std::size_t kEocdSize = 22;
constexpr std::size_t kLocatorSize = 20;
constexpr std::size_t kZip64EocdSize = 56;  // with the 12 bytes of signature and size field
constexpr std::size_t kCentralSize = 46;
constexpr std::size_t kLocalSize = 30;
constexpr std::uint16_t kMax16 = 0xFFFF;
constexpr std::uint32_t kMax32 = 0xFFFFFFFF;

class Reader {
 public:
  Reader(std::span<const std::byte> bytes, const std::string& name) : b_(bytes), name_(name) {}

  [[noreturn]] void fail(const std::string& message) const {
    throw FormatError("[pth] " + name_ + ": zip: " + message);
  }

  // `n` bytes at `at` lie inside the file (overflow-safe).
  bool fits(std::uint64_t at, std::uint64_t n) const noexcept {
    return at <= b_.size() && n <= b_.size() - at;
  }

  template <typename T>
  T get(std::uint64_t at) const noexcept {  // little-endian; the caller checked fits()
    T v;
    std::memcpy(&v, b_.data() + at, sizeof v);
    return v;
  }
  std::uint16_t u16(std::uint64_t at) const noexcept { return get<std::uint16_t>(at); }
  std::uint32_t u32(std::uint64_t at) const noexcept { return get<std::uint32_t>(at); }
  std::uint64_t u64(std::uint64_t at) const noexcept { return get<std::uint64_t>(at); }
  std::string_view text(std::uint64_t at, std::uint64_t n) const noexcept {
    return {reinterpret_cast<const char*>(b_.data()) + at, static_cast<std::size_t>(n)};
  }
  std::uint64_t size() const noexcept { return b_.size(); }

 private:
  std::span<const std::byte> b_;
  const std::string& name_;
};

std::string num(std::uint64_t v) { return std::to_string(v); }

std::string hex16(std::uint16_t v) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%04x", v);
  return b;
}

struct Directory {
  std::uint64_t entries = 0;
  std::uint64_t cd_offset = 0;
  std::uint64_t cd_size = 0;
  std::uint64_t cd_end = 0;  // where the central directory must end (the next end record)
  bool zip64 = false;
};

// Finds the EOCD: the last signature whose comment length reaches exactly the end of the file.
std::uint64_t find_eocd(const Reader& r) {
  if (r.size() < kEocdSize)
    r.fail("file is " + num(r.size()) + " bytes, too short for a zip archive (truncated?)");
  std::uint64_t last = r.size() - kEocdSize;
  std::uint64_t first = last > kMax16 ? last - kMax16 : 0;
  for (std::uint64_t p = last + 1; p-- > first;) {
    if (r.u32(p) == kEocdSig && r.u16(p + 20) == r.size() - p - kEocdSize) return p;
  }
  r.fail("no end of central directory record (not a zip archive, or truncated)");
}

Directory read_directory(const Reader& r) {
  Directory d;
  std::uint64_t eocd = find_eocd(r);
  std::uint16_t disk = r.u16(eocd + 4), cd_disk = r.u16(eocd + 6);
  std::uint16_t n_disk = r.u16(eocd + 8), n_total = r.u16(eocd + 10);
  std::uint32_t cd_size = r.u32(eocd + 12), cd_offset = r.u32(eocd + 16);

  bool locator = eocd >= kLocatorSize && r.u32(eocd - kLocatorSize) == kZip64LocatorSig;
  if (!locator) {
    if (disk != 0 || cd_disk != 0 || n_disk != n_total)
      r.fail("multi-disk archives are not supported (disk " + num(disk) + ", directory on disk " +
             num(cd_disk) + ")");
    if (n_total == kMax16 || cd_size == kMax32 || cd_offset == kMax32)
      r.fail("end record holds zip64 placeholders but there is no zip64 end record");
    d.entries = n_total;
    d.cd_size = cd_size;
    d.cd_offset = cd_offset;
    d.cd_end = eocd;
    return d;
  }
  std::uint64_t loc = eocd - kLocatorSize;
  std::uint32_t z_disk = r.u32(loc + 4);
  std::uint64_t z_off = r.u64(loc + 8);
  std::uint32_t disks = r.u32(loc + 16);
  if (z_disk != 0 || disks > 1) r.fail("multi-disk archives are not supported (zip64 locator)");
  if (z_off > loc || loc - z_off < kZip64EocdSize)
    r.fail("zip64 end record offset " + num(z_off) + " does not leave room before its locator at " +
           num(loc));
  if (r.u32(z_off) != kZip64EocdSig) r.fail("no zip64 end record at offset " + num(z_off));
  std::uint64_t rest = r.u64(z_off + 4);
  if (rest != loc - z_off - 12)
    r.fail("zip64 end record at " + num(z_off) + " says it has " + num(rest) +
           " more bytes, but its locator follows after " + num(loc - z_off - 12));
  std::uint32_t z_this = r.u32(z_off + 16), z_cd_disk = r.u32(z_off + 20);
  std::uint64_t z_n_disk = r.u64(z_off + 24), z_n_total = r.u64(z_off + 32);
  std::uint64_t z_cd_size = r.u64(z_off + 40), z_cd_off = r.u64(z_off + 48);
  if (z_this != 0 || z_cd_disk != 0 || z_n_disk != z_n_total)
    r.fail("multi-disk archives are not supported (zip64 end record)");
  // The 16/32-bit fields must agree with the zip64 ones, or hold the placeholder.
  auto agrees = [](std::uint64_t small, std::uint64_t big, std::uint64_t placeholder) {
    return small == placeholder || small == big;
  };
  if (!agrees(disk, 0, kMax16) || !agrees(cd_disk, 0, kMax16) ||
      !agrees(n_disk, z_n_disk, kMax16) || !agrees(n_total, z_n_total, kMax16) ||
      !agrees(cd_size, z_cd_size, kMax32) || !agrees(cd_offset, z_cd_off, kMax32))
    r.fail("end record and zip64 end record disagree (entries " + num(n_total) + " vs " +
           num(z_n_total) + ", directory size " + num(cd_size) + " vs " + num(z_cd_size) +
           ", offset " + num(cd_offset) + " vs " + num(z_cd_off) + ")");
  d.entries = z_n_total;
  d.cd_size = z_cd_size;
  d.cd_offset = z_cd_off;
  d.cd_end = z_off;
  d.zip64 = true;
  return d;
}

// Fills the zip64 values of a central directory entry from its extra field.
struct Sizes {
  std::uint64_t usize, csize, offset;
  std::uint32_t disk;
};

void read_extra(const Reader& r, std::uint64_t at, std::uint64_t len, Sizes& s, bool& zip64,
                const std::string& entry) {
  bool need_u = s.usize == kMax32, need_c = s.csize == kMax32, need_o = s.offset == kMax32,
       need_d = s.disk == kMax16;
  std::uint64_t end = at + len;
  while (at < end) {
    if (end - at < 4) r.fail("entry " + entry + ": extra field ends inside a record header");
    std::uint16_t id = r.u16(at), size = r.u16(at + 2);
    at += 4;
    if (size > end - at)
      r.fail("entry " + entry + ": extra field record " + hex16(id) + " extends past the extra field");
    if (id == 0x0001) {
      if (zip64) r.fail("entry " + entry + ": two zip64 extra fields");
      zip64 = true;
      std::uint64_t p = at, stop = at + size;
      auto take64 = [&](std::uint64_t& v, const char* what) {
        if (stop - p < 8) r.fail("entry " + entry + ": zip64 extra field lacks the " + what);
        v = r.u64(p);
        p += 8;
      };
      if (need_u) take64(s.usize, "uncompressed size");
      if (need_c) take64(s.csize, "compressed size");
      if (need_o) take64(s.offset, "local header offset");
      if (need_d) {
        if (stop - p < 4) r.fail("entry " + entry + ": zip64 extra field lacks the disk number");
        s.disk = r.u32(p);
      }
      need_u = need_c = need_o = need_d = false;
    }
    at += size;
  }
  if (need_u || need_c || need_o || need_d)
    r.fail("entry " + entry + ": header holds zip64 placeholders but no zip64 extra field");
}

}  // namespace

ZipArchive ZipArchive::parse(std::span<const std::byte> bytes, std::string display_name) {
  ZipArchive z;
  z.bytes_ = bytes;
  z.name_ = std::move(display_name);
  Reader r(bytes, z.name_);
  Directory d = read_directory(r);
  z.zip64_ = d.zip64;
  if (d.cd_offset > d.cd_end || d.cd_size != d.cd_end - d.cd_offset)
    r.fail("central directory [" + num(d.cd_offset) + ", +" + num(d.cd_size) +
           ") does not end where the end record starts (" + num(d.cd_end) + ")");
  if (d.entries > d.cd_size / kCentralSize)
    r.fail("the end record counts " + num(d.entries) + " entries, more than a " +
           num(d.cd_size) + "-byte central directory can hold");
  if (d.entries == 0) r.fail("the archive has no entries");

  z.entries_.reserve(static_cast<std::size_t>(d.entries));
  std::uint64_t p = d.cd_offset;
  for (std::uint64_t i = 0; i < d.entries; ++i) {
    std::string where = "central directory entry " + num(i);
    if (d.cd_end - p < kCentralSize) r.fail(where + " extends past the central directory");
    if (r.u32(p) != kCentralSig) r.fail(where + " at offset " + num(p) + " has no signature");
    std::uint16_t flags = r.u16(p + 8), method = r.u16(p + 10);
    std::uint32_t crc = r.u32(p + 16);
    Sizes s{r.u32(p + 24), r.u32(p + 20), r.u32(p + 42), r.u16(p + 34)};
    std::uint64_t n = r.u16(p + 28), m = r.u16(p + 30), k = r.u16(p + 32);
    if (d.cd_end - p - kCentralSize < n + m + k)
      r.fail(where + ": name, extra field and comment extend past the central directory");
    ZipEntry e;
    e.name = std::string(r.text(p + kCentralSize, n));
    std::string label = core::quote_name(e.name);
    if (e.name.empty()) r.fail(where + " has an empty name");
    if (!core::valid_utf8(e.name) || e.name.find('\0') != std::string::npos)
      r.fail(where + ": name " + label + " is not valid UTF-8 text");
    if (flags & 0x0041)
      throw UnsupportedError("[pth] " + z.name_ + ": zip: entry " + label +
                             " is encrypted; torch.save never encrypts");
    read_extra(r, p + kCentralSize + n, m, s, e.zip64, label);
    if (s.disk != 0) r.fail("entry " + label + " starts on disk " + num(s.disk));
    if (method == 0 && s.csize != s.usize)
      r.fail("entry " + label + " is stored, but its compressed size " + num(s.csize) +
             " differs from its size " + num(s.usize));
    e.header_offset = s.offset;
    e.size = s.csize;
    e.uncompressed_size = s.usize;
    e.method = method;
    e.crc32 = crc;
    p += kCentralSize + n + m + k;

    // The local header must agree, and the data must lie before the central directory.
    std::uint64_t h = e.header_offset;
    if (h > d.cd_offset || d.cd_offset - h < kLocalSize)
      r.fail("entry " + label + ": local header offset " + num(h) +
             " is not before the central directory");
    if (r.u32(h) != kLocalSig) r.fail("entry " + label + ": no local header at offset " + num(h));
    if (r.u16(h + 6) & 0x0041)
      throw UnsupportedError("[pth] " + z.name_ + ": zip: entry " + label + " is encrypted");
    if (r.u16(h + 8) != method)
      r.fail("entry " + label + ": local header says compression method " + num(r.u16(h + 8)) +
             ", the central directory " + num(method));
    std::uint64_t ln = r.u16(h + 26), lm = r.u16(h + 28);
    if (d.cd_offset - h - kLocalSize < ln + lm)
      r.fail("entry " + label + ": local header runs into the central directory");
    if (r.text(h + kLocalSize, ln) != e.name)
      r.fail("entry " + label + ": local header names " +
             core::quote_name(r.text(h + kLocalSize, ln)));
    e.data_offset = h + kLocalSize + ln + lm;
    if (e.size > d.cd_offset - e.data_offset)
      r.fail("entry " + label + ": its " + num(e.size) + " bytes at offset " + num(e.data_offset) +
             " extend past the start of the central directory (" + num(d.cd_offset) +
             "): truncated or damaged archive");
    if (!z.index_.emplace(e.name, z.entries_.size()).second)
      r.fail("two entries are named " + label);
    z.entries_.push_back(std::move(e));
  }
  if (p != d.cd_end)
    r.fail("central directory holds " + num(d.cd_end - p) + " bytes after its " +
           num(d.entries) + " entries");

  // No two entries may overlap (each entry's data ends before the next local header).
  std::vector<const ZipEntry*> order;
  order.reserve(z.entries_.size());
  for (const auto& e : z.entries_) order.push_back(&e);
  std::sort(order.begin(), order.end(),
            [](const ZipEntry* a, const ZipEntry* b) { return a->header_offset < b->header_offset; });
  for (std::size_t i = 1; i < order.size(); ++i) {
    const ZipEntry& a = *order[i - 1];
    const ZipEntry& b = *order[i];
    if (a.data_offset + a.size > b.header_offset)
      r.fail("entries " + core::quote_name(a.name) + " and " + core::quote_name(b.name) +
             " overlap");
  }
  return z;
}

const ZipEntry* ZipArchive::find(std::string_view name) const noexcept {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

}  // namespace tensoracle::io
