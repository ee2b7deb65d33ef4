// The engine cache in hostile surroundings (issue 30): it touches only files it created, never
// follows a link in its folder, refuses a folder that others can write, accepts an entry only
// when the record vouches for the very engine file, and reads its JSON files as untrusted.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "cache/store.h"
#include "cache_model.h"
#include "st_helpers.h"
#include "tensoracle/cache.h"
#include "tensoracle/errors.h"

using namespace tensoracle;
namespace fs = std::filesystem;
using namespace tensoracle::testing::cache_model;
using tensoracle::testing::read_bytes;
using tensoracle::testing::TempDir;
using tensoracle::testing::write_bytes;

namespace {

const std::string kHex32 = "0123456789abcdef0123456789abcdef";

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary | std::ios::trunc) << text; }

std::string read_text(const fs::path& p) {
  auto b = read_bytes(p);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

std::int64_t mtime_s(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mtim.tv_sec;
}

// Files an ordinary project folder holds, none of them the cache's.
const std::vector<std::pair<std::string, std::string>> kForeign = {
    {"Cargo.lock", "# cargo\n"},
    {"poetry.lock", "# poetry\n"},
    {"model.engine", "not ours"},
    {"model.json", "{\"a\": 1}"},
    {"notes.lock", ""},
    {"build-" + kHex32 + ".lock", "held by some other tool"},
    {"build-" + kHex32 + ".engine", "an engine of another tool"},
    {"build-" + kHex32 + ".json", "{\"name\": \"build\"}"},
    {".data.json.tmp-1-0000000000000000", "another tool's temporary"},
};

void plant_foreign(const fs::path& dir) {
  fs::create_directories(dir);
  for (const auto& [name, text] : kForeign) write_text(dir / name, text);
  // Old, as a leftover temporary would be.
  const struct timespec t[2] = {{0, UTIME_OMIT}, {time(nullptr) - 7 * 86400, 0}};
  for (const auto& [name, text] : kForeign) ASSERT_EQ(utimensat(AT_FDCWD, (dir / name).c_str(), t, 0), 0);
}

void expect_foreign_intact(const fs::path& dir) {
  for (const auto& [name, text] : kForeign) {
    ASSERT_TRUE(fs::exists(dir / name)) << name << " was removed";
    EXPECT_EQ(read_text(dir / name), text) << name;
  }
}

int run_cli(const std::string& args) {
#ifdef TENSORACLE_CLI_PATH
  return std::system((std::string(TENSORACLE_CLI_PATH) + " " + args + " > /dev/null 2>&1").c_str());
#else
  (void)args;
  return -1;
#endif
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Only its own files (hole 9)

TEST(CacheSafety, ClearAndPruneOfAnOrdinaryFolderRemoveNothing) {
  TempDir tmp;
  const fs::path project = tmp.path / "project";
  plant_foreign(project);
  EXPECT_TRUE(cache::list(project).empty());
  EXPECT_TRUE(cache::prune(std::chrono::seconds(0), 0, project).empty());
  expect_foreign_intact(project);
  EXPECT_TRUE(cache::clear(std::nullopt, project).empty());
  expect_foreign_intact(project);
  EXPECT_TRUE(cache::clear(std::string("build"), project).empty());
  expect_foreign_intact(project);
#ifdef TENSORACLE_CLI_PATH
  EXPECT_EQ(run_cli("cache clear --dir " + project.string()), 0);
  EXPECT_EQ(run_cli("cache prune --older-than 0 --max-size 0 --dir " + project.string()), 0);
  expect_foreign_intact(project);
#endif
}

TEST(CacheSafety, ClearAndPruneOfACacheRemoveOnlyItsEntries) {
  Model m;
  auto a = m.open();
  auto o = m.options();
  o.name = "other";
  auto b = m.open(o);
  plant_foreign(m.cache_dir);
  // A lock of another name's failed build stays when clearing one name.
  write_bytes(m.cache_dir / ("third-" + kHex32 + ".lock"), {});
  auto removed = cache::clear(std::string("other"), m.cache_dir);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_FALSE(fs::exists(b.path));
  EXPECT_TRUE(fs::exists(a.path));
  EXPECT_TRUE(fs::exists(m.cache_dir / ("third-" + kHex32 + ".lock"))) << "clear --name other touches only 'other'";
  expect_foreign_intact(m.cache_dir);
  EXPECT_EQ(cache::prune(std::chrono::seconds(0), std::nullopt, m.cache_dir).size(), 1u);
  EXPECT_FALSE(fs::exists(a.path));
  expect_foreign_intact(m.cache_dir);
  EXPECT_TRUE(cache::clear(std::nullopt, m.cache_dir).empty());
  expect_foreign_intact(m.cache_dir);
  EXPECT_FALSE(fs::exists(m.cache_dir / ("third-" + kHex32 + ".lock"))) << "an orphan lock of the cache's own naming";
  EXPECT_FALSE(fs::exists(m.cache_dir / "digests.json"));
}

// ---------------------------------------------------------------------------------------------
// Links in the cache folder are never followed (hole 10)

TEST(CacheSafety, LockFileLinkIsRefusedNotCreatedThrough) {
  Model m;
  const auto id = engine_identity(Model::declaration(), m.options());
  const fs::path victim = m.tmp.path / "nologin";
  fs::create_directories(m.cache_dir);
  fs::create_symlink(victim, cache::entry_paths(m.cache_dir, "linear", id.identity).lock);
  try {
    m.open();
    ADD_FAILURE() << "opened through a linked lock file";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(victim)) << "created through the link";
}

TEST(CacheSafety, PruneAndClearCreateNothingThroughLinks) {
  Model m;
  auto h = m.open();
  const fs::path victim = m.tmp.path / "victim";
  fs::create_symlink(victim, m.cache_dir / ("gone-" + kHex32 + ".lock"));
  cache::prune(std::chrono::hours(1), std::nullopt, m.cache_dir);
  EXPECT_FALSE(fs::exists(victim)) << "prune created a file through a link";
  cache::clear(std::string("nothing"), m.cache_dir);
  EXPECT_FALSE(fs::exists(victim)) << "clear created a file through a link";
  // The entry's own lock replaced by a link: clearing the entry is refused.
  const auto lock = cache::entry_paths(m.cache_dir, "linear", h.identity).lock;
  fs::remove(lock);
  fs::create_symlink(victim, lock);
  EXPECT_THROW(cache::clear(std::nullopt, m.cache_dir), IoError);
  EXPECT_FALSE(fs::exists(victim)) << "clear created a file through the entry's lock link";
  EXPECT_TRUE(fs::is_symlink(m.cache_dir / ("gone-" + kHex32 + ".lock"))) << "not ours: left alone";
}

TEST(CacheSafety, LastUseTouchDoesNotFollowARecordLink) {
  Model m;
  auto h = m.open();
  const auto record = cache::entry_paths(m.cache_dir, "linear", h.identity).record;
  const fs::path victim = m.tmp.path / "victim.json";
  fs::copy_file(record, victim);
  const struct timespec old[2] = {{0, UTIME_OMIT}, {1'000'000'000, 0}};  // 2001
  ASSERT_EQ(utimensat(AT_FDCWD, victim.c_str(), old, 0), 0);
  fs::remove(record);
  fs::create_symlink(victim, record);
  settle();
  auto again = m.open();
  EXPECT_EQ(mtime_s(victim), 1'000'000'000) << "the touch followed the record link";
  EXPECT_EQ(run_once(again), run_once(h));
}

TEST(CacheSafety, FolderWritableByOthersIsRefused) {
  for (mode_t mode : {0777, 0770, 01777}) {
    Model m;
    fs::create_directories(m.cache_dir);
    ASSERT_EQ(::chmod(m.cache_dir.c_str(), mode), 0);
    try {
      m.open();
      ADD_FAILURE() << std::oct << mode << ": a cache folder others can write was used";
    } catch (const IoError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("[cache] " + m.cache_dir.string(), 0), 0u) << what;
      EXPECT_NE(what.find("chmod go-w"), std::string::npos) << what;
      EXPECT_NE(what.find("cache_dir"), std::string::npos) << what;
    }
    EXPECT_THROW(cache::list(m.cache_dir), IoError);
    EXPECT_THROW(cache::clear(std::nullopt, m.cache_dir), IoError);
    EXPECT_THROW(cache::prune(std::chrono::seconds(0), std::nullopt, m.cache_dir), IoError);
    EXPECT_TRUE(fs::is_empty(m.cache_dir)) << "nothing written";
#ifdef TENSORACLE_CLI_PATH
    EXPECT_EQ(WEXITSTATUS(run_cli("cache list --dir " + m.cache_dir.string())), 2);
#endif
  }
}

TEST(CacheSafety, FolderOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the folder to another user";
  Model m;
  fs::create_directories(m.cache_dir);
  ASSERT_EQ(::chown(m.cache_dir.c_str(), 65534, 65534), 0);
  try {
    m.open();
    ADD_FAILURE() << "a cache folder of another user was used";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("owned by"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("chown"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cache::clear(std::nullopt, m.cache_dir), IoError);
  EXPECT_TRUE(fs::is_empty(m.cache_dir));
}

TEST(CacheSafety, NewFolderIsPrivate) {
  Model m;
  m.open();
  struct stat st {};
  ASSERT_EQ(::stat(m.cache_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

// ---------------------------------------------------------------------------------------------
// The record vouches for the very engine file

TEST(CacheSafety, EngineReplacedByAnotherValidEngineIsNotAccepted) {
  Model m;
  auto a = m.open();
  const float ya = run_once(a);
  m.write_weights(2.f);  // another entry, same I/O, other numbers
  auto b = m.open();
  ASSERT_NE(a.identity, b.identity);
  ASSERT_NE(run_once(b), ya);
  m.write_weights(1.f);
  fs::copy_file(b.path, a.path, fs::copy_options::overwrite_existing);
  settle();
  auto checks = cache::verify(m.cache_dir);
  ASSERT_EQ(checks.size(), 2u);
  for (const auto& c : checks)
    EXPECT_EQ(c.health, c.entry.path == a.path ? cache::Health::kCorrupt : cache::Health::kOk) << c.entry.path;
  try {
    auto h = m.open();
    ADD_FAILURE() << "accepted another engine: built " << h.built << ", result " << run_once(h) << " (own " << ya << ")";
  } catch (const CorruptEngineError& e) {
    EXPECT_NE(std::string(e.what()).find(a.path.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("force_rebuild=True"), std::string::npos) << e.what();
  }
  auto o = m.options();
  o.force_rebuild = true;
  EXPECT_EQ(run_once(m.open(o)), ya);
  // Engine and record of the other entry both copied over this one's: its identity is not
  // this entry's, so the entry is rebuilt.
  const auto pb = cache::entry_paths(m.cache_dir, "linear", b.identity);
  const auto pa = cache::entry_paths(m.cache_dir, "linear", a.identity);
  fs::copy_file(pb.engine, pa.engine, fs::copy_options::overwrite_existing);
  fs::copy_file(pb.record, pa.record, fs::copy_options::overwrite_existing);
  auto h = m.open();
  EXPECT_TRUE(h.built);
  EXPECT_EQ(run_once(h), ya);
}

// ---------------------------------------------------------------------------------------------
// Untrusted JSON

TEST(CacheSafety, DeeplyNestedRecordIsNoRecord) {
  Model m;
  auto h = m.open();
  const auto record = cache::entry_paths(m.cache_dir, "linear", h.identity).record;
  const std::size_t depth = 1'000'000;
  std::string text = read_text(record);
  auto at = text.find("\"identity_text\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, std::string("\"identity_text\"").size(), "\"y\"");
  text.insert(1, "\"identity_text\": " + std::string(depth, '[') + std::string(depth, ']') + ",");
  write_text(record, text);
  EXPECT_FALSE(cache::read_record(record));
  auto entries = cache::list(m.cache_dir);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_FALSE(entries[0].has_record);
  auto again = m.open();
  EXPECT_EQ(run_once(again), run_once(h));
  EXPECT_TRUE(cache::read_record(record)) << "replaced";
#ifdef TENSORACLE_CLI_PATH
  write_text(record, text);
  EXPECT_EQ(run_cli("cache list --dir " + m.cache_dir.string()), 0);
#endif
}

TEST(CacheSafety, DeeplyNestedDigestMemoCountsAsEmpty) {
  Model m;
  settle();  // so that the memo's record of the weights is not racy: a warm open hashes nothing
  m.open();
  auto w0 = hashed();
  EXPECT_FALSE(m.open().built);
  ASSERT_EQ(hashed() - w0, 0u) << "the memo works";
  const fs::path memo = m.cache_dir / "digests.json";
  const std::size_t depth = 1'000'000;
  std::string text = read_text(memo);
  auto at = text.find("\"files\"");
  ASSERT_NE(at, std::string::npos);
  text.insert(1, "\"deep\": " + std::string(depth, '[') + std::string(depth, ']') + ",");
  write_text(memo, text);
  w0 = hashed();
  EXPECT_FALSE(m.open().built);
  EXPECT_EQ(hashed() - w0, 1u) << "a memo refused as a whole: the weights are hashed again";
}
