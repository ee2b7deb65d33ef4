// The strict zip reader under the .pth converter: torch's layout, zip64, and damaged archives.
#include <gtest/gtest.h>

#include <random>

#include "io/zip_reader.h"
#include "pth_helpers.h"
#include "tensoracle/errors.h"

using tensoracle::FormatError;
using tensoracle::UnsupportedError;
using tensoracle::io::ZipArchive;
using namespace tensoracle::testing;

namespace {

std::vector<ZipFileSpec> three_files() {
  return {{"a/data.pkl", to_bytes("pickle bytes")},
          {"a/data/0", Bytes(100, std::byte{7})},
          {"a/version", to_bytes("3\n")}};
}

std::string text_of(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

template <typename E>
std::string message_of(const Bytes& b) {
  try {
    ZipArchive::parse(b, "t.pth");
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception";
  return "";
}

}  // namespace

TEST(ZipReader, ReadsTorchLayout) {
  Bytes b = zip_bytes(three_files());
  ZipArchive z = ZipArchive::parse(b, "t.pth");
  ASSERT_EQ(z.entries().size(), 3u);
  EXPECT_TRUE(z.zip64());  // torch always writes the zip64 end record
  EXPECT_EQ(text_of(z.data(*z.find("a/data.pkl"))), "pickle bytes");
  EXPECT_EQ(z.data(*z.find("a/data/0")).size(), 100u);
  EXPECT_EQ(z.find("a/data/0")->data_offset % 64, 0u);  // torch's alignment padding
  EXPECT_EQ(text_of(z.data(*z.find("a/version"))), "3\n");
  EXPECT_EQ(z.find("a/missing"), nullptr);
  EXPECT_EQ(z.find("a/data/0")->crc32, crc32(Bytes(100, std::byte{7})));
}

TEST(ZipReader, ClassicEndRecordAndComment) {
  ZipOptions o;
  o.zip64_end = false;
  o.comment = "a comment";
  ZipArchive z = ZipArchive::parse(zip_bytes(three_files(), o), "t.pth");
  EXPECT_FALSE(z.zip64());
  EXPECT_EQ(z.entries().size(), 3u);
}

TEST(ZipReader, Zip64ExtraFields) {
  ZipOptions o;
  o.zip64_extras = true;
  Bytes b = zip_bytes(three_files(), o);
  ZipArchive z = ZipArchive::parse(b, "t.pth");
  for (const auto& e : z.entries()) EXPECT_TRUE(e.zip64) << e.name;
  EXPECT_EQ(text_of(z.data(*z.find("a/data.pkl"))), "pickle bytes");
}

TEST(ZipReader, EveryTruncationIsAFormatError) {
  Bytes b = zip_bytes(three_files());
  for (std::size_t n = 0; n < b.size(); ++n) {
    Bytes cut(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(ZipArchive::parse(cut, "t.pth"), FormatError) << "prefix of " << n << " bytes";
  }
}

TEST(ZipReader, EveryFlippedByteIsParsedOrRefused) {
  Bytes b = zip_bytes(three_files());
  for (std::size_t i = 0; i < b.size(); ++i) {
    for (std::uint8_t x : {0x01, 0x80, 0xFF}) {
      Bytes c = b;
      c[i] ^= std::byte{x};
      try {
        ZipArchive z = ZipArchive::parse(c, "t.pth");
        for (const auto& e : z.entries()) {  // whatever it accepts lies inside the input
          ASSERT_LE(e.data_offset + e.size, c.size());
        }
      } catch (const FormatError&) {
      } catch (const UnsupportedError&) {
      }
    }
  }
}

TEST(ZipReader, GarbageAndEmpty) {
  EXPECT_THROW(ZipArchive::parse({}, "t.pth"), FormatError);
  std::mt19937 rng(1);
  for (int round = 0; round < 50; ++round) {
    Bytes g(static_cast<std::size_t>(rng() % 4096));
    for (auto& x : g) x = static_cast<std::byte>(rng());
    EXPECT_THROW(ZipArchive::parse(g, "t.pth"), FormatError);
  }
  EXPECT_NE(message_of<FormatError>(to_bytes("not a zip at all, just text")).find("[pth] t.pth: zip: "), std::string::npos);
}

TEST(ZipReader, DuplicateNames) {
  auto f = three_files();
  f[2].name = "a/data.pkl";
  EXPECT_NE(message_of<FormatError>(zip_bytes(f)).find("two entries are named 'a/data.pkl'"), std::string::npos);
}

TEST(ZipReader, SizeRunningIntoTheNextEntry) {
  auto f = three_files();
  f[0].declared_size = 200;  // past the local header of a/data/0
  std::string m = message_of<FormatError>(zip_bytes(f));
  EXPECT_NE(m.find("overlap"), std::string::npos) << m;
}

TEST(ZipReader, SizeRunningIntoTheCentralDirectory) {
  auto f = three_files();
  f[2].declared_size = 1000;
  std::string m = message_of<FormatError>(zip_bytes(f));
  EXPECT_NE(m.find("extend past the start of the central directory"), std::string::npos) << m;
}

TEST(ZipReader, CompressedEntriesAreListedEncryptedRefused) {
  auto f = three_files();
  f[1].method = 8;
  ZipArchive z = ZipArchive::parse(zip_bytes(f), "t.pth");
  EXPECT_EQ(z.find("a/data/0")->method, 8);
  f[1].method = 0;
  f[1].flags = 0x0809;
  EXPECT_NE(message_of<UnsupportedError>(zip_bytes(f)).find("encrypted"), std::string::npos);
}

TEST(ZipReader, EndRecordsMustAgree) {
  ZipOptions o;
  o.eocd_entries = 2;  // the zip64 record says 3
  EXPECT_NE(message_of<FormatError>(zip_bytes(three_files(), o)).find("disagree"), std::string::npos);
  ZipOptions d;
  d.zip64_end = false;
  d.eocd_disk = 1;
  EXPECT_NE(message_of<FormatError>(zip_bytes(three_files(), d)).find("multi-disk"), std::string::npos);
}

TEST(ZipReader, PlaceholdersWithoutZip64) {
  ZipOptions o;
  o.zip64_end = false;
  o.eocd_entries = 0xFFFF;
  EXPECT_NE(message_of<FormatError>(zip_bytes(three_files(), o)).find("zip64"), std::string::npos);
}
