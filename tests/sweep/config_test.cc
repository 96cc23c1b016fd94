// Config loading: valid configs parse to what they say; every bad config is refused before
// anything runs, with file:line:column and the key.
#include "sweep/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace sweep {
namespace {

namespace fs = std::filesystem;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sweep-config-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    // 1000 blank 28x28 images: the config reads their headers and checks the files' sizes.
    const std::string images = std::string("\0\0\x08\x03\0\0\x03\xE8\0\0\0\x1C\0\0\0\x1C", 16) +
                               std::string(1000 * 28 * 28, '\0');
    const std::string labels = std::string("\0\0\x08\x01\0\0\x03\xE8", 8) + std::string(1000, '\0');
    for (const char* f : {"train-images", "test-images"}) std::ofstream(dir_ / f) << images;
    for (const char* f : {"train-labels", "test-labels"}) std::ofstream(dir_ / f) << labels;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Dataset() const {
    return "{ format = \"idx\", train_images = \"" + (dir_ / "train-images").string() +
           "\", train_labels = \"" + (dir_ / "train-labels").string() + "\", test_images = \"" +
           (dir_ / "test-images").string() + "\", test_labels = \"" +
           (dir_ / "test-labels").string() + "\" }";
  }
  std::string TrainerConfig(const std::string& parameters) const {
    return "[sweep]\nname = \"t\"\nmetric = \"val_acc\"\nmode = \"max\"\nmax_trials = 4\n"
           "[parameters]\n" +
           parameters + "\n[trainer]\ndataset = " + Dataset() + "\n";
  }
  fs::path dir_;
};

const char* kBranin = R"([sweep]
name = "b"
max_trials = 10
seed = 3
[trial]
kind = "function"
[function]
name = "branin"
[parameters]
x1 = { distribution = "uniform", min = -5, max = 10 }
x2 = { distribution = "uniform", min = 0, max = 15 }
)";

// A sweep stored before names could not start with '-' still opens, to resume and to read.
TEST_F(ConfigTest, AStoredNameStartingWithADashStillOpens) {
  std::string text = kBranin;
  text.replace(text.find("name = \"b\""), 10, "name = \"-old\"");
  EXPECT_FALSE(ParseConfig(text, "b.toml").ok());
  for (ConfigUse use : {ConfigUse::kResume, ConfigUse::kView}) {
    auto cfg = ParseConfig(text, "b.toml", use);
    ASSERT_TRUE(cfg.ok()) << cfg.status().message();
    EXPECT_EQ(cfg->sweep.name, "-old");
  }
}

TEST_F(ConfigTest, FunctionConfigParses) {
  auto cfg = ParseConfig(kBranin, "b.toml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->sweep.name, "b");
  EXPECT_EQ(cfg->sweep.metric, "value");
  EXPECT_FALSE(cfg->sweep.maximize);
  EXPECT_EQ(cfg->sweep.max_trials, 10);
  EXPECT_EQ(cfg->sweep.seed, 3u);
  EXPECT_EQ(cfg->trial.kind, TrialKind::kFunction);
  ASSERT_EQ(cfg->search.space.parameters().size(), 2u);
  EXPECT_EQ(cfg->search.space.parameters()[0].name, "x1");
  EXPECT_EQ(cfg->store.path, "sweeps.db");
}

// A random search without max_trials draws until its time budget or target ends it; with
// neither it is refused for a sweep, but one trial (`sweep train`) needs no end.
TEST_F(ConfigTest, RandomSearchWithoutMaxTrialsNeedsAnotherEnd) {
  std::string open = kBranin;
  open.erase(open.find("max_trials = 10\n"), 16);
  for (const char* end : {"time_budget = \"30s\"\n", "stop_when = \"value <= 1\"\n"}) {
    std::string text = open;
    text.insert(text.find("seed = 3"), end);
    auto cfg = ParseConfig(text, "b.toml");
    ASSERT_TRUE(cfg.ok()) << end << cfg.status().message();
    EXPECT_EQ(cfg->sweep.max_trials, sweep::kUnboundedTrials) << end;
  }
  auto refused = ParseConfig(open, "b.toml");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("b.toml:1:1: sweep.max_trials: random search needs "
                                            "max_trials (how many trials to draw), or "
                                            "time_budget or stop_when to end it"),
            std::string::npos)
      << refused.status().message();
  auto one = ParseConfig(open, "b.toml", sweep::ConfigUse::kOneTrial);
  ASSERT_TRUE(one.ok()) << one.status().message();
}

// longest_first starts the heaviest of the trials drawn ahead: without max_trials the draw has
// no end, and it would start only the heaviest the sampler gives.
TEST_F(ConfigTest, LongestFirstNeedsMaxTrials) {
  std::string text =
      TrainerConfig("lr = { distribution = \"log_uniform\", min = 0.01, max = 0.1 }");
  text.erase(text.find("max_trials = 4\n"), 15);
  text.insert(text.find("[parameters]"), "time_budget = \"1h\"\n");
  text += "[trial]\norder = \"longest_first\"\n";
  auto cfg = ParseConfig(text, "l.toml");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(
      cfg.status().message().find(
          "trial.order: \"longest_first\" orders a sweep of known size; set sweep.max_trials"),
      std::string::npos)
      << cfg.status().message();
}

TEST_F(ConfigTest, TrainerConfigParsesAndKeepsDeclarationOrder) {
  auto cfg = ParseConfig(TrainerConfig("lr = { distribution = \"log_uniform\", min = 1e-3, max = "
                                       "0.3 }\nbatch_size = { values = [64, 128] }\nhidden = { "
                                       "values = [[256], [512, 256]] }\nepochs = 2"),
                         "t.toml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  std::vector<std::string> names;
  for (const auto& p : cfg->search.space.parameters()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"lr", "batch_size", "hidden", "epochs"}));
  EXPECT_TRUE(cfg->trainer.contains("dataset"));
}

