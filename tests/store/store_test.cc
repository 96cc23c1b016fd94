// Tests for sweep::store::Store against real SQLite files, each in a fresh temp directory.
// Raw sqlite3 is used only to arrange or inspect what the Store cannot (schema version, query
// plans). Single-threaded GoogleTest cases; a second Store plays the other process.
#include "store/store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "sha256.h"
#include "store_sql.h"

namespace sweep::store {
namespace {

const Status& StatusOf(const Status& status) { return status; }
template <typename T>
const Status& StatusOf(const Result<T>& result) {
  return result.status();
}

#define ASSERT_OK(expr)                                           \
  do {                                                            \
    const auto& assert_ok_value_ = (expr);                        \
    ASSERT_TRUE(StatusOf(assert_ok_value_).ok())                  \
        << #expr << ": " << StatusOf(assert_ok_value_).message(); \
  } while (0)

#define EXPECT_OK(expr)                                           \
  do {                                                            \
    const auto& expect_ok_value_ = (expr);                        \
    EXPECT_TRUE(StatusOf(expect_ok_value_).ok())                  \
        << #expr << ": " << StatusOf(expect_ok_value_).message(); \
  } while (0)

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TrialRecord MakeTrial(int64_t number, TrialStatus status, std::optional<double> objective,
                      std::string metrics_json = "{}") {
  TrialRecord trial;
  trial.number = number;
  trial.status = status;
  trial.params_json = "{\"lr\":" + std::to_string(number) + "}";
  trial.objective = objective;
  trial.metrics_json = std::move(metrics_json);
  return trial;
}

std::vector<int64_t> Numbers(const std::vector<TrialRecord>& trials) {
  std::vector<int64_t> numbers;
  for (const TrialRecord& trial : trials) numbers.push_back(trial.number);
  return numbers;
}

// Runs SQL on the file with a raw connection (outside any Store).
void RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  std::string message = error != nullptr ? error : "";
  sqlite3_free(error);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << message;
}

// Column `column` of every row of `sql`, as text, one row per line.
std::string RawQuery(const std::string& path, const std::string& sql, int column = 0) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return "<open failed>";
  }
  sqlite3_stmt* stmt = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    out = std::string("<prepare failed: ") + sqlite3_errmsg(db) + ">";
  } else {
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, column);
      if (!out.empty()) out += "\n";
      out += text != nullptr ? reinterpret_cast<const char*>(text) : "NULL";
    }
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

std::string QueryPlan(const std::string& path, std::string_view sql) {
  // Column 3 of EXPLAIN QUERY PLAN is the human-readable detail ("SEARCH trials USING ...").
  return RawQuery(path, "EXPLAIN QUERY PLAN " + std::string(sql), 3);
}

// True when the plan reaches trials through an index and never walks the whole table.
bool SearchesTrialsByIndex(const std::string& plan) {
  bool uses_index = Contains(plan, "SEARCH trials USING INDEX") ||
                    Contains(plan, "SEARCH trials USING COVERING INDEX");
  bool scans_table = false;
  size_t start = 0;
  while (start <= plan.size()) {
    size_t end = plan.find('\n', start);
    if (end == std::string::npos) end = plan.size();
    std::string line = plan.substr(start, end - start);
    if ((line.rfind("SCAN trials", 0) == 0 || line.rfind("SCAN TABLE trials", 0) == 0) &&
        !Contains(line, "USING")) {
      scans_table = true;
    }
    start = end + 1;
  }
  return uses_index && !scans_table;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "sweep_store_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/sweeps.db";
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Opens store_ read-write on path_ and creates sweep "s" (id in sweep_id_).
  void OpenWithSweep(bool maximize = true) {
    auto store = Store::Open(path_, OpenMode::kReadWrite);
    ASSERT_OK(store);
    store_ = std::move(store).value();
    NewSweep sweep;
    sweep.name = "s";
    sweep.config_text = "[sweep]\nname = \"s\"\n";
    sweep.config_path = "configs/s.toml";
    sweep.metric = "val_acc";
    sweep.maximize = maximize;
    sweep.seed = 42;
    sweep.created_s = 1000.5;
    auto id = store_->CreateSweep(sweep);
    ASSERT_OK(id);
    sweep_id_ = *id;
  }

  void Insert(const TrialRecord& trial) { ASSERT_OK(store_->InsertTrial(sweep_id_, trial)); }
  void WriteVersion1File();
  void ExpectVersion1Content(Store& store);

  std::string dir_;
  std::string path_;
  std::unique_ptr<Store> store_;
  int64_t sweep_id_ = 0;
};

// ---- opening ----

// A writer that ends leaves the whole store in the file itself, its write-ahead log emptied,
// even while another connection (a reader between two reads) keeps SQLite from deleting the log.
TEST_F(StoreTest, AWriterThatEndsLeavesItsLogEmpty) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  for (int i = 0; i < 50; ++i) Insert(MakeTrial(i, TrialStatus::kCompleted, 0.5));
  ASSERT_OK(store_->Commit());
  sqlite3* reader = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path_.c_str(), &reader, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(reader, "SELECT count(*) FROM trials", nullptr, nullptr, nullptr),
            SQLITE_OK);
  ASSERT_GT(std::filesystem::file_size(path_ + "-wal"), 0u);
  store_.reset();
  EXPECT_EQ(std::filesystem::file_size(path_ + "-wal"), 0u);
  sqlite3_close(reader);
  // The file alone holds every trial.
  ASSERT_EQ(sqlite3_open_v2(("file:" + path_ + "?immutable=1").c_str(), &reader,
                            SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr),
            SQLITE_OK);
  sqlite3_stmt* count = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(reader, "SELECT count(*) FROM trials", -1, &count, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(count), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(count, 0), 50);
  sqlite3_finalize(count);
  sqlite3_close(reader);
}

TEST_F(StoreTest, CreatesNewFileWithCurrentSchemaInWalMode) {
  auto store = Store::Open(path_, OpenMode::kReadWrite);
  ASSERT_OK(store);
  EXPECT_EQ((*store)->path(), path_);
  EXPECT_TRUE(std::filesystem::exists(path_));
  EXPECT_EQ(RawQuery(path_, "PRAGMA user_version"), std::to_string(kSchemaVersion));
  EXPECT_EQ(RawQuery(path_, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(RawQuery(path_, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"),
            "events\nreports\nsweeps\ntrials");
}

// Two processes creating the same new file at once (two sweeps started together on a new
// --db): both open it, neither sees "locked" while the other switches it to WAL.
TEST_F(StoreTest, ProcessesCreatingTheSameNewFileTogetherBothOpenIt) {
  for (int round = 0; round < 20; ++round) {
    const std::string path = dir_ + "/new-" + std::to_string(round) + ".db";
    int go[2];
    ASSERT_EQ(::pipe(go), 0);
    std::vector<pid_t> children;
    for (int i = 0; i < 3; ++i) {
      pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(go[1]);
        char c;
        (void)!::read(go[0], &c, 1);  // all start together, when the pipe closes
        auto store = Store::Open(path, OpenMode::kReadWrite);
        if (!store.ok()) std::fprintf(stderr, "%s\n", store.status().message().c_str());
        ::_exit(store.ok() ? 0 : 1);
      }
      children.push_back(pid);
    }
    ::close(go[0]);
    ::close(go[1]);
    for (pid_t pid : children) {
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
    }
    EXPECT_EQ(RawQuery(path, "PRAGMA journal_mode"), "wal");
  }
}

TEST_F(StoreTest, RefusesADirectoryByName) {
  for (OpenMode mode : {OpenMode::kReadWrite, OpenMode::kReadOnly}) {
    auto store = Store::Open(dir_, mode);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(store.status().message(), dir_ + ": is a directory, not a database file");
  }
}

// A FIFO named as the database, directly or through a link, is refused: SQLite would wait
// forever to read its header. Each open runs in a child that an alarm ends, so a store that
// does hang fails the test instead of hanging it.
TEST_F(StoreTest, RefusesAFifoByName) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string link = dir_ + "/link.db";
  std::filesystem::create_symlink("fifo", link);
  for (const std::string& path : {fifo, link}) {
    for (OpenMode mode : {OpenMode::kReadWrite, OpenMode::kReadOnly}) {
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::alarm(10);
        auto store = Store::Open(path, mode);
        const bool refused = !store.ok() &&
                             store.status().code() == Status::Code::kInvalidArgument &&
                             store.status().message() == path + ": not a regular file";
        if (!refused) std::fprintf(stderr, "%s\n", store.status().message().c_str());
        ::_exit(refused ? 0 : 1);
      }
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << path << (WIFSIGNALED(status) ? ": hung" : ": not refused as expected");
    }
  }
}

