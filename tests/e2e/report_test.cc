// End to end: `sweep show`, `export`, `report` and `status --watch` on real sweeps. The report
// page is opened in headless Chromium (skipped when it is not installed); terminal output is
// read through a pseudo-terminal of a set size.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>

#include "e2e_fixture.h"

namespace sweep_e2e {
namespace {

using nlohmann::json;

// A Branin sweep with learning curves and ASHA, so every chart has something to draw.
std::string AshaBranin(const std::string& name, int trials, int steps = 9) {
  return BraninConfig(name, trials, "seed = 3\n", "steps = " + std::to_string(steps) + "\n",
                      "[early_stopping]\nalgorithm = \"asha\"\nmin_resource = 1\n"
                      "reduction_factor = 3\n");
}

// ---- Chromium ----

std::string ChromiumBinary() {
  for (const char* name : {"chromium", "chromium-browser"}) {
    std::string cmd = std::string("command -v ") + name + " > /dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return name;
  }
  return "";
}

struct PageLoad {
  int code = -1;
  std::string dom, log;
  double seconds = 0;
};

class ReportE2eTest : public E2eTest {
 protected:
  // Opens `html` in headless Chromium with a fresh profile; `extra` adds flags such as
  // --screenshot. Returns the DOM after the page's scripts ran and Chromium's log.
  PageLoad OpenInChromium(const std::string& chromium, const std::string& html,
                          const std::string& extra, const std::string& tag) {
    const fs::path profile = dir_ / ("chromium-profile-" + tag);
    const std::string flags =
        "--headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking "
        "--disable-component-update --disable-sync --user-data-dir='" +
        profile.string() + "' --enable-logging=stderr --v=0 " + extra;
    std::string cmd = "cd '" + dir_.string() + "' && timeout 300 " + chromium + " " + flags +
                      " 'file://" + (dir_ / html).string() + "' > dom-" + tag + ".txt 2> log-" +
                      tag + ".txt < /dev/null";
    auto start = std::chrono::steady_clock::now();
    int rc = std::system(cmd.c_str());
    PageLoad p;
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    p.code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    p.dom = Slurp(dir_ / ("dom-" + tag + ".txt"));
    p.log = Slurp(dir_ / ("log-" + tag + ".txt"));
    return p;
  }

  // The drawn-item counts the page wrote on <body data-charts="history:N ...">.
  static std::map<std::string, std::string> ChartCounts(const std::string& dom) {
    std::map<std::string, std::string> counts;
    std::smatch m;
    if (!std::regex_search(dom, m, std::regex("data-charts=\"([^\"]*)\""))) return counts;
    std::string s = m[1];
    std::regex item("(\\w+):(\\w+)");
    for (auto it = std::sregex_iterator(s.begin(), s.end(), item); it != std::sregex_iterator();
         ++it) {
      counts[(*it)[1]] = (*it)[2];
    }
    return counts;
  }

