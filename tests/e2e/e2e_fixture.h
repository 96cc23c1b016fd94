// The end-to-end fixture: a temporary directory per test, the real `sweep` binary run in it
// (in the foreground, or in the background with its pid), and queries on its sweeps.db.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

namespace sweep_e2e {

namespace fs = std::filesystem;

// A random search over Branin (function trials): `sweep_lines` go into [sweep] after name and
// max_trials, `function_lines` into [function], `tail` after [parameters].
inline std::string BraninConfig(const std::string& name, int max_trials,
                                const std::string& sweep_lines = "",
                                const std::string& function_lines = "",
                                const std::string& tail = "") {
  return "[sweep]\nname = \"" + name + "\"\nmax_trials = " + std::to_string(max_trials) + "\n" +
         sweep_lines + "[trial]\nkind = \"function\"\n[function]\nname = \"branin\"\n" +
         function_lines +
         "[parameters]\nx1 = { distribution = \"uniform\", min = -5, max = 10 }\n"
         "x2 = { distribution = \"uniform\", min = 0, max = 15 }\n" +
         tail;
}

struct Output {
  int code = -1;
  std::string out, err;
};

inline std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class E2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sweep-e2e-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Runs `sweep ARGS` in the test directory; `env` is prepended ("K=V K2=V2").
  Output Sweep(const std::string& args, const std::string& env = "") {
    return SweepAs("", args, env);
  }
  // The same, started by `launcher` ("setpriv --reuid=65534 ... ": as another user).
  Output SweepAs(const std::string& launcher, const std::string& args,
                 const std::string& env = "") {
    Output o;
    std::string cmd = "cd '" + dir_.string() + "' && " + launcher + "env " + env +
                      " '" SWEEP_BINARY "' " + args + " > out.txt 2> err.txt < /dev/null";
    int rc = std::system(cmd.c_str());
    o.code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    o.out = Slurp(dir_ / "out.txt");
    o.err = Slurp(dir_ / "err.txt");
    return o;
  }

  // Runs `sweep ARGS` as Sweep does and returns its stdout parsed as JSON. An exit status
  // other than 0 (shown with sweep's stderr) or output that is not JSON is a fatal failure, so
  // call it as `json j; ASSERT_NO_FATAL_FAILURE(j = SweepJson(ARGS));` to stop the test there.
  nlohmann::json SweepJson(const std::string& args) {
    nlohmann::json parsed;  // null unless the run succeeds
    // In a lambda: ASSERT_* can only return from a function that returns void.
    [&] {
      const Output o = Sweep(args);
      ASSERT_EQ(o.code, 0) << "sweep " << args << "\n" << o.err;
      nlohmann::json j = nlohmann::json::parse(o.out, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(j.is_discarded()) << "sweep " << args << " printed no JSON:\n" << o.out;
      parsed = std::move(j);
    }();
    return parsed;
  }

  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }

  // Write, then make it executable: a program (a script with its #! line) a trial runs.
  void WriteProgram(const std::string& name, const std::string& text) {
    Write(name, text);
    fs::permissions(dir_ / name, fs::perms::owner_all);
  }

  // Starts `sweep ARGS` in the test directory without waiting; output goes to LOG.
  pid_t Start(const std::string& args, const std::string& log, const std::string& env = "") {
    std::string cmd = "cd '" + dir_.string() + "' && exec env " + env + " '" SWEEP_BINARY "' " +
                      args + " > " + log + " 2>&1 < /dev/null";
    const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
    pid_t pid = -1;
    EXPECT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
    return pid;
  }

  // Waits for a process started by Start(); returns its exit code, or -signal.
  static int Wait(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }

  // Waits (up to 10 s, looking every 25 ms) until done() holds; whether it did.
  template <typename Done>
  static bool WaitUntil(Done&& done) {
    for (int i = 0; i < 400; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return false;
  }

  // Waits (up to 10 s) until the store holds some report.
  bool WaitForAReport() {
    return WaitUntil([&] {
      return HasTable("reports") && std::stoi(Query("SELECT count(*) FROM reports")[0][0]) > 0;
    });
  }

  // Takes sweeps.db's write lock as another program would (a sqlite3 shell's BEGIN EXCLUSIVE);
  // null when it could not. The caller commits and closes it.
  sqlite3* HoldWriteLock() {
    sqlite3* db = nullptr;
    if (sqlite3_open((dir_ / "sweeps.db").c_str(), &db) != SQLITE_OK) return nullptr;
    sqlite3_busy_timeout(db, 10000);
    if (sqlite3_exec(db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr) != SQLITE_OK) {
      sqlite3_close(db);
      return nullptr;
    }
    return db;
  }

  // Whether the test's sweeps.db (or `db`) exists and has committed `table`: what a test that
  // polls a running sweep checks before it queries the table (the file appears before its
  // schema does).
  bool HasTable(const std::string& table, const std::string& db_name = "sweeps.db") {
    return fs::exists(dir_ / db_name) &&
           Query(
               "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '" + table + "'",
               db_name) == std::vector<std::vector<std::string>>{{"1"}};
  }

  // Runs `sql` on the test's sweeps.db (or `db`), to stage a state a crash would leave.
  void Exec(const std::string& sql, const std::string& db_name = "sweeps.db") {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2((dir_ / db_name).c_str(), &db, SQLITE_OPEN_READWRITE, nullptr),
              SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
        << (error != nullptr ? error : "");
    sqlite3_free(error);
    sqlite3_close(db);
  }

  // Rows of a query on the test's sweeps.db (or `db`), each row as strings.
  std::vector<std::vector<std::string>> Query(const std::string& sql,
                                              const std::string& db_name = "sweeps.db") {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open_v2((dir_ / db_name).c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
              SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    std::vector<std::vector<std::string>> rows;
    while (st != nullptr && sqlite3_step(st) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int i = 0; i < sqlite3_column_count(st); ++i) {
        auto* t = sqlite3_column_text(st, i);
        row.push_back(t ? reinterpret_cast<const char*>(t) : "NULL");
      }
      rows.push_back(row);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rows;
  }

  // A small 4-class image dataset in IDX format (8x8 images): each class lights its own
  // quadrant, plus noise, so a small MLP learns it in a few epochs.
  void WriteTinyDataset(int n_train, int n_test) {
    auto write = [&](const std::string& stem, int n, uint32_t seed) {
      std::ofstream img(dir_ / (stem + "-images-idx3-ubyte"), std::ios::binary);
      std::ofstream lab(dir_ / (stem + "-labels-idx1-ubyte"), std::ios::binary);
      auto be32 = [](std::ofstream& o, uint32_t v) {
        unsigned char b[4] = {static_cast<unsigned char>(v >> 24),
                              static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
        o.write(reinterpret_cast<char*>(b), 4);
      };
      be32(img, 0x00000803);
      be32(img, n);
      be32(img, 8);
      be32(img, 8);
      be32(lab, 0x00000801);
      be32(lab, n);
      uint32_t s = seed;
      for (int i = 0; i < n; ++i) {
        int c = i % 4;
        for (int y = 0; y < 8; ++y) {
          for (int x = 0; x < 8; ++x) {
            s = s * 1664525u + 1013904223u;
            int quadrant = (y / 4) * 2 + (x / 4);
            int v = (quadrant == c ? 160 : 0) + static_cast<int>((s >> 24) % 90);
            img.put(static_cast<char>(v));
          }
        }
        lab.put(static_cast<char>(c));
      }
    };
    write("train", n_train, 1);
    write("t10k", n_test, 2);
  }

  fs::path dir_;
};

}  // namespace sweep_e2e
