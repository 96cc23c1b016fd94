// Storage faults, end to end: a disk that fills up mid-sweep, a read-only file system, and a
// corrupted database file. Each gets a clear message, loses nothing already committed, and
// (for the disk) resumes once the cause is gone. The file systems are small tmpfs mounts in a
// private user and mount namespace (`unshare -rm`), so the test needs no privileges and leaves
// nothing mounted; it is skipped where namespaces are not allowed.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "e2e_fixture.h"

namespace {

using nlohmann::json;
using sweep_e2e::E2eTest;
using sweep_e2e::Output;
using sweep_e2e::Slurp;
namespace fs = std::filesystem;

const std::string kManyTrials = sweep_e2e::BraninConfig("full", 6000, "seed = 4\n", "steps = 2\n");

class StorageTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    if (std::system("unshare -rm true > /dev/null 2>&1") != 0) {
      GTEST_SKIP() << "user and mount namespaces are not available here";
    }
  }

  // Runs `script` with sh inside a fresh user+mount namespace, in the test directory, with
  // $SWEEP set to the binary. Returns its exit code.
  int InNamespace(const std::string& script) {
    Write("script.sh", script);
    std::string cmd = "cd '" + dir_.string() +
                      "' && SWEEP='" SWEEP_BINARY "' unshare -rm sh script.sh > script.log 2>&1";
    int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }

  std::string Read(const std::string& name) { return Slurp(dir_ / name); }

  // Runs sweep `name` (4 trainer trials of 12 epochs, checkpoints under disk/ck) on this
  // machine with one agent, `agent`, started in folder a/ once the shell lines `setup` have run.
  void RunWithOneAgent(const std::string& name, const std::string& setup,
                       const std::string& agent) {
    WriteTinyDataset(6000, 200);
    Write("c.toml",
          "[sweep]\nname = \"" + name +
              "\"\nseed = 5\n[search]\nalgorithm = \"grid\"\n[parameters]\n"
              "lr = { values = [0.05, 0.1, 0.2, 0.3] }\nepochs = 12\nbatch_size = 32\n[trial]\n"
              "checkpoint_dir = \"disk/ck\"\n[trainer]\ndataset = \"" +
              dir_.string() + "\"\n[executor]\ncpu_slots = 1\n");
    ASSERT_EQ(InNamespace("set -u\nmkdir -p disk\n" + setup + "\n" +
                          R"("$SWEEP" run c.toml --listen 127.0.0.1:0 > run.out 2> run.err & run=$!
port=
for i in $(seq 200); do
  port=$(sed -n 's/.*listening for agents on [^ ]*:\([0-9][0-9]*\)$/\1/p' run.err)
  [ -n "$port" ] && break
  sleep 0.05
done
[ -n "$port" ] || exit 91
(cd a && exec "$SWEEP" agent --connect 127.0.0.1:$port --cpu-slots 1 --name )" +
                          agent + R"( > ../agent.log 2>&1) & agent=$!
wait $run; echo $? > run.rc
kill $agent; wait $agent
)"),
              0)
        << Read("script.log") << Read("run.err");
  }
};

