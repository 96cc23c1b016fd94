// End-to-end tests of the `sweep` binary: real configs, a real SQLite file, real worker
// processes. Each test works in its own temporary directory and checks exit codes, messages,
// the CLI's JSON, and the rows in the store.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <zlib.h>
#include <nlohmann/json.hpp>

#include "e2e_fixture.h"

namespace {

using nlohmann::json;
using sweep_e2e::E2eTest;
using sweep_e2e::Output;
namespace fs = std::filesystem;

const std::string kBranin =
    sweep_e2e::BraninConfig("branin", 40, "seed = 11\n", "", "[executor]\ncpu_slots = 2\n");

TEST_F(E2eTest, FunctionSweepThenBestMatchesTheTrialsTable) {
  Write("b.toml", kBranin);
  Output run = Sweep("run b.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.out.find("best trials of 'branin'"), std::string::npos) << run.out;

  json arr;
  ASSERT_NO_FATAL_FAILURE(arr = SweepJson("best branin --top 5 --json"));
  ASSERT_EQ(arr.size(), 5u);
  auto rows = Query(
      "SELECT t.number, t.objective FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
      "WHERE s.name = 'branin' AND t.status = 'completed' ORDER BY t.objective ASC, t.number "
      "LIMIT 5");
  ASSERT_EQ(rows.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(arr[i]["trial"].get<int64_t>(), std::stoll(rows[i][0]));
    EXPECT_EQ(arr[i]["status"], "completed");
    EXPECT_NEAR(arr[i]["metrics"]["value"].get<double>(), std::stod(rows[i][1]), 1e-9);
    EXPECT_TRUE(arr[i]["params"].contains("x1"));
    EXPECT_TRUE(arr[i]["params"].contains("x2"));
  }
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "40");
  EXPECT_EQ(Query("SELECT count(*) FROM reports")[0][0], "40");
  EXPECT_EQ(Query("PRAGMA integrity_check")[0][0], "ok");
  EXPECT_EQ(Query("SELECT status FROM sweeps")[0][0], "completed");

  json l;
  ASSERT_NO_FATAL_FAILURE(l = SweepJson("list --json"));
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0]["name"], "branin");
  EXPECT_EQ(l[0]["trials"], 40);
  EXPECT_NEAR(l[0]["best"].get<double>(), arr[0]["metrics"]["value"].get<double>(), 1e-12);

  json st;
  ASSERT_NO_FATAL_FAILURE(st = SweepJson("status branin --json"));
  EXPECT_EQ(st["counts"]["completed"], 40);
  EXPECT_EQ(st["running"].size(), 0u);
  EXPECT_EQ(st["best"]["trial"], arr[0]["trial"]);
}

TEST_F(E2eTest, DbGivenBeforeTheCommand) {
  Write("b.toml", kBranin);
  ASSERT_EQ(Sweep("run b.toml --db other.db").code, 0);
  json list, best;
  ASSERT_NO_FATAL_FAILURE(list = SweepJson("--db other.db list --json"));
  EXPECT_EQ(list[0]["name"], "branin");
  ASSERT_NO_FATAL_FAILURE(best = SweepJson("--db=other.db best branin --top 1 --json"));
  EXPECT_EQ(best.size(), 1u);
  Output train = Sweep("--db other.db train b.toml");
  EXPECT_EQ(train.code, 2);
  EXPECT_NE(train.err.find("--db: `sweep train` reads no store"), std::string::npos) << train.err;
  EXPECT_FALSE(fs::exists(dir_ / "sweeps.db"));
}

// No worker can be started (the open-file limit reached): the machine's trouble, not the
// trials'. The sweep stops interrupted after the first, saying why, instead of failing every
// trial in an instant; resume, with descriptors to spare, finishes it.
TEST_F(E2eTest, AWorkerThatCannotStartStopsTheSweepInsteadOfFailingItsTrials) {
  Write("b.toml", kBranin);
  const std::string cmd = "cd '" + dir_.string() +
                          "' && (ulimit -n 12 && exec '" SWEEP_BINARY
                          "' run b.toml) > out.txt 2> err.txt < /dev/null";
  const int rc = std::system(cmd.c_str());
  const std::string err = sweep_e2e::Slurp(dir_ / "err.txt");
  if (err.find("cannot start a worker") == std::string::npos && !fs::exists(dir_ / "sweeps.db")) {
    GTEST_SKIP() << "12 descriptors do not even open the store here: " << err;
  }
  EXPECT_EQ(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 1) << err;
  EXPECT_NE(err.find("cannot start a worker: Too many open files (the open-file limit is "
                     "reached: raise `ulimit -n`)"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("sweep resume branin"), std::string::npos) << err;
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'failed'")[0][0], "0");
  EXPECT_EQ(Query("SELECT status FROM sweeps")[0][0], "interrupted");
  Output resume = Sweep("resume branin");
  ASSERT_EQ(resume.code, 0) << resume.err;
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "40");
}

TEST_F(E2eTest, RandomSearchIsDeterministicAcrossRuns) {
  Write("b.toml", kBranin);
  ASSERT_EQ(Sweep("run b.toml --db one.db").code, 0);
  ASSERT_EQ(Sweep("run b.toml --db two.db").code, 0);
  json ja, jb;
  ASSERT_NO_FATAL_FAILURE(ja = SweepJson("trials branin --db one.db --json"));
  ASSERT_NO_FATAL_FAILURE(jb = SweepJson("trials branin --db two.db --json"));
  ASSERT_EQ(ja.size(), 40u);
  for (size_t i = 0; i < ja.size(); ++i) {
    EXPECT_EQ(ja[i]["params"], jb[i]["params"]) << "trial " << i;
    EXPECT_EQ(ja[i]["metrics"]["value"], jb[i]["metrics"]["value"]);
  }
}

TEST_F(E2eTest, GridEnumeratesTheProductInOrder) {
  Write("g.toml", R"([sweep]
name = "grid"
[search]
algorithm = "grid"
[trial]
kind = "function"
[function]
name = "branin"
[parameters]
x2 = { values = [0.0, 7.5] }
x1 = { values = [-5, 0, 5] }
)");
  ASSERT_EQ(Sweep("run g.toml").code, 0);
  json arr;
  ASSERT_NO_FATAL_FAILURE(arr = SweepJson("trials grid --json"));
  ASSERT_EQ(arr.size(), 6u);
  const double expected[6][2] = {{0.0, -5}, {0.0, 0}, {0.0, 5}, {7.5, -5}, {7.5, 0}, {7.5, 5}};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(arr[i]["trial"], i);
    EXPECT_EQ(arr[i]["params"]["x2"].get<double>(), expected[i][0]);
    EXPECT_EQ(arr[i]["params"]["x1"].get<double>(), expected[i][1]);
  }
}