  // Waits until `sweep status NAME` finds the sweep that a started `run` records.
  void WaitUntilRecorded(const std::string& name) {
    for (int i = 0; i < 500 && Sweep("status " + name).code != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  static std::string PageErrors(const std::string& dom) {
    std::smatch m;
    if (!std::regex_search(dom, m, std::regex("data-errors=\"([^\"]*)\""))) return "<missing>";
    return m[1];
  }

  // Chromium logs every console message of the page as "...:CONSOLE..."; ours logs none.
  static std::vector<std::string> ConsoleLines(const std::string& log) {
    std::vector<std::string> lines;
    std::istringstream in(log);
    std::string line;
    while (std::getline(in, line)) {
      if (line.find(":CONSOLE") != std::string::npos ||
          line.find("Uncaught") != std::string::npos) {
        lines.push_back(line);
      }
    }
    return lines;
  }

  void ExpectPageDrawn(const PageLoad& p, const std::map<std::string, int>& at_least) {
    EXPECT_EQ(p.code, 0) << p.log;
    EXPECT_EQ(PageErrors(p.dom), "");
    std::vector<std::string> console = ConsoleLines(p.log);
    EXPECT_TRUE(console.empty()) << console.front();
    auto counts = ChartCounts(p.dom);
    for (const char* chart : {"history", "parallel", "curves", "importance", "best", "config"}) {
      ASSERT_TRUE(counts.count(chart)) << chart << " missing from data-charts";
      EXPECT_NE(counts[chart], "error") << chart;
      EXPECT_NE(counts[chart], "0") << chart;
    }
    for (const auto& [chart, n] : at_least) {
      EXPECT_GE(std::atoi(counts[chart].c_str()), n) << chart;
    }
  }
};

fs::path ArtifactDir() {
  fs::path dir = SWEEP_ARTIFACT_DIR;
  fs::create_directories(dir);
  return dir;
}

TEST_F(ReportE2eTest, ReportOpensInChromiumWithEveryChartDrawn) {
  Write("b.toml", AshaBranin("rep", 30));
  ASSERT_EQ(Sweep("run b.toml").code, 0);
  Output o = Sweep("report rep -o report.html");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("wrote report.html: 30 trials"), std::string::npos) << o.err;
  const std::string html = Slurp(dir_ / "report.html");
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  // ASHA leaves few trials completed: the explaining charts then use a rung, and say so.
  const int ended =
      std::stoi(Query("SELECT COUNT(*) FROM trials WHERE status = 'completed' AND "
                      "objective IS NOT NULL")[0][0]);
  EXPECT_EQ(html.find("completed, too few to explain") != std::string::npos, ended < 10)
      << ended << " completed";

  const std::string chromium = ChromiumBinary();
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (Debian package: chromium)";
  PageLoad dom = OpenInChromium(chromium, "report.html", "--dump-dom", "dom");
  auto completed = Query("SELECT COUNT(*) FROM trials WHERE status = 'completed'");
  auto all = Query(
      "SELECT COUNT(*) FROM trials WHERE objective IS NOT NULL AND status IN "
      "('completed', 'pruned')");
  ExpectPageDrawn(dom, {{"history", std::stoi(all[0][0])},
                        {"parallel", std::stoi(completed[0][0])},
                        {"importance", 2}});
  EXPECT_EQ(ChartCounts(dom.dom)["history"], all[0][0]);

  const fs::path shot = ArtifactDir() / "report_e2e.png";
  fs::remove(shot);
  PageLoad s =
      OpenInChromium(chromium, "report.html",
                     "--window-size=1280,2600 --screenshot='" + shot.string() + "'", "shot");
  EXPECT_EQ(s.code, 0) << s.log;
  ASSERT_TRUE(fs::exists(shot)) << s.log;
  EXPECT_GT(fs::file_size(shot), 20000u);  // a blank page is a few KB
  std::cout << "report screenshot: " << shot.string() << "\n";
}

TEST_F(ReportE2eTest, TenThousandTrialsStayResponsive) {
  Write("b.toml", AshaBranin("big", 10000, 3));
  Output run = Sweep("run b.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  auto start = std::chrono::steady_clock::now();
  Output o = Sweep("report big -o big.html");
  const double generate_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(o.code, 0) << o.err;
  const auto bytes = fs::file_size(dir_ / "big.html");
  std::cout << "10,000 trials: report generated in " << generate_s << " s (whole command), "
            << bytes / 1024 << " KiB; " << o.err;
  EXPECT_LT(bytes, 8u << 20);
  EXPECT_LT(generate_s, 30.0);  // a few seconds here; minutes would mean a query per trial

  const std::string chromium = ChromiumBinary();
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (Debian package: chromium)";
  PageLoad p = OpenInChromium(chromium, "big.html", "--dump-dom", "big");
  std::cout << "10,000 trials: headless chromium loaded and drew the page in " << p.seconds
            << " s\n";
  ExpectPageDrawn(p, {{"parallel", 1000}});
  EXPECT_GE(std::atoi(ChartCounts(p.dom)["history"].c_str()), 9000);
  EXPECT_LT(p.seconds, 60.0);
}

// ---- show, export ----

TEST_F(ReportE2eTest, ShowPrintsOneTrialAndItsCurves) {
  Write("b.toml", AshaBranin("sh", 12));
  ASSERT_EQ(Sweep("run b.toml").code, 0);
  Output o = Sweep("show sh 0", "COLUMNS=72");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("trial 0 of sweep sh: "), std::string::npos) << o.out;
  for (const char* key :
       {"params", "x1 = ", "x2 = ", "placement", "started", "ended", "duration", "steps"}) {
    EXPECT_NE(o.out.find(key), std::string::npos) << key << "\n" << o.out;
  }
  EXPECT_NE(o.out.find("\xE2\xA0"), std::string::npos) << "no braille in\n" << o.out;  // U+28xx
  EXPECT_NE(o.out.find("step"), std::string::npos);

  // A pruned trial says why.
  auto pruned = Query("SELECT number, error FROM trials WHERE status = 'pruned' LIMIT 1");
  ASSERT_FALSE(pruned.empty());
  Output p = Sweep("show sh " + pruned[0][0], "COLUMNS=400");
  EXPECT_NE(p.out.find("pruned      " + pruned[0][1]), std::string::npos) << p.out;

  // JSON: plain numbers, every report.
  json t;
  ASSERT_NO_FATAL_FAILURE(t = SweepJson("show sh 1 --json"));
  auto reports = Query("SELECT COUNT(*) FROM reports WHERE trial = 1");
  EXPECT_EQ(t["reports"].size(), std::stoul(reports[0][0]));
  EXPECT_TRUE(t["reports"][0]["metrics"]["value"].is_number());
  EXPECT_EQ(t["trial"], 1);
  EXPECT_TRUE(t["duration_s"].is_number());
  // Every key is there for every trial: pruned_reason is null unless it was pruned.
  ASSERT_TRUE(t.contains("pruned_reason"));
  EXPECT_EQ(t["pruned_reason"].is_null(), t["status"] != "pruned") << t.dump();
  json shown;
  ASSERT_NO_FATAL_FAILURE(shown = SweepJson("show sh " + pruned[0][0] + " --json"));
  EXPECT_EQ(shown["pruned_reason"], pruned[0][1]);

  Output missing = Sweep("show sh 99");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("no trial 99 in sweep 'sh' (its trials are numbered 0 to 11)"),
            std::string::npos)
      << missing.err;
  Output unknown = Sweep("show shh 1");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("no sweep named 'shh'"), std::string::npos) << unknown.err;
  EXPECT_NE(unknown.err.find("did you mean 'sh'?"), std::string::npos) << unknown.err;
  for (const char* bad : {"-1", "abc", "1.5"}) {
    Output refused = Sweep(std::string("show sh ") + bad);
    EXPECT_EQ(refused.code, 2) << bad;
    EXPECT_NE(refused.err.find(
                  std::string("TRIAL: a trial number is a whole number from 0, got '") + bad + "'"),
              std::string::npos)
        << refused.err;
  }
  // `report -o -` writes the page to standard output, as `export -o -` does, and no file "-".
  Output page = Sweep("report sh -o -");
  ASSERT_EQ(page.code, 0) << page.err;
  EXPECT_EQ(page.out.rfind("<!DOCTYPE html>", 0), 0u) << page.out.substr(0, 80);
  EXPECT_FALSE(fs::exists(dir_ / "-"));
}

TEST_F(ReportE2eTest, ExportWritesEveryTrialAndEveryReport) {
  Write("b.toml", AshaBranin("ex", 15));
  ASSERT_EQ(Sweep("run b.toml").code, 0);
  Output csv = Sweep("export ex --format csv");
  ASSERT_EQ(csv.code, 0) << csv.err;
  std::istringstream lines(csv.out);
  std::string header;
  std::getline(lines, header);
  EXPECT_EQ(header,
            "trial,status,objective,epochs,retries,started,ended,duration_s,placement,param.x1,"
            "param.x2,metric.value,error");
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 16);  // header and 15 trials

