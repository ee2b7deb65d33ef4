// Atomic writes: nothing partial is ever visible, failures leave no temporary files.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
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
