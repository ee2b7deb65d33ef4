// Atomic writes: nothing partial is ever visible, failures leave no temporary files.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "st_helpers.h"
#include "tensoracle/errors.h"
#include "tensoracle/safetensors.h"

namespace st = tensoracle::safetensors;
using tensoracle::core::AtomicFile;
using tensoracle::testing::read_bytes;
using tensoracle::testing::TempDir;

TEST(AtomicFile, UncommittedWriterLeavesNothing) {
  TempDir dir;
  {
    AtomicFile f(dir.path / "x.bin", "test");
    std::vector<std::byte> b(100, std::byte{1});
    f.write(b);
    EXPECT_EQ(dir.names().size(), 1u);
    EXPECT_EQ(dir.names()[0].rfind(AtomicFile::temporary_prefix("x.bin"), 0), 0u);
  }
  EXPECT_TRUE(dir.names().empty());
}

TEST(AtomicFile, MissingFolderIsAnIoErrorNamingTheFile) {
  TempDir dir;
  try {
    AtomicFile f(dir.path / "no" / "such" / "x.bin", "test");
    FAIL();
  } catch (const tensoracle::IoError& e) {
    EXPECT_EQ(e.errno_value(), ENOENT);
    EXPECT_NE(std::string(e.what()).find("x.bin"), std::string::npos);
  }
}

// A write that fails midway (here: the file-size limit, EFBIG — the same path as a full disk,
// ENOSPC) must throw IoError, leave the previous file untouched and no temporary behind.
// Runs in a child process because the limit applies to the whole process.
TEST(AtomicFile, FailedWriteLeavesPreviousFileAndNoTemporary) {
  TempDir dir;
  auto path = dir.path / "model.safetensors";
  std::vector<float> small(4, 3.f);
  st::save_file(path, {{"w", st::Dtype::F32, {4}, std::as_bytes(std::span(small))}});
  auto before = read_bytes(path);

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim {64 * 1024, 64 * 1024};
    setrlimit(RLIMIT_FSIZE, &lim);
    std::vector<float> big(1 << 20, 1.f);  // 4 MiB, far above the limit
    int code = 10;
    try {
      st::save_file(path, {{"w", st::Dtype::F32, {1 << 20}, std::as_bytes(std::span(big))}});
    } catch (const tensoracle::IoError& e) {
      bool named = std::string(e.what()).find("model.safetensors") != std::string::npos;
      code = (e.errno_value() == EFBIG && named) ? 0 : 11;
    } catch (...) {
      code = 12;
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: no error, 11: wrong errno or message, 12: other exception";
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"model.safetensors"});
}

// Only a regular file is ever replaced: a FIFO, a directory, or a symbolic link (to a file or
// to a device) at the destination is refused, before anything is written and again at commit,
// with an IoError naming the path; the thing at the destination is left as it was.
TEST(AtomicFile, RefusesToReplaceAnythingButARegularFile) {
  TempDir dir;
  std::vector<std::byte> b(16, std::byte{7});
  auto refused = [&](const std::filesystem::path& p, int err, const char* kind) {
    try {
      AtomicFile f(p, "test");
      f.write(b);
      f.commit();
      ADD_FAILURE() << p << " was replaced";
    } catch (const tensoracle::IoError& e) {
      EXPECT_EQ(e.errno_value(), err) << e.what();
      EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(kind), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("only regular files"), std::string::npos) << e.what();
    }
  };
  const auto fifo = dir.path / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  refused(fifo, EEXIST, "a FIFO");
  EXPECT_EQ(std::filesystem::symlink_status(fifo).type(), std::filesystem::file_type::fifo);

  std::filesystem::create_directory(dir.path / "folder");
  refused(dir.path / "folder", EISDIR, "a directory");
  EXPECT_TRUE(std::filesystem::is_directory(dir.path / "folder"));

  tensoracle::testing::write_bytes(dir.path / "target.bin", b);
  std::filesystem::create_symlink("target.bin", dir.path / "link-to-file");
  refused(dir.path / "link-to-file", EEXIST, "a symbolic link");
  EXPECT_TRUE(std::filesystem::is_symlink(dir.path / "link-to-file"));

  std::filesystem::create_symlink("/dev/null", dir.path / "link-to-null");
  refused(dir.path / "link-to-null", EEXIST, "a symbolic link");
  EXPECT_TRUE(std::filesystem::is_symlink(dir.path / "link-to-null"));

  EXPECT_EQ(dir.names(), (std::vector<std::string>{"fifo", "folder", "link-to-file", "link-to-null", "target.bin"}))
      << "a temporary file was left behind";
}

// The destination turns into a FIFO while the data is written: commit() refuses.
TEST(AtomicFile, CommitChecksTheDestinationAgain) {
  TempDir dir;
  const auto p = dir.path / "out.bin";
  AtomicFile f(p, "test");
  std::vector<std::byte> b(16, std::byte{7});
  f.write(b);
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  EXPECT_THROW(f.commit(), tensoracle::IoError);
  EXPECT_EQ(std::filesystem::symlink_status(p).type(), std::filesystem::file_type::fifo);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"out.bin"});
}

// A regular file is still replaced.
TEST(AtomicFile, ReplacesARegularFile) {
  TempDir dir;
  const auto p = dir.path / "out.bin";
  tensoracle::testing::write_bytes(p, std::vector<std::byte>(4, std::byte{1}));
  AtomicFile f(p, "test");
  std::vector<std::byte> b(16, std::byte{7});
  f.write(b);
  f.commit();
  EXPECT_EQ(read_bytes(p), b);
}