  Output file = Sweep("export ex --format json --reports -o reports.json");
  ASSERT_EQ(file.code, 0) << file.err;
  json reports = json::parse(Slurp(dir_ / "reports.json"));
  auto stored = Query("SELECT COUNT(*) FROM reports");
  EXPECT_EQ(reports.size(), std::stoul(stored[0][0]));
  EXPECT_TRUE(reports[0]["param.x1"].is_number());
  EXPECT_TRUE(reports[0]["metric.value"].is_number());
  // Values round-trip: trial 3's value as the store holds it (shortest round-trip JSON text)
  // is the exported number, bit for bit, in both formats.
  json trials;
  ASSERT_NO_FATAL_FAILURE(trials = SweepJson("export ex --format json"));
  const double stored_value =
      json::parse(Query("SELECT metrics FROM trials WHERE number = 3")[0][0])["value"];
  EXPECT_EQ(trials[3]["metric.value"].get<double>(), stored_value);
  EXPECT_EQ(trials[3]["objective"].get<double>(), stored_value);
  EXPECT_NE(csv.out.find("," + json(stored_value).dump() + ","), std::string::npos);

  Output bad = Sweep("export ex --format xml");
  EXPECT_EQ(bad.code, 2);
  Output unknown = Sweep("export nosuch");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("no sweep named 'nosuch'"), std::string::npos);
}