// Another program's database that happens to have a schema version (and even a table named
// sweeps) is refused at open, in both modes, and left as it was, instead of failing later on a
// missing table or column.
TEST_F(StoreTest, RefusesAForeignDatabaseWithASchemaVersion) {
  const std::string version = std::to_string(kSchemaVersion);
  const std::string other_sweeps = dir_ + "/other_sweeps.db";
  ASSERT_NO_FATAL_FAILURE(RawExec(other_sweeps,
                                  "CREATE TABLE sweeps (id INTEGER, label TEXT);"
                                  "CREATE TABLE trials (x); CREATE TABLE reports (x);"
                                  "CREATE TABLE events (x); PRAGMA user_version = " +
                                      version));
  const std::string only_sweeps = dir_ + "/only_sweeps.db";
  ASSERT_NO_FATAL_FAILURE(RawExec(only_sweeps,
                                  "CREATE TABLE sweeps (id INTEGER, label TEXT);"
                                  "PRAGMA user_version = " +
                                      version));
  const std::string no_trials = dir_ + "/no_trials.db";
  ASSERT_NO_FATAL_FAILURE(
      RawExec(no_trials, "CREATE TABLE sweeps (id INTEGER, name TEXT); PRAGMA user_version = 2"));
  for (const auto& [path, why] : {std::pair{other_sweeps, "its sweeps table is not sweep's"},
                                  std::pair{only_sweeps, "it lacks sweep's tables"},
                                  std::pair{no_trials, "it lacks sweep's tables"}}) {
    for (OpenMode mode : {OpenMode::kReadOnly, OpenMode::kReadWrite}) {
      auto store = Store::Open(path, mode);
      ASSERT_FALSE(store.ok()) << path;
      EXPECT_EQ(store.status().code(), Status::Code::kInvalidArgument);  // the wrong file named
      EXPECT_EQ(store.status().message(), path + ": not a sweep database (" + why + ")");
    }
    EXPECT_EQ(RawQuery(path, "PRAGMA journal_mode"), "delete");  // not switched to WAL
  }
}

// Another program's database with no schema version at all: refused for writing, naming the
// file, and left as it was (not switched to WAL).
TEST_F(StoreTest, RefusesAForeignDatabaseWithoutASchemaVersion) {
  const std::string other = dir_ + "/other.db";
  ASSERT_NO_FATAL_FAILURE(RawExec(other, "CREATE TABLE x (a); INSERT INTO x VALUES (1);"));
  auto store = Store::Open(other, OpenMode::kReadWrite);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(store.status().message(),
            other +
                ": a SQLite database that sweep did not create (it has tables but no sweep "
                "schema); choose another database path");
  EXPECT_EQ(RawQuery(other, "PRAGMA journal_mode"), "delete");
  EXPECT_EQ(RawQuery(other, "SELECT a FROM x"), "1");
}

// A file with a second name (a hard link) is refused for writing: each name would get its own
// write-ahead log and lock. Reading it is fine.
TEST_F(StoreTest, RefusesToWriteAFileWithTwoNames) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  store_.reset();
  const std::string other = dir_ + "/other-name.db";
  ASSERT_EQ(::link(path_.c_str(), other.c_str()), 0);
  for (const std::string& p : {path_, other}) {
    auto store = Store::Open(p, OpenMode::kReadWrite);
    ASSERT_FALSE(store.ok()) << p;
    EXPECT_EQ(store.status().code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(store.status().message(),
              p + ": the file has 2 names (hard links), and a sweep database must have one: a "
                  "writer through each name would get its own write-ahead log and lock; copy it "
                  "to a file of its own");
    auto reader = Store::Open(p, OpenMode::kReadOnly);
    ASSERT_OK(reader);
    ASSERT_OK((*reader)->FindSweep("s"));
  }
  ASSERT_EQ(::unlink(other.c_str()), 0);
  ASSERT_OK(Store::Open(path_, OpenMode::kReadWrite));
}

// A file damaged in the middle (a bad sector, a copy taken mid-write) is refused for writing,
// naming the file and what is wrong, before a sweep writes into it; readers still get what is
// readable.
TEST_F(StoreTest, RefusesToWriteADamagedFile) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  for (int64_t n = 0; n < 300; ++n) {
    TrialRecord t = MakeTrial(n, TrialStatus::kCompleted, 0.5);
    Insert(t);
    for (int64_t step = 1; step <= 10; ++step) {
      ReportRecord r;
      r.trial = n;
      r.step = step;
      r.epoch = static_cast<double>(step);
      r.metrics_json = R"({"val_acc":0.123456789,"loss":1.23456789})";
      ASSERT_OK(store_->AddReport(sweep_id_, r));
    }
  }
  ASSERT_OK(store_->Commit());
  store_.reset();  // the last connection checkpoints the WAL into the file
  const auto size = std::filesystem::file_size(path_);
  ASSERT_GT(size, 40u * 4096);
  {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 4096 / 2 * 4096));
    for (int i = 0; i < 4096; ++i) f.put(static_cast<char>(i * 131 + 7));
  }
  auto writer = Store::Open(path_, OpenMode::kReadWrite);
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), Status::Code::kCorruption);
  EXPECT_EQ(writer.status().message().rfind(path_ + ": database file is corrupt (", 0), 0u)
      << writer.status().message();
  EXPECT_NE(writer.status().message().find(".recover` to save what is left"), std::string::npos);
  auto reader = Store::Open(path_, OpenMode::kReadOnly);
  ASSERT_OK(reader);
  ASSERT_OK((*reader)->FindSweep("s"));
}

TEST_F(StoreTest, ReopensExistingFile) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  store_.reset();
  auto store = Store::Open(path_, OpenMode::kReadWrite);
  ASSERT_OK(store);
  ASSERT_OK((*store)->FindSweep("s"));
}

TEST_F(StoreTest, RefusesNewerSchemaNamingBothVersions) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  store_.reset();
  const std::string newer = std::to_string(kSchemaVersion + 1);
  ASSERT_NO_FATAL_FAILURE(RawExec(path_, "PRAGMA user_version = " + newer));
  for (OpenMode mode : {OpenMode::kReadWrite, OpenMode::kReadOnly}) {
    auto store = Store::Open(path_, mode);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().message(), path_ + ": database schema version " + newer +
                                            " is newer than this sweep binary supports (" +
                                            std::to_string(kSchemaVersion) + "); upgrade sweep");
  }
  EXPECT_EQ(RawQuery(path_, "PRAGMA user_version"), newer);  // left untouched
}

// A file as schema v1 (the first release) wrote it: sweep 'old' (seed 7), its trial 0 (val_acc
// 0.8), and reports of steps 1 (twice) and 2.
void StoreTest::WriteVersion1File() {
  ASSERT_NO_FATAL_FAILURE(RawExec(path_, std::string(internal::MigrationSql(0))));
  ASSERT_NO_FATAL_FAILURE(RawExec(
      path_,
      "PRAGMA user_version = 1;"
      "INSERT INTO sweeps (name, config_text, config_hash, config_path, metric, maximize, seed, "
      "status, created) VALUES ('old', 'x', 'h', 'old.toml', 'val_acc', 1, 7, 'completed', 1.0);"
      "INSERT INTO trials (sweep_id, number, params, status, metrics, objective, epochs) "
      "VALUES (1, 0, '{\"lr\":0.1}', 'completed', '{\"val_acc\":0.8}', 0.8, 2);"
      "INSERT INTO reports (sweep_id, trial, step, epoch, metrics, time) VALUES "
      "(1, 0, 1, 1, '{\"val_acc\":0.7}', 2.0), (1, 0, 1, 1, '{\"val_acc\":0.6}', 2.5), "
      "(1, 0, 2, 2, '{\"val_acc\":0.8}', 3.0);"));
}

// What WriteVersion1File wrote, as a Store of this version reads it: sweep 'old', its trial
// 0 with new columns at their defaults, and its two report steps (the repeated one once).
void StoreTest::ExpectVersion1Content(Store& store) {
  auto sweep = store.FindSweep("old");
  ASSERT_TRUE(sweep.ok()) << sweep.status().message();
  EXPECT_EQ(sweep->seed, 7);
  auto trial = store.Trial(sweep->id, 0);
  ASSERT_TRUE(trial.ok() && trial->has_value());
  EXPECT_EQ((*trial)->objective, 0.8);
  EXPECT_EQ((*trial)->retries, 0);
  auto reports = store.Reports(sweep->id, 0);
  ASSERT_TRUE(reports.ok());
  ASSERT_EQ(reports->size(), 2u);
}

// A file written by schema v1 (as the first release wrote it) is migrated on open: its data
// stays, the new columns take their defaults, and duplicate report steps collapse to the first.
TEST_F(StoreTest, MigratesAVersion1File) {
  ASSERT_NO_FATAL_FAILURE(WriteVersion1File());
  auto opened = Store::Open(path_, OpenMode::kReadWrite);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  Store& store = **opened;
  EXPECT_EQ(RawQuery(path_, "PRAGMA user_version"), std::to_string(kSchemaVersion));
  ASSERT_NO_FATAL_FAILURE(ExpectVersion1Content(store));
  auto sweep = store.FindSweep("old");
  EXPECT_EQ(sweep->owner, "");
  EXPECT_EQ(sweep->run_options, "");
  EXPECT_EQ(sweep->active_s, 0);
  auto reports = store.Reports(sweep->id, 0);
  EXPECT_EQ((*reports)[0].metrics_json, "{\"val_acc\":0.7}");
  EXPECT_EQ((*store.Trial(sweep->id, 0))->stdout_log, "");
  EXPECT_EQ(RawQuery(path_, "PRAGMA integrity_check"), "ok");
}