// `sweep train` runs one trial and ranks nothing: it may train on every sample, which a sweep
// ranking by a val_ metric may not.
TEST_F(ConfigTest, OneTrialMayTrainWithoutAValidationSplit) {
  const std::string text =
      "[sweep]\nname = \"t\"\n[trainer]\ndataset = " + Dataset() + "\nvalidation_fraction = 0\n";
  EXPECT_FALSE(ParseConfig(text, "v.toml").ok());
  auto one = ParseConfig(text, "v.toml", ConfigUse::kOneTrial);
  EXPECT_TRUE(one.ok()) << one.status().message();
}

// A relative dataset path is relative to the config's folder, not to where sweep runs: the
// config means the same files from anywhere (and when its sweep is resumed from elsewhere).
TEST_F(ConfigTest, RelativeDatasetPathsAreRelativeToTheConfigsFolder) {
  const std::string text =
      "[sweep]\nname = \"r\"\nmax_trials = 2\n[trainer]\ndataset = { format = \"idx\", "
      "train_images = \"train-images\", train_labels = \"./train-labels\", test_images = \"" +
      (dir_ / "test-images").string() + "\", test_labels = \"../" + dir_.filename().string() +
      "/test-labels\" }\n";
  auto cfg = ParseConfig(text, (dir_ / "c.toml").string());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  const auto& ds = cfg->trainer["dataset"];
  for (const char* k : {"train_images", "train_labels", "test_images", "test_labels"}) {
    const std::string expected = (dir_ / (std::string(k) == "train_images"   ? "train-images"
                                          : std::string(k) == "train_labels" ? "train-labels"
                                          : std::string(k) == "test_images"  ? "test-images"
                                                                             : "test-labels"))
                                     .string();
    EXPECT_EQ(ds[k], expected) << k;
  }
  // The same config read from elsewhere names files that are not there.
  EXPECT_FALSE(ParseConfig(text, "/c.toml").ok());
  // ...which a view of stored results does not need: it reads the search space only.
  auto view = ParseConfig(text, "/c.toml", ConfigUse::kView);
  ASSERT_TRUE(view.ok()) << view.status().message();
  EXPECT_EQ(view->sweep.name, "r");
}

// So is a relative cache_dir, in [trainer] or as a constant parameter; an absolute one stays.
TEST_F(ConfigTest, ARelativeCacheDirIsRelativeToTheConfigsFolder) {
  const std::string base =
      "[sweep]\nname = \"r\"\nmax_trials = 2\n[trainer]\ndataset = " + Dataset() + "\n";
  auto cfg = ParseConfig(base + "cache_dir = \"relc\"\n", (dir_ / "c.toml").string());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->trainer["cache_dir"], (dir_ / "relc").string());
  cfg = ParseConfig(base + "[parameters]\ncache_dir = \"../x\"\n", (dir_ / "c.toml").string());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  ASSERT_EQ(cfg->search.space.parameters().size(), 1u);
  EXPECT_EQ(cfg->search.space.parameters()[0].distribution.values[0],
            (dir_.parent_path() / "x").string());
  cfg = ParseConfig(base + "cache_dir = \"/var/cache/s\"\n", (dir_ / "c.toml").string());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->trainer["cache_dir"], "/var/cache/s");
}