// A grid of ten million points runs with max_trials capping it: its first points, in grid
// order, and the store holds a row only for a trial that started (none waits as pending).
TEST_F(E2eTest, AHugeGridRunsCappedByMaxTrialsWithoutPendingRows) {
  Write("h.toml", R"([sweep]
name = "huge"
max_trials = 4
[search]
algorithm = "grid"
[trial]
kind = "function"
[function]
name = "branin"
[parameters]
x1 = { distribution = "uniform", min = 0, max = 1, step = 0.0001 }
x2 = { distribution = "uniform", min = 0, max = 1, step = 0.001 }
)");
  Output o = Sweep("run h.toml");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(Query("SELECT count(*), min(status), max(status) FROM trials"),
            (std::vector<std::vector<std::string>>{{"4", "completed", "completed"}}));
  json arr;
  ASSERT_NO_FATAL_FAILURE(arr = SweepJson("trials huge --json"));
  ASSERT_EQ(arr.size(), 4u);
  EXPECT_EQ(arr[3]["params"]["x1"].get<double>(), 0.0);
  EXPECT_EQ(arr[3]["params"]["x2"].get<double>(), 0.003);
}

// --version names the version, the commit and what was compiled in, on stdout, exit 0.
TEST_F(E2eTest, VersionSaysWhatWasBuilt) {
  Output o = Sweep("--version");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out.rfind("sweep 0.", 0), 0u) << o.out;
  EXPECT_NE(o.out.find(" (commit "), std::string::npos) << o.out;
  for (const char* line : {"\nCUDA: ", "\ncuDNN: ", "\nNCCL: ", "\nBLAS: ", "\nagents: "}) {
    EXPECT_NE(o.out.find(line), std::string::npos) << line << " in " << o.out;
  }
}

TEST_F(E2eTest, AbortingWorkerFailsItsTrialAndTheRestComplete) {
  Write("b.toml", kBranin);
  Output run = Sweep("run b.toml", "SWEEP_TEST_ABORT_TRIAL=3");
  ASSERT_EQ(run.code, 0) << run.err;
  auto failed = Query("SELECT number, error FROM trials WHERE status = 'failed'");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0][0], "3");
  EXPECT_NE(failed[0][1].find("killed by signal 6"), std::string::npos) << failed[0][1];
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "39");
  json arr;
  ASSERT_NO_FATAL_FAILURE(arr = SweepJson("trials branin --status failed --json"));
  ASSERT_EQ(arr.size(), 1u);
  EXPECT_NE(arr[0]["error"].get<std::string>().find("signal 6"), std::string::npos);
}

// A trainer.cache_dir the trials here cannot use (a file in its place) is said once as the
// sweep starts; the trials go on without it and complete.
TEST_F(E2eTest, ACacheDirThatCannotBeUsedIsSaidOnce) {
  WriteTinyDataset(400, 100);
  Write("in-the-way", "a file\n");
  Write("c.toml",
        "[sweep]\nname = \"cache\"\nmax_trials = 2\n[parameters]\nlr = { values = "
        "[0.05, 0.2] }\nepochs = 1\nbatch_size = 32\n[search]\nalgorithm = \"grid\"\n"
        "[trainer]\ndataset = \"" +
            dir_.string() + "\"\ncache_dir = \"" + (dir_ / "in-the-way" / "c").string() +
            "\"\n[executor]\ncpu_slots = 2\n");
  Output run = Sweep("run c.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  const std::string said = "c.toml: trainer.cache_dir '" + (dir_ / "in-the-way" / "c").string() +
                           "' cannot be used here (";
  EXPECT_NE(run.err.find(said), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find(said), run.err.rfind(said)) << run.err;
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0], "2");
  // `sweep train` says so too, of the config's or a --set one.
  Output train = Sweep("train c.toml --set lr=0.1");
  EXPECT_EQ(train.code, 0) << train.err;
  EXPECT_NE(train.err.find("cache_dir '" + (dir_ / "in-the-way" / "c").string() +
                           "' cannot be used here ("),
            std::string::npos)
      << train.err;
  train = Sweep("train c.toml --set lr=0.1 --set cache_dir=" + (dir_ / "in-the-way").string());
  EXPECT_NE(train.err.find("cache_dir '" + (dir_ / "in-the-way").string() + "' cannot"),
            std::string::npos)
      << train.err;
}

TEST_F(E2eTest, TrainerSweepOnASmallDataset) {
  WriteTinyDataset(800, 200);
  Write("t.toml",
        "[sweep]\nname = \"tiny\"\nmax_trials = 4\nseed = 5\n"
        "[parameters]\nlr = { values = [0.05, 0.2] }\nhidden = { values = [[16], [32, "
        "16]] }\nepochs = 3\nbatch_size = 32\n"
        "[search]\nalgorithm = \"grid\"\n"
        "[trainer]\ndataset = \"" +
            dir_.string() +
            "\"\n"
            "[executor]\ncpu_slots = 2\n");
  Output run = Sweep("run t.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  json arr;
  ASSERT_NO_FATAL_FAILURE(arr = SweepJson("best tiny --json"));
  ASSERT_EQ(arr.size(), 4u);
  double prev = 2;
  for (const auto& t : arr) {
    double acc = t["metrics"]["val_acc"].get<double>();
    EXPECT_LE(acc, prev);  // ordered best first
    prev = acc;
    EXPECT_EQ(t["epochs"], 3.0);
    EXPECT_TRUE(t["metrics"].contains("test_acc"));
    EXPECT_TRUE(t["metrics"].contains("samples_per_s"));
  }
  EXPECT_GT(arr[0]["metrics"]["val_acc"].get<double>(), 0.9);
  auto top = Query(
      "SELECT number, objective FROM trials WHERE status = 'completed' ORDER BY "
      "objective DESC, number LIMIT 1");
  EXPECT_EQ(arr[0]["trial"].get<int64_t>(), std::stoll(top[0][0]));
  EXPECT_EQ(Query("SELECT count(*) FROM reports")[0][0], "12");  // 4 trials x 3 epochs
  // CSV: every column name once; the `epochs` parameter is apart from the epochs consumed.
  Output csv = Sweep("trials tiny --csv");
  ASSERT_EQ(csv.code, 0) << csv.err;
  const std::string header = csv.out.substr(0, csv.out.find('\n'));
  EXPECT_EQ(header.rfind("trial,status,objective,epochs,retries,started,ended,duration_s,"
                         "placement,param.batch_size,param.epochs,param.hidden,param.lr,",
                         0),
            0u)
      << header;
  std::set<std::string> names;
  std::istringstream cols(header);
  for (std::string col; std::getline(cols, col, ',');) {
    EXPECT_TRUE(names.insert(col).second) << "twice: " << col << " in " << header;
  }
}

// A gray 8-bit PNG of `pixels` (h rows of w), written without the trainer's code: zlib's
// deflate and CRC, and PNG's chunks.
void WritePng(const fs::path& path, int w, int h, const std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> raw;
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);  // filter: none
    raw.insert(raw.end(), pixels.begin() + y * w, pixels.begin() + (y + 1) * w);
  }
  uLongf packed_size = compressBound(raw.size());
  std::vector<uint8_t> packed(packed_size);
  ASSERT_EQ(compress2(packed.data(), &packed_size, raw.data(), raw.size(), 6), Z_OK);
  packed.resize(packed_size);
  std::string png = "\x89PNG\r\n\x1a\n";
  auto be32 = [](std::string* s, uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) s->push_back(static_cast<char>(v >> shift));
  };
  auto chunk = [&](const char* type, const std::string& data) {
    be32(&png, static_cast<uint32_t>(data.size()));
    const std::string body = std::string(type) + data;
    png += body;
    be32(&png,
         static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size())));
  };
  std::string ihdr;
  be32(&ihdr, static_cast<uint32_t>(w));
  be32(&ihdr, static_cast<uint32_t>(h));
  ihdr += std::string("\x08\x00\x00\x00\x00", 5);  // 8 bits, gray, deflate, no filter, no interlace
  chunk("IHDR", ihdr);
  chunk("IDAT", std::string(packed.begin(), packed.end()));
  chunk("IEND", "");
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << png;
}

