#include "folder_reaper.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace sweep {
namespace {

namespace fs = std::filesystem;

class FolderReaperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("folder-reaper-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A folder of `files` files in two levels.
  static void Fill(const fs::path& dir, int files) {
    fs::create_directories(dir / "sub");
    for (int i = 0; i < files; ++i) {
      std::ofstream(dir / (i % 2 ? "sub" : ".") / ("f" + std::to_string(i))) << i;
    }
  }

  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(root_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path root_;
};

TEST_F(FolderReaperTest, AFolderIsGoneAtOnceAndDeletedInTheBackground) {
  Fill(root_ / "trial-0", 200);
  Fill(root_ / "trial-1", 3);
  FolderReaper reaper;
  std::string why;
  ASSERT_TRUE(reaper.Discard((root_ / "trial-0").string(), &why)) << why;
  // Its name is free at once: the trial's run may make it anew.
  EXPECT_FALSE(fs::exists(root_ / "trial-0"));
  fs::create_directories(root_ / "trial-0");
  reaper.Drain();
  EXPECT_EQ(Names(), (std::vector<std::string>{"trial-0", "trial-1"}));
  EXPECT_TRUE(fs::is_empty(root_ / "trial-0"));
  EXPECT_TRUE(fs::exists(root_ / "trial-1" / "sub" / "f1"));
}

TEST_F(FolderReaperTest, AMissingFolderIsNoError) {
  FolderReaper reaper;
  std::string why;
  EXPECT_TRUE(reaper.Discard((root_ / "trial-9").string(), &why));
  EXPECT_TRUE(why.empty());
  reaper.Drain();
  EXPECT_TRUE(Names().empty());
}

TEST_F(FolderReaperTest, LinksAreDeletedNotFollowed) {
  Fill(root_ / "outside", 4);
  fs::create_directories(root_ / "trial-0");
  fs::create_directory_symlink(root_ / "outside", root_ / "trial-0" / "data");
  fs::create_symlink(root_ / "outside" / "f0", root_ / "trial-0" / "f0");
  fs::create_directory_symlink(root_ / "outside", root_ / "trial-1");
  FolderReaper reaper;
  ASSERT_TRUE(reaper.Discard((root_ / "trial-0").string(), nullptr));
  ASSERT_TRUE(reaper.Discard((root_ / "trial-1").string(), nullptr));
  reaper.Drain();
  EXPECT_EQ(Names(), std::vector<std::string>{"outside"});
  EXPECT_TRUE(fs::exists(root_ / "outside" / "f0"));
  EXPECT_TRUE(fs::exists(root_ / "outside" / "sub" / "f1"));
}

TEST_F(FolderReaperTest, WhatAnEarlierRunLeftIsDeletedByTheNext) {
  // A coordinator that ended while deleting leaves its folders under their hidden names.
  Fill(root_ / ".cleared-trial-3-100-5-0", 50);
  Fill(root_ / ".cleared-trial-4-100-6-1", 1);
  Fill(root_ / "trial-5", 2);
  std::ofstream(root_ / ".sweep-runs") << "{}\n";
  FolderReaper reaper;
  reaper.Adopt(root_.string());
  reaper.Drain();
  EXPECT_EQ(Names(), (std::vector<std::string>{".sweep-runs", "trial-5"}));
}

TEST_F(FolderReaperTest, EndingBeforeTheDeletionIsDoneLosesNothingElse) {
  Fill(root_ / "trial-0", 2000);
  Fill(root_ / "trial-1", 2);
  {
    FolderReaper reaper;
    ASSERT_TRUE(reaper.Discard((root_ / "trial-0").string(), nullptr));
  }
  // Whatever the reaper deleted before it ended, trial-0's name is free, trial-1 is whole, and
  // anything left is under a hidden name the next reaper adopts.
  for (const std::string& name : Names()) {
    EXPECT_TRUE(name == "trial-1" || name.starts_with(".cleared-trial-0-")) << name;
  }
  EXPECT_TRUE(fs::exists(root_ / "trial-1" / "sub" / "f1"));
  FolderReaper next;
  next.Adopt(root_.string());
  next.Drain();
  EXPECT_EQ(Names(), std::vector<std::string>{"trial-1"});
}

}  // namespace
}  // namespace sweep