// Version 9 keeps the sweep `run --from` started from; a sweep of version 8 has it from its
// start event's summary.
TEST_F(StoreTest, MigratingTakesTheSweepACarryCameFromFromItsStartEvent) {
  for (int v = 0; v < 8; ++v) {
    ASSERT_NO_FATAL_FAILURE(RawExec(path_, std::string(internal::MigrationSql(v))));
  }
  ASSERT_NO_FATAL_FAILURE(RawExec(
      path_,
      "PRAGMA user_version = 8;"
      "INSERT INTO sweeps (name, config_text, config_hash, config_path, metric, maximize, seed, "
      "status, created) VALUES ('new', 'x', 'h', 'n.toml', 'value', 0, 1, 'completed', 1.0), "
      "('plain', 'x', 'h', 'p.toml', 'value', 0, 1, 'completed', 1.0);"
      "INSERT INTO trials (sweep_id, number, params, status) VALUES (1, 0, '{}', 'completed');"
      "INSERT INTO events (sweep_id, trial, from_state, to_state, detail, time) VALUES "
      "(1, NULL, '', 'running', 'carried over 1 of 3 trial(s) from ''old.v2'' (1 completed, 0 "
      "pruned); not carried: 2 failed', 1.0), (2, NULL, '', 'running', '', 1.0),"
      "(1, 0, '', 'completed', 'carried over from sweep ''old.v2'' trial 4', 1.0);"));
  auto opened = Store::Open(path_, OpenMode::kReadWrite);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  EXPECT_EQ((*opened)->FindSweep("new")->carried_from, "old.v2");
  EXPECT_EQ((*opened)->FindSweep("plain")->carried_from, "");
  EXPECT_EQ((*(*opened)->Trial(1, 0))->bracket, std::nullopt);
}

// Version 10 keeps when a sweep's coordinator last committed; a sweep of version 9 has it from
// its end, or else its last event (none: a sweep with no event has none).
TEST_F(StoreTest, MigratingTakesWhenASweepWasLastSeenFromItsEndOrLastEvent) {
  for (int v = 0; v < 9; ++v) {
    ASSERT_NO_FATAL_FAILURE(RawExec(path_, std::string(internal::MigrationSql(v))));
  }
  ASSERT_NO_FATAL_FAILURE(RawExec(
      path_,
      "PRAGMA user_version = 9;"
      "INSERT INTO sweeps (name, config_text, config_hash, config_path, metric, maximize, seed, "
      "status, created, ended) VALUES ('done', 'x', 'h', 'd.toml', 'value', 0, 1, 'completed', "
      "1.0, 50.0), ('stopped', 'x', 'h', 's.toml', 'value', 0, 1, 'interrupted', 1.0, NULL), "
      "('bare', 'x', 'h', 'b.toml', 'value', 0, 1, 'running', 1.0, NULL);"
      "INSERT INTO events (sweep_id, trial, from_state, to_state, detail, time) VALUES "
      "(1, NULL, '', 'running', '', 1.0), (2, NULL, '', 'running', '', 1.0), "
      "(2, NULL, 'running', 'interrupted', '', 30.0), (2, NULL, 'interrupted', 'running', '', "
      "20.0);"));
  auto opened = Store::Open(path_, OpenMode::kReadWrite);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  EXPECT_EQ((*opened)->FindSweep("done")->seen_s, 50.0);
  EXPECT_EQ((*opened)->FindSweep("stopped")->seen_s, 30.0);
  EXPECT_EQ((*opened)->FindSweep("bare")->seen_s, std::nullopt);
}

// A reader (`best`, `trials`, `status`) of an older file reads it through a migrated copy in
// memory: the file is left as it was, for the next command that writes to migrate.
TEST_F(StoreTest, ReadsAVersion1FileWithoutChangingIt) {
  ASSERT_NO_FATAL_FAILURE(WriteVersion1File());
  const std::string before = RawQuery(path_, "SELECT group_concat(sql, ';') FROM sqlite_master");
  auto opened = Store::Open(path_, OpenMode::kReadOnly);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  Store& store = **opened;
  ASSERT_NO_FATAL_FAILURE(ExpectVersion1Content(store));
  EXPECT_EQ(store.Commit().code(), Status::Code::kOk);  // nothing pending
  TrialRecord t = MakeTrial(1, TrialStatus::kRunning, {});
  EXPECT_FALSE(store.InsertTrial(store.FindSweep("old")->id, t).ok());  // still a reader
  EXPECT_EQ(RawQuery(path_, "PRAGMA user_version"), "1");
  EXPECT_EQ(RawQuery(path_, "SELECT group_concat(sql, ';') FROM sqlite_master"), before);
}

// A command trial's log paths are stored with it and read back.
TEST_F(StoreTest, StoresLogPaths) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  TrialRecord t = MakeTrial(0, TrialStatus::kRunning, {});
  t.stdout_log = "trials/s/trial-0/stdout.log";
  t.stderr_log = "trials/s/trial-0/stderr.log";
  ASSERT_TRUE(store_->InsertTrial(sweep_id_, t).ok());
  ASSERT_TRUE(store_->Commit().ok());
  auto read = store_->Trial(sweep_id_, 0);
  ASSERT_TRUE(read.ok() && read->has_value());
  EXPECT_EQ((*read)->stdout_log, t.stdout_log);
  EXPECT_EQ((*read)->stderr_log, t.stderr_log);
}

// A step reported again (a rerun trial, a program printing it twice) is stored once, with its
// first values, in its place in the arrival order: early stopping decided on the first and
// ignores the second, and resume replays the stored reports, so the replay decides alike.
TEST_F(StoreTest, ReportingAStepAgainKeepsTheFirstReport) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  TrialRecord t;
  t.number = 0;
  t.params_json = "{}";
  ASSERT_TRUE(store_->InsertTrial(sweep_id_, t).ok());
  t.number = 1;
  ASSERT_TRUE(store_->InsertTrial(sweep_id_, t).ok());
  auto report = [&](int64_t trial, int64_t step, const char* metrics) {
    ReportRecord r;
    r.trial = trial;
    r.step = step;
    r.epoch = static_cast<double>(step);
    r.metrics_json = metrics;
    ASSERT_TRUE(store_->AddReport(sweep_id_, r).ok());
  };
  report(0, 1, "{\"v\":1}");
  report(1, 1, "{\"v\":2}");
  report(0, 1, "{\"v\":3}");
  ASSERT_TRUE(store_->Commit().ok());
  auto all = store_->AllReports(sweep_id_);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].trial, 0);
  EXPECT_EQ((*all)[0].metrics_json, "{\"v\":1}");
  EXPECT_EQ((*all)[1].trial, 1);
}

// A stored report is read back before the commit, and rewritten in place or moved to the end of
// the arrival order (AllReports), which resume replays.
TEST_F(StoreTest, AStoredReportIsReadAndRewrittenInPlaceOrLast) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  TrialRecord t;
  t.params_json = "{}";
  for (int64_t n : {0, 1}) {
    t.number = n;
    ASSERT_OK(store_->InsertTrial(sweep_id_, t));
  }
  ReportRecord r;
  r.step = 1;
  r.epoch = 0.5;
  for (int64_t trial : {0, 1}) {
    r.trial = trial;
    r.metrics_json = "{\"loss\":" + std::to_string(trial) + "}";
    ASSERT_OK(store_->AddReport(sweep_id_, r));
  }
  auto missing = store_->ReportAt(sweep_id_, 0, 2);
  ASSERT_TRUE(missing.ok()) << missing.status().message();
  EXPECT_FALSE(missing->has_value());
  auto stored = store_->ReportAt(sweep_id_, 0, 1);  // not committed yet
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->metrics_json, "{\"loss\":0}");
  EXPECT_EQ((*stored)->epoch, 0.5);

  ReportRecord merged = **stored;
  merged.metrics_json = "{\"loss\":0,\"lr\":0.1}";
  merged.time_s = 7;
  ASSERT_OK(store_->RewriteReport(sweep_id_, merged, /*last=*/false));
  auto all = store_->AllReports(sweep_id_);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].trial, 0);
  EXPECT_EQ((*all)[0].metrics_json, "{\"loss\":0,\"lr\":0.1}");
  EXPECT_EQ((*all)[0].time_s, 7);

  merged.metrics_json = "{\"loss\":0,\"lr\":0.1,\"acc\":1}";
  ASSERT_OK(store_->RewriteReport(sweep_id_, merged, /*last=*/true));
  ASSERT_OK(store_->Commit());
  all = store_->AllReports(sweep_id_);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].trial, 1);
  EXPECT_EQ((*all)[1].trial, 0);
  EXPECT_EQ((*all)[1].metrics_json, "{\"loss\":0,\"lr\":0.1,\"acc\":1}");
  EXPECT_EQ((*all)[1].epoch, 0.5);
  merged.step = 9;
  EXPECT_EQ(store_->RewriteReport(sweep_id_, merged, false).code(), Status::Code::kNotFound);
}

