// safetensors' streaming write path (save_file_streaming): same bytes as save_file, sources
// held to their byte length, no file left by a failed write, no replacement when refused,
// ranges copied from files (copy_file_range to a file, pread to memory).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <numeric>

#include "st_helpers.h"
#include "tensoracle/safetensors.h"

namespace st = tensoracle::safetensors;
using namespace tensoracle;
using tensoracle::testing::read_bytes;
using tensoracle::testing::TempDir;
using tensoracle::testing::write_bytes;

namespace {
std::vector<std::byte> to_bytes(std::string_view s) {
  std::vector<std::byte> b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}
}  // namespace

TEST(SafetensorsStreaming, SameBytesAsSaveFile) {
  std::vector<float> a(10);
  std::iota(a.begin(), a.end(), 0.f);
  std::vector<std::int64_t> b{1, 2, 3};
  auto bytes = std::as_bytes(std::span(a));
  std::vector<st::TensorData> data{{"a", st::Dtype::F32, {2, 5}, bytes}, {"b", st::Dtype::I64, {3}, std::as_bytes(std::span(b))}};
  std::vector<st::TensorSource> sources{
      {"a", st::Dtype::F32, {2, 5}, [&](st::ByteSink& out) { out.write(bytes.first(12)); out.write(bytes.subspan(12)); }},
      {"b", st::Dtype::I64, {3}, [&](st::ByteSink& out) { out.write(std::as_bytes(std::span(b))); }}};
  st::Metadata m{{"k", "v"}};
  EXPECT_EQ(st::serialize_streaming(sources, m), st::serialize(data, m));
  TempDir dir;
  st::save_file_streaming(dir.path / "x.safetensors", sources, m);
  EXPECT_EQ(read_bytes(dir.path / "x.safetensors"), st::serialize(data, m));
}

TEST(SafetensorsStreaming, BadSourcesLeaveNoFile) {
  TempDir dir;
  auto path = dir.path / "x.safetensors";
  std::vector<std::byte> eight(8);
  std::vector<st::TensorSource> too_short{{"a", st::Dtype::F32, {4}, [&](st::ByteSink& out) { out.write(eight); }}};
  EXPECT_THROW(st::save_file_streaming(path, too_short), InvalidArgument);
  std::vector<st::TensorSource> too_long{{"a", st::Dtype::F32, {1}, [&](st::ByteSink& out) { out.write(eight); }}};
  EXPECT_THROW(st::save_file_streaming(path, too_long), InvalidArgument);
  std::vector<st::TensorSource> throws{{"a", st::Dtype::F32, {2}, [&](st::ByteSink& out) {
                                          out.write(std::span(eight).first(4));
                                          throw FormatError("mid-way");
                                        }}};
  EXPECT_THROW(st::save_file_streaming(path, throws), FormatError);
  EXPECT_TRUE(dir.names().empty());
  write_bytes(path, to_bytes("keep"));
  std::vector<st::TensorSource> ok{{"a", st::Dtype::F32, {2}, [&](st::ByteSink& out) { out.write(eight); }}};
  EXPECT_THROW(st::save_file_streaming(path, ok, std::nullopt, /*replace_existing=*/false), IoError);
  EXPECT_EQ(read_bytes(path), to_bytes("keep"));
  EXPECT_EQ(dir.names(), std::vector<std::string>{"x.safetensors"});
}

TEST(SafetensorsStreaming, WriteFromFile) {
  TempDir dir;
  std::vector<float> a(1000);
  std::iota(a.begin(), a.end(), 0.f);
  auto src = dir.path / "src.bin";
  std::vector<std::byte> raw(16);  // 16 bytes of something else first
  auto ab = std::as_bytes(std::span(a));
  raw.insert(raw.end(), ab.begin(), ab.end());
  write_bytes(src, raw);
  int fd = ::open(src.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::vector<st::TensorSource> sources{{"a", st::Dtype::F32, {1000}, [&](st::ByteSink& out) {
                                           out.write_from_file(fd, 16, 400);        // a[0:100]
                                           out.write(ab.subspan(400, 400));          // a[100:200]
                                           out.write_from_file(fd, 16 + 800, 3200);  // a[200:]
                                         }}};
  std::vector<st::TensorData> data{{"a", st::Dtype::F32, {1000}, ab}};
  auto expected = st::serialize(data);
  EXPECT_EQ(st::serialize_streaming(sources), expected);  // through pread
  st::save_file_streaming(dir.path / "x.safetensors", sources);  // through copy_file_range
  EXPECT_EQ(read_bytes(dir.path / "x.safetensors"), expected);
  EXPECT_EQ(::lseek(fd, 0, SEEK_CUR), 0);  // the descriptor's offset is untouched

  std::vector<st::TensorSource> past_end{{"a", st::Dtype::F32, {1001}, [&](st::ByteSink& out) {
                                            out.write_from_file(fd, 16, 4004);  // the file has 4000 after 16
                                          }}};
  EXPECT_THROW(st::save_file_streaming(dir.path / "y.safetensors", past_end), IoError);
  EXPECT_THROW(st::serialize_streaming(past_end), IoError);
  EXPECT_FALSE(std::filesystem::exists(dir.path / "y.safetensors"));
  ::close(fd);
}