TEST_F(StorageTest, DiskFullStopsCleanlyAndResumesOnceThereIsSpace) {
  Write("c.toml", kManyTrials);
  fs::create_directories(dir_ / "after_full");
  fs::create_directories(dir_ / "after_resume");
  ASSERT_EQ(InNamespace(R"(set -u
mkdir -p disk
mount -t tmpfs -o size=512k tmpfs disk || exit 90
"$SWEEP" run c.toml --db disk/s.db > run.out 2> run.err; echo $? > run.rc
cp disk/s.db* after_full/
mount -o remount,size=64m disk
"$SWEEP" resume full --db disk/s.db > resume.out 2> resume.err; echo $? > resume.rc
cp disk/s.db* after_resume/
)"),
            0)
      << Read("script.log");
  EXPECT_EQ(Read("run.rc"), "1\n");
  std::string err = Read("run.err");
  EXPECT_NE(err.find("disk/s.db: disk full"), std::string::npos) << err;
  EXPECT_NE(err.find("sweep resume full --db disk/s.db"), std::string::npos) << err;

  // What was committed before the disk filled up is intact and consistent.
  auto completed =
      Query("SELECT count(*) FROM trials WHERE status = 'completed'", "after_full/s.db");
  EXPECT_GT(std::stoi(completed[0][0]), 0);
  EXPECT_LT(std::stoi(completed[0][0]), 6000);
  EXPECT_EQ(Query("PRAGMA integrity_check", "after_full/s.db")[0][0], "ok");
  EXPECT_EQ(Query("SELECT count(*) FROM reports r WHERE NOT EXISTS (SELECT 1 FROM trials t "
                  "WHERE t.number = r.trial)",
                  "after_full/s.db")[0][0],
            "0");

  EXPECT_EQ(Read("resume.rc"), "0\n") << Read("resume.err");
  EXPECT_EQ(
      Query("SELECT count(*) FROM trials WHERE status = 'completed'", "after_resume/s.db")[0][0],
      "6000");
  EXPECT_EQ(Query("SELECT count(*) FROM reports", "after_resume/s.db")[0][0], "12000");
  EXPECT_EQ(Query("PRAGMA integrity_check", "after_resume/s.db")[0][0], "ok");
}

// A command trial whose logs' disk is full: its program's writes to stderr (the log) fail and
// it exits non-zero; the trial's error says the disk is full, not only the exit code.
TEST_F(StorageTest, ACommandTrialWhoseLogDiskIsFullSaysSo) {
  WriteProgram("noisy.sh", R"sh(#!/bin/sh
head -c 200000 /dev/zero | tr '\0' x >&2 || exit 3
echo 'sweep-report {"epoch": 1, "score": 1}'
)sh");
  Write("n.toml",
        "[sweep]\nname = \"noisy\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 1\n"
        "[trial]\nkind = \"command\"\ncommand = [\"./noisy.sh\"]\nmax_retries = 0\n"
        "trials_dir = \"disk/trials\"\n");
  ASSERT_EQ(InNamespace(R"(set -u
mkdir -p disk
mount -t tmpfs -o size=64k tmpfs disk || exit 90
"$SWEEP" run n.toml > run.out 2> run.err; echo $? > run.rc
)"),
            0)
      << Read("script.log");
  EXPECT_EQ(Read("run.rc"), "1\n") << Read("run.err");
  const auto rows = Query("SELECT status, error FROM trials");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0][0], "failed");
  EXPECT_NE(rows[0][1].find("exited with code 3; the disk of its logs ("), std::string::npos)
      << rows[0][1];
  EXPECT_NE(rows[0][1].find("disk/trials/noisy/trial-0) is full"), std::string::npos) << rows[0][1];
}

// A finished sweep's file on a disk that has since filled up: a reader cannot make its -wal and
// -shm there, reads the file (which its writer closed whole) as immutable instead, and leaves
// nothing behind.
TEST_F(StorageTest, AFinishedSweepIsReadOnAFullDisk) {
  Write("c.toml", sweep_e2e::BraninConfig("done", 5));
  ASSERT_EQ(InNamespace(R"(set -u
mkdir -p disk
mount -t tmpfs -o size=1m tmpfs disk || exit 90
"$SWEEP" run c.toml --db disk/s.db > run.out 2> run.err || exit 91
dd if=/dev/zero of=disk/filler bs=4k 2> /dev/null
"$SWEEP" list --db disk/s.db > list.out 2> list.err; echo $? > list.rc
"$SWEEP" trials done --json --db disk/s.db > trials.out 2> trials.err; echo $? > trials.rc
ls disk > left.txt
)"),
            0)
      << Read("script.log") << Read("run.err");
  EXPECT_EQ(Read("list.rc"), "0\n") << Read("list.err");
  EXPECT_NE(Read("list.out").find("done  completed  5 trials"), std::string::npos)
      << Read("list.out");
  EXPECT_EQ(Read("trials.rc"), "0\n") << Read("trials.err");
  EXPECT_EQ(json::parse(Read("trials.out")).size(), 5u);
  EXPECT_EQ(Read("left.txt"), "filler\ns.db\ns.db.lock\n");  // no -wal, no -shm
}