TEST_F(StoreTest, OwnerActiveTimeAndRetriesRoundTrip) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  TrialRecord t;
  t.number = 4;
  t.params_json = "{}";
  ASSERT_TRUE(store_->InsertTrial(sweep_id_, t).ok());
  ASSERT_TRUE(store_->SetTrialRetries(sweep_id_, 4, 2).ok());
  ASSERT_TRUE(store_->SetTrialAgentLosses(sweep_id_, 4, 1).ok());
  ASSERT_TRUE(store_->SetSweepOwner(sweep_id_, "123@host", "--listen 0.0.0.0:7000").ok());
  ASSERT_TRUE(store_->SetSweepActive(sweep_id_, 12.5, 1000.25).ok());
  ASSERT_TRUE(store_->Commit().ok());
  EXPECT_EQ((*store_->Trial(sweep_id_, 4))->retries, 2);
  EXPECT_EQ((*store_->Trial(sweep_id_, 4))->agent_losses, 1);
  EXPECT_EQ((*store_->Trial(sweep_id_, 4))->info_json, "{}");
  ASSERT_TRUE(store_->SetTrialInfo(sweep_id_, 4, R"({"classes":["cat","dog"]})").ok());
  ASSERT_TRUE(store_->Commit().ok());
  EXPECT_EQ((*store_->Trial(sweep_id_, 4))->info_json, R"({"classes":["cat","dog"]})");
  EXPECT_EQ(store_->SetTrialInfo(sweep_id_, 99, "{}").code(), Status::Code::kNotFound);
  auto sweep = store_->FindSweep("s");
  ASSERT_TRUE(sweep.ok());
  EXPECT_EQ(sweep->owner, "123@host");
  EXPECT_EQ(sweep->run_options, "--listen 0.0.0.0:7000");
  EXPECT_EQ(sweep->active_s, 12.5);
  EXPECT_EQ(sweep->seen_s, 1000.25);
  EXPECT_EQ(sweep->max_trials, std::nullopt);  // the config's, until a resume gives another
  EXPECT_EQ(sweep->time_budget_s, std::nullopt);
  EXPECT_EQ(store_->SetTrialRetries(sweep_id_, 99, 1).code(), Status::Code::kNotFound);
  ASSERT_TRUE(store_->SetSweepBudget(sweep_id_, 32, 5400.0).ok());
  ASSERT_TRUE(store_->Commit().ok());
  EXPECT_EQ(store_->FindSweep("s")->max_trials, 32);
  EXPECT_EQ(store_->FindSweep("s")->time_budget_s, 5400.0);
  ASSERT_TRUE(store_->SetSweepBudget(sweep_id_, std::nullopt, 60.0).ok());
  ASSERT_TRUE(store_->Commit().ok());
  EXPECT_EQ(store_->FindSweep("s")->max_trials, std::nullopt);
  EXPECT_EQ(store_->FindSweep("s")->carried, 0);
  EXPECT_EQ(store_->FindSweep("s")->carried_from, "");
  ASSERT_TRUE(store_->SetSweepCarried(sweep_id_, 7, -7, "first").ok());
  ASSERT_TRUE(store_->Commit().ok());
  EXPECT_EQ(store_->FindSweep("s")->carried, 7);
  EXPECT_EQ(store_->FindSweep("s")->sample_shift, -7);
  EXPECT_EQ(store_->FindSweep("s")->carried_from, "first");
  // A carried trial keeps its bracket and what its run found out; another has none.
  TrialRecord carried = MakeTrial(0, TrialStatus::kCompleted, {});
  carried.bracket = 2;
  carried.info_json = R"({"classes":["a","b"]})";
  ASSERT_OK(store_->InsertTrial(sweep_id_, carried));
  ASSERT_OK(store_->InsertTrial(sweep_id_, MakeTrial(1, TrialStatus::kRunning, {})));
  ASSERT_OK(store_->Commit());
  EXPECT_EQ((*store_->Trial(sweep_id_, 0))->bracket, 2);
  EXPECT_EQ((*store_->Trial(sweep_id_, 0))->info_json, R"({"classes":["a","b"]})");
  EXPECT_EQ((*store_->Trial(sweep_id_, 1))->bracket, std::nullopt);
}

// The file replaced under a writer: its commits stop, its write-ahead log is set aside, and
// closing it later leaves the log and index of the file now there alone, so a writer of the
// new file loses nothing. (SQLite checkpoints and deletes a log by name on close only when its
// database file is still at its path.)
TEST_F(StoreTest, AWriterWhoseFileWasReplacedLeavesTheNewFilesLogAlone) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  TrialRecord t;
  t.number = 0;
  t.params_json = "{}";
  ASSERT_OK(store_->InsertTrial(sweep_id_, t));
  ASSERT_OK(store_->Commit());
  const std::string other = dir_ + "/other.db";
  {
    auto made = Store::Open(other, OpenMode::kReadWrite);
    ASSERT_OK(made);
  }
  std::filesystem::rename(other, path_);
  t.number = 1;
  ASSERT_OK(store_->InsertTrial(sweep_id_, t));
  const Status lost = store_->Commit();
  EXPECT_EQ(lost.code(), Status::Code::kIoError);
  EXPECT_TRUE(Contains(lost.message(), "replaced by another file")) << lost.message();
  EXPECT_TRUE(store_->file_lost());
  EXPECT_FALSE(std::filesystem::exists(path_ + "-wal"));
  EXPECT_TRUE(std::filesystem::exists(path_ + "-wal.orphaned-" + std::to_string(::getpid())));

  // A writer of the new file commits into its own log; the old writer closes meanwhile.
  auto writer = Store::Open(path_, OpenMode::kReadWrite);
  ASSERT_OK(writer);
  NewSweep sweep;
  sweep.name = "after";
  sweep.config_text = "[sweep]\nname = \"after\"\n";
  sweep.config_path = "after.toml";
  sweep.metric = "val_acc";
  ASSERT_OK((*writer)->CreateSweep(sweep));
  store_.reset();
  auto reader = Store::Open(path_, OpenMode::kReadOnly);
  ASSERT_OK(reader);
  EXPECT_TRUE((*reader)->FindSweep("after").ok()) << "the new file lost its writer's commit";
}

// How many trials the database file alone holds, read as immutable (without its log); -1 when
// it cannot be read so.
int TrialsInTheFileAlone(const std::string& path) {
  sqlite3* alone = nullptr;
  const std::string uri = "file:" + path + "?immutable=1";
  int count = -1;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_open_v2(uri.c_str(), &alone, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr) ==
          SQLITE_OK &&
      sqlite3_prepare_v2(alone, "SELECT count(*) FROM trials", -1, &stmt, nullptr) == SQLITE_OK &&
      sqlite3_step(stmt) == SQLITE_ROW) {
    count = sqlite3_column_int(stmt, 0);
  }
  sqlite3_finalize(stmt);
  sqlite3_close(alone);
  return count;
}

// A writer that closes while a reader holds a snapshot (a query of `sweep status`, a notebook's
// cursor) waits for it to finish, then moves everything into the file and empties the log, so
// that the file alone holds the sweep: a copy of it is whole.
TEST_F(StoreTest, AClosingWriterWaitsForAReaderAndLeavesTheLogEmpty) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  TrialRecord t;
  t.params_json = "{}";
  for (int64_t n = 0; n < 50; ++n) {
    t.number = n;
    ASSERT_OK(store_->InsertTrial(sweep_id_, t));
  }
  ASSERT_OK(store_->Commit());
  sqlite3* reader = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path_.c_str(), &reader, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(reader, "BEGIN; SELECT count(*) FROM trials;", nullptr, nullptr, nullptr),
            SQLITE_OK);
  std::thread done([reader] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    sqlite3_exec(reader, "COMMIT", nullptr, nullptr, nullptr);
  });
  store_.reset();
  done.join();
  std::error_code ec;
  EXPECT_EQ(std::filesystem::file_size(path_ + "-wal", ec), 0u) << "the log still holds commits";
  sqlite3_close(reader);
  EXPECT_EQ(TrialsInTheFileAlone(path_), 50);
}

// The write-ahead log deleted under its writer: the commits in it (now reachable only through
// the writer's open descriptor) are moved into the file, and the commit says so.
TEST_F(StoreTest, ALogDeletedUnderItsWriterHasItsCommitsMovedIntoTheFile) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  TrialRecord t;
  t.params_json = "{}";
  t.number = 0;
  ASSERT_OK(store_->InsertTrial(sweep_id_, t));
  ASSERT_OK(store_->Commit());
  ASSERT_TRUE(std::filesystem::exists(path_ + "-wal"));
  std::filesystem::remove(path_ + "-wal");
  t.number = 1;
  ASSERT_OK(store_->InsertTrial(sweep_id_, t));
  const Status moved = store_->Commit();
  EXPECT_EQ(moved.code(), Status::Code::kIoError);
  EXPECT_TRUE(Contains(moved.message(),
                       "-wal was deleted while this sweep wrote to it; every "
                       "commit was moved into the file"))
      << moved.message();
  EXPECT_EQ(TrialsInTheFileAlone(path_), 2);
}

// The same with a reader holding a snapshot: the checkpoint cannot move every page, and the
// commit says so rather than that everything was moved.
TEST_F(StoreTest, ALogDeletedWhileAReaderHoldsItBackSaysSo) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  TrialRecord t;
  t.params_json = "{}";
  t.number = 0;
  ASSERT_OK(store_->InsertTrial(sweep_id_, t));
  ASSERT_OK(store_->Commit());
  // The reader is another process (SQLite's locks between connections of one process differ).
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    sqlite3* reader = nullptr;
    sqlite3_open_v2(path_.c_str(), &reader, SQLITE_OPEN_READONLY, nullptr);
    sqlite3_exec(reader, "BEGIN; SELECT count(*) FROM trials;", nullptr, nullptr, nullptr);
    char c = 'r';
    (void)!::write(ready[1], &c, 1);
    (void)!::read(done[0], &c, 1);
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  std::filesystem::remove(path_ + "-wal");
  t.number = 1;
  ASSERT_OK(store_->InsertTrial(sweep_id_, t));
  const Status held = store_->Commit();
  (void)!::write(done[1], &c, 1);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(held.code(), Status::Code::kIoError);
  EXPECT_TRUE(Contains(held.message(), "could not all be moved into the file (")) << held.message();
  for (int fd : {ready[0], ready[1], done[0], done[1]}) ::close(fd);
}