// A trainer sweep on a folder of PNGs, streamed, with a bad file skipped: the trial keeps the
// label map and the skipped file, `show` prints them, and each report counts the skipped files.
TEST_F(E2eTest, AnImageFolderTrialKeepsItsLabelsAndSkippedFiles) {
  for (int i = 0; i < 40; ++i) {
    const bool dog = i % 2 == 1;
    std::vector<uint8_t> px(64);
    for (int p = 0; p < 64; ++p) px[p] = static_cast<uint8_t>((dog ? 150 : 20) + (p * 7 + i) % 60);
    WritePng(dir_ / "images" / (dog ? "dog" : "cat") / (std::to_string(i) + ".png"), 8, 8, px);
  }
  Write("images/dog/bad.png", "not a picture");
  Write("f.toml",
        "[sweep]\nname = \"pets\"\nmax_trials = 1\nseed = 5\n"
        "[parameters]\nlr = 0.1\nhidden = [8]\nepochs = 2\nbatch_size = 8\n"
        "validation_fraction = 0.25\n"
        "[search]\nalgorithm = \"grid\"\n"
        "[trainer]\ndataset = { format = \"folder\", train = \"images\", on_bad_file = "
        "\"skip\", cache = \"stream\", decode_threads = 2 }\n");
  Output run = Sweep("run f.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  Output show = Sweep("show pets 0", "COLUMNS=200");
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("0 cat  1 dog"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("1 bad file skipped"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("dog/bad.png"), std::string::npos) << show.out;
  json trial;
  ASSERT_NO_FATAL_FAILURE(trial = SweepJson("show pets 0 --json"));
  const json& info = trial.contains("trial") && trial["trial"].is_object() ? trial["trial"]["info"]
                                                                           : trial["info"];
  EXPECT_EQ(info["classes"], json({"cat", "dog"})) << trial.dump();
  EXPECT_EQ(info["skipped_files"], 1) << trial.dump();
  const auto reports = Query("SELECT json_extract(metrics, '$.skipped_files') FROM reports");
  ASSERT_EQ(reports.size(), 2u);
  for (const auto& r : reports) EXPECT_EQ(r[0], "1");

  // `sweep train` says them too: on stderr, and in its --json as `show --json` has them.
  Output train = Sweep("train f.toml");
  ASSERT_EQ(train.code, 0) << train.err;
  EXPECT_NE(train.err.find("labels: 0 cat  1 dog\n"), std::string::npos) << train.err;
  EXPECT_NE(train.err.find("skipped: 1 bad file skipped\n"), std::string::npos) << train.err;
  EXPECT_NE(train.err.find("dog/bad.png"), std::string::npos) << train.err;
  json trained;
  ASSERT_NO_FATAL_FAILURE(trained = SweepJson("train f.toml --json"));
  EXPECT_EQ(trained["info"], info) << trained.dump();
}

// order = "longest_first": the trial with the most work starts first, numbers start out of
// order, and a sweep killed with trials drawn but not started draws them again on resume.
TEST_F(E2eTest, LongestFirstStartsTheMostWorkFirstAndResumeDrawsTheRestAgain) {
  WriteTinyDataset(3000, 200);
  Write("l.toml",
        "[sweep]\nname = \"lpt\"\nmax_trials = 10\nseed = 3\n"
        "[parameters]\nhidden = { values = [[8], [64], [16], [256], [32]] }\n"
        "epochs = { values = [1, 40] }\nbatch_size = 32\n"
        "[search]\nalgorithm = \"grid\"\n[trial]\norder = \"longest_first\"\n"
        "[trainer]\ndataset = \"" +
            dir_.string() + "\"\n[executor]\ncpu_slots = 1\n");
  // Each trial's work, by number, as the grid lists them.
  auto work_of = [](const json& params) {
    int width = params["hidden"][0].get<int>();
    return static_cast<double>(width) * params["epochs"].get<int>();
  };
  // The dry run names the trial the run starts first.
  Output dry = Sweep("run l.toml --dry-run");
  ASSERT_EQ(dry.code, 0) << dry.err;
  EXPECT_NE(
      dry.out.find("trial 7 on local:cpu0: {\"batch_size\":32,\"epochs\":40,\"hidden\":[256]}"),
      std::string::npos)
      << dry.out;
  pid_t pid = Start("run l.toml", "l.log");
  for (int i = 0; i < 6000; ++i) {
    if (HasTable("trials") && Query("SELECT count(*) FROM trials WHERE status = 'completed'") !=
                                  std::vector<std::vector<std::string>>{{"0"}}) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  ASSERT_EQ(Wait(pid), -SIGKILL) << "the sweep ended before it could be killed";
  auto first = Query("SELECT number, params FROM trials ORDER BY started, number");
  ASSERT_FALSE(first.empty());
  ASSERT_LT(first.size(), 10u);
  json p0 = json::parse(first[0][1]);
  EXPECT_EQ(p0["hidden"], json::array({256}));
  EXPECT_EQ(p0["epochs"], 40);
  for (size_t i = 1; i < first.size(); ++i) {
    EXPECT_GE(work_of(json::parse(first[i - 1][1])), work_of(json::parse(first[i][1])));
  }
  std::set<int64_t> seen;
  for (const auto& r : first) seen.insert(std::stoll(r[0]));
  EXPECT_GT(*seen.rbegin(), static_cast<int64_t>(seen.size()) - 1) << "numbers left a gap";

  Output resumed = Sweep("resume lpt");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  auto all = Query("SELECT number, status, params FROM trials ORDER BY number");
  ASSERT_EQ(all.size(), 10u);
  std::set<std::string> grid;
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i][0], std::to_string(i));
    EXPECT_EQ(all[i][1], "completed") << "trial " << i;
    grid.insert(json::parse(all[i][2]).dump());
  }
  EXPECT_EQ(grid.size(), 10u);  // every point of the grid once
}