TEST_F(ConfigTest, KeepCheckpointsTakesACountOrAll) {
  auto cfg = ParseConfig(TrainerConfig("lr = 0.1") + "[trial]\nkeep_checkpoints = 2\n", "k.toml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->trial.keep_checkpoints, 2);
  cfg = ParseConfig(TrainerConfig("lr = 0.1") + "[trial]\nkeep_checkpoints = \"all\"\n", "k.toml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_FALSE(cfg->trial.keep_checkpoints);
}

// A stepped range is a finite set: grid search enumerates it, random search draws from it, and a
// whole-number option accepts a uniform whose steps are whole.
TEST_F(ConfigTest, SteppedRangesInGridAndRandom) {
  const std::string params =
      "lr = { distribution = \"uniform\", min = 0.05, max = 0.2, step = 0.05 }\n"
      "batch_size = { distribution = \"int_uniform\", min = 64, max = 256, step = 64 }\n"
      "epochs = { distribution = \"uniform\", min = 1, max = 3, step = 1 }\n";
  auto grid = ParseConfig(
      TrainerConfig(params).replace(TrainerConfig(params).find("max_trials = 4\n"), 15, "") +
          "[search]\nalgorithm = \"grid\"\n",
      "g.toml");
  ASSERT_TRUE(grid.ok()) << grid.status().message();
  EXPECT_EQ(grid->sweep.max_trials, 4 * 4 * 3);
  const auto* lr = grid->search.space.Find("lr");
  ASSERT_NE(lr, nullptr);
  EXPECT_EQ(lr->distribution.step, 0.05);
  auto random = ParseConfig(TrainerConfig(params), "r.toml");
  ASSERT_TRUE(random.ok()) << random.status().message();
  EXPECT_EQ(random->search.space.Find("batch_size")->distribution.step, 64);
}

TEST_F(ConfigTest, GridMaxTrialsDefaultsToTheGridSize) {
  auto cfg = ParseConfig(R"([sweep]
name = "g"
[search]
algorithm = "grid"
[trial]
kind = "function"
[function]
name = "branin"
[parameters]
x1 = { values = [0, 1, 2] }
x2 = { values = [0, 5] }
)",
                         "g.toml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->sweep.max_trials, 6);
}

std::string BraninWithSteps();  // below

struct BadCase {
  const char* what;
  std::string text;
  std::string expected;  // a fragment of the message, including file:line:col where known
};

class BadConfigTest : public ConfigTest {};

TEST_F(BadConfigTest, EachIsRefusedWithItsMessage) {
  const std::string ds = Dataset();
  auto trainer = [&](const std::string& params, const std::string& extra = "") {
    return TrainerConfig(params) + extra;
  };
  const std::vector<BadCase> cases = {
      {"syntax error", "[sweep\nname = 1", "bad.toml:1:"},
      {"unknown top-level table", std::string(kBranin) + "[serach]\nalgorithm = \"grid\"\n",
       "bad.toml:12:2: serach: unknown table [serach]; did you mean [search]?"},
      {"a key outside any table", "name = \"b\"\n[sweep]\nmax_trials = 3\n",
       "bad.toml:1:1: name: 'name' is a key outside any table: put it under the table it "
       "belongs to, such as [sweep]"},
      {"unknown key with suggestion", "[sweep]\nname = \"b\"\nmax_trails = 3\n",
       "bad.toml:3:1: sweep.max_trails: unknown key 'max_trails' in [sweep]; did you mean "
       "'max_trials'?"},
      {"wrong type", "[sweep]\nname = 5\n",
       "bad.toml:2:8: sweep.name: expected a string, got an integer"},
      {"condition on a function trial's input",
       std::string(kBranin) + "x3 = { values = [1, 2], when = { x1 = [1] } }\n",
       "parameters.x3.when: function trials need every input; conditions apply to trainer and "
       "command trials"},
      {"keep_checkpoints on a function trial",
       std::string(kBranin).replace(std::string(kBranin).find("[trial]\n"), 8,
                                    "[trial]\nkeep_checkpoints = 2\n"),
       "trial.keep_checkpoints: only for kind = \"trainer\" (a command trial's program keeps "
       "its own files, in its trial directory; a function trial has none)"},
      {"max_trials < 1",
       std::string(kBranin).replace(std::string(kBranin).find("max_trials = 10"), 15,
                                    "max_trials = 0"),
       "bad.toml:3:14: sweep.max_trials: must be between 1 and"},
      {"min > max", trainer("lr = { distribution = \"uniform\", min = 0.5, max = 0.1 }"),
       "bad.toml:7:40: parameters.lr: min > max (0.5 > 0.1)"},
      {"log with min <= 0", trainer("lr = { distribution = \"log_uniform\", min = 0, max = 0.1 }"),
       "bad.toml:7:44: parameters.lr.min: log_uniform needs min > 0 (got 0)"},
      {"log int with min <= 0",
       trainer("batch_size = { distribution = \"log_int_uniform\", min = 0, max = 256 }"),
       "parameters.batch_size.min: log_int_uniform needs min > 0"},
      {"[trainer] without a dataset",
       "[sweep]\nname = \"t\"\nmax_trials = 2\n[trainer]\nlr = 0.1\n",
       "bad.toml:4:1: trainer.dataset: [trainer] needs a `dataset`"},
      {"grid too large to count",
       [] {
         std::string t =
             "[sweep]\nname = \"g\"\nmetric = \"score\"\nmode = \"max\"\n[search]\n"
             "algorithm = \"grid\"\n[trial]\nkind = \"command\"\ncommand = [\"true\"]\n"
             "[parameters]\n";
         for (int i = 0; i < 64; ++i) t += "p" + std::to_string(i) + " = { values = [1, 2] }\n";
         return t;
       }(),
       "bad.toml:6:13: search.algorithm: grid search space is too large"},
      {"validation_fraction = 0 with the default metric",
       "[sweep]\nname = \"t\"\nmax_trials = 1\n[trainer]\ndataset = " + ds +
           "\nvalidation_fraction = 0\n",
       "bad.toml:6:23: trainer.validation_fraction: 0 leaves no validation split to measure the "
       "sweep's metric, 'val_acc' (the default), on"},
      {"validation_fraction = 0 as a parameter with the default metric",
       "[sweep]\nname = \"t\"\nmax_trials = 1\n[parameters]\nvalidation_fraction = 0\n"
       "[trainer]\ndataset = " +
           ds + "\n",
       "bad.toml:5:23: parameters.validation_fraction: 0 leaves no validation split"},
      {"min_resource past the trials' own length",
       std::string(BraninWithSteps()) +
           "[early_stopping]\nalgorithm = \"asha\"\nmin_resource = 30\n",
       "early_stopping.min_resource: is 30 but the trials run to 27 (max_resource defaults to "
       "that)"},
      {"distribution and values together",
       trainer("lr = { distribution = \"uniform\", min = 0.1, max = 0.5, values = [0.2] }"),
       "bad.toml:7:23: parameters.lr.distribution: \"uniform\" with `values`: give either "
       "`values = [...]` (the choices) or a distribution with `min` and `max`, not both"},
      {"empty values", trainer("batch_size = { values = [] }"),
       "bad.toml:7:25: parameters.batch_size.values: empty `values`"},
      {"early stopping on test_acc",
       [&] {
         std::string t = TrainerConfig("lr = 0.1");
         return t.replace(t.find("val_acc"), 7, "test_acc") +
                "[early_stopping]\nalgorithm = \"asha\"\n";
       }(),
       "bad.toml:10:1: early_stopping: early stopping compares trials on a metric they report "
       "every epoch; the trainer reports 'test_acc' only at the end"},
      {"validation_fraction that can be 0 with a val_ metric",
       trainer("validation_fraction = { values = [0.0, 0.1] }"),
       "bad.toml:7:23: parameters.validation_fraction: a trial with 0 has no validation split "
       "to measure 'val_acc' on; keep every value > 0"},
      {"grid with a value listed twice",
       trainer("batch_size = { values = [64, 128, 64.0] }", "[search]\nalgorithm = \"grid\"\n"),
       "bad.toml:7:14: parameters.batch_size: grid search would run every trial with 64.0 twice: "
       "it is listed at positions 1 and 3"},
      {"grid over continuous",
       trainer("lr = { distribution = \"uniform\", min = 0.1, max = 0.5 }",
               "[search]\nalgorithm = \"grid\"\n"),
       "bad.toml:7:6: parameters.lr: grid search takes the points listed in `values = [...]` or "
       "a range with a `step`, not distribution = \"uniform\" without one"},
      {"grid over a log range",
       trainer("lr = { distribution = \"log_uniform\", min = 0.1, max = 0.5 }",
               "[search]\nalgorithm = \"grid\"\n"),
       "bad.toml:7:6: parameters.lr: grid search takes the points listed in `values = [...]`, not "
       "distribution = \"log_uniform\"; list them"},
      {"step that does not divide the range",
       trainer("lr = { distribution = \"uniform\", min = 0.1, max = 0.5, step = 0.15 }"),
       "bad.toml:7:63: parameters.lr: uniform: max - min (0.4) is not a whole number of steps of "
       "0.15; the last value would be 0.4, so set max = 0.4 or change the step"},
      {"step on a log range",
       trainer("lr = { distribution = \"log_uniform\", min = 0.1, max = 0.5, step = 0.1 }"),
       "bad.toml:7:67: parameters.lr.step: log_uniform takes no step"},
      {"step of zero",
       trainer("lr = { distribution = \"uniform\", min = 0.1, max = 0.5, step = 0 }"),
       "bad.toml:7:63: parameters.lr.step: step must be > 0 (got 0)"},
      {"fractional step on integers",
       trainer("batch_size = { distribution = \"int_uniform\", min = 16, max = 64, step = 8.0 }"),
       "bad.toml:7:73: parameters.batch_size.step: int_uniform needs an integer step, got a float"},
      {"negative max_initial_failures",
       std::string(kBranin).replace(std::string(kBranin).find("kind = \"function\"\n"), 18,
                                    "kind = \"function\"\nmax_initial_failures = -1\n"),
       "bad.toml:7:24: trial.max_initial_failures: must be between 0 and 1000000000"},
      {"step with values", trainer("lr = { values = [0.1, 0.2], step = 0.1 }"),
       "bad.toml:7:36: parameters.lr.step: 'values' lists its choices; step does not apply"},
      {"stepped uniform drawing fractions for whole numbers",
       trainer("batch_size = { distribution = \"uniform\", min = 16, max = 64, step = 0.5 }"),
       "bad.toml:7:14: parameters.batch_size: uniform draws fractions and batch_size takes whole "
       "numbers"},
      {"metric never reported",
       "[sweep]\nname = \"t\"\nmetric = \"val_accuracy\"\nmode = \"max\"\nmax_trials = 2\n"
       "[trainer]\ndataset = " +
           ds + "\n",
       "bad.toml:3:10: sweep.metric: trainer trials never report 'val_accuracy'"},
      {"unknown trainer hyperparameter", trainer("learning_rate = 0.1"),
       "bad.toml:7:1: parameters.learning_rate: the trainer has no hyperparameter "
       "'learning_rate'"},
      {"unknown algorithm", std::string(kBranin) + "[search]\nalgorithm = \"bayes\"\n",
       "bad.toml:13:13: search.algorithm: unknown value \"bayes\""},
      {"missing dataset file",
       "[sweep]\nname = \"t\"\nmax_trials = 2\n[trainer]\ndataset = { format = \"idx\", "
       "train_images = \"/nonexistent/train.gz\", train_labels = \"/nonexistent/l.gz\" }\n",
       "bad.toml:5:11: trainer.dataset.train_images: no such file '/nonexistent/train.gz'"},
      {"no dataset", "[sweep]\nname = \"t\"\nmax_trials = 2\n",
       "bad.toml: [trainer] needs a `dataset`"},
      {"random without max_trials",
       std::string(kBranin).replace(std::string(kBranin).find("max_trials = 10\n"), 16, ""),
       "sweep.max_trials: random search needs max_trials"},
      {"metric without mode",
       "[sweep]\nname = \"t\"\nmetric = \"val_loss\"\nmax_trials = 2\n[trainer]\ndataset = " + ds +
           "\n",
       "bad.toml:3:10: sweep.mode: say whether to maximise or minimise 'val_loss'"},
      {"bad hidden type", trainer("hidden = { values = [\"wide\"] }"), "parameters.hidden: "},
      {"function params",
       "[sweep]\nname = \"b\"\nmax_trials = 3\n[trial]\nkind = \"function\"\n"
       "[function]\nname = \"branin\"\n[parameters]\nx1 = 1.0\ny = 2.0\n",
       "bad.toml:10:5: parameters.y: branin: unexpected parameter 'y'"},
      {"bad name", "[sweep]\nname = \"a b\"\n", "bad.toml:2:8: sweep.name: use 1-128 letters"},
      {"name read as an option", "[sweep]\nname = \"-foo\"\n",
       "bad.toml:2:8: sweep.name: use 1-128 letters, digits, '-', '_' or '.', not \".\" or "
       "\"..\", not starting with '-' (got \"-foo\")"},
      {"keep_checkpoints for function trials",
       std::string(kBranin).replace(std::string(kBranin).find("kind = \"function\""), 17,
                                    "kind = \"function\"\nkeep_checkpoints = 3"),
       "trial.keep_checkpoints: only for kind = \"trainer\""},
      {"keep_checkpoints as a word", trainer("lr = 0.1", "[trial]\nkeep_checkpoints = \"best\"\n"),
       "bad.toml:11:20: trial.keep_checkpoints: expected \"all\" or a number of trials"},
      {"negative keep_checkpoints", trainer("lr = 0.1", "[trial]\nkeep_checkpoints = -1\n"),
       "bad.toml:11:20: trial.keep_checkpoints: must be between 0 and"},
  };
  for (const BadCase& c : cases) {
    auto cfg = ParseConfig(c.text, "bad.toml");
    ASSERT_FALSE(cfg.ok()) << c.what;
    EXPECT_EQ(cfg.status().code(), Status::Code::kInvalidArgument) << c.what;
    EXPECT_NE(cfg.status().message().find(c.expected), std::string::npos)
        << c.what << "\n  got:      " << cfg.status().message() << "\n  expected: " << c.expected;
  }
}

// kBranin reporting a curve of 27 steps (one line longer).
std::string BraninWithSteps() {
  std::string text = kBranin;
  text.replace(text.find("name = \"branin\"\n"), 16, "name = \"branin\"\nsteps = 27\n");
  return text;
}

TEST_F(ConfigTest, EarlyStoppingTakesItsMaxResourceFromTheTrials) {
  auto cfg = ParseConfig(BraninWithSteps() + "[early_stopping]\nalgorithm = \"asha\"\n", "e.toml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->early_stopping.algorithm, search::EarlyStopping::kAsha);
  EXPECT_EQ(cfg->early_stopping.max_resource, 27);
  EXPECT_FALSE(cfg->early_stopping.maximize);
  EXPECT_EQ(cfg->early_stopping.metric, "value");
  EXPECT_EQ(cfg->early_stopping.bootstrap_count, 0);
  cfg = ParseConfig(
      BraninWithSteps() + "[early_stopping]\nalgorithm = \"hyperband\"\nbootstrap_count = 2\n",
      "e.toml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->early_stopping.bootstrap_count, 2);
}

// Hyperband over a grid reads its bracket cycle scrambled (trial numbers follow the grid's axes);
// over random search, in the round-robin's order.
TEST_F(ConfigTest, HyperbandKnowsWhetherTrialsFollowAGrid) {
  const std::string hb = "[early_stopping]\nalgorithm = \"hyperband\"\n";
  auto random = ParseConfig(BraninWithSteps() + hb, "r.toml");
  ASSERT_TRUE(random.ok()) << random.status().message();
  EXPECT_FALSE(random->early_stopping.grid_order);
  std::string grid = BraninWithSteps();
  grid.replace(grid.find("x1 = {"), grid.find('\n', grid.find("x1 = {")) - grid.find("x1 = {"),
               "x1 = { values = [-5, 0, 5, 10] }");
  grid.replace(grid.find("x2 = {"), grid.find('\n', grid.find("x2 = {")) - grid.find("x2 = {"),
               "x2 = { values = [0, 5, 10, 15] }");
  grid.replace(grid.find("[trial]"), 7, "[search]\nalgorithm = \"grid\"\n[trial]");
  auto gridded = ParseConfig(grid + hb, "g.toml");
  ASSERT_TRUE(gridded.ok()) << gridded.status().message();
  EXPECT_TRUE(gridded->early_stopping.grid_order);
}

TEST_F(ConfigTest, ConditionalParameterAndTarget) {
  std::string text = TrainerConfig(
      "optimizer = { values = [\"sgd\"] }\nmomentum = { distribution = \"uniform\", min = "
      "0.8, max = 0.99, when = { optimizer = \"sgd\" } }");
  text.replace(0, 7, "[sweep]\nstop_when = \"val_acc >= 0.9\"");
  auto cfg = ParseConfig(text, "c.toml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  const auto& p = cfg->search.space.parameters()[1];
  ASSERT_TRUE(p.condition.has_value());
  EXPECT_EQ(p.condition->parent, "optimizer");
  ASSERT_TRUE(cfg->sweep.stop_when.has_value());
  EXPECT_TRUE(cfg->sweep.stop_when->Reached(0.95));
  EXPECT_FALSE(cfg->sweep.stop_when->Reached(0.85));
}

TEST_F(BadConfigTest, EarlyStoppingAndConditionErrors) {
  struct Case {
    std::string text, expected;
  };
  const std::string b = kBranin;
  const std::string bs = BraninWithSteps();
  std::string bad_target = b, unknown_target = b;
  bad_target.replace(b.find("seed = 3"), 8, "stop_when = \"value = 3\"");
  unknown_target.replace(b.find("seed = 3"), 8, "stop_when = \"acc > 3\"");
  std::string test_target = TrainerConfig("lr = { values = [0.1] }");
  test_target.replace(test_target.find("max_trials = 4"), 14, "stop_when = \"test_acc >= 0.5\"");
  const std::vector<Case> cases = {
      {bs + "[early_stopping]\nalgorithm = \"median\"\ngrace_period = 27\n",
       "e.toml:15:16: early_stopping.grace_period: is 27 but every trial runs 27 steps, one "
       "report each: the median rule could never stop one"},
      {bs + "[early_stopping]\nalgorithm = \"asha\"\ngrace_period = 2\n",
       "e.toml:15:16: early_stopping.grace_period: does not apply to algorithm \"asha\""},
      {bs + "[early_stopping]\nalgorithm = \"asha\"\nreduction_factor = 1\n",
       "e.toml:15:20: early_stopping.reduction_factor must be >= 2"},
      {bs + "[early_stopping]\nalgorithm = \"median\"\nmin_trials = 0\n",
       "e.toml:15:14: early_stopping.min_trials: must be between 1 and"},
      {bs + "[early_stopping]\nalgorithm = \"asha\"\nbootstrap_count = -1\n",
       "e.toml:15:19: early_stopping.bootstrap_count: must be between 0 and"},
      {bs + "[early_stopping]\nalgorithm = \"median\"\nbootstrap_count = 2\n",
       "e.toml:15:19: early_stopping.bootstrap_count: does not apply to algorithm \"median\""},
      {bs + "[early_stopping]\nalgorithm = \"asha\"\nmax_resource = 81\n",
       "e.toml:15:16: early_stopping.max_resource: is 81 but every trial stops at 27"},
      {b + "[early_stopping]\nalgorithm = \"median\"\n",
       "early_stopping: early stopping needs trials that report a curve: set function.steps"},
      {b + "[early_stopping]\nalgorithm = \"bohb\"\n",
       "e.toml:13:13: early_stopping.algorithm: unknown value \"bohb\""},
      {TrainerConfig("momentum = { distribution = \"uniform\", min = 0.8, max = 0.99, when = { "
                     "optimiser = \"sgd\" } }"),
       "parameters.momentum: momentum: condition on 'optimiser'"},
      {bad_target, "e.toml:4:13: sweep.stop_when: cannot read \"value = 3\""},
      {unknown_target, "e.toml:4:13: sweep.stop_when: function trials never report 'acc'"},
      {test_target,
       "e.toml:5:13: sweep.stop_when: stop_when is checked on every report, and the trainer "
       "measures 'test_acc' only after a trial's last epoch"},
  };
  for (const Case& c : cases) {
    auto cfg = ParseConfig(c.text, "e.toml");
    ASSERT_FALSE(cfg.ok()) << c.expected;
    EXPECT_NE(cfg.status().message().find(c.expected), std::string::npos)
        << "got:      " << cfg.status().message() << "\nexpected: " << c.expected;
  }
}

// Settings that would run but could never do what they say: refused before anything runs.
TEST_F(BadConfigTest, ValuesAndMetricsThatNothingCouldUse) {
  auto command = [](const std::string& sweep, const std::string& param,
                    const std::string& trial = "") {
    return "[sweep]\nname = \"c\"\nmax_trials = 4\nmode = \"max\"\n" + sweep +
           "\n[trial]\nkind = \"command\"\ncommand = [\"prog\", \"{y}\"]\n" + trial +
           "\n[parameters]\ny = " + param + "\n";
  };
  const std::string bs = BraninWithSteps();
  const std::vector<BadCase> cases = {
      {"nan among values", command("metric = \"score\"", "{ values = [1.0, nan] }"),
       "c.toml:11:22: parameters.y.values: nan and inf are not values a trial can be given"},
      {"inf constant", command("metric = \"score\"", "-inf"),
       "c.toml:11:5: parameters.y: nan and inf are not values"},
      {"nan in an array constant", command("metric = \"score\"", "[1.0, [2.0, nan]]"),
       "c.toml:11:17: parameters.y: nan and inf are not values"},
      {"empty metric", command("metric = \"\"", "1"), "c.toml:5:10: sweep.metric: empty"},
      {"step as the metric", command("metric = \"step\"", "1"),
       "c.toml:5:10: sweep.metric: 'step' is where a report stands, not a metric"},
      {"epoch in stop_when", command("metric = \"score\"\nstop_when = \"epoch >= 3\"", "1"),
       "c.toml:6:13: sweep.stop_when: 'epoch' is where a report stands"},
      {"a typo in stop_when's operator",
       command("metric = \"score\"\nstop_when = \"score => 1.2\"", "1"),
       "c.toml:6:13: sweep.stop_when: cannot read \"score => 1.2\""},
      {"checkpoint_dir for a command", command("metric = \"score\"", "1", "checkpoint_dir = \"x\""),
       "c.toml:9:18: trial.checkpoint_dir: only for kind = \"trainer\""},
      {"a duration with two dots", command("metric = \"score\"\ntime_budget = \"1.2.3s\"", "1"),
       "c.toml:6:15: sweep.time_budget: cannot read \"1.2.3s\" as a duration"},
      {"fractional max_resource for whole steps",
       bs + "[early_stopping]\nalgorithm = \"asha\"\nmax_resource = 9.5\n",
       "c.toml:15:16: early_stopping.max_resource: is 9.5 but function trials report whole "
       "steps"},
  };
  for (const BadCase& c : cases) {
    auto cfg = ParseConfig(c.text, "c.toml");
    ASSERT_FALSE(cfg.ok()) << c.what;
    EXPECT_NE(cfg.status().message().find(c.expected), std::string::npos)
        << c.what << "\ngot:      " << cfg.status().message() << "\nexpected: " << c.expected;
  }
  // A command trial may still stop on any metric its program reports, and a file may start
  // with a UTF-8 byte order mark.
  EXPECT_TRUE(
      ParseConfig(command("metric = \"score\"\nstop_when = \"loss<0.1\"", "1"), "c.toml").ok());
  auto bom = ParseConfig("\xEF\xBB\xBF" + command("metric = \"score\"", "1"), "c.toml");
  EXPECT_TRUE(bom.ok()) << bom.status().message();
}

TEST_F(BadConfigTest, TrainerOptionsThatDoNotGoTogether) {
  auto cfg = ParseConfig(TrainerConfig("nesterov = true\nmomentum = 0.0"), "n.toml");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find(
                "n.toml:9:1: trainer: the options every trial shares do not go together: "
                "nesterov: needs momentum > 0"),
            std::string::npos)
      << cfg.status().message();
  // Each option alone is checked against the others as the trial will have them, not against
  // the trainer's defaults: replicas = 200 with batch_size 512 (the default is 128).
  auto many = ParseConfig(TrainerConfig("batch_size = 512\nreplicas = 200"), "n.toml");
  EXPECT_TRUE(many.ok()) << many.status().message();
  auto too_many = ParseConfig(TrainerConfig("batch_size = 64\nreplicas = 200"), "n.toml");
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("batch_size: 64 is smaller than replicas = 200"),
            std::string::npos)
      << too_many.status().message();
  // With momentum varied, the trials the sweep will run are checked: one would have momentum 0.
  auto varied =
      ParseConfig(TrainerConfig("nesterov = true\nmomentum = { values = [0.0, 0.9] }"), "n.toml");
  ASSERT_FALSE(varied.ok());
  EXPECT_NE(varied.status().message().find("would fail as it starts, with {\"momentum\":0.0,"
                                           "\"nesterov\":true}: nesterov: needs momentum > 0"),
            std::string::npos)
      << varied.status().message();
  // Two varied values against each other, and against the trial's slots (one replica each).
  auto pair = ParseConfig(TrainerConfig("nesterov = { values = [true, false] }\n"
                                        "momentum = { values = [0.0, 0.9] }"),
                          "n.toml");
  ASSERT_FALSE(pair.ok());
  EXPECT_NE(pair.status().message().find("nesterov: needs momentum > 0"), std::string::npos)
      << pair.status().message();
  auto slots = ParseConfig(
      TrainerConfig("batch_size = { values = [1, 128] }") + "[trial]\ngpus = 2\n", "n.toml");
  ASSERT_FALSE(slots.ok());
  EXPECT_NE(slots.status().message().find("batch_size: 1 is smaller than replicas = 2"),
            std::string::npos)
      << slots.status().message();
  EXPECT_TRUE(
      ParseConfig(TrainerConfig("batch_size = { values = [2, 128] }") + "[trial]\ngpus = 2\n",
                  "n.toml")
          .ok());
  // [trainer] values a varied parameter overrides in every trial are not refused for what
  // they would do alone: nesterov with momentum 0, a batch larger than the training set.
  auto overridden = ParseConfig(TrainerConfig("momentum = { values = [0.9, 0.5] }\n"
                                              "batch_size = { values = [32, 64] }") +
                                    "nesterov = true\nmomentum = 0.0\nbatch_size = 1000\n",
                                "n.toml");
  EXPECT_TRUE(overridden.ok()) << overridden.status().message();
  // A sweep's trials train on their slots' GPUs: `devices` would be ignored on GPU slots and
  // fail every trial on CPU slots, in [trainer] or varied.
  const std::string why =
      "a sweep gives each trial the GPUs of the slots it runs on (trial.gpus of them); to keep "
      "a sweep to some GPUs, start it (and each agent) with CUDA_VISIBLE_DEVICES set";
  auto devices =
      ParseConfig(TrainerConfig("lr = 0.1") + "devices = [0, 1]\n[trial]\ngpus = 2\n", "n.toml");
  ASSERT_FALSE(devices.ok());
  EXPECT_NE(devices.status().message().find("n.toml:10:11: trainer.devices: " + why),
            std::string::npos)
      << devices.status().message();
  auto varied_devices = ParseConfig(TrainerConfig("devices = { values = [[0], [1]] }"), "n.toml");
  ASSERT_FALSE(varied_devices.ok());
  EXPECT_NE(varied_devices.status().message().find("n.toml:7:11: parameters.devices: " + why),
            std::string::npos)
      << varied_devices.status().message();
  // `sweep train` sets its own layout (--threads, --set replicas) after reading the config, and
  // a stored sweep is taken as recorded: neither is held to the slots here.
  EXPECT_TRUE(ParseConfig(TrainerConfig("lr = 0.1") + "devices = [0]\n[trial]\ngpus = 2\n",
                          "n.toml", ConfigUse::kOneTrial)
                  .ok());
  // A fraction drawn for an option of whole numbers.
  auto fraction = ParseConfig(
      TrainerConfig("epochs = { distribution = \"uniform\", min = 1, max = 3 }"), "n.toml");
  ASSERT_FALSE(fraction.ok());
  EXPECT_NE(fraction.status().message().find(
                "parameters.epochs: uniform draws fractions and epochs takes whole numbers: use "
                "distribution = \"int_uniform\""),
            std::string::npos)
      << fraction.status().message();
}

// A CNN's stages against the images the dataset's header describes, for each trial the sweep
// will run: channels varied as lists, one of them too deep for 28x28 images.
TEST_F(BadConfigTest, CnnStagesAreCheckedAgainstTheImages) {
  std::vector<char> idx = {0, 0, 0x08, 3, 0, 0, 0x03, char(0xE8), 0, 0, 0, 28, 0, 0, 0, 28};
  idx.resize(idx.size() + 1000 * 28 * 28);
  std::ofstream(dir_ / "train-images", std::ios::binary).write(idx.data(), idx.size());
  auto ok = ParseConfig(
      TrainerConfig("model = \"cnn\"\nchannels = { values = [[16, 32], [32, 64]] }"), "c.toml");
  EXPECT_TRUE(ok.ok()) << ok.status().message();
  auto deep = ParseConfig(
      TrainerConfig("model = \"cnn\"\nchannels = { values = [[16, 32], [8, 8, 8, 8, 8]] }"),
      "c.toml");
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("channels: stage 5 of 5 (8 channels) would start from a "
                                         "1x1 input, too small for its 2x2 pool (28x28 images "
                                         "allow at most 4 stages)"),
            std::string::npos)
      << deep.status().message();
}

TEST_F(BadConfigTest, FunctionMetricMustBeValue) {
  std::string text = kBranin;
  text.replace(text.find("seed = 3"), 8, "seed = 3\nmetric = \"acc\"\nmode = \"max\"");
  auto cfg = ParseConfig(text, "f.toml");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("f.toml:5:10: sweep.metric: function trials report only "
                                        "'value'"),
            std::string::npos)
      << cfg.status().message();
}

TEST_F(BadConfigTest, DurationAndGpus) {
  std::string text = kBranin;
  text.replace(text.find("seed = 3"), 8, "time_budget = \"2 hours\"");
  auto cfg = ParseConfig(text, "d.toml");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("d.toml:4:15: sweep.time_budget: cannot read"),
            std::string::npos)
      << cfg.status().message();
  text = std::string(kBranin);
  text.replace(text.find("kind = \"function\""), 17, "kind = \"function\"\ngpus = 0");
  cfg = ParseConfig(text, "d.toml");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("d.toml:7:8: trial.gpus: must be between 1 and 64"),
            std::string::npos)
      << cfg.status().message();
}