// Written over in place (a truncate; a copy onto it) the file keeps its identity: a commit
// finds it smaller than it was, which it never is under its writers, and stops, as for a file
// replaced, and a read that finds it damaged says so too; a file damaged without shrinking is
// found by CheckFile.
class StoreWrittenOverTest : public StoreTest {
 protected:
  // 200 trials of 2 kB, checkpointed into the file itself, as SQLite's checkpoints put them;
  // returns the file's size.
  uintmax_t Fill() {
    EXPECT_NO_FATAL_FAILURE(OpenWithSweep());
    TrialRecord t;
    t.params_json = std::string(2000, ' ') + "{}";
    for (int64_t n = 0; n < 200; ++n) {
      t.number = n;
      EXPECT_OK(store_->InsertTrial(sweep_id_, t));
    }
    EXPECT_OK(store_->Commit());
    EXPECT_OK(store_->CheckFile());
    sqlite3* other = nullptr;
    EXPECT_EQ(sqlite3_open(path_.c_str(), &other), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(other, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(other);
    EXPECT_OK(InsertAndCommit(200));  // after which this writer knows the file's size
    return std::filesystem::file_size(path_);
  }
  Status InsertAndCommit(int64_t number) {
    TrialRecord t;
    t.number = number;
    t.params_json = "{}";
    Status inserted = store_->InsertTrial(sweep_id_, t);
    return inserted.ok() ? store_->Commit() : inserted;
  }
};

TEST_F(StoreWrittenOverTest, ACommitFindsTheFileCutShort) {
  const uintmax_t size = Fill();
  ASSERT_GT(size, 100000u);
  std::filesystem::resize_file(path_, size - 8192);  // the last pages gone, the rest whole
  const Status cut = InsertAndCommit(500);
  EXPECT_FALSE(cut.ok());
  EXPECT_TRUE(Contains(cut.message(), "cut short (from " + std::to_string(size) + " to " +
                                          std::to_string(size - 8192) + " bytes)"))
      << cut.message();
  // Still this file: its log stays beside it, with its last commits, for a recovery.
  EXPECT_FALSE(std::filesystem::exists(path_ + "-wal.orphaned-" + std::to_string(::getpid())));
}

TEST_F(StoreWrittenOverTest, CheckFileFindsItWrittenOverInPlace) {
  const uintmax_t size = Fill();
  {
    // Garbage over every page but the first, the size kept.
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    const std::string junk(size - 4096, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  const Status damaged = store_->CheckFile();
  EXPECT_EQ(damaged.code(), Status::Code::kCorruption) << damaged.message();
  EXPECT_TRUE(Contains(damaged.message(), "another program wrote over it")) << damaged.message();
}

TEST_F(StoreTest, RefusesFileThatIsNotADatabase) {
  {
    std::ofstream out(path_);
    for (int i = 0; i < 100; ++i) out << "this is a text file, not a database\n";
  }
  for (OpenMode mode : {OpenMode::kReadWrite, OpenMode::kReadOnly}) {
    auto store = Store::Open(path_, mode);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(Contains(store.status().message(), path_)) << store.status().message();
  }
}

TEST_F(StoreTest, RefusesAnotherProgramsDatabase) {
  ASSERT_NO_FATAL_FAILURE(RawExec(path_, "CREATE TABLE notes (text TEXT)"));
  auto store = Store::Open(path_, OpenMode::kReadWrite);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(store.status().message(), path_));
  EXPECT_EQ(RawQuery(path_, "SELECT COUNT(*) FROM sqlite_master"), "1");  // nothing added
}

TEST_F(StoreTest, ReadOnlyOpenOfMissingFileIsNotFound) {
  auto store = Store::Open(path_, OpenMode::kReadOnly);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(store.status().message(), path_ + ": no such database");
  EXPECT_FALSE(std::filesystem::exists(path_));
}

TEST_F(StoreTest, ReadOnlyStoreRefusesWrites) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  auto reader = Store::Open(path_, OpenMode::kReadOnly);
  ASSERT_OK(reader);
  EXPECT_FALSE((*reader)->InsertTrial(sweep_id_, MakeTrial(0, TrialStatus::kPending, {})).ok());
  NewSweep sweep;
  sweep.name = "other";
  EXPECT_FALSE((*reader)->CreateSweep(sweep).ok());
}

// ---- sweeps ----

TEST_F(StoreTest, SweepRoundTrips) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep(/*maximize=*/false));
  auto sweep = store_->FindSweep("s");
  ASSERT_OK(sweep);
  EXPECT_EQ(sweep->id, sweep_id_);
  EXPECT_EQ(sweep->name, "s");
  EXPECT_EQ(sweep->config_text, "[sweep]\nname = \"s\"\n");
  EXPECT_EQ(sweep->config_hash, internal::Sha256Hex("[sweep]\nname = \"s\"\n"));
  EXPECT_EQ(sweep->config_path, "configs/s.toml");
  EXPECT_EQ(sweep->metric, "val_acc");
  EXPECT_FALSE(sweep->maximize);
  EXPECT_EQ(sweep->seed, 42);
  EXPECT_EQ(sweep->status, SweepStatus::kRunning);
  EXPECT_EQ(sweep->created_s, 1000.5);
  EXPECT_FALSE(sweep->ended_s.has_value());
}

TEST_F(StoreTest, DuplicateSweepNameIsAlreadyExists) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  NewSweep again;
  again.name = "s";
  auto id = store_->CreateSweep(again);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), Status::Code::kAlreadyExists);
  EXPECT_EQ(id.status().message(), "sweep 's' already exists in " + path_);
}

TEST_F(StoreTest, UnknownSweepNameIsNotFound) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  auto sweep = store_->FindSweep("nope");
  ASSERT_FALSE(sweep.ok());
  EXPECT_EQ(sweep.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(sweep.status().message(), "no sweep named 'nope' in " + path_);
}

TEST_F(StoreTest, SetSweepStatusRoundTrips) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  ASSERT_OK(store_->SetSweepStatus(sweep_id_, SweepStatus::kCompleted, 2000.0));
  auto sweep = store_->FindSweep("s");
  ASSERT_OK(sweep);
  EXPECT_EQ(sweep->status, SweepStatus::kCompleted);
  EXPECT_EQ(sweep->ended_s, 2000.0);
  EXPECT_EQ(store_->SetSweepStatus(sweep_id_ + 7, SweepStatus::kFailed, {}).code(),
            Status::Code::kNotFound);
}

TEST_F(StoreTest, ListSweepsGivesTrialCountAndBest) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep(/*maximize=*/true));
  Insert(MakeTrial(0, TrialStatus::kCompleted, 0.5));
  Insert(MakeTrial(1, TrialStatus::kCompleted, 0.9));
  Insert(MakeTrial(2, TrialStatus::kPruned, 0.99));   // not completed: not best
  Insert(MakeTrial(3, TrialStatus::kCompleted, {}));  // no objective
  NewSweep min_sweep;
  min_sweep.name = "min";
  min_sweep.maximize = false;
  min_sweep.created_s = 2000;
  auto min_id = store_->CreateSweep(min_sweep);  // also commits the batch above
  ASSERT_OK(min_id);
  ASSERT_OK(store_->InsertTrial(*min_id, MakeTrial(0, TrialStatus::kCompleted, 3.0)));
  ASSERT_OK(store_->InsertTrial(*min_id, MakeTrial(1, TrialStatus::kCompleted, 2.0)));
  ASSERT_OK(store_->InsertTrial(*min_id, MakeTrial(2, TrialStatus::kCompleted, {})));
  NewSweep empty;
  empty.name = "empty";
  empty.created_s = 3000;
  ASSERT_OK(store_->CreateSweep(empty));

  auto sweeps = store_->ListSweeps();
  ASSERT_OK(sweeps);
  ASSERT_EQ(sweeps->size(), 3u);
  EXPECT_EQ((*sweeps)[0].name, "s");
  EXPECT_EQ((*sweeps)[0].trials, 4);
  EXPECT_EQ((*sweeps)[0].best, 0.9);
  EXPECT_EQ((*sweeps)[0].metric, "val_acc");
  EXPECT_EQ((*sweeps)[1].name, "min");
  EXPECT_EQ((*sweeps)[1].trials, 3);
  EXPECT_EQ((*sweeps)[1].best, 2.0);  // a NULL objective is not the minimum
  EXPECT_FALSE((*sweeps)[1].maximize);
  EXPECT_EQ((*sweeps)[2].name, "empty");
  EXPECT_EQ((*sweeps)[2].trials, 0);
  EXPECT_FALSE((*sweeps)[2].best.has_value());
}

// ---- trials, reports, events ----

// Reads made together see one state of the file, not a writer's commit between them.
TEST_F(StoreTest, ReadsTogetherSeeOneStateOfTheFile) {
  OpenWithSweep();
  TrialRecord t;
  t.number = 0;
  t.params_json = "{}";
  Insert(t);
  ASSERT_OK(store_->Commit());
  auto reader = Store::Open(path_, OpenMode::kReadOnly);
  ASSERT_OK(reader);
  size_t first = 0, second = 0;
  ASSERT_OK((*reader)->ReadTogether([&]() -> Status {
    auto a = (*reader)->Trials(sweep_id_, TrialQuery{});
    if (!a.ok()) return a.status();
    first = a->size();
    t.number = 1;
    Insert(t);  // another connection commits meanwhile
    if (Status s = store_->Commit(); !s.ok()) return s;
    auto b = (*reader)->Trials(sweep_id_, TrialQuery{});
    if (!b.ok()) return b.status();
    second = b->size();
    return Status::Ok();
  }));
  EXPECT_EQ(first, 1u);
  EXPECT_EQ(second, 1u);
  auto after = (*reader)->Trials(sweep_id_, TrialQuery{});
  ASSERT_OK(after);
  EXPECT_EQ(after->size(), 2u);
}

