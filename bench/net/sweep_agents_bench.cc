// Reports per second that a real sweep stores when its trials run on remote agents: end to end,
// from a `sweep worker` process through its agent, the network and the coordinator into the
// SQLite file, counted in the file.
//
// The program starts `sweep run CONFIG --listen 127.0.0.1:0 --token-file F --no-local` and
// 3 `sweep agent --connect ... --cpu-slots 2` processes (6 workers), in a temporary directory.
// The sweep: Branin function trials that report every step as fast as they can (steps = N,
// step_ms = 0, no early stopping). While it runs, the program samples max(rowid) of `reports`
// every 100 ms. At the end it prints:
//   - the process wall time (coordinator start to exit, agents joining included) and
//     rows / that time;
//   - rows / the span of the rows' own `time` column (first to last report stored);
//   - the rate over the middle half of that span (steady state, no ramp-up or tail).
//
// Usage: sweep_agents_bench [steps=5000] [trials=60] [agents=3] [slots_per_agent=2]
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "sweep_agents_bench: %s\n", why.c_str());
  std::exit(1);
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `sweep ARGS` in `dir` with stdout and stderr to `log`.
pid_t Spawn(const fs::path& dir, const std::string& args, const std::string& log) {
  std::string cmd = "cd '" + dir.string() + "' && exec '" SWEEP_BINARY "' " + args + " > " + log +
                    " 2>&1 < /dev/null";
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0) {
    Die("cannot start " + args);
  }
  return pid;
}

// The value of a one-number query on the store, or `fallback`.
double Scalar(sqlite3* db, const std::string& sql, double fallback = 0) {
  sqlite3_stmt* st = nullptr;
  double v = fallback;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
    v = sqlite3_column_double(st, 0);
  }
  sqlite3_finalize(st);
  return v;
}

struct Sample {
  double t_s;
  double rows;
};

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 5000;
  const int trials = argc > 2 ? std::atoi(argv[2]) : 60;
  const int agents = argc > 3 ? std::atoi(argv[3]) : 3;
  const int slots = argc > 4 ? std::atoi(argv[4]) : 2;
  if (steps < 2 || trials < 1 || agents < 1 || slots < 1) {
    Die("usage: sweep_agents_bench [steps] [trials] [agents] [slots_per_agent]");
  }

  char tmpl[] = "/tmp/sweep-agents-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) Die("mkdtemp failed");
  const fs::path dir = tmpl;
  std::ofstream(dir / "tok") << "sweep-agents-bench-token-0123456789\n";
  ::chmod((dir / "tok").c_str(), 0600);
  std::ofstream(dir / "c.toml") << "[sweep]\nname = \"bench\"\nmax_trials = " << trials
                                << "\nseed = 1\n[trial]\nkind = \"function\"\n[function]\n"
                                   "name = \"branin\"\nsteps = "
                                << steps
                                << "\nstep_ms = 0\n[parameters]\n"
                                   "x1 = { distribution = \"uniform\", min = -5, max = 10 }\n"
                                   "x2 = { distribution = \"uniform\", min = 0, max = 15 }\n";

  const auto start = Clock::now();
  auto since_start = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  pid_t coordinator =
      Spawn(dir, "run c.toml --listen 127.0.0.1:0 --token-file tok --no-local", "coordinator.log");
  const std::regex listening("listening for agents on [^ ]*:([0-9]+)\n");
  std::smatch m;
  std::string log;
  while (!std::regex_search(log = Slurp(dir / "coordinator.log"), m, listening)) {
    if (since_start() > 30) Die("the coordinator did not listen:\n" + log);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::string port = m[1];
  std::vector<pid_t> agent_pids;
  for (int i = 0; i < agents; ++i) {
    agent_pids.push_back(Spawn(dir,
                               "agent --connect 127.0.0.1:" + port +
                                   " --token-file tok --cpu-slots " + std::to_string(slots) +
                                   " --name b" + std::to_string(i),
                               "agent" + std::to_string(i) + ".log"));
  }

  sqlite3* db = nullptr;
  if (sqlite3_open_v2((dir / "sweeps.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) !=
      SQLITE_OK) {
    Die("cannot open the store");
  }
  sqlite3_busy_timeout(db, 1000);
  std::vector<Sample> samples;
  int status = 0;
  for (;;) {
    pid_t got = ::waitpid(coordinator, &status, WNOHANG);
    if (got == coordinator) break;
    samples.push_back({since_start(), Scalar(db, "SELECT max(rowid) FROM reports")});
    if (since_start() > 600) Die("the sweep did not end in 10 minutes");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double wall_s = since_start();
  for (pid_t pid : agent_pids) {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Die("the sweep failed:\n" + Slurp(dir / "coordinator.log"));
  }

  const double rows = Scalar(db, "SELECT count(*) FROM reports");
  const double expected = static_cast<double>(steps) * trials;
  if (rows != expected) {
    Die("stored " + std::to_string(rows) + " reports, expected " + std::to_string(expected));
  }
  const double first_s = Scalar(db, "SELECT min(time) FROM reports");
  const double last_s = Scalar(db, "SELECT max(time) FROM reports");
  const double span_s = last_s - first_s;
  const double q1 = first_s + span_s / 4, q3 = first_s + span_s * 3 / 4;
  char middle_sql[160];
  std::snprintf(middle_sql, sizeof middle_sql,
                "SELECT count(*) FROM reports WHERE time >= %.6f AND time < %.6f", q1, q3);
  const double middle_rows = Scalar(db, middle_sql);
  // The sampled curve's steepest second, as a reader of the file saw it.
  double best_window = 0;
  for (size_t i = 0, j = 0; i < samples.size(); ++i) {
    while (j < samples.size() && samples[j].t_s - samples[i].t_s < 1.0) ++j;
    if (j < samples.size()) {
      best_window = std::max(
          best_window, (samples[j].rows - samples[i].rows) / (samples[j].t_s - samples[i].t_s));
    }
  }
  sqlite3_close(db);

  std::printf(
      "sweep run --listen --no-local, %d agents x %d CPU slots, %d branin trials x %d "
      "steps (step_ms = 0, no early stopping)\n",
      agents, slots, trials, steps);
  std::printf("  reports stored:             %.0f\n", rows);
  std::printf("  process wall time:          %.2f s  -> %8.0f reports/s (start-up included)\n",
              wall_s, rows / wall_s);
  std::printf("  first to last report:       %.2f s  -> %8.0f reports/s\n", span_s, rows / span_s);
  std::printf("  middle half of the run:     %.2f s  -> %8.0f reports/s\n", q3 - q1,
              middle_rows / (q3 - q1));
  std::printf("  best 1 s seen by a reader:            %8.0f reports/s (committed rows)\n",
              best_window);
  double load[1] = {0};
  if (::getloadavg(load, 1) == 1) {
    std::printf(
        "  load average %.1f on %u hardware threads (the workers, agents and coordinator "
        "share them)\n",
        load[0], std::thread::hardware_concurrency());
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return 0;
}