TEST_F(BadConfigTest, MissingFileIsNotFound) {
  auto cfg = LoadConfig((dir_ / "nope.toml").string());
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().code(), Status::Code::kNotFound);
  EXPECT_NE(cfg.status().message().find("nope.toml: no such config file"), std::string::npos);
}

TEST(ParseDurationTest, Forms) {
  EXPECT_EQ(ParseDuration("2h"), 7200);
  EXPECT_EQ(ParseDuration("30m"), 1800);
  EXPECT_EQ(ParseDuration("1h30m"), 5400);
  EXPECT_EQ(ParseDuration("90s"), 90);
  EXPECT_EQ(ParseDuration("1.5h"), 5400);
  EXPECT_EQ(ParseDuration("45"), 45);
  EXPECT_FALSE(ParseDuration("").has_value());
  EXPECT_FALSE(ParseDuration("2 hours").has_value());
  EXPECT_FALSE(ParseDuration("1h30").has_value());
  EXPECT_FALSE(ParseDuration("1.2.3s").has_value());
  EXPECT_FALSE(ParseDuration("1..5m").has_value());
  EXPECT_FALSE(ParseDuration(".").has_value());
}

// What messages echo reads back as the same duration.
TEST(ParseDurationTest, FormatDurationReadsBack) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(0.5), "0.5s");
  EXPECT_EQ(FormatDuration(1.024), "1.02s");
  EXPECT_EQ(FormatDuration(90), "1m30s");
  EXPECT_EQ(FormatDuration(5400), "1h30m");
  EXPECT_EQ(FormatDuration(90061), "1d1h1m1s");
  for (double s : {0.5, 3.0, 59.0, 3600.0, 86399.0, 90061.0}) {
    EXPECT_EQ(ParseDuration(FormatDuration(s)), s) << s;
  }
}