// -o writes where the path leads, as a shell's `>` does: through a symbolic link to its target
// (the link stays), into a FIFO or a device in place (neither becomes a regular file), and
// over a regular file with its permission bits kept and no temporary file left behind.
TEST_F(ReportE2eTest, OutputPathKeepsSymlinksFifosAndDevices) {
  Write("b.toml", AshaBranin("out", 4));
  ASSERT_EQ(Sweep("run b.toml").code, 0);
  const std::string csv = Sweep("export out").out;
  ASSERT_FALSE(csv.empty());

  fs::create_directory(dir_ / "results");
  Write("results/kept.csv", "old\n");
  fs::permissions(dir_ / "results/kept.csv",
                  fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  fs::create_symlink("results/kept.csv", dir_ / "link.csv");
  Output o = Sweep("export out -o link.csv");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.csv"));
  EXPECT_EQ(Slurp(dir_ / "results/kept.csv"), csv);
  EXPECT_EQ(fs::status(dir_ / "results/kept.csv").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);

  // A link to a file not there yet creates the file.
  fs::create_symlink("results/new.html", dir_ / "page.html");
  o = Sweep("report out -o page.html");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_TRUE(fs::is_symlink(dir_ / "page.html"));
  EXPECT_NE(Slurp(dir_ / "results/new.html").find("<html"), std::string::npos);
  for (const auto& entry : fs::directory_iterator(dir_ / "results")) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "kept.csv" || name == "new.html") << "left behind: " << name;
  }

  // A FIFO is written in place: its reader gets the whole text. The reader opens it first
  // (without blocking), so a sweep that never opens it cannot hang the test; the text fits in
  // the pipe's buffer.
  ASSERT_EQ(::mkfifo((dir_ / "pipe").c_str(), 0600), 0);
  const int fifo = ::open((dir_ / "pipe").c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(fifo, 0);
  o = Sweep("export out -o pipe");
  std::string piped;
  char buf[4096];
  for (ssize_t n; (n = ::read(fifo, buf, sizeof buf)) > 0;) piped.append(buf, n);
  ::close(fifo);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(piped, csv);
  EXPECT_TRUE(fs::is_fifo(dir_ / "pipe"));

  // A character device (a node of /dev/null's numbers, so the real one is never at risk) stays
  // one; making it needs root.
  if (::mknod((dir_ / "null").c_str(), S_IFCHR | 0666, ::makedev(1, 3)) == 0) {
    o = Sweep("report out -o null");
    ASSERT_EQ(o.code, 0) << o.err;
    EXPECT_TRUE(fs::is_character_file(dir_ / "null"));
  }
}

