// `tensoracle compare` on hostile and huge .npz archives, run as a program: the exit code, the
// message, and how much memory the process took (its peak RSS) are what a user sees.
// Archives of gigabytes are built in milliseconds: the deflate stream of a MiB of zeros, made
// once with a full flush, is the same bytes every time, so a stream of N MiB repeats it N times.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "pth_helpers.h"
#include "st_helpers.h"

#ifdef TENSORACLE_CLI_PATH

namespace tensoracle {
namespace {

using testing::Bytes;
using testing::TempDir;

constexpr std::uint64_t kMiB = 1 << 20;

// The header of a .npy image of `count` float32 values (padded to 64 bytes, as NumPy does).
Bytes npy_header(std::uint64_t count) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(count) + ",), }";
  while ((10 + dict.size() + 1) % 64) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(dict.size() & 0xFF);
  out += static_cast<char>(dict.size() >> 8);
  return testing::to_bytes(out + dict);
}

// Raw deflate of `in`, ended with a full flush (`last`: with the final block instead).
Bytes deflate_piece(const Bytes& in, bool last) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  Bytes out(deflateBound(&z, in.size()) + 64);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, last ? Z_FINISH : Z_FULL_FLUSH), last ? Z_STREAM_END : Z_OK);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A deflated .npy entry: `head` (a .npy header and maybe data), then `zero_mib` MiB of zeros.
struct Deflated {
  Bytes stream;
  std::uint64_t size = 0;  // inflated
  std::uint32_t crc = 0;   // of the inflated bytes
};

Deflated deflated(const Bytes& head, std::uint64_t zero_mib) {
  Deflated d;
  d.stream = deflate_piece(head, false);
  const Bytes zeros(kMiB, std::byte{0});
  const Bytes piece = deflate_piece(zeros, false);
  const uLong zero_crc = ::crc32(0, reinterpret_cast<const Bytef*>(zeros.data()), kMiB);
  uLong crc = ::crc32(0, reinterpret_cast<const Bytef*>(head.data()), static_cast<uInt>(head.size()));
  for (std::uint64_t i = 0; i < zero_mib; ++i) {
    d.stream.insert(d.stream.end(), piece.begin(), piece.end());
    crc = crc32_combine(crc, zero_crc, kMiB);
  }
  const Bytes end = deflate_piece({}, true);
  d.stream.insert(d.stream.end(), end.begin(), end.end());
  d.size = head.size() + zero_mib * kMiB;
  d.crc = static_cast<std::uint32_t>(crc);
  return d;
}

// An .npz entry of `mib` MiB of float32 zeros, deflated, declared truthfully.
testing::ZipFileSpec zeros_entry(const std::string& name, std::uint64_t mib) {
  Deflated d = deflated(npy_header(mib * kMiB / 4), mib);
  testing::ZipFileSpec e{name, d.stream, 8};
  e.uncompressed_size = d.size;
  e.crc = d.crc;
  return e;
}

struct CliRun {
  int exit_code = -1;   // -1: killed by a signal
  int signal = 0;
  std::string output;   // stdout and stderr
  long peak_rss_kib = -1;  // the program's VmHWM as it exits; -1 where ptrace is not allowed
  double seconds = 0;
};

// VmHWM of process `pid` from /proc, in KiB (-1 if absent).
long vm_hwm_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// Under AddressSanitizer (make sanitize) the CLI reserves terabytes of shadow memory, so an
// address-space limit stops it at start, its RSS says nothing of the program's own, and
// LeakSanitizer cannot run in a traced process: there the CLI runs untraced and unlimited.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// Runs the CLI with `args`; `address_space` > 0 limits its address space (RLIMIT_AS). The
// peak RSS is read while the program exits (stopped there by ptrace): the child's rusage would
// count the pages it shared with this test process between fork and exec.
CliRun run_cli(const std::vector<std::string>& args, const std::filesystem::path& dir, rlim_t address_space = 0) {
  const auto out_path = dir / "cli-output.txt";
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (address_space && !kAddressSanitizer) {
      struct rlimit lim {address_space, address_space};
      ::setrlimit(RLIMIT_AS, &lim);
    }
    ::setenv("OMP_NUM_THREADS", "2", 1);  // a small, machine-independent address space to start with
    if (!kAddressSanitizer) ::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);  // stops at exec when allowed
    std::vector<char*> argv{const_cast<char*>(TENSORACLE_CLI_PATH)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(TENSORACLE_CLI_PATH, argv.data());
    ::_exit(127);
  }
  CliRun r;
  int status = 0;
  bool first = true;
  while (::waitpid(pid, &status, 0) == pid && WIFSTOPPED(status)) {
    int deliver = 0;
    if (first) {
      ::ptrace(PTRACE_SETOPTIONS, pid, nullptr, PTRACE_O_TRACEEXIT | PTRACE_O_EXITKILL);
      first = false;
    } else if (status >> 8 == (SIGTRAP | (PTRACE_EVENT_EXIT << 8))) {
      r.peak_rss_kib = vm_hwm_kib(pid);
    } else {
      deliver = WSTOPSIG(status);  // the program's own signals go through
    }
    ::ptrace(PTRACE_CONT, pid, nullptr, reinterpret_cast<void*>(static_cast<long>(deliver)));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  auto bytes = testing::read_bytes(out_path);
  r.output.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return r;
}