TEST_F(E2eTest, TrainPrintsMetricsAndJson) {
  WriteTinyDataset(400, 100);
  Write("t.toml",
        "[sweep]\nname = \"tiny\"\nmax_trials = 4\n[parameters]\nlr = { distribution = "
        "\"log_uniform\", min = 0.01, max = 0.3 }\nepochs = 2\n[trainer]\ndataset = \"" +
            dir_.string() + "\"\nhidden = [16]\nbatch_size = 32\n");
  Output human = Sweep("train t.toml --set lr=0.1");
  ASSERT_EQ(human.code, 0) << human.err;
  EXPECT_NE(human.out.find("epoch 1"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("val_acc"), std::string::npos);
  EXPECT_NE(human.out.find("test_acc"), std::string::npos);
  json r;
  ASSERT_NO_FATAL_FAILURE(r = SweepJson("train t.toml --set lr=0.1 --set hidden=[32,16] --json"));
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["params"]["hidden"], json({32, 16}));
  EXPECT_EQ(r["epochs"], 2.0);  // consumed, as `trials --json` says it
  ASSERT_EQ(r["reports"].size(), 2u);
  // Each report as `show --json` gives it.
  EXPECT_EQ(r["reports"][1]["epoch"], 2.0);
  EXPECT_GT(r["reports"][1]["step"], r["reports"][0]["step"]);  // optimizer steps
  EXPECT_TRUE(r["reports"][1]["time"].is_number());
  EXPECT_TRUE(r["reports"][1]["metrics"]["val_acc"].is_number());
  EXPECT_EQ(r["metrics"]["val_acc"], r["reports"][1]["metrics"]["val_acc"]);
  EXPECT_TRUE(r["samples_per_s"].is_number());
  EXPECT_TRUE(r["data_wait_s"].is_number());
  EXPECT_TRUE(r["test_acc"].is_number());

  // Going on from a checkpoint reports only the epochs this run trains (not the checkpoint's
  // again), and one with no epoch left to train says so.
  const std::string ckpt = " --set checkpoint_path=" + (dir_ / "t.ckpt").string();
  ASSERT_EQ(Sweep("train t.toml --set lr=0.1 --set epochs=1" + ckpt).code, 0);
  Output more = Sweep("train t.toml --set lr=0.1 --set epochs=3 --json" + ckpt);
  ASSERT_EQ(more.code, 0) << more.err;
  EXPECT_NE(more.err.find("went on from the checkpoint at epoch 1\n"), std::string::npos)
      << more.err;
  r = json::parse(more.out);
  ASSERT_EQ(r["reports"].size(), 2u) << more.out;
  EXPECT_EQ(r["reports"][0]["epoch"], 2.0);
  EXPECT_EQ(r["epochs"], 3.0);
  Output done = Sweep("train t.toml --set lr=0.1 --set epochs=3" + ckpt);
  ASSERT_EQ(done.code, 0) << done.err;
  EXPECT_EQ(done.out.find("epoch "), std::string::npos) << done.out;
  EXPECT_NE(done.err.find("at epoch 3: no epoch left to train"), std::string::npos) << done.err;
  // `sweep train`'s checkpoint_path is the user's file: one it refuses (not a checkpoint, another
  // configuration's, a longer run's) fails the run, naming it, and is left as it was.
  Write("notes.py", "print('keep me')\n");
  const std::string saved = sweep_e2e::Slurp(dir_ / "t.ckpt");
  const std::pair<std::string, std::string> refused[] = {
      {"notes.py", " --set lr=0.1 --set epochs=3"},
      {"t.ckpt", " --set lr=0.2 --set epochs=3"},
      {"t.ckpt", " --set lr=0.1 --set epochs=2"},
  };
  for (const auto& [file, sets] : refused) {
    Output no = Sweep("train t.toml --json --set checkpoint_path=" + (dir_ / file).string() + sets);
    EXPECT_EQ(no.code, 1) << file << sets << ": " << no.err;
    const json failed_run = json::parse(no.out);
    EXPECT_EQ(failed_run["status"], "failed") << no.out;
    EXPECT_EQ(failed_run["error"].get<std::string>().find((dir_ / file).string() + ": "), 0u)
        << no.out;
  }
  EXPECT_EQ(sweep_e2e::Slurp(dir_ / "notes.py"), "print('keep me')\n");
  EXPECT_EQ(sweep_e2e::Slurp(dir_ / "t.ckpt"), saved);

  // A varied seed is said, with --json too (on stderr), with the one used: --set gives it back.
  Write("s.toml",
        "[sweep]\nname = \"seeded\"\nmax_trials = 4\n[parameters]\nseed = { values = [1, 2] "
        "}\nepochs = 1\n[trainer]\ndataset = \"" +
            dir_.string() + "\"\nhidden = [16]\nbatch_size = 32\n");
  Output seeded = Sweep("train s.toml --json");
  ASSERT_EQ(seeded.code, 0) << seeded.err;
  std::smatch used;
  ASSERT_TRUE(std::regex_search(seeded.err, used,
                                std::regex("using seed ([0-9]+) \\(the config "
                                           "varies it: pick one with --set "
                                           "seed=N\\)")))
      << seeded.err;
  json again;
  ASSERT_NO_FATAL_FAILURE(again = SweepJson("train s.toml --json --set seed=" + used[1].str()));
  EXPECT_EQ(again["metrics"]["val_acc"], json::parse(seeded.out)["metrics"]["val_acc"]);

  Output bad = Sweep("train t.toml --set lr=abc");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--set lr=abc"), std::string::npos) << bad.err;
  Output unknown = Sweep("train t.toml --set lrr=0.1");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("did you mean 'lr'"), std::string::npos) << unknown.err;
  // A model that cannot fit in any machine's memory (1.1 trillion parameters) fails with its
  // size, before any allocation the kernel would answer by killing the process.
  Output huge = Sweep("train t.toml --set lr=0.1 --set hidden=[1048576,1048576] --json");
  EXPECT_EQ(huge.code, 1) << huge.err;
  const json failed = json::parse(huge.out);
  EXPECT_EQ(failed["status"], "failed");
  EXPECT_TRUE(std::regex_search(
      failed["error"].get<std::string>(),
      std::regex("^the model does not fit in memory: 1[0-9]{12} parameters need at least [0-9.]+ "
                 "GiB .*, this machine has [0-9.]+ GiB")))
      << failed["error"];
  // Under a process limit (ulimit -v) below the machine's memory, the limit is the bound, and
  // the message says which.
  Output capped = Sweep("train t.toml --set lr=0.1 --set hidden=[30000,30000] --json",
                        "OPENBLAS_NUM_THREADS=1 prlimit --as=2000000000 --");
  EXPECT_EQ(capped.code, 1) << capped.err;
  const json capped_result = json::parse(capped.out);
  EXPECT_TRUE(std::regex_search(capped_result["error"].get<std::string>(),
                                std::regex("^the model does not fit in memory: [0-9]+ parameters "
                                           "need at least [0-9.]+ GiB .*, this process may "
                                           "use 1.9 GiB \\(ulimit -v\\); make hidden")))
      << capped_result["error"];
}