// Found by the fuzzer: toml++ 3.3 misreads non-ASCII after a backslash in a multi-line string.
TEST(NonAsciiTest, RefusedWhereTomlppCannotReadIt) {
  auto cfg = ParseConfig("[sweep]\nname = \"\"\"a\\\n  \xc3\xa9\"\"\"\n", "m.toml");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("m.toml:2:12: a non-ASCII character right after a "
                                        "backslash in a multi-line string"),
            std::string::npos)
      << cfg.status().message();
  cfg = ParseConfig("[sweep]\ncaf\xc3\xa9 = 1\n", "m.toml");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("m.toml:2:4: non-ASCII character outside a string"),
            std::string::npos)
      << cfg.status().message();
  // Inside strings and comments it is fine.
  cfg = ParseConfig("# caf\xc3\xa9\n[sweep]\nname = \"b\" # \xc3\xa9\n", "m.toml");
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().message().find("non-ASCII"), std::string::npos) << cfg.status().message();
}

TEST(ParseSetValueTest, TomlValuesOrBareStrings) {
  EXPECT_EQ(ParseSetValue("0.05"), nlohmann::json(0.05));
  EXPECT_EQ(ParseSetValue("128"), nlohmann::json(128));
  EXPECT_EQ(ParseSetValue("[256, 128]"), nlohmann::json({256, 128}));
  EXPECT_EQ(ParseSetValue("\"sgd\""), nlohmann::json("sgd"));
  EXPECT_EQ(ParseSetValue("sgd"), nlohmann::json("sgd"));
  EXPECT_EQ(ParseSetValue("true"), nlohmann::json(true));
  // Not TOML outside quotes; found by the fuzzer (toml++ 3.3 misbehaves on it).
  EXPECT_EQ(ParseSetValue("\xc8\xba"), nlohmann::json("\xc8\xba"));
  EXPECT_EQ(ParseSetValue("caf\xc3\xa9"), nlohmann::json("caf\xc3\xa9"));
  EXPECT_EQ(ParseSetValue("\"caf\xc3\xa9\""), nlohmann::json("caf\xc3\xa9"));
  // What a shell user types: spaces around the value, numbers TOML spells otherwise.
  EXPECT_EQ(ParseSetValue(" cosine"), nlohmann::json("cosine"));
  EXPECT_EQ(ParseSetValue("0.1 "), nlohmann::json(0.1));
  EXPECT_EQ(ParseSetValue(".5"), nlohmann::json(0.5));
  EXPECT_EQ(ParseSetValue("5."), nlohmann::json(5.0));
  EXPECT_EQ(ParseSetValue("1.e-3"), nlohmann::json(1e-3));
  EXPECT_EQ(ParseSetValue("1.2.3"), nlohmann::json("1.2.3"));
  EXPECT_EQ(ParseSetValue("e"), nlohmann::json("e"));
  // A seed as `sweep train` prints it: whole numbers up to 2^64 - 1 (TOML stops at 2^63 - 1).
  EXPECT_EQ(ParseSetValue("18446744073709551615"), nlohmann::json(uint64_t{18446744073709551615u}));
  EXPECT_EQ(ParseSetValue("18446744073709551616"), nlohmann::json(1.8446744073709552e19));
}

