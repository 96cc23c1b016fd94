// RunTool (sweep/src/cluster/run_tool.h): a cluster tool's output and exit code, and a tool that
// hangs killed at its timeout instead of hanging its caller (an agent ending its Slurm task).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "cluster/run_tool.h"

namespace sweep::cluster {
namespace {

TEST(RunToolTest, GivesTheToolsOutputAndExitCode) {
  auto r = RunTool({"sh", "-c", "cat; echo said >&2; exit 3"}, "fed\n", 10'000);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->out, "fed\n");
  EXPECT_EQ(r->err, "said\n");
  EXPECT_EQ(r->exit_code, 3);
}

TEST(RunToolTest, AToolStillRunningAtItsTimeoutIsKilledAndNamed) {
  const auto start = std::chrono::steady_clock::now();
  auto r = RunTool({"sleep", "30"}, "", 200);
  const double took_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnavailable);
  EXPECT_EQ(r.status().message(), "sleep did not finish within 0.2 s; it was killed");
  EXPECT_LT(took_s, 5);
}

TEST(RunToolTest, AToolThatClosesItsOutputButHangsIsKilledToo) {
  auto r = RunTool({"sh", "-c", "exec >&- 2>&-; exec sleep 30"}, "", 200);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnavailable);
}

TEST(RunToolTest, AMissingToolIsNotFoundByName) {
  auto r = RunTool({"sweep-no-such-tool"}, "", 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_NE(r.status().message().find("sweep-no-such-tool"), std::string::npos);
}

}  // namespace
}  // namespace sweep::cluster