TEST_F(StoreTest, TrialLifecycleRoundTrips) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  TrialRecord trial = MakeTrial(0, TrialStatus::kPending, {});
  trial.params_json = R"({"lr":0.01,"width":64})";
  Insert(trial);
  ASSERT_OK(store_->UpdateTrialStatus(sweep_id_, 0, TrialStatus::kRunning, "local:cpu0", 10.0));
  TrialRecord done = trial;
  done.status = TrialStatus::kCompleted;
  done.ended_s = 20.0;
  done.metrics_json = R"({"val_acc":0.91,"test_acc":0.9})";
  done.objective = 0.91;
  done.epochs = 3;
  done.checkpoint = "/ckpt/0.bin";
  ASSERT_OK(store_->FinishTrial(sweep_id_, done));
  ASSERT_OK(store_->Commit());
  store_.reset();

  auto reopened = Store::Open(path_, OpenMode::kReadOnly);
  ASSERT_OK(reopened);
  auto got = (*reopened)->Trial(sweep_id_, 0);
  ASSERT_OK(got);
  ASSERT_TRUE(got->has_value());
  const TrialRecord& t = **got;
  EXPECT_EQ(t.number, 0);
  EXPECT_EQ(t.status, TrialStatus::kCompleted);
  EXPECT_EQ(t.params_json, R"({"lr":0.01,"width":64})");
  EXPECT_EQ(t.placement, "local:cpu0");
  EXPECT_EQ(t.started_s, 10.0);
  EXPECT_EQ(t.ended_s, 20.0);
  EXPECT_EQ(t.error, "");
  EXPECT_EQ(t.checkpoint, "/ckpt/0.bin");
  EXPECT_EQ(t.metrics_json, R"({"val_acc":0.91,"test_acc":0.9})");
  EXPECT_EQ(t.objective, 0.91);
  EXPECT_EQ(t.epochs, 3);
}

// A running trial's progress lands in its row; once it has ended, a late progress write
// leaves its final values alone.
TEST_F(StoreTest, ProgressUpdatesOnlyARunningTrial) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  Insert(MakeTrial(0, TrialStatus::kPending, {}));
  ASSERT_OK(store_->UpdateTrialStatus(sweep_id_, 0, TrialStatus::kRunning, "local:cpu0", 1.0));
  TrialRecord progress = MakeTrial(0, TrialStatus::kRunning, 0.5, R"({"val_acc":0.5})");
  progress.epochs = 2;
  ASSERT_OK(store_->SetTrialProgress(sweep_id_, progress));
  auto got = store_->Trial(sweep_id_, 0);
  ASSERT_OK(got);
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->status, TrialStatus::kRunning);
  EXPECT_EQ((*got)->metrics_json, R"({"val_acc":0.5})");
  EXPECT_EQ((*got)->objective, 0.5);
  EXPECT_EQ((*got)->epochs, 2);

  TrialRecord done = MakeTrial(0, TrialStatus::kCompleted, 0.9, R"({"val_acc":0.9})");
  done.epochs = 5;
  ASSERT_OK(store_->FinishTrial(sweep_id_, done));
  ASSERT_OK(store_->SetTrialProgress(sweep_id_, progress));
  got = store_->Trial(sweep_id_, 0);
  ASSERT_OK(got);
  EXPECT_EQ((*got)->status, TrialStatus::kCompleted);
  EXPECT_EQ((*got)->metrics_json, R"({"val_acc":0.9})");
  EXPECT_EQ((*got)->objective, 0.9);
  EXPECT_EQ((*got)->epochs, 5);
}

TEST_F(StoreTest, UpdateTrialStatusKeepsPlacementAndStartWhenNotGiven) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  Insert(MakeTrial(0, TrialStatus::kPending, {}));
  ASSERT_OK(store_->UpdateTrialStatus(sweep_id_, 0, TrialStatus::kRunning, "local:cpu1", 5.0,
                                      "a1:/runs/trial-0.ckpt"));
  ASSERT_OK(store_->UpdateTrialStatus(sweep_id_, 0, TrialStatus::kInterrupted, "", {}));
  auto got = store_->Trial(sweep_id_, 0);
  ASSERT_OK(got);
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->status, TrialStatus::kInterrupted);
  EXPECT_EQ((*got)->placement, "local:cpu1");
  EXPECT_EQ((*got)->started_s, 5.0);
  EXPECT_EQ((*got)->checkpoint, "a1:/runs/trial-0.ckpt");
}

TEST_F(StoreTest, MissingTrialIsEmptyOptional) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  auto got = store_->Trial(sweep_id_, 99);
  ASSERT_OK(got);
  EXPECT_FALSE(got->has_value());
}

TEST_F(StoreTest, DuplicateTrialNumberIsAlreadyExists) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  Insert(MakeTrial(0, TrialStatus::kPending, {}));
  Status status = store_->InsertTrial(sweep_id_, MakeTrial(0, TrialStatus::kPending, {}));
  EXPECT_EQ(status.code(), Status::Code::kAlreadyExists) << status.message();
  // The batch survives the failed row.
  ASSERT_OK(store_->Commit());
  auto counts = store_->CountByStatus(sweep_id_);
  ASSERT_OK(counts);
  EXPECT_EQ(counts->total(), 1);
}

TEST_F(StoreTest, WritesToUnknownTrialOrSweepAreNotFound) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  Status update = store_->UpdateTrialStatus(sweep_id_, 5, TrialStatus::kRunning, "x", 1.0);
  EXPECT_EQ(update.code(), Status::Code::kNotFound);
  EXPECT_EQ(update.message(),
            "no trial 5 in sweep id " + std::to_string(sweep_id_) + " in " + path_);
  EXPECT_EQ(store_->FinishTrial(sweep_id_, MakeTrial(5, TrialStatus::kFailed, {})).code(),
            Status::Code::kNotFound);
  ReportRecord report;
  report.trial = 5;
  EXPECT_EQ(store_->AddReport(sweep_id_, report).code(), Status::Code::kNotFound);
  EXPECT_EQ(store_->InsertTrial(sweep_id_ + 9, MakeTrial(0, TrialStatus::kPending, {})).code(),
            Status::Code::kNotFound);
}

TEST_F(StoreTest, ReportsRoundTripInStepOrder) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  Insert(MakeTrial(0, TrialStatus::kRunning, {}));
  Insert(MakeTrial(1, TrialStatus::kRunning, {}));
  for (int64_t step : {2, 0, 1}) {
    ReportRecord report;
    report.trial = 0;
    report.step = step;
    report.epoch = step * 0.5;
    report.metrics_json = "{\"val_acc\":" + std::to_string(step) + "}";
    report.time_s = 100.0 + step;
    ASSERT_OK(store_->AddReport(sweep_id_, report));
  }
  ReportRecord other;
  other.trial = 1;
  ASSERT_OK(store_->AddReport(sweep_id_, other));
  ASSERT_OK(store_->Commit());

  auto reports = store_->Reports(sweep_id_, 0);
  ASSERT_OK(reports);
  ASSERT_EQ(reports->size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    const ReportRecord& r = (*reports)[i];
    EXPECT_EQ(r.trial, 0);
    EXPECT_EQ(r.step, i);
    EXPECT_EQ(r.epoch, i * 0.5);
    EXPECT_EQ(r.metrics_json, "{\"val_acc\":" + std::to_string(i) + "}");
    EXPECT_EQ(r.time_s, 100.0 + i);
  }
}

TEST_F(StoreTest, EventsAreStoredWithOptionalTrial) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  Insert(MakeTrial(0, TrialStatus::kPending, {}));
  ASSERT_OK(store_->AddEvent(sweep_id_, 0, "pending", "running", "local:cpu0", 1.5));
  ASSERT_OK(store_->AddEvent(sweep_id_, std::nullopt, "", "running", "sweep started", 1.0));
  ASSERT_OK(store_->Commit());
  EXPECT_EQ(RawQuery(path_,
                     "SELECT COALESCE(trial, 'NULL') || '|' || from_state || '|' || to_state || "
                     "'|' || detail || '|' || time FROM events ORDER BY id"),
            "0|pending|running|local:cpu0|1.5\nNULL||running|sweep started|1.0");
  ASSERT_OK(store_->AddEvent(sweep_id_, 0, "running", "interrupted", "agent a lost", 2.5));
  auto events = store_->TrialEvents(sweep_id_, 0);
  ASSERT_OK(events);
  ASSERT_EQ(events->size(), 2u);  // the trial's own, in order, seen before the commit
  EXPECT_EQ((*events)[0].to, "running");
  EXPECT_EQ((*events)[0].detail, "local:cpu0");
  EXPECT_EQ((*events)[1].from, "running");
  EXPECT_EQ((*events)[1].to, "interrupted");
  EXPECT_EQ((*events)[1].detail, "agent a lost");
  EXPECT_EQ((*events)[1].time_s, 2.5);
  EXPECT_TRUE(store_->TrialEvents(sweep_id_, 7)->empty());
}

// ---- batching ----