// A disk too small for the new database's schema: SQLite reports the failed write as a "disk
// I/O error", and the store says from the system's errno that the disk is full.
TEST_F(StorageTest, DiskFullWhileCreatingTheSchemaSaysDiskFull) {
  Write("c.toml", sweep_e2e::BraninConfig("tiny", 3));
  ASSERT_EQ(InNamespace(R"(set -u
mkdir -p disk
mount -t tmpfs -o size=16k tmpfs disk || exit 90
"$SWEEP" run c.toml --db disk/f.db > run.out 2> run.err; echo $? > run.rc
)"),
            0)
      << Read("script.log");
  EXPECT_EQ(Read("run.rc"), "1\n");
  std::string err = Read("run.err");
  EXPECT_NE(err.find("disk/f.db: disk full while "), std::string::npos) << err;
  EXPECT_NE(err.find("; free some space"), std::string::npos) << err;
  EXPECT_EQ(err.find("I/O error"), std::string::npos) << err;
}

// The checkpoints' disk fills up while a trainer trial runs: the trial could not write its
// checkpoint, which is the machine's trouble and not the trial's. It ends interrupted (no retry
// spent), the sweep stops naming the file and the cause, and once there is space `resume` runs
// it again and finishes the sweep, with each epoch reported once.
TEST_F(StorageTest, CheckpointDiskFullInterruptsTheTrialAndResumeFinishesIt) {
  WriteTinyDataset(800, 200);
  Write("c.toml",
        "[sweep]\nname = \"ckfull\"\nseed = 5\n[search]\nalgorithm = \"grid\"\n[parameters]\n"
        "lr = { values = [0.05, 0.2] }\nepochs = 2\nbatch_size = 32\n[trial]\n"
        "checkpoint_dir = \"disk/ck\"\n[trainer]\ndataset = \"" +
            dir_.string() + "\"\n[executor]\ncpu_slots = 1\n");
  fs::create_directories(dir_ / "after_full");
  ASSERT_EQ(InNamespace(R"(set -u
mkdir -p disk
mount -t tmpfs -o size=16k tmpfs disk || exit 90
"$SWEEP" run c.toml > run.out 2> run.err; echo $? > run.rc
cp sweeps.db* after_full/
ls disk/ck/ckfull > full.ls
mount -o remount,size=64m disk
"$SWEEP" resume ckfull > resume.out 2> resume.err; echo $? > resume.rc
)"),
            0)
      << Read("script.log");
  EXPECT_EQ(Read("run.rc"), "1\n");
  const std::string err = Read("run.err");
  EXPECT_NE(err.find("sweep: stopping: trial 0: cannot write the checkpoint: " + dir_.string() +
                     "/disk/ck/ckfull/trial-0.ckpt: write failed: No space left on device"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("sweep resume ckfull"), std::string::npos) << err;
  EXPECT_EQ(Read("full.ls"), "") << "a failed write leaves no temporary file";
  const auto stopped =
      Query("SELECT number, status, retries, error FROM trials", "after_full/sweeps.db");
  ASSERT_EQ(stopped.size(), 1u) << "the sweep stopped before its second trial";
  EXPECT_EQ(stopped[0][1], "interrupted");
  EXPECT_EQ(stopped[0][2], "0");
  EXPECT_NE(stopped[0][3].find("trial-0.ckpt: write failed: No space left on device"),
            std::string::npos)
      << stopped[0][3];
  EXPECT_EQ(Query("SELECT status FROM sweeps", "after_full/sweeps.db")[0][0], "interrupted");

  EXPECT_EQ(Read("resume.rc"), "0\n") << Read("resume.err");
  EXPECT_EQ(
      Query("SELECT group_concat(status) FROM (SELECT status FROM trials ORDER BY number)")[0][0],
      "completed,completed");
  EXPECT_EQ(Query("SELECT count(*) FROM reports")[0][0], "4");  // 2 trials x 2 epochs, once each
  EXPECT_EQ(Query("SELECT sum(retries) FROM trials")[0][0], "0");
}

// The same on one server of several: an agent whose disk is full fails a trial's checkpoint.
// That server takes no more trials, the trial runs again on another one (no retry spent), and
// the sweep goes on to its end instead of stopping every server.
TEST_F(StorageTest, ACheckpointDiskFullOnOneServerRetiresItAndTheSweepGoesOn) {
  ASSERT_NO_FATAL_FAILURE(RunWithOneAgent(
      "oneful", "mkdir -p a/disk\nmount -t tmpfs -o size=16k tmpfs a/disk || exit 90", "full"));
  EXPECT_EQ(Read("run.rc"), "0\n") << Read("run.err");
  const std::string err = Read("run.err");
  EXPECT_NE(err.find("sweep: no more trials on full: trial "), std::string::npos) << err;
  EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
  EXPECT_EQ(
      Query("SELECT group_concat(status) FROM (SELECT status FROM trials ORDER BY number)")[0][0],
      "completed,completed,completed,completed");
  EXPECT_EQ(Query("SELECT sum(retries) FROM trials")[0][0], "0");
  // The trial that met the full disk ran again, here, from its first epoch: 12 epochs, once.
  EXPECT_EQ(Query("SELECT count(*) FROM events WHERE to_state = 'interrupted' AND detail LIKE "
                  "'%No space left on device%running it again on another server'")[0][0],
            "1");
  EXPECT_EQ(Query("SELECT count(*) FROM reports")[0][0], "48");
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE placement NOT LIKE 'local:%'")[0][0], "0");
  EXPECT_EQ(Query("SELECT status FROM sweeps")[0][0], "completed");
}

// An agent where a file stands in the way of the checkpoint folder: its trial's first run is
// the machine's trouble too (not a failed trial, nor an earlier sweep's file to delete).
TEST_F(StorageTest, AFileInTheWayOfAnAgentsCheckpointFolderRetiresIt) {
  ASSERT_NO_FATAL_FAILURE(RunWithOneAgent("inway", "mkdir -p a\ntouch a/disk", "blocked"));
  EXPECT_EQ(Read("run.rc"), "0\n") << Read("run.err");
  const std::string err = Read("run.err");
  EXPECT_NE(err.find("sweep: no more trials on blocked: trial "), std::string::npos) << err;
  EXPECT_NE(err.find("disk/ck/inway: cannot create the checkpoint directory: Not a directory"),
            std::string::npos)
      << err;
  EXPECT_EQ(
      Query("SELECT group_concat(status) FROM (SELECT status FROM trials ORDER BY number)")[0][0],
      "completed,completed,completed,completed");
  EXPECT_EQ(Query("SELECT sum(retries) FROM trials")[0][0], "0");
  EXPECT_EQ(Query("SELECT count(*) FROM reports")[0][0], "48");
}

// A checkpoint path on a read-only file system is found at the trial's start, not after the
// epochs before its first checkpoint (with checkpoint_every = 0, at its very end).
TEST_F(StorageTest, AnUnwritableCheckpointPathIsFoundBeforeTheFirstEpoch) {
  WriteTinyDataset(800, 200);
  Write("t.toml", "[sweep]\nname = \"ro\"\n[parameters]\nepochs = 3\n[trainer]\ndataset = \"" +
                      dir_.string() + "\"\nhidden = [16]\nbatch_size = 32\n");
  ASSERT_EQ(InNamespace(R"(set -u
mkdir -p ro
mount -t tmpfs -o size=1m tmpfs ro || exit 90
mount -o remount,ro ro || exit 91
"$SWEEP" train t.toml --set checkpoint_path=ro/t.ckpt > train.out 2> train.err; echo $? > train.rc
)"),
            0)
      << Read("script.log");
  EXPECT_EQ(Read("train.rc"), "1\n");
  const std::string err = Read("train.err");
  EXPECT_NE(err.find("sweep: interrupted at epoch 0: cannot write the checkpoint: ro/t.ckpt.probe"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("Read-only file system"), std::string::npos) << err;
  EXPECT_EQ(Read("train.out").find("epoch 1"), std::string::npos) << Read("train.out");
}

// A reader that keeps a snapshot open (a sqlite3 shell in a transaction) holds the write-ahead
// log back when the sweep ends: the file alone is then not the whole store, and the run says
// so. Once the reader ends, the next command that writes moves the log into the file.
TEST_F(StorageTest, ALogAReaderHeldBackAtTheEndIsSaid) {
  Write("a.toml", sweep_e2e::BraninConfig("first", 2));
  auto log_bytes = [&] {
    std::error_code ec;
    const auto n = fs::file_size(dir_ / "sweeps.db-wal", ec);
    return ec ? 0u : n;
  };
  ASSERT_EQ(Sweep("run a.toml").code, 0);
  EXPECT_EQ(log_bytes(), 0u);  // moved into the file at the end
  sqlite3* reader = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ / "sweeps.db").c_str(), &reader), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(reader, "BEGIN; SELECT count(*) FROM trials;", nullptr, nullptr, nullptr),
            SQLITE_OK);
  Write("b.toml", sweep_e2e::BraninConfig("second", 4));
  Output held = Sweep("run b.toml");
  EXPECT_GT(log_bytes(), 0u);
  sqlite3_exec(reader, "COMMIT", nullptr, nullptr, nullptr);
  EXPECT_EQ(held.code, 0) << held.err;
  EXPECT_NE(held.err.find("sweep: sweeps.db: a reader (a sqlite3 shell in a transaction?) held "
                          "the file open, so the newest commits are still in sweeps.db-wal"),
            std::string::npos)
      << held.err;
  Output again = Sweep("resume second");  // complete: it only opens the store to write
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(log_bytes(), 0u);
  sqlite3_close(reader);
  Output quiet = Sweep("run a.toml --name third");
  EXPECT_EQ(quiet.err.find("a reader"), std::string::npos) << quiet.err;
}