// A trial that names GPUs on a machine without one fails saying why each backend declines,
// and how to train on the CPU instead; with no NVIDIA driver at all, CUDA's "insufficient
// driver" becomes what it means.
TEST_F(E2eTest, GpusNamedWhereThereAreNoneSayWhyAndHowToTrainOnTheCpu) {
  if (Sweep("devices").out.find("no CUDA device") == std::string::npos) {
    GTEST_SKIP() << "this machine has a GPU";
  }
  WriteTinyDataset(400, 100);
  Write("t.toml", "[sweep]\nname = \"tiny\"\n[parameters]\nepochs = 1\n[trainer]\ndataset = \"" +
                      dir_.string() + "\"\nhidden = [16]\nbatch_size = 32\n");
  Output o = Sweep("train t.toml --set devices=[0] --json");
  EXPECT_EQ(o.code, 1) << o.err;
  const std::string error = json::parse(o.out)["error"].get<std::string>();
  EXPECT_NE(error.find("no backend can train this model: "), std::string::npos) << error;
  EXPECT_NE(error.find("cpu: the trial names GPUs (devices), which the CPU cannot use (leave "
                       "devices unset to train on the CPU)"),
            std::string::npos)
      << error;
  // A build without the CUDA backend gives only the CPU's reason.
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  const bool has_driver = driver != nullptr;
  if (has_driver) dlclose(driver);
  if (!has_driver && error.find("cuda: ") != std::string::npos) {
    EXPECT_NE(error.find("cuda: no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded)"),
              std::string::npos)
        << error;
  }
}

// `--set dataset=...` replaces the config's dataset, which need not exist on this machine (a
// config written for another one); without it, the missing folder is named.
TEST_F(E2eTest, TrainWithAnotherDatasetThanTheConfigs) {
  WriteTinyDataset(400, 100);
  Write("t.toml",
        "[sweep]\nname = \"elsewhere\"\nmax_trials = 4\n[parameters]\nepochs = 1\n[trainer]\n"
        "dataset = \"no-such-folder\"\nhidden = [16]\nbatch_size = 32\n");
  Output missing = Sweep("train t.toml");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("no-such-folder"), std::string::npos) << missing.err;
  json r;
  ASSERT_NO_FATAL_FAILURE(r = SweepJson("train t.toml --set dataset=" + dir_.string() + " --json"));
  EXPECT_EQ(r["status"], "completed") << r.dump();
  Output bad = Sweep("train t.toml --set dataset=" + (dir_ / "nor-this").string());
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--set dataset="), std::string::npos) << bad.err;
}

// `sweep train` stopped by Ctrl-C (or SIGTERM, or SIGHUP: its terminal closed, which sends two)
// before its end exits 1, so that a script's `sweep train ... && next` does not go on with a
// half-trained result. It says at once what the stop waits for.
TEST_F(E2eTest, TrainStoppedBeforeItsEndExitsOne) {
  Write("slow.toml", sweep_e2e::BraninConfig("slow", 1, "", "steps = 1000\nstep_ms = 20\n"));
  auto wait_for = [&](const std::string& log, const std::string& what) {
    for (int i = 0; i < 2000; ++i) {
      if (sweep_e2e::Slurp(dir_ / log).find(what) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    const std::string log = "train-" + std::to_string(sig) + ".log";
    pid_t pid = Start("train slow.toml --set x1=1 --set x2=2", log);
    ASSERT_TRUE(wait_for(log, "epoch 2")) << sweep_e2e::Slurp(dir_ / log);
    ::kill(pid, sig);
    if (sig == SIGHUP) ::kill(pid, sig);
    EXPECT_EQ(Wait(pid), 1) << sweep_e2e::Slurp(dir_ / log);
    const std::string said = sweep_e2e::Slurp(dir_ / log);
    EXPECT_NE(said.find("sweep: stopping after the current step; Ctrl-C again stops at once, "
                        "unsaved\n"),
              std::string::npos)
        << said;
    EXPECT_NE(said.find("before the trial's end"), std::string::npos) << said;
  }
  // With --json, its state is named as `trials --json` names it.
  pid_t json_pid = Start("train slow.toml --set x1=1 --set x2=2 --json", "json.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(json_pid, SIGTERM);
  EXPECT_EQ(Wait(json_pid), 1);
  const std::string printed = sweep_e2e::Slurp(dir_ / "json.log");
  const size_t open = printed.find('{'), close = printed.rfind('}');
  ASSERT_TRUE(open != std::string::npos && close != std::string::npos) << printed;
  EXPECT_EQ(json::parse(printed.substr(open, close - open + 1))["status"], "interrupted")
      << printed;
  // A second signal does not wait for the step (here 1.5 s) to end: the process ends by it.
  Write("slower.toml", sweep_e2e::BraninConfig("slower", 1, "", "steps = 100\nstep_ms = 1500\n"));
  pid_t pid = Start("train slower.toml --set x1=1 --set x2=2", "twice.log");
  ASSERT_TRUE(wait_for("twice.log", "epoch 1")) << sweep_e2e::Slurp(dir_ / "twice.log");
  ::kill(pid, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto second = std::chrono::steady_clock::now();
  ::kill(pid, SIGINT);
  EXPECT_EQ(Wait(pid), -SIGINT);
  EXPECT_LT(std::chrono::steady_clock::now() - second, std::chrono::milliseconds(1000));
}

TEST_F(E2eTest, BadConfigsExitTwoWithTheirMessage) {
  Write("bad1.toml", "[sweep]\nname = \"x\"\nmax_trails = 3\n");
  Output o = Sweep("run bad1.toml");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("bad1.toml:3:1: sweep.max_trails: unknown key"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("did you mean 'max_trials'"), std::string::npos);
  Write("bad2.toml", std::string(kBranin) + "[search]\nalgorithm = \"grid\"\n");
  o = Sweep("run bad2.toml");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("grid search takes the points listed in"), std::string::npos) << o.err;
  o = Sweep("run missing.toml");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("missing.toml: no such config file"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(dir_ / "sweeps.db"));  // nothing ran, nothing was created
}

TEST_F(E2eTest, ExistingNameIsRefusedAndUnknownNamesAreReported) {
  Write("b.toml", kBranin);
  ASSERT_EQ(Sweep("run b.toml").code, 0);
  Output again = Sweep("run b.toml");
  EXPECT_EQ(again.code, 2);
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
  // Completed: nothing to resume.
  EXPECT_NE(again.err.find("has completed; its results: `sweep best branin`"), std::string::npos)
      << again.err;
  EXPECT_EQ(Query("SELECT count(*) FROM trials")[0][0], "40");  // nothing lost or added

  // --resume goes on with the config the sweep started with: an edited one is refused, not
  // silently ignored; the same one resumes (here, a finished sweep: nothing to do).
  Write("edited.toml", kBranin + "# a comment, and max_trials below\n");
  Output edited = Sweep("run edited.toml --resume");
  EXPECT_EQ(edited.code, 2);
  EXPECT_NE(edited.err.find("edited.toml: sweep 'branin' in sweeps.db was started from another "
                            "version of this config"),
            std::string::npos)
      << edited.err;
  EXPECT_NE(edited.err.find("sweep resume branin"), std::string::npos) << edited.err;
  Output same = Sweep("run b.toml --resume");
  EXPECT_EQ(same.code, 0) << same.err;
  EXPECT_EQ(Query("SELECT count(*) FROM trials")[0][0], "40");
  // --name: a name as the config's would be; never silently the config's own.
  for (const char* bad : {"''", "..", "'a b'"}) {
    Output o = Sweep(std::string("run b.toml --name ") + bad);
    EXPECT_EQ(o.code, 2) << bad;
    EXPECT_NE(o.err.find("use 1-128 letters"), std::string::npos) << bad << ": " << o.err;
  }

  Output unknown = Sweep("best nosuch");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("no sweep named 'nosuch'"), std::string::npos) << unknown.err;
  Output nodb = Sweep("list --db nowhere.db");
  EXPECT_NE(nodb.code, 0);
  EXPECT_NE(nodb.err.find("nowhere.db"), std::string::npos) << nodb.err;
}

TEST_F(E2eTest, CsvExportHasAColumnPerParameter) {
  Write("b.toml", kBranin);
  ASSERT_EQ(Sweep("run b.toml").code, 0);
  Output csv = Sweep("trials branin --csv --sort value");
  ASSERT_EQ(csv.code, 0) << csv.err;
  std::istringstream in(csv.out);
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header,
            "trial,status,objective,epochs,retries,started,ended,duration_s,placement,param.x1,"
            "param.x2,metric.value,error");
  // Parameters in full, as stored (shortest round trip), not rounded as in the table.
  json js;
  ASSERT_NO_FATAL_FAILURE(js = SweepJson("trials branin --json"));
  std::map<int, json> params;
  for (const json& t : js) params[t["trial"].get<int>()] = t["params"];
  int lines = 0;
  double prev = -1e300;
  for (std::string line; std::getline(in, line);) {
    ++lines;
    double v = std::stod(line.substr(line.rfind(',', line.size() - 2) + 1));
    EXPECT_GE(v, prev);
    prev = v;
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    ASSERT_GE(f.size(), 11u) << line;
    const json& p = params[std::stoi(f[0])];
    EXPECT_EQ(std::stod(f[9]), p["x1"].get<double>()) << line;  // param.x1
    EXPECT_EQ(std::stod(f[10]), p["x2"].get<double>()) << line;
  }
  EXPECT_EQ(lines, 40);

  // By a hyperparameter: param.NAME, or NAME where no metric has that name; descending with '-'.
  for (const char* key : {"-x1", "-param.x1"}) {
    json by;
    ASSERT_NO_FATAL_FAILURE(by = SweepJson(std::string("trials branin --json --sort ") + key));
    double last = 1e300;
    for (const json& t : by) {
      const double x1 = t["params"]["x1"].get<double>();
      EXPECT_LE(x1, last) << key;
      last = x1;
    }
  }
  Output unknown = Sweep("trials branin --sort x9");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("no trial of 'branin' has 'x9'; did you mean 'x1'?"),
            std::string::npos)
      << unknown.err;
  EXPECT_NE(unknown.err.find("sort keys: trial, status, objective, started, ended, epochs, "
                             "value, param.x1, param.x2)"),
            std::string::npos)
      << unknown.err;
  // Also when --status lists no trial: the keys are the sweep's.
  Output none = Sweep("trials branin --status running --sort x9");
  EXPECT_EQ(none.code, 2) << none.out;
  EXPECT_NE(none.err.find("no trial of 'branin' has 'x9'"), std::string::npos) << none.err;
  EXPECT_EQ(Sweep("trials branin --status running --sort -x1").code, 0);
}