TEST_F(StoreTest, BatchedWritesAreInvisibleToReaderUntilCommit) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  auto reader = Store::Open(path_, OpenMode::kReadOnly);
  ASSERT_OK(reader);
  Insert(MakeTrial(0, TrialStatus::kPending, {}));
  Insert(MakeTrial(1, TrialStatus::kPending, {}));
  ASSERT_OK(store_->UpdateTrialStatus(sweep_id_, 0, TrialStatus::kRunning, "local:cpu0", 1.0));

  auto before = (*reader)->Trials(sweep_id_, TrialQuery{});
  ASSERT_OK(before);
  EXPECT_TRUE(before->empty());
  auto max_before = (*reader)->MaxTrialNumber(sweep_id_);
  ASSERT_OK(max_before);
  EXPECT_EQ(*max_before, -1);

  ASSERT_OK(store_->Commit());
  auto after = (*reader)->Trials(sweep_id_, TrialQuery{});
  ASSERT_OK(after);
  EXPECT_EQ(Numbers(*after), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ((*after)[0].status, TrialStatus::kRunning);
}

TEST_F(StoreTest, CommitWithNothingWrittenIsOk) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  ASSERT_OK(store_->Commit());
  ASSERT_OK(store_->Commit());
}

TEST_F(StoreTest, CreateSweepCommitsTheOpenBatch) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  auto reader = Store::Open(path_, OpenMode::kReadOnly);
  ASSERT_OK(reader);
  Insert(MakeTrial(0, TrialStatus::kPending, {}));
  NewSweep second;
  second.name = "second";
  ASSERT_OK(store_->CreateSweep(second));
  auto max = (*reader)->MaxTrialNumber(sweep_id_);
  ASSERT_OK(max);
  EXPECT_EQ(*max, 0);
  ASSERT_OK((*reader)->FindSweep("second"));
}

// The owner is written with the sweep's row, and what the caller does before the commit (take
// the sweep's lock) happens while no reader can see the sweep yet; its failure leaves no sweep.
TEST_F(StoreTest, CreateSweepStoresItsOwnerInTheSameCommit) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  auto reader = Store::Open(path_, OpenMode::kReadOnly);
  ASSERT_OK(reader);
  NewSweep owned;
  owned.name = "owned";
  owned.owner = "42@host";
  owned.run_options = "--listen 127.0.0.1:7000 --no-local";
  bool seen_before_commit = true;
  auto id = store_->CreateSweep(owned, [&](int64_t) {
    seen_before_commit = (*reader)->FindSweep("owned").ok();
    return Status::Ok();
  });
  ASSERT_OK(id);
  EXPECT_FALSE(seen_before_commit);
  auto found = (*reader)->FindSweep("owned");
  ASSERT_OK(found);
  EXPECT_EQ(found->id, *id);
  EXPECT_EQ(found->owner, "42@host");
  EXPECT_EQ(found->run_options, "--listen 127.0.0.1:7000 --no-local");

  NewSweep refused;
  refused.name = "refused";
  auto failed = store_->CreateSweep(refused, [](int64_t) { return Status::Busy("held"); });
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message(), "held");
  EXPECT_EQ((*reader)->FindSweep("refused").status().code(), Status::Code::kNotFound);
  ASSERT_OK(store_->CreateSweep(refused));  // the name is free again
}

TEST_F(StoreTest, ClosingWithoutCommitDropsTheBatch) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  Insert(MakeTrial(0, TrialStatus::kPending, {}));
  store_.reset();
  auto reopened = Store::Open(path_, OpenMode::kReadWrite);
  ASSERT_OK(reopened);
  auto max = (*reopened)->MaxTrialNumber(sweep_id_);
  ASSERT_OK(max);
  EXPECT_EQ(*max, -1);
}

// ---- queries ----

TEST_F(StoreTest, BestTrialsMaximizeOrdersDescendingWithNumberTieBreak) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  Insert(MakeTrial(0, TrialStatus::kCompleted, 0.5));
  Insert(MakeTrial(1, TrialStatus::kCompleted, 0.9));
  Insert(MakeTrial(2, TrialStatus::kCompleted, 0.7));
  Insert(MakeTrial(3, TrialStatus::kCompleted, 0.9));
  auto best = store_->BestTrials(sweep_id_, /*maximize=*/true, 3);
  ASSERT_OK(best);
  EXPECT_EQ(Numbers(*best), (std::vector<int64_t>{1, 3, 2}));
}

TEST_F(StoreTest, BestTrialsMinimizeOrdersAscendingWithNumberTieBreak) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep(/*maximize=*/false));
  Insert(MakeTrial(0, TrialStatus::kCompleted, 0.5));
  Insert(MakeTrial(1, TrialStatus::kCompleted, 0.9));
  Insert(MakeTrial(2, TrialStatus::kCompleted, 0.2));
  Insert(MakeTrial(3, TrialStatus::kCompleted, 0.2));
  auto best = store_->BestTrials(sweep_id_, /*maximize=*/false, 10);
  ASSERT_OK(best);
  EXPECT_EQ(Numbers(*best), (std::vector<int64_t>{2, 3, 0, 1}));
}

TEST_F(StoreTest, BestTrialsIgnoresTrialsNotCompletedOrWithoutObjective) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  Insert(MakeTrial(0, TrialStatus::kCompleted, 0.5));
  Insert(MakeTrial(1, TrialStatus::kPruned, 0.99));
  Insert(MakeTrial(2, TrialStatus::kFailed, 0.98));
  Insert(MakeTrial(3, TrialStatus::kRunning, 0.97));
  Insert(MakeTrial(4, TrialStatus::kInterrupted, 0.96));
  Insert(MakeTrial(5, TrialStatus::kCompleted, {}));
  auto best = store_->BestTrials(sweep_id_, /*maximize=*/true, 10);
  ASSERT_OK(best);
  EXPECT_EQ(Numbers(*best), (std::vector<int64_t>{0}));
}

// Fixture rows for the sort tests: each column orders the trials differently.
class TrialsSortTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
    TrialRecord t0 = MakeTrial(0, TrialStatus::kRunning, {}, R"({"loss":0.3})");
    t0.started_s = 30;
    t0.epochs = 1;
    TrialRecord t1 = MakeTrial(1, TrialStatus::kCompleted, 0.8, R"({"loss":0.1,"val_acc":0.8})");
    t1.started_s = 10;
    t1.ended_s = 50;
    t1.epochs = 3;
    TrialRecord t2 = MakeTrial(2, TrialStatus::kFailed, {}, "{}");
    t2.started_s = 20;
    t2.ended_s = 40;
    t2.epochs = 2;
    TrialRecord t3 = MakeTrial(3, TrialStatus::kCompleted, 0.6, R"({"loss":0.2,"val_acc":0.6})");
    t3.ended_s = 60;
    t3.epochs = 2;
    for (const TrialRecord& t : {t0, t1, t2, t3}) Insert(t);
    ASSERT_OK(store_->Commit());
  }

  std::vector<int64_t> Sorted(const std::string& sort, std::optional<TrialStatus> status = {},
                              int64_t limit = -1) {
    TrialQuery query;
    query.sort = sort;
    query.status = status;
    query.limit = limit;
    auto trials = store_->Trials(sweep_id_, query);
    EXPECT_TRUE(trials.ok()) << sort << ": " << trials.status().message();
    return trials.ok() ? Numbers(*trials) : std::vector<int64_t>{};
  }
};

TEST_F(TrialsSortTest, ByNumber) {
  EXPECT_EQ(Sorted("number"), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(Sorted("-number"), (std::vector<int64_t>{3, 2, 1, 0}));
}

TEST_F(TrialsSortTest, ByStatusAlphabeticallyThenNumber) {
  // completed < failed < running
  EXPECT_EQ(Sorted("status"), (std::vector<int64_t>{1, 3, 2, 0}));
  EXPECT_EQ(Sorted("-status"), (std::vector<int64_t>{0, 2, 1, 3}));
}

TEST_F(TrialsSortTest, ByObjectiveWithNullsLast) {
  EXPECT_EQ(Sorted("objective"), (std::vector<int64_t>{3, 1, 0, 2}));
  EXPECT_EQ(Sorted("-objective"), (std::vector<int64_t>{1, 3, 0, 2}));
}

TEST_F(TrialsSortTest, ByStartedWithNullsLast) {
  EXPECT_EQ(Sorted("started"), (std::vector<int64_t>{1, 2, 0, 3}));
  EXPECT_EQ(Sorted("-started"), (std::vector<int64_t>{0, 2, 1, 3}));
}

TEST_F(TrialsSortTest, ByEndedWithNullsLast) {
  EXPECT_EQ(Sorted("ended"), (std::vector<int64_t>{2, 1, 3, 0}));
  EXPECT_EQ(Sorted("-ended"), (std::vector<int64_t>{3, 1, 2, 0}));
}

TEST_F(TrialsSortTest, ByEpochsWithNumberTieBreak) {
  EXPECT_EQ(Sorted("epochs"), (std::vector<int64_t>{0, 2, 3, 1}));
  EXPECT_EQ(Sorted("-epochs"), (std::vector<int64_t>{1, 2, 3, 0}));
}

TEST_F(TrialsSortTest, ByMetricNameWithMissingValuesLast) {
  EXPECT_EQ(Sorted("loss"), (std::vector<int64_t>{1, 3, 0, 2}));
  EXPECT_EQ(Sorted("-loss"), (std::vector<int64_t>{0, 3, 1, 2}));
  EXPECT_EQ(Sorted("-val_acc"), (std::vector<int64_t>{1, 3, 0, 2}));
}

TEST_F(TrialsSortTest, FiltersByStatus) {
  EXPECT_EQ(Sorted("number", TrialStatus::kCompleted), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(Sorted("-loss", TrialStatus::kCompleted), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(Sorted("number", TrialStatus::kPruned), (std::vector<int64_t>{}));
}

TEST_F(TrialsSortTest, Limits) {
  EXPECT_EQ(Sorted("-number", {}, 2), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(Sorted("number", {}, 0), (std::vector<int64_t>{}));
}

TEST_F(TrialsSortTest, RefusesEmptySortKeys) {
  for (const char* sort : {"", "-"}) {
    TrialQuery query;
    query.sort = sort;
    auto trials = store_->Trials(sweep_id_, query);
    ASSERT_FALSE(trials.ok()) << sort;
    EXPECT_EQ(trials.status().code(), Status::Code::kInvalidArgument) << sort;
  }
  // A name is bound, never pasted into the SQL: these name metrics no trial has.
  for (const char* sort : {"loss; DROP TABLE trials", "x'y", "$.loss", "val acc"}) {
    EXPECT_EQ(Sorted(sort), (std::vector<int64_t>{0, 1, 2, 3})) << sort;
  }
  EXPECT_EQ(Sorted("number").size(), 4u);  // table still there
}

// Names no JSON path can spell ('"', '\\', control characters) sort too, metrics and parameters.
TEST_F(TrialsSortTest, ByNamesNoJsonPathReaches) {
  TrialRecord t4 = MakeTrial(4, TrialStatus::kCompleted, 0.5, R"({"a\"b":2,"c\\d":1,"e\nf":1})");
  t4.params_json = R"({"p\"q":1})";
  TrialRecord t5 = MakeTrial(5, TrialStatus::kCompleted, 0.4, R"({"a\"b":1,"c\\d":2,"e\nf":3})");
  t5.params_json = R"({"p\"q":0})";
  Insert(t4);
  Insert(t5);
  ASSERT_OK(store_->Commit());
  EXPECT_EQ(Sorted("a\"b"), (std::vector<int64_t>{5, 4, 0, 1, 2, 3}));
  EXPECT_EQ(Sorted("-metric.a\"b"), (std::vector<int64_t>{4, 5, 0, 1, 2, 3}));
  EXPECT_EQ(Sorted("c\\d"), (std::vector<int64_t>{4, 5, 0, 1, 2, 3}));
  EXPECT_EQ(Sorted("-e\nf"), (std::vector<int64_t>{5, 4, 0, 1, 2, 3}));
  EXPECT_EQ(Sorted("param.p\"q"), (std::vector<int64_t>{5, 4, 0, 1, 2, 3}));
}