// -o never replaces a sweep store: not the one --db names (by name, through a link, or its
// write-ahead log), nor another SQLite file. The store stays whole and the command says why.
// An -o ending in .json without --format writes JSON.
TEST_F(ReportE2eTest, OutputNeverReplacesASweepStore) {
  Write("b.toml", AshaBranin("keep", 4));
  ASSERT_EQ(Sweep("run b.toml").code, 0);
  const std::string before = Slurp(dir_ / "sweeps.db");
  fs::create_symlink("sweeps.db", dir_ / "link.db");
  fs::copy_file(dir_ / "sweeps.db", dir_ / "other.db");
  Write("sweeps.db-wal", "");
  for (const std::string cmd :
       {"export keep -o sweeps.db", "export keep --format json -o link.db",
        "export keep -o ./sweeps.db-wal", "report keep -o sweeps.db", "report keep -o link.db",
        "export keep -o other.db", "report keep -o other.db",
        // Not there yet: SQLite would read it as the store's own journal.
        "export keep -o sweeps.db-journal", "report keep --db link.db -o link.db-journal",
        "export keep --db link.db -o sweeps.db-journal", "export keep -o sweeps.db.lock",
        "report keep --db link.db -o sweeps.db.lock"}) {
    SCOPED_TRACE(cmd);
    Output o = Sweep(cmd);
    EXPECT_EQ(o.code, 2) << o.err;
    const bool other = cmd.find("other.db") != std::string::npos;
    EXPECT_NE(o.err.find(other ? "is a SQLite database" : "the sweep store given by --db"),
              std::string::npos)
        << o.err;
  }
  // Each file named for what it is.
  EXPECT_NE(
      Sweep("export keep -o sweeps.db-shm")
          .err.find("sweeps.db-shm: is the shm file of the sweep store given by --db (sweeps.db)"),
      std::string::npos);
  EXPECT_NE(
      Sweep("export keep -o sweeps.db.lock")
          .err.find(
              "sweeps.db.lock: is the lock file of the sweep store given by --db (sweeps.db); "
              "replacing it would let a second process into a running sweep"),
      std::string::npos);
  EXPECT_EQ(Slurp(dir_ / "sweeps.db"), before);
  EXPECT_FALSE(fs::exists(dir_ / "sweeps.db-journal"));
  EXPECT_FALSE(fs::exists(dir_ / "link.db-journal"));
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.db"));
  EXPECT_EQ(Sweep("list").code, 0);
  Output same = Sweep("export keep --db other.db");
  EXPECT_EQ(same.code, 0) << same.err;

  // Another file is still written; its extension picks the format unless --format says.
  ASSERT_EQ(Sweep("export keep -o trials.json").code, 0);
  json trials = json::parse(Slurp(dir_ / "trials.json"));
  EXPECT_EQ(trials.size(), 4u);
  ASSERT_EQ(Sweep("export keep -o TRIALS.JSON").code, 0);
  EXPECT_EQ(json::parse(Slurp(dir_ / "TRIALS.JSON")), trials);
  ASSERT_EQ(Sweep("export keep --format csv -o forced.json").code, 0);
  EXPECT_EQ(Slurp(dir_ / "forced.json").rfind("trial,status,", 0), 0u);
  ASSERT_EQ(Sweep("export keep -o trials.txt").code, 0);
  EXPECT_EQ(Slurp(dir_ / "trials.txt").rfind("trial,status,", 0), 0u);
}

// ---- through a pseudo-terminal ----

struct PtyRun {
  int code = -1;
  std::string out;
};