// A hyperparameter and a metric of the same name (the trainer's `lr`): a bare --sort key is the
// hyperparameter, as the CSV's columns name them; metric.NAME is the metric.
TEST_F(E2eTest, SortKeyNamedByBothAParameterAndAMetric) {
  WriteProgram("r.sh",
               "#!/bin/sh\necho \"sweep-report {\\\"score\\\": $1, \\\"x\\\": $((10 - $1))}\"\n");
  Write("c.toml",
        "[sweep]\nname = \"both\"\nmetric = \"score\"\nmode = \"max\"\n[search]\n"
        "algorithm = \"grid\"\n[parameters]\nx = { values = [2, 1, 3] }\n[trial]\n"
        "kind = \"command\"\ncommand = [\"./r.sh\", \"{x}\"]\n");
  Output run = Sweep("run c.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  auto order = [&](const std::string& key) {
    // A lambda that returns a value cannot stop the test: a failed run fails it, listing none.
    std::vector<int64_t> xs;
    for (const json& t : SweepJson("trials both --json --sort " + key)) {
      xs.push_back(t["params"]["x"].get<int64_t>());
    }
    return xs;
  };
  EXPECT_EQ(order("x"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(order("param.x"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(order("metric.x"), (std::vector<int64_t>{3, 2, 1}));  // 10 - x
  EXPECT_EQ(order("-metric.x"), (std::vector<int64_t>{1, 2, 3}));
  // The keys an unknown one lists name the metric as it sorts.
  Output unknown = Sweep("trials both --sort y");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("epochs, score, metric.x, param.x)"), std::string::npos)
      << unknown.err;
}

TEST_F(E2eTest, AshaPrunesTrialsWithTheirRungAndReason) {
  Write("a.toml", R"([sweep]
name = "asha"
max_trials = 60
seed = 2
[trial]
kind = "function"
[function]
name = "hartmann6"
steps = 27
[early_stopping]
algorithm = "asha"
min_resource = 1
reduction_factor = 3
[parameters]
x1 = { distribution = "uniform", min = 0, max = 1 }
x2 = { distribution = "uniform", min = 0, max = 1 }
x3 = { distribution = "uniform", min = 0, max = 1 }
x4 = { distribution = "uniform", min = 0, max = 1 }
x5 = { distribution = "uniform", min = 0, max = 1 }
x6 = { distribution = "uniform", min = 0, max = 1 }
)");
  Output run = Sweep("run a.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  json arr;
  ASSERT_NO_FATAL_FAILURE(arr = SweepJson("trials asha --status pruned --json"));
  ASSERT_GT(arr.size(), 20u);  // most trials stop at a rung
  for (const auto& t : arr) {
    // The stop reaches the trial at the report that earned it: it ends exactly on a rung.
    const double epochs = t["epochs"].get<double>();
    EXPECT_TRUE(epochs == 1 || epochs == 3 || epochs == 9) << t;
    EXPECT_EQ(t["error"].get<std::string>().rfind("pruned at rung ", 0), 0u) << t["error"];
  }
  auto total = Query("SELECT sum(epochs) FROM trials");
  EXPECT_LT(std::stod(total[0][0]), 60 * 27 / 3.0);  // at most a third of the full budget
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'failed'")[0][0], "0");
  EXPECT_EQ(Query("SELECT count(*) FROM events WHERE to_state = 'pruned'")[0][0],
            std::to_string(arr.size()));
}

// bootstrap_count = 2: one trial at a time, trials 0 and 1 are the first two at the first rung
// and stop there, whatever their values, with a reason that names the key.
TEST_F(E2eTest, BootstrapCountStopsTheFirstTrialsAtARung) {
  Write("b.toml",
        sweep_e2e::BraninConfig("boot", 12, "seed = 5\nmax_concurrent = 1\n", "steps = 9\n",
                                "[early_stopping]\nalgorithm = \"asha\"\n"
                                "bootstrap_count = 2\n"));
  Output run = Sweep("run b.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  json arr;
  ASSERT_NO_FATAL_FAILURE(arr = SweepJson("trials boot --json"));
  ASSERT_EQ(arr.size(), 12u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(arr[i]["status"], "pruned") << arr[i];
    EXPECT_EQ(arr[i]["epochs"].get<double>(), 1) << arr[i];
    EXPECT_NE(arr[i]["error"].get<std::string>().find(
                  "among the first 2 trials to reach the rung, which bootstrap_count = 2 stops"),
              std::string::npos)
        << arr[i]["error"];
  }
  // Trial 2 is judged against them: it goes on only if it beats both.
  const auto first_value = [&](int trial) {
    return std::stod(Query("SELECT json_extract(metrics, '$.value') FROM reports WHERE trial = " +
                           std::to_string(trial) + " AND epoch = 1")[0][0]);
  };
  const double v0 = first_value(0), v1 = first_value(1), v2 = first_value(2);
  EXPECT_EQ(arr[2]["epochs"].get<double>() > 1, v2 <= std::min(v0, v1)) << arr[2];
}

// TPE under the median rule, four at once: it learns from the steps trials report (pruned ones
// too), so the startup trials are exactly the first n_startup_trials, counting each trial once,
// whether it is running, has reported, or both.
TEST_F(E2eTest, TpeUnderTheMedianRuleStartsFromTheFirstTrialsReports) {
  Write("mt.toml", sweep_e2e::BraninConfig("medtpe", 24, "seed = 3\nmax_concurrent = 4\n",
                                           "steps = 9\nstep_ms = 5\n",
                                           "[search]\nalgorithm = \"tpe\"\nn_startup_trials = 6\n"
                                           "[early_stopping]\nalgorithm = \"median\"\n"));
  Output run = Sweep("run mt.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  json arr;
  ASSERT_NO_FATAL_FAILURE(arr = SweepJson("trials medtpe --json"));
  ASSERT_EQ(arr.size(), 24u);
  int pruned = 0;
  for (const json& t : arr) {
    const int n = t["trial"].get<int>();
    EXPECT_EQ(t["proposed_by"], n < 6 ? "startup random" : "tpe") << t;
    pruned += t["status"] == "pruned" ? 1 : 0;
  }
  EXPECT_GT(pruned, 0);
}

// TPE without early stopping, four at once: a running trial's latest report stands in for its
// result, and each trial counts once towards n_startup_trials (running, reported, or both), so
// the startup trials are exactly the first six; no two trials share a point. (Trial 4 is
// proposed with trial 0 ended and trials 1-3 running, each with a report.)
TEST_F(E2eTest, TpeReadsRunningTrialsReportsAndCountsEachTrialOnce) {
  Write("pt.toml", sweep_e2e::BraninConfig("provtpe", 24, "seed = 4\nmax_concurrent = 4\n",
                                           "steps = 9\nstep_ms = 5\n",
                                           "[search]\nalgorithm = \"tpe\"\nn_startup_trials = 6\n"
                                           "[executor]\ncpu_slots = 4\n"));
  Output run = Sweep("run pt.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  json arr;
  ASSERT_NO_FATAL_FAILURE(arr = SweepJson("trials provtpe --json"));
  ASSERT_EQ(arr.size(), 24u);
  std::set<std::string> points;
  for (const json& t : arr) {
    const int n = t["trial"].get<int>();
    EXPECT_EQ(t["proposed_by"], n < 6 ? "startup random" : "tpe") << t;
    EXPECT_EQ(t["status"], "completed") << t;
    EXPECT_TRUE(points.insert(t["params"].dump()).second) << t;
  }
}

// early_stopping.max_resource below the trials' own length: survivors stop there and end
// completed (Ray Tune's max_t); none runs or reports past it.
TEST_F(E2eTest, SurvivorsStopAtMaxResource) {
  Write("m.toml", sweep_e2e::BraninConfig(
                      "cap", 20, "seed = 5\nmax_concurrent = 1\n", "steps = 27\nstep_ms = 2\n",
                      "[early_stopping]\nalgorithm = \"asha\"\nmin_resource = 1\n"
                      "reduction_factor = 3\nmax_resource = 9\n"));
  Output run = Sweep("run m.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(Query("SELECT max(epochs) FROM trials")[0][0], "9.0");
  EXPECT_EQ(Query("SELECT max(step) FROM reports")[0][0], "9");
  auto survivors = Query("SELECT number, epochs, error FROM trials WHERE status = 'completed'");
  ASSERT_FALSE(survivors.empty());
  for (const auto& row : survivors) {
    EXPECT_EQ(row[1], "9.0") << "trial " << row[0];
    EXPECT_EQ(row[2], "ran to early_stopping.max_resource = 9") << "trial " << row[0];
  }
}

// Rungs at 1.5, 3.75 and 9.375 for trials of 10 steps: the top rung is reached by a trial's
// last report. It is recorded there but stops nothing, so every trial that ran its 10 steps
// ends completed, and `best` shows each of them.
TEST_F(E2eTest, ATrialWhoseLastReportReachesARungEndsCompleted) {
  Write("l.toml",
        sweep_e2e::BraninConfig("last", 32, "seed = 7\nmax_concurrent = 1\n", "steps = 10\n",
                                "[early_stopping]\nalgorithm = \"asha\"\n"
                                "min_resource = 1.5\nreduction_factor = 2.5\n"));
  Output run = Sweep("run l.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  json arr;
  ASSERT_NO_FATAL_FAILURE(arr = SweepJson("trials last --json"));
  ASSERT_EQ(arr.size(), 32u);
  int full = 0, pruned = 0;
  for (const json& t : arr) {
    if (t["epochs"].get<double>() == 10) {
      ++full;
      EXPECT_EQ(t["status"], "completed") << t;
    } else {
      ++pruned;
      EXPECT_EQ(t["status"], "pruned") << t;
    }
  }
  EXPECT_GT(full, 2);  // more than the rung's best few: some were worse there than others
  EXPECT_GT(pruned, 0);
  ASSERT_NO_FATAL_FAILURE(arr = SweepJson("best last --top 32 --json"));
  EXPECT_EQ(static_cast<int>(arr.size()), full);
}

TEST_F(E2eTest, StopWhenEndsTheSweepAtItsTarget) {
  Write("s.toml",
        sweep_e2e::BraninConfig("target", 5000, "stop_when = \"value <= 5\"\nseed = 3\n"));
  Output run = Sweep("run s.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  int64_t trials = std::stoll(Query("SELECT count(*) FROM trials")[0][0]);
  EXPECT_LT(trials, 5000);
  EXPECT_EQ(Query("SELECT count(*) FROM trials WHERE status = 'running'")[0][0], "0");
  EXPECT_EQ(Query("SELECT status FROM sweeps")[0][0], "completed");
  auto end = Query("SELECT detail FROM events WHERE trial IS NULL AND to_state = 'completed'");
  ASSERT_EQ(end.size(), 1u);
  const std::string& why = end[0][0];
  const size_t at = why.find("target value <= 5 reached by trial ");
  ASSERT_NE(at, std::string::npos) << why;
  // The trial that reached the target completed (it holds the result sought), and `best` has
  // a result within the target (that one, or another that finished alongside it).
  const std::string winner = std::to_string(std::stoi(why.substr(at + 35)));
  auto row = Query("SELECT status, objective FROM trials WHERE number = " + winner);
  ASSERT_EQ(row.size(), 1u);
  EXPECT_EQ(row[0][0], "completed") << "trial " << winner;
  EXPECT_LE(std::stod(row[0][1]), 5.0);
  json best;
  ASSERT_NO_FATAL_FAILURE(best = SweepJson("best target --top 1 --json"));
  EXPECT_LE(best[0]["metrics"]["value"].get<double>(), 5.0) << best.dump();
}

// A running trial's row holds its latest reported metrics and epochs, written in the same
// commit as the reports: `trials` and `best`'s readers see progress before the trial ends.
TEST_F(E2eTest, RunningTrialsShowTheirLatestMetrics) {
  Write("l.toml",
        sweep_e2e::BraninConfig("live", 2, "max_concurrent = 1\n", "steps = 40\nstep_ms = 50\n"));
  pid_t run = Start("run l.toml", "run.log");
  const std::string snapshot =
      "SELECT t.number, t.metrics, t.epochs, (SELECT max(r.epoch) FROM reports r WHERE "
      "r.sweep_id = t.sweep_id AND r.trial = t.number) FROM trials t WHERE t.status = 'running'";
  bool seen = false;
  for (int i = 0; i < 400 && !seen; ++i) {
    if (HasTable("reports")) {
      for (const auto& row : Query(snapshot)) {
        if (row[3] == "NULL" || std::stod(row[3]) < 3) continue;
        seen = true;
        EXPECT_EQ(std::stod(row[2]), std::stod(row[3])) << "trial " << row[0];
        const json metrics = json::parse(row[1]);
        EXPECT_TRUE(metrics.contains("value")) << row[1];
        json trials;
        ASSERT_NO_FATAL_FAILURE(trials = SweepJson("trials live --json"));
        for (const json& t : trials) {
          // The same trial, unless it ended in between (then its final row is checked elsewhere).
          if (t["trial"].get<int>() != std::stoi(row[0]) || t["status"] != "running") continue;
          EXPECT_GE(t["epochs"].get<double>(), 3) << t.dump();
          EXPECT_TRUE(t["metrics"].contains("value")) << t.dump();
        }
      }
    }
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_TRUE(seen) << "no running trial with 3 reports was seen";
  EXPECT_EQ(Wait(run), 0) << sweep_e2e::Slurp(dir_ / "run.log");
}

// Without max_trials a random search draws trials until its time budget is spent.
TEST_F(E2eTest, RandomSearchWithOnlyATimeBudgetRunsUntilItIsSpent) {
  Write("t.toml", R"([sweep]
name = "open"
time_budget = "2s"
seed = 3
[trial]
kind = "function"
[function]
name = "branin"
steps = 3
step_ms = 50
[parameters]
x1 = { distribution = "uniform", min = -5, max = 10 }
x2 = { distribution = "uniform", min = 0, max = 15 }
[executor]
cpu_slots = 2
)");
  Output run = Sweep("run t.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.err.find("trials until its time budget"), std::string::npos) << run.err;
  EXPECT_GT(std::stoi(Query("SELECT count(*) FROM trials WHERE status = 'completed'")[0][0]), 4);
  auto end = Query("SELECT detail FROM events WHERE trial IS NULL AND to_state = 'completed'");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_NE(end[0][0].find("time budget of 2 s spent"), std::string::npos) << end[0][0];
  // One trial of the same config needs no end.
  Output one = Sweep("train t.toml --set x1=1 --set x2=2");
  EXPECT_EQ(one.code, 0) << one.err;
}

// A trial that reports a curve reaches the target part-way: the sweep stops it there, and it
// ends completed with the value that met the target, not interrupted.
TEST_F(E2eTest, StopWhenCompletesTheTrialThatReachedItsTargetPartWay) {
  Write("s.toml", sweep_e2e::BraninConfig("curve", 200,
                                          "stop_when = \"value <= 30\"\nmax_concurrent = 1\n"
                                          "seed = 3\n",
                                          "steps = 20\nstep_ms = 50\n"));
  Output run = Sweep("run s.toml");
  ASSERT_EQ(run.code, 0) << run.err;
  auto rows = Query("SELECT number, status, objective, epochs, error FROM trials ORDER BY number");
  ASSERT_FALSE(rows.empty());
  const auto& last = rows.back();
  EXPECT_EQ(last[1], "completed") << last[4];
  EXPECT_LE(std::stod(last[2]), 30.0);
  EXPECT_LT(std::stod(last[3]), 20.0) << "it was stopped before its last step";
  EXPECT_NE(last[4].find("reached the target value <= 30"), std::string::npos) << last[4];
  json best;
  ASSERT_NO_FATAL_FAILURE(best = SweepJson("best curve --top 1 --json"));
  EXPECT_EQ(best[0]["trial"].get<int>(), std::stoi(last[0])) << best.dump();
}

// `sweep devices` lists what trials would run on here: GPUs with their model, memory, compute
// capability, whether this build's kernels run on it, and link group, or (as on the test
// machines) the CPU slots.
TEST_F(E2eTest, DevicesListsTheSlotsTrialsWouldUse) {
  json slots;
  ASSERT_NO_FATAL_FAILURE(slots = SweepJson("devices --json --cpu-slots 3"));
  ASSERT_TRUE(slots.is_array());
  ASSERT_FALSE(slots.empty());
  if (slots[0]["gpu"].get<bool>()) {
    for (const json& s : slots) {
      EXPECT_FALSE(s["model"].get<std::string>().empty()) << s.dump();
      EXPECT_GT(s["memory_bytes"].get<int64_t>(), 0) << s.dump();
      EXPECT_GE(s["compute_capability"].get<int>(), 30) << s.dump();
      // The GPU machines the tests run on are ones the default build has kernels for.
      EXPECT_TRUE(s["runs_this_build"].get<bool>()) << s.dump();
    }
  } else {
    ASSERT_EQ(slots.size(), 3u) << slots.dump();
    EXPECT_EQ(slots[2]["slot"], "cpu2");
    EXPECT_TRUE(slots[2]["runs_this_build"].get<bool>()) << slots.dump();
    Output text = Sweep("devices --cpu-slots 3");
    ASSERT_EQ(text.code, 0) << text.err;
    EXPECT_NE(text.out.find("3 CPU slots"), std::string::npos) << text.out;
  }
  EXPECT_EQ(Sweep("devices --cpu-slots 0").code, 2);
}

TEST_F(E2eTest, HelpShowsAnExample) {
  Output o = Sweep("--help");
  EXPECT_EQ(o.code, 0);
  EXPECT_NE(o.out.find("sweep run configs/quickstart.toml"), std::string::npos) << o.out;
  o = Sweep("frobnicate");
  EXPECT_EQ(o.code, 2);
}

}  // namespace