TEST(DidYouMeanTest, SuggestsCloseWordsOnly) {
  EXPECT_EQ(DidYouMean("max_trails", {"max_trials", "seed"}), "max_trials");
  EXPECT_EQ(DidYouMean("zzzzzz", {"max_trials", "seed"}), "");
}

// The names other tools give our trainer's keys (and typos of them) point to ours, where ours
// is one of the candidates.
TEST(DidYouMeanTest, KnowsOtherToolsNamesForOurKeys) {
  const std::vector<std::string> trainer = {"lr",           "epochs", "batch_size",
                                            "weight_decay", "hidden", "momentum"};
  EXPECT_EQ(DidYouMean("learning_rate", trainer), "lr");
  EXPECT_EQ(DidYouMean("lerning_rate", trainer), "lr");
  EXPECT_EQ(DidYouMean("num_epochs", trainer), "epochs");
  EXPECT_EQ(DidYouMean("wd", trainer), "weight_decay");
  EXPECT_EQ(DidYouMean("hidden_sizes", trainer), "hidden");
  EXPECT_EQ(DidYouMean("momentm", trainer), "momentum");
  EXPECT_EQ(DidYouMean("learning_rate", {"max_trials", "seed"}), "");  // not ours to name
}

}  // namespace
}  // namespace sweep

namespace sweep {
namespace {

// Every config shipped under configs/ loads as it is (the trainer ones need Debian's
// dataset-fashion-mnist, which the set-up installs).
TEST(ShippedConfigsTest, AllLoad) {
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(SWEEP_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".toml") continue;
    auto cfg = LoadConfig(entry.path().string());
    if (!cfg.ok() && cfg.status().message().find("fashion-mnist") != std::string::npos &&
        !fs::exists("/usr/share/datasets/fashion-mnist")) {
      continue;
    }
    EXPECT_TRUE(cfg.ok()) << entry.path() << ": " << cfg.status().message();
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

}  // namespace
}  // namespace sweep