// Runs `sweep ARGS` in the test directory on a new pseudo-terminal of `columns` x `rows`.
PtyRun RunOnPty(const fs::path& dir, const std::vector<std::string>& args, int columns, int rows,
                double timeout_s = 120) {
  struct winsize ws {};
  ws.ws_col = static_cast<unsigned short>(columns);
  ws.ws_row = static_cast<unsigned short>(rows);
  int master = -1;
  pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
  if (pid == 0) {
    if (::chdir(dir.c_str()) != 0) _exit(127);
    ::unsetenv("COLUMNS");
    std::vector<char*> argv = {const_cast<char*>(SWEEP_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(SWEEP_BINARY, argv.data());
    _exit(127);
  }
  PtyRun r;
  if (pid < 0) return r;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    struct pollfd pfd = {master, POLLIN, 0};
    if (::poll(&pfd, 1, 100) > 0) {
      ssize_t n = ::read(master, buf, sizeof buf);
      if (n <= 0) break;  // EIO once the child and its pty are gone
      r.out.append(buf, static_cast<size_t>(n));
    }
  }
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ::close(master);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Display columns of a line: UTF-8 code points, escape sequences left out.
size_t Columns(const std::string& line) {
  std::string plain = std::regex_replace(line, std::regex("\x1b\\[[0-9;?]*[A-Za-z]"), "");
  size_t n = 0;
  for (unsigned char c : plain) n += (c & 0xC0) != 0x80 && c != '\r';
  return n;
}

TEST_F(ReportE2eTest, ShowOnATerminalFitsItsWidth) {
  Write("b.toml", AshaBranin("pt", 6));
  ASSERT_EQ(Sweep("run b.toml").code, 0);
  for (int columns : {44, 100}) {
    PtyRun r = RunOnPty(dir_, {"show", "pt", "1"}, columns, 40);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("\xE2\xA0"), std::string::npos) << r.out;
    std::istringstream in(r.out);
    std::string line;
    size_t widest = 0;
    while (std::getline(in, line)) {
      EXPECT_LE(Columns(line), size_t(columns)) << line;
      widest = std::max(widest, Columns(line));
    }
    EXPECT_EQ(widest, size_t(columns)) << "the charts use the whole width";
  }
}

// A table taller than the terminal is cut to its height while it is redrawn (the cursor cannot
// go back above the screen's top, so a taller one would pile up copies in the scrollback).
TEST_F(ReportE2eTest, StatusWatchFitsAShortTerminal) {
  Write("b.toml", BraninConfig("short", 24, "max_concurrent = 8\n",
                               "steps = 8\nstep_ms = 100\n[executor]\ncpu_slots = 8\n"));
  pid_t run = Start("run b.toml", "run.log");
  WaitUntilRecorded("short");
  PtyRun r = RunOnPty(dir_, {"status", "short", "--watch", "--interval", "0.1"}, 90, 8);
  EXPECT_EQ(Wait(run), 0) << Slurp(dir_ / "run.log");
  ASSERT_EQ(r.code, 0) << r.out;
  std::regex up("\x1b\\[([0-9]+)F");
  int redraws = 0;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), up); it != std::sregex_iterator();
       ++it) {
    EXPECT_LE(std::stoi((*it)[1]), 7) << "a redraw moved up past the screen's top";
    ++redraws;
  }
  EXPECT_GE(redraws, 3) << r.out;
  EXPECT_NE(r.out.find(" more lines"), std::string::npos) << r.out;
}

TEST_F(ReportE2eTest, StatusWatchRedrawsInPlaceUntilTheSweepEnds) {
  Write("b.toml", BraninConfig("wt", 16, "max_concurrent = 2\n", "steps = 4\nstep_ms = 60\n"));
  pid_t run = Start("run b.toml", "run.log");
  WaitUntilRecorded("wt");
  PtyRun r = RunOnPty(dir_, {"status", "wt", "--watch", "--interval", "0.1"}, 90, 30);
  EXPECT_EQ(Wait(run), 0) << Slurp(dir_ / "run.log");
  ASSERT_EQ(r.code, 0) << r.out;
  // Redrawn in place: cursor up to the table's first line, clear to the end of the screen.
  std::regex redraw("\x1b\\[[0-9]+F\x1b\\[J");
  auto redraws = std::distance(std::sregex_iterator(r.out.begin(), r.out.end(), redraw),
                               std::sregex_iterator());
  EXPECT_GE(redraws, 3) << r.out;
  EXPECT_NE(r.out.find("(running)"), std::string::npos) << r.out;
  // The last frame is the final table.
  std::string last = r.out.substr(r.out.rfind("\x1b[J"));
  EXPECT_NE(last.find("sweep wt (completed)"), std::string::npos) << last;
  EXPECT_NE(last.find("trials: 16 (16 completed"), std::string::npos) << last;
  EXPECT_NE(last.find("best: trial"), std::string::npos) << last;
  // It is the same table `sweep status` prints.
  Output plain = Sweep("status wt");
  std::string final_table = std::regex_replace(last.substr(3), std::regex("\r"), "");
  EXPECT_EQ(final_table, plain.out);

  // Not a terminal: whole tables, one after another, no escape sequences.
  Output piped = Sweep("status wt --watch --interval 0.1");
  EXPECT_EQ(piped.code, 0);
  EXPECT_EQ(piped.out, plain.out + "\n");
  EXPECT_EQ(piped.out.find('\x1b'), std::string::npos);
}