TEST_F(StorageTest, ReadOnlyFileSystemIsAClearError) {
  Write("c.toml", kManyTrials);
  ASSERT_EQ(InNamespace(R"(set -u
mkdir -p ro
mount -t tmpfs -o size=1m tmpfs ro || exit 90
mount -o remount,ro ro || exit 91
"$SWEEP" run c.toml --db ro/s.db > run.out 2> run.err; echo $? > run.rc
)"),
            0)
      << Read("script.log");
  EXPECT_EQ(Read("run.rc"), "1\n");
  std::string err = Read("run.err");
  EXPECT_NE(err.find("ro/s.db: "), std::string::npos) << err;
  EXPECT_TRUE(err.find("read-only") != std::string::npos ||
              err.find("cannot open database file") != std::string::npos)
      << err;
}

TEST_F(StorageTest, CorruptedDatabaseIsReportedNotCrashedOn) {
  Write("c.toml", sweep_e2e::BraninConfig("small", 300));
  ASSERT_EQ(Sweep("run c.toml").code, 0);
  ASSERT_FALSE(fs::exists(dir_ / "sweeps.db-wal") && fs::file_size(dir_ / "sweeps.db-wal") > 0);
  {
    // Keep the header page, overwrite every table and index page with garbage.
    const auto size = fs::file_size(dir_ / "sweeps.db");
    std::fstream f(dir_ / "sweeps.db", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    for (uintmax_t i = 4096; i < size; ++i) f.put(static_cast<char>(i * 131 + 7));
  }
  for (const char* cmd : {"trials small --json", "best small", "resume small"}) {
    Output o = Sweep(cmd);
    EXPECT_EQ(o.code, 1) << cmd << ": " << o.err;
    EXPECT_NE(o.err.find("sweeps.db: "), std::string::npos) << cmd << ": " << o.err;
    EXPECT_NE(o.err.find("corrupt"), std::string::npos) << cmd << ": " << o.err;
  }
}

}  // namespace