// Any name a program reported can be sorted by: commas, spaces, brackets, non-ASCII.
TEST_F(TrialsSortTest, ByMetricNamesWithAnyCharacters) {
  TrialRecord t4 =
      MakeTrial(4, TrialStatus::kCompleted, 0.5, R"({"val,acc":0.9,"a b]":1,"学习":2,"q's":3})");
  TrialRecord t5 =
      MakeTrial(5, TrialStatus::kCompleted, 0.4, R"({"val,acc":0.7,"a b]":3,"学习":1,"q's":4})");
  Insert(t4);
  Insert(t5);
  ASSERT_OK(store_->Commit());
  EXPECT_EQ(Sorted("val,acc"), (std::vector<int64_t>{5, 4, 0, 1, 2, 3}));
  EXPECT_EQ(Sorted("-a b]"), (std::vector<int64_t>{5, 4, 0, 1, 2, 3}));
  EXPECT_EQ(Sorted("学习"), (std::vector<int64_t>{5, 4, 0, 1, 2, 3}));
  EXPECT_EQ(Sorted("metric.q's"), (std::vector<int64_t>{4, 5, 0, 1, 2, 3}));
}

TEST_F(StoreTest, CountByStatusCountsEachState) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  int64_t number = 0;
  auto add = [&](TrialStatus status, int n) {
    for (int i = 0; i < n; ++i) Insert(MakeTrial(number++, status, {}));
  };
  add(TrialStatus::kPending, 1);
  add(TrialStatus::kRunning, 2);
  add(TrialStatus::kCompleted, 3);
  add(TrialStatus::kPruned, 4);
  add(TrialStatus::kFailed, 5);
  add(TrialStatus::kInterrupted, 6);
  auto counts = store_->CountByStatus(sweep_id_);
  ASSERT_OK(counts);
  EXPECT_EQ(counts->pending, 1);
  EXPECT_EQ(counts->running, 2);
  EXPECT_EQ(counts->completed, 3);
  EXPECT_EQ(counts->pruned, 4);
  EXPECT_EQ(counts->failed, 5);
  EXPECT_EQ(counts->interrupted, 6);
  EXPECT_EQ(counts->total(), 21);
}

TEST_F(StoreTest, MaxTrialNumber) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  auto empty = store_->MaxTrialNumber(sweep_id_);
  ASSERT_OK(empty);
  EXPECT_EQ(*empty, -1);
  Insert(MakeTrial(4, TrialStatus::kPending, {}));
  Insert(MakeTrial(17, TrialStatus::kPending, {}));
  Insert(MakeTrial(9, TrialStatus::kPending, {}));
  auto max = store_->MaxTrialNumber(sweep_id_);
  ASSERT_OK(max);
  EXPECT_EQ(*max, 17);
}

// ---- scale: 100k trials, every hot query reaches trials through an index ----

TEST_F(StoreTest, HundredThousandTrialsQueriesUseIndexes) {
  ASSERT_NO_FATAL_FAILURE(OpenWithSweep());
  constexpr int64_t kTrials = 100000;
  for (int64_t i = 0; i < kTrials; ++i) {
    TrialStatus status = i % 4 == 0 ? TrialStatus::kPruned : TrialStatus::kCompleted;
    // Objectives are a permutation of 0..kTrials-1, so the best is known: 7919 is prime, coprime
    // with kTrials.
    double objective = static_cast<double>((i * 7919) % kTrials);
    Insert(MakeTrial(i, status, objective, "{\"loss\":" + std::to_string(objective) + "}"));
  }
  ASSERT_OK(store_->Commit());

  auto best = store_->BestTrials(sweep_id_, /*maximize=*/true, 5);
  ASSERT_OK(best);
  ASSERT_EQ(best->size(), 5u);
  for (size_t i = 0; i + 1 < best->size(); ++i) {
    EXPECT_GT(*(*best)[i].objective, *(*best)[i + 1].objective);
    EXPECT_EQ((*best)[i].status, TrialStatus::kCompleted);
  }
  // Trial i has objective (i * 7919) mod kTrials: 99999 is trial 82321, and so on. 99996 is
  // trial 29284, pruned (29284 % 4 == 0), so it is not among the best.
  EXPECT_EQ(Numbers(*best), (std::vector<int64_t>{82321, 64642, 46963, 11605, 93926}));
  std::vector<double> objectives;
  for (const TrialRecord& t : *best) objectives.push_back(t.objective.value_or(-1));
  EXPECT_EQ(objectives, (std::vector<double>{99999, 99998, 99997, 99995, 99994}));
  auto counts = store_->CountByStatus(sweep_id_);
  ASSERT_OK(counts);
  EXPECT_EQ(counts->pruned, kTrials / 4);
  EXPECT_EQ(counts->completed, kTrials - kTrials / 4);
  TrialQuery first_ten;
  first_ten.limit = 10;
  auto trials = store_->Trials(sweep_id_, first_ten);
  ASSERT_OK(trials);
  EXPECT_EQ(Numbers(*trials), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));

  using internal::Query;
  for (Query query : {Query::kBestTrialsMax, Query::kBestTrialsMin, Query::kCountByStatus,
                      Query::kTrial, Query::kMaxTrialNumber, Query::kUpdateTrialStatus,
                      Query::kFinishTrial, Query::kListSweeps}) {
    std::string plan = QueryPlan(path_, internal::QuerySql(query));
    EXPECT_TRUE(SearchesTrialsByIndex(plan)) << internal::QuerySql(query) << "\nplan:\n" << plan;
  }
  std::string events_plan = QueryPlan(path_, internal::QuerySql(Query::kTrialEvents));
  EXPECT_TRUE(Contains(events_plan, "USING INDEX events_by_trial")) << events_plan;
  std::string reports_plan = QueryPlan(path_, internal::QuerySql(Query::kReports));
  EXPECT_TRUE(Contains(reports_plan, "SEARCH reports USING INDEX reports_by_trial_step"))
      << reports_plan;

  for (const char* sort : {"number", "-number", "objective", "-loss"}) {
    for (std::optional<TrialStatus> status :
         {std::optional<TrialStatus>(), std::optional<TrialStatus>(TrialStatus::kCompleted)}) {
      TrialQuery query;
      query.sort = sort;
      query.status = status;
      query.limit = 10;
      auto sql = internal::BuildTrialsSql(query);
      ASSERT_OK(sql);
      std::string plan = QueryPlan(path_, sql->sql);
      EXPECT_TRUE(SearchesTrialsByIndex(plan)) << sql->sql << "\nplan:\n" << plan;
    }
  }
}

}  // namespace
}  // namespace sweep::store

namespace sweep::store {
namespace {

// A reader that opens the file in the instant `sweep run` creates it (no schema yet) is told
// there is no sweep yet, not that the file is foreign.
TEST(StoreOpenTest, ReadOnlyOpenOfABrandNewFileSaysNoSweepYet) {
  char tmpl[] = "/tmp/sweep-store-new-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  std::string path = dir + "/new.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA journal_mode = WAL", nullptr, nullptr, nullptr), SQLITE_OK);
  auto store = Store::Open(path, OpenMode::kReadOnly);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(store.status().message(), path + ": no sweep recorded yet (a new database)");
  sqlite3_close(db);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sweep::store