TEST_F(ReportE2eTest, StatusWatchWithoutATerminalPrintsTablesOneAfterAnother) {
  Write("b.toml", BraninConfig("lw", 10, "max_concurrent = 1\n", "steps = 3\nstep_ms = 50\n"));
  pid_t run = Start("run b.toml", "run.log");
  WaitUntilRecorded("lw");
  Output o = Sweep("status lw --watch --interval 0.2");
  EXPECT_EQ(Wait(run), 0);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out.find('\x1b'), std::string::npos);
  size_t tables = 0;
  for (size_t at = o.out.find("sweep lw ("); at != std::string::npos;
       at = o.out.find("sweep lw (", at + 1)) {
    ++tables;
  }
  EXPECT_GE(tables, 3u) << o.out;
  EXPECT_NE(o.out.find("sweep lw (running)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.rfind("sweep lw (completed)"), std::string::npos) << o.out;
  EXPECT_EQ(Sweep("status lw --watch --json").code, 2);  // --json and --watch exclude each other
}

TEST_F(ReportE2eTest, StatusWatchStartedBeforeTheSweepWaitsForIt) {
  // Started first, as in a second terminal before `sweep run`: no file yet, then no such sweep.
  pid_t watch = Start("status early --watch --interval 0.1", "watch.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  Write("b.toml", BraninConfig("early", 6, "max_concurrent = 1\n", "steps = 3\nstep_ms = 30\n"));
  ASSERT_EQ(Sweep("run b.toml").code, 0);
  EXPECT_EQ(Wait(watch), 0);
  std::string log = Slurp(dir_ / "watch.log");
  EXPECT_NE(log.find("no such database; waiting for sweep 'early' to start (Ctrl-C to stop)"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("waiting", log.find("waiting") + 1), std::string::npos) << log;  // once
  EXPECT_NE(log.rfind("sweep early (completed)"), std::string::npos) << log;

  // A file that is not a sweep database ends the watch at once.
  Write("other.db", "not a database at all, but long enough to be read as one's header....");
  Output o = Sweep("status early --watch --db other.db");
  EXPECT_EQ(o.code, 2) << o.err;  // the wrong file named: a usage error
  EXPECT_EQ(o.err.find("waiting"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace sweep_e2e

namespace sweep_e2e {
namespace {

TEST_F(ReportE2eTest, StatusWatchEndsWhenTheCoordinatorDied) {
  Write("b.toml", BraninConfig("dead", 200, "max_concurrent = 1\n", "steps = 5\nstep_ms = 50\n"));
  pid_t run = Start("run b.toml", "run.log");
  WaitUntilRecorded("dead");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(run, SIGKILL);
  EXPECT_EQ(Wait(run), -SIGKILL);
  Output o = Sweep("status dead --watch --interval 0.1");
  EXPECT_EQ(o.code, 1);
  // Every table says so, the first one too, as `status` does.
  EXPECT_EQ(o.out.find("sweep dead (running)"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.rfind("sweep dead (running, but its coordinator is gone", 0), 0u) << o.out;
  EXPECT_NE(o.err.find("no process runs it"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("sweep resume dead"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace sweep_e2e