// Expects the program's peak RSS below `mib` MiB (skipped where it cannot be measured).
#define EXPECT_PEAK_RSS_BELOW(run, mib, why)                                                   \
  do {                                                                                         \
    if ((run).peak_rss_kib < 0) GTEST_SKIP() << "peak RSS unmeasured (ptrace not allowed, or AddressSanitizer)"; \
    EXPECT_LT((run).peak_rss_kib, (mib) * 1024) << why;                                       \
  } while (0)

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

// A directory that declares far more than deflate can make of the entry's bytes is refused
// when the archive is opened: nothing is inflated.
TEST(CompareCli, AnNpzEntryDeclaringMoreThanDeflateCanExpandIsRefused) {
  TempDir dir;
  testing::ZipFileSpec e = zeros_entry("x.npy", 1);
  e.uncompressed_size = std::uint64_t{1} << 40;
  testing::write_zip_file(dir.path / "bomb.npz", {e});
  CliRun r = run_cli({"compare", (dir.path / "bomb.npz").string(), (dir.path / "bomb.npz").string()}, dir.path);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "error: [npz] " + (dir.path / "bomb.npz").string() + ": entry 'x.npy': declares 1099511627776 bytes");
  EXPECT_HAS(r.output, "more than deflate can expand");
}

// An entry whose stream goes on past its declared size (a small array, then 256 MiB of
// zeros): inflation stops one byte past the declared size, so the process stays small.
TEST(CompareCli, InflationStopsAtTheDeclaredSize) {
  TempDir dir;
  Bytes head = npy_header(16);
  head.resize(head.size() + 64, std::byte{0});  // the 16 values the header declares
  Deflated d = deflated(head, 256);
  testing::ZipFileSpec e{"x.npy", d.stream, 8};
  e.uncompressed_size = head.size();
  e.crc = d.crc;
  testing::write_zip_file(dir.path / "long.npz", {e});
  CliRun r = run_cli({"compare", (dir.path / "long.npz").string(), (dir.path / "long.npz").string()}, dir.path);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "entry 'x.npy': inflates beyond its declared size of " + std::to_string(head.size()) + " bytes");
  std::printf("refused a 256 MiB stream declared as %zu bytes: peak RSS %ld MiB, %.2f s\n", head.size(),
              r.peak_rss_kib / 1024, r.seconds);
  EXPECT_PEAK_RSS_BELOW(r, 64, "the process inflated far past the declared size");
}

// The compressed arrays of one archive may inflate to --max-inflated bytes in all.
TEST(CompareCli, TheTotalInflatedSizeIsCapped) {
  TempDir dir;
  testing::write_zip_file(dir.path / "a.npz", {zeros_entry("a.npy", 1), zeros_entry("b.npy", 1)});
  const std::string a = (dir.path / "a.npz").string();
  CliRun r = run_cli({"compare", "--max-inflated", "1536KiB", a, a}, dir.path);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "more than the limit of 1572864 bytes");
  EXPECT_HAS(r.output, "reached at entry 'b.npy'");
  EXPECT_HAS(r.output, "--max-inflated SIZE");
  r = run_cli({"compare", "--max-inflated", "3MiB", a, a}, dir.path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Memory the system refuses for an array (here: 8 GiB under a 3 GiB address-space limit) is
// an input error, exit 2, naming the file and the entry — not an internal error.
TEST(CompareCli, OutOfMemoryIsExitTwoNamingTheEntry) {
  if (kAddressSanitizer) GTEST_SKIP() << "AddressSanitizer's shadow memory does not start under an address-space limit";
  TempDir dir;
  testing::write_zip_file(dir.path / "big.npz", {zeros_entry("x.npy", 8192)});
  const std::string big = (dir.path / "big.npz").string();
  CliRun r = run_cli({"compare", big, big}, dir.path, rlim_t{3} << 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const std::uint64_t size = npy_header(std::uint64_t{2} << 30).size() + (std::uint64_t{8} << 30);
  EXPECT_HAS(r.output, "error: [npz] " + big + ": entry 'x.npy': cannot allocate " + std::to_string(size) + " bytes (8.0 GiB)");
  EXPECT_HAS(r.output, "out of memory");
}

// Two archives of 8 arrays of 8 MiB each (128 MiB inflated in all) are compared one pair of
// arrays at a time: the process never holds more than a few of them.
TEST(CompareCli, ArchivesAreComparedOneArrayAtATime) {
  TempDir dir;
  std::vector<testing::ZipFileSpec> entries;
  for (int i = 0; i < 8; ++i) entries.push_back(zeros_entry("t" + std::to_string(i) + ".npy", 8));
  testing::write_zip_file(dir.path / "c.npz", entries);
  testing::write_zip_file(dir.path / "r.npz", entries);
  CliRun r = run_cli({"compare", "--atol", "0", "--rtol", "0", (dir.path / "c.npz").string(), (dir.path / "r.npz").string()},
                  dir.path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "passed: all 8 tensors within tolerance");
  std::printf("compare of 2 x 8 arrays of 8 MiB: peak RSS %ld MiB, %.2f s\n", r.peak_rss_kib / 1024, r.seconds);
  EXPECT_PEAK_RSS_BELOW(r, 64, "more than a few 8 MiB arrays were held at once");
}

}  // namespace
}  // namespace tensoracle

#endif  // TENSORACLE_CLI_PATH
