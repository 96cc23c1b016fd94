// SweepLock: one owner per sweep, and a lock file the database's own users can open.
#include "sweep_lock.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace sweep {
namespace {

namespace fs = std::filesystem;

class SweepLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sweep-lock-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = (dir_ / "s.db").string();
    std::ofstream(db_) << "x";
  }
  void TearDown() override { fs::remove_all(dir_); }

  static struct stat StatOf(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st;
  }

  fs::path dir_;
  std::string db_;
};

TEST_F(SweepLockTest, OneOwnerAtATimeAndFreeOnceReleased) {
  auto first = SweepLock::Acquire(db_, 1);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(SweepLock::Acquire(db_, 1).status().code(), Status::Code::kBusy);
  EXPECT_TRUE(SweepLock::Acquire(db_, 2).ok());  // another sweep of the same file
  EXPECT_TRUE(*SweepLock::IsHeld(db_, 1));
  first->reset();
  EXPECT_FALSE(*SweepLock::IsHeld(db_, 1));
  EXPECT_TRUE(SweepLock::Acquire(db_, 1).ok());
}

// A group-writable database in a shared folder: its lock file is group-writable too, so that
// another user of the group can run the sweep after this one.
TEST_F(SweepLockTest, TheLockFileTakesTheDatabasesMode) {
  ::chmod(db_.c_str(), 0664);
  ASSERT_TRUE(SweepLock::Acquire(db_, 1).ok());
  EXPECT_EQ(StatOf(db_ + ".lock").st_mode & 0777, 0664u);
}

// Root running a sweep on a user's database leaves a lock file that user owns, as SQLite does
// with the database's -wal and -shm: otherwise the user could not run the sweep again.
TEST_F(SweepLockTest, ALockFileMadeByRootBelongsToTheDatabasesOwner) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  ASSERT_EQ(::chown(db_.c_str(), 65534, 65534), 0);
  ASSERT_TRUE(SweepLock::Acquire(db_, 1).ok());
  const struct stat lock = StatOf(db_ + ".lock");
  EXPECT_EQ(lock.st_uid, 65534u);
  EXPECT_EQ(lock.st_gid, 65534u);
}

// A lock file that is a link (planted in a shared folder) is refused, and what it points at is
// left as it was: the sweep's run must not lock, chmod or chown another file.
TEST_F(SweepLockTest, ALinkInPlaceOfTheLockFileIsRefusedAndItsTargetLeftAlone) {
  const std::string target = (dir_ / "private").string();
  std::ofstream(target) << "secret";
  ::chmod(target.c_str(), 0600);
  ::chmod(db_.c_str(), 0666);
  fs::create_symlink(target, db_ + ".lock");
  auto lock = SweepLock::Acquire(db_, 1);
  ASSERT_FALSE(lock.ok());
  EXPECT_NE(lock.status().message().find("is a symbolic link"), std::string::npos)
      << lock.status().message();
  EXPECT_EQ(StatOf(target).st_mode & 0777, 0600u);
}

// A lock file that exists already (another user's, of an earlier run) is used as it is.
TEST_F(SweepLockTest, AnExistingLockFileKeepsItsMode) {
  std::ofstream(db_ + ".lock") << "";
  ::chmod((db_ + ".lock").c_str(), 0640);
  ::chmod(db_.c_str(), 0666);
  ASSERT_TRUE(SweepLock::Acquire(db_, 1).ok());
  EXPECT_EQ(StatOf(db_ + ".lock").st_mode & 0777, 0640u);
}

}  // namespace
}  // namespace sweep
