// The cluster launchers end to end. A real single-node Slurm (Debian's slurmctld and slurmd,
// started here without systemd, auth/none, two CPUs, two fake GPUs) runs the job arrays `sweep
// slurm submit` writes, against a real coordinator: an array where only two of three tasks fit, a
// task cancelled mid-sweep, the warning signal, a requeue. Skipped, saying why, only where Slurm is
// not installed. `sweep k8s render`'s manifests are read back as YAML (python3-yaml), and the
// agent command they hold serves a coordinator here.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agents_fixture.h"
#include "e2e_fixture.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using sweep_e2e::Output;

// What `command` prints, and its exit code.
std::pair<int, std::string> Shell(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, ""};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// A port nothing listens on now.
int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// slurmctld and slurmd for this test binary, in a folder of their own, on free ports; their
// clients (sbatch, squeue, and sweep's calls of them) find it through SLURM_CONF.
class LocalSlurm {
 public:
  static std::string Missing() {
    for (const char* tool : {"slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol"}) {
      if (Shell(std::string("command -v ") + tool + " || test -x /usr/sbin/" + tool).first != 0) {
        return tool;
      }
    }
    return "";
  }

  bool Start(std::string* why) {
    char tmpl[] = "/tmp/sweep-slurm-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    fs::create_directories(dir_ / "state");
    fs::create_directories(dir_ / "spool");
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::string node = host;
    node = node.substr(0, node.find('.'));
    const std::string user = Trimmed(Shell("id -un").second);
    const std::string d = dir_.string();
    // Two fake GPUs for gres. slurmd takes only character or block devices as their files
    // (a plain file: "is not a valid character or block device"); links to /dev/null are
    // such, and need no root to make.
    for (const char* gpu : {"gpu0", "gpu1"}) fs::create_symlink("/dev/null", dir_ / gpu);
    std::ofstream(dir_ / "gres.conf")
        << "Name=gpu File=" << d << "/gpu0\nName=gpu File=" << d << "/gpu1\n";
    // Requeued jobs wait out the credential's lifetime (120 s by default); the scheduler looks
    // every second: a test sees a requeue or a freed CPU in seconds.
    std::ofstream(dir_ / "slurm.conf")
        << "ClusterName=sweeptest\nSlurmctldHost=" << node << "\nAuthType=auth/none\n"
        << "CredType=cred/none\nAuthInfo=cred_expire=5\nProctrackType=proctrack/pgid\n"
        << "TaskPlugin=task/none\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
        << "SlurmUser=" << user << "\nSlurmdUser=" << user << "\nStateSaveLocation=" << d
        << "/state\nSlurmdSpoolDir=" << d << "/spool\nSlurmctldPidFile=" << d
        << "/slurmctld.pid\nSlurmdPidFile=" << d << "/slurmd.pid\nSlurmctldPort=" << FreePort()
        << "\nSlurmdPort=" << FreePort() << "\nSlurmctldLogFile=" << d
        << "/slurmctld.log\nSlurmdLogFile=" << d << "/slurmd.log\nReturnToService=2\n"
        << "MpiDefault=none\nJobCompType=jobcomp/none\n"
        << "AccountingStorageType=accounting_storage/none\nKillWait=5\nMinJobAge=300\n"
        << "SchedulerParameters=sched_interval=1,bf_interval=1\n"
        << "GresTypes=gpu\nNodeName=" << node << " CPUs=2 Gres=gpu:2 State=UNKNOWN\n"
        << "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
    ::setenv("SLURM_CONF", (dir_ / "slurm.conf").c_str(), 1);
    const std::string path = "PATH=$PATH:/usr/sbin ";
    Shell(path + "slurmctld -i");
    Shell(path + "slurmd");
    // slurmd registers within a second or two on a quiet machine; beside a full test run on two
    // cores it has taken over 10 s.
    for (int i = 0; i < 300; ++i) {
      if (Shell("sinfo -h -o %T").second.find("idle") != std::string::npos) return true;
      ::usleep(100'000);
    }
    *why = "the local Slurm did not come up in 30 s: " +
           Shell("sinfo; tail -n 5 " + d + "/slurm*.log").second;
    return false;
  }

  void Stop() {
    if (dir_.empty()) return;
    Shell("scancel --user $(id -un)");
    for (const char* pid : {"slurmd.pid", "slurmctld.pid"}) {
      Shell("kill $(cat " + (dir_ / pid).string() + ") 2>/dev/null");
    }
    ::usleep(500'000);
    fs::remove_all(dir_);
    dir_.clear();
  }

 private:
  fs::path dir_;
};

class SlurmTest : public sweep_e2e::AgentsFixture {
 protected:
  static void SetUpTestSuite() {
    missing_ = LocalSlurm::Missing();
    if (!missing_.empty()) return;
    slurm_ = new LocalSlurm;
    if (!slurm_->Start(&failed_)) {
      delete slurm_;
      slurm_ = nullptr;
    }
  }
  static void TearDownTestSuite() {
    if (slurm_ != nullptr) slurm_->Stop();
    delete slurm_;
    slurm_ = nullptr;
  }

  void SetUp() override {
    if (!missing_.empty()) {
      GTEST_SKIP() << "Slurm is not installed here (no " << missing_
                   << "; Debian's slurmctld, slurmd and slurm-client packages provide it)";
    }
    ASSERT_TRUE(failed_.empty()) << failed_;
    AgentsFixture::SetUp();
  }
  void TearDown() override {
    for (const std::string& job : jobs_) Shell("scancel " + job);
    AgentsFixture::TearDown();
  }

  // `sweep slurm submit` of `n` agents for the coordinator on `port`, each asking for
  // `resources` (one CPU by default): the job id.
  std::string Submit(int n, int port, const std::string& resources = "--cpu-slots 1") {
    Output o = Sweep("slurm submit --agents " + std::to_string(n) + " " + resources +
                     " --connect 127.0.0.1:" + std::to_string(port) +
                     " --token-file tok --retry-for 20s --output " +
                     (dir_ / "task-%a.log").string() + " --sbatch-arg=--chdir=" + dir_.string());
    EXPECT_EQ(o.code, 0) << o.err;
    const std::string id = Trimmed(o.out);
    jobs_.push_back(id);
    return id;
  }

  // Three one-CPU tasks for the coordinator on `port`, on two CPUs: waits until the third is
  // pending and the first two have joined. The job id.
  std::string SubmitThreeOneWaiting(int port) {
    const std::string job = Submit(3, port);
    EXPECT_TRUE(WaitUntil([&] { return TaskState(job, 2) == "PENDING"; }, 20))
        << Shell("squeue -r").second;
    EXPECT_TRUE(WaitForLine("coordinator.log", "joined from host", 30, 2))
        << Log("coordinator.log");
    return job;
  }

  // The state of array task `task` of `job` ("RUNNING", "PENDING"; empty once it is gone).
  static std::string TaskState(const std::string& job, int task) {
    return Trimmed(Shell("squeue -h -r -j " + job + "_" + std::to_string(task) + " -o %T").second);
  }

  static inline std::string missing_;
  static inline std::string failed_;
  static inline LocalSlurm* slurm_ = nullptr;
  std::vector<std::string> jobs_;
};

// Three tasks, two CPUs: the third waits until a task leaves. One is cancelled mid-sweep; its
// trials run again elsewhere and the pending task starts and serves: none lost or run twice.
TEST_F(SlurmTest, AnArrayWhereTwoOfThreeFitCompletesTheSweepThroughACancelledTask) {
  const int kTrials = 16, kSteps = 10;
  Write("f.toml",
        sweep_e2e::BraninConfig("slurm", kTrials, "seed = 3\n",
                                "steps = " + std::to_string(kSteps) + "\nstep_ms = 150\n"));
  int port = 0;
  pid_t coordinator = StartCoordinator("f.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  const std::string job = SubmitThreeOneWaiting(port);
  if (HasFailure()) return;
  EXPECT_EQ(TaskState(job, 2), "PENDING") << "only two one-CPU tasks fit on two CPUs";
  ASSERT_TRUE(WaitForAReport());
  ASSERT_EQ(Shell("scancel " + job + "_0").first, 0);
  ASSERT_EQ(WaitExit(coordinator, 120), 0) << Log("coordinator.log");
  ExpectEveryTrialAccountedFor(kTrials, kSteps);
  const auto agents = PlacedOn("SELECT placement FROM trials");
  EXPECT_TRUE(agents.count("slurm-" + job + "-2")) << ::testing::PrintToString(agents);
  EXPECT_GT(Scalar("SELECT count(*) FROM events WHERE to_state = 'interrupted'"), 0)
      << "task 0 had trials running when it was cancelled";
}

// When the sweep is over, the running agents cancel the array's tasks that have not started:
// the pending one never runs (it would find no coordinator and wait out --retry-for), and the
// array leaves the queue at once.
TEST_F(SlurmTest, PendingArrayTasksAreCancelledWhenTheSweepIsOver) {
  Write("f.toml", sweep_e2e::BraninConfig("short", 8, "seed = 5\n", "steps = 5\nstep_ms = 200\n"));
  int port = 0;
  pid_t coordinator = StartCoordinator("f.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  const std::string job = SubmitThreeOneWaiting(port);
  if (HasFailure()) return;
  ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log");
  const auto ended = Clock::now();
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Trimmed(Shell("squeue -h -r -o %T -j " + job + " 2>/dev/null").second).empty();
      },
      10))
      << Shell("squeue -r").second;
  std::printf("the array left the queue %.1f s after the sweep ended\n",
              std::chrono::duration<double>(Clock::now() - ended).count());
  EXPECT_FALSE(fs::exists(dir_ / "task-2.log")) << "the pending task ran:\n" << Log("task-2.log");
  EXPECT_GE(Count(Log("task-0.log") + Log("task-1.log"),
                  "cancelled the pending tasks of Slurm job array " + job),
            1)
      << Log("task-0.log") << Log("task-1.log");
}

// Two one-GPU tasks on the node's two (fake) GPUs: each gets its own from Slurm
// (CUDA_VISIBLE_DEVICES), its agent serves it as one GPU slot, and the command trials placed
// there see that GPU and no other.
TEST_F(SlurmTest, EachGpuTaskServesTheGpuSlurmGaveIt) {
  WriteGpuSweep("g.toml", 6, "1");
  int port = 0;
  pid_t coordinator = StartCoordinator("g.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  const std::string job = Submit(2, port, "--gpus-per-agent 1");
  if (HasFailure()) return;
  ASSERT_TRUE(WaitForLine("coordinator.log", "joined from host", 30, 2))
      << Log("coordinator.log") << Log("task-0.log") << Log("task-1.log");
  ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log");
  EXPECT_EQ(Count(Log("coordinator.log"), " with 1 GPU slot\n"), 2) << Log("coordinator.log");
  // Which GPU each task's trials saw: one per task, a different one for each.
  std::map<std::string, std::set<std::string>> seen;
  for (auto& row : Query("SELECT t.placement, json_extract(r.metrics, '$.gpu') FROM trials t "
                         "JOIN reports r ON r.trial = t.number")) {
    seen[row[0]].insert(row[1]);
  }
  const std::string a = "slurm-" + job + "-0:gpu0", b = "slurm-" + job + "-1:gpu0";
  ASSERT_EQ(seen.size(), 2u) << ::testing::PrintToString(seen);
  ASSERT_EQ(seen[a].size(), 1u) << ::testing::PrintToString(seen);
  ASSERT_EQ(seen[b].size(), 1u) << ::testing::PrintToString(seen);
  EXPECT_NE(*seen[a].begin(), *seen[b].begin()) << ::testing::PrintToString(seen);
  EXPECT_EQ(Scalar("SELECT count(*) FROM trials WHERE status = 'completed'"), 6);
}

// Slurm's warning before a time limit or a preemption (USR1 to the batch shell, which the
// script's agent is): the agent's trial stops at its checkpoint and goes on from it on the
// other agent, every epoch reported once. Both trials wait after epoch 6 until trial 0 has
// been interrupted, so neither can finish first on a slow machine.
TEST_F(SlurmTest, TheWarningSignalMovesATrialOnFromItsCheckpoint) {
  const std::string go = (dir_ / "go").string();
  WriteProgram(
      "epochs.sh",
      "#!/bin/sh\n# 12 epochs; the last one done is kept in the trial's folder.\n"
      "cd \"$SWEEP_TRIAL_DIR\"\ne=$(cat ckpt 2>/dev/null || echo 0)\n"
      "stop=0\ntrap 'stop=1' TERM\n"
      "while [ $e -lt 12 ] && [ $stop = 0 ]; do sleep 0.25; e=$((e + 1)); echo $e > ckpt;\n"
      "  echo \"sweep-report {\\\"epoch\\\": $e, \\\"score\\\": $e}\"\n"
      "  if [ $e = 6 ]; then while [ ! -e '" +
          go + "' ] && [ $stop = 0 ]; do sleep 0.1; done; fi\ndone\n");
  Write("c.toml",
        "[sweep]\nname = \"warned\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 2\n"
        "[parameters]\nx = { values = [1, 2] }\n"
        "[trial]\nkind = \"command\"\ncommand = [\"./epochs.sh\"]\n");
  int port = 0;
  pid_t coordinator = StartCoordinator("c.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  const std::string job = Submit(2, port);
  ASSERT_TRUE(
      WaitUntil([&] { return Scalar("SELECT count(DISTINCT trial) FROM reports") == 2; }, 40))
      << Log("coordinator.log");
  const std::string first = Query("SELECT placement FROM trials WHERE number = 0")[0][0];
  const std::string task = first.substr(first.rfind('-') + 1, 1);
  ASSERT_EQ(Shell("scancel --batch --signal=USR1 " + job + "_" + task).first, 0);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Scalar(
                   "SELECT count(*) FROM events WHERE trial = 0 AND "
                   "to_state = 'interrupted'") == 1;
      },
      40))
      << Log("coordinator.log");
  std::ofstream(go) << "";
  ASSERT_EQ(WaitExit(coordinator, 90), 0) << Log("coordinator.log");
  EXPECT_EQ(Scalar("SELECT count(*) FROM trials WHERE status = 'completed'"), 2);
  // Trial 0 was interrupted, not failed, and went on from its checkpoint elsewhere.
  EXPECT_EQ(Scalar("SELECT count(*) FROM events WHERE trial = 0 AND to_state = 'interrupted'"), 1)
      << Log("coordinator.log");
  EXPECT_EQ(Scalar("SELECT retries FROM trials WHERE number = 0"), 0);
  EXPECT_NE(Query("SELECT placement FROM trials WHERE number = 0")[0][0], first);
  EXPECT_EQ(Scalar("SELECT count(*) FROM reports WHERE trial = 0"), 12);
  EXPECT_EQ(Scalar("SELECT count(DISTINCT json_extract(metrics, '$.score')) FROM reports "
                   "WHERE trial = 0"),
            12);
}

// Slurm itself sends the warning. slurmctld checks time limits every 30 s (fixed in slurmctld,
// not a setting) and sends it at the first check with less than the warning's time + 30 s left:
// a one-minute task asking for USR1 25 s ahead gets it 5 to 35 s in. The trial there stops at
// a checkpoint, is interrupted (no retry used), and goes on from that epoch on another agent.
TEST_F(SlurmTest, SlurmsOwnTimeLimitWarningMovesATrialOnFromItsCheckpoint) {
  // An epoch a second under Slurm, so the trial outlasts the wait for the warning; a twentieth
  // of that elsewhere, so the rest is quick once moved.
  WriteProgram(
      "epochs.sh",
      "#!/bin/sh\n# 60 epochs; the last one done is kept in the trial's folder.\n"
      "cd \"$SWEEP_TRIAL_DIR\"\ne=$(cat ckpt 2>/dev/null || echo 0)\n"
      "pace=0.05\n[ -n \"$SLURM_JOB_ID\" ] && pace=1\nstop=0\ntrap 'stop=1' TERM\n"
      "while [ $e -lt 60 ] && [ $stop = 0 ]; do sleep $pace; e=$((e + 1)); echo $e > ckpt;\n"
      "  echo \"sweep-report {\\\"epoch\\\": $e, \\\"score\\\": $e}\"; done\n");
  Write("c.toml",
        "[sweep]\nname = \"limited\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 1\n"
        "[parameters]\nx = { values = [1] }\n"
        "[trial]\nkind = \"command\"\ncommand = [\"./epochs.sh\"]\n");
  int port = 0;
  pid_t coordinator = StartCoordinator("c.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  const auto submitted = Clock::now();
  const std::string job = Submit(1, port, "--cpu-slots 1 --time 1 --signal B:USR1@25");
  if (HasFailure()) return;
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Scalar(
                   "SELECT count(*) FROM events WHERE trial = 0 AND to_state = "
                   "'interrupted'") == 1;
      },
      55))
      << "no warning from Slurm\n"
      << Log("coordinator.log") << Log("task-0.log");
  const double warned_s = std::chrono::duration<double>(Clock::now() - submitted).count();
  std::printf("Slurm's warning interrupted the trial %.1f s after the submit\n", warned_s);
  EXPECT_NE(Log("task-0.log").find("stopping: ending 1 running trial(s)"), std::string::npos)
      << Log("task-0.log");
  const int64_t stopped_at = Scalar("SELECT max(step) FROM reports WHERE trial = 0");
  EXPECT_GT(stopped_at, 0);
  EXPECT_LT(stopped_at, 60) << "the trial ended before the warning came";
  StartAgent("elsewhere", port);
  ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log");
  EXPECT_EQ(Scalar("SELECT count(*) FROM trials WHERE status = 'completed'"), 1);
  EXPECT_EQ(Scalar("SELECT count(*) FROM events WHERE trial = 0 AND to_state = 'interrupted'"), 1);
  EXPECT_EQ(Scalar("SELECT retries FROM trials WHERE number = 0"), 0);
  EXPECT_EQ(Query("SELECT placement FROM trials WHERE number = 0")[0][0].rfind("elsewhere:", 0),
            0u);
  // Every epoch once: the second agent went on from the checkpoint, not from epoch 1.
  EXPECT_EQ(Scalar("SELECT count(*) FROM reports WHERE trial = 0"), 60);
  EXPECT_EQ(Scalar("SELECT count(DISTINCT json_extract(metrics, '$.score')) FROM reports "
                   "WHERE trial = 0"),
            60);
}

// `scontrol requeue` kills a task and queues it again: it comes back, reconnects and serves.
TEST_F(SlurmTest, ARequeuedTaskReconnectsAndServes) {
  Write("f.toml",
        sweep_e2e::BraninConfig("requeued", 12, "seed = 4\n", "steps = 10\nstep_ms = 200\n"));
  int port = 0;
  pid_t coordinator = StartCoordinator("f.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  const std::string job = Submit(1, port);
  ASSERT_TRUE(WaitForLine("coordinator.log", "joined from host", 30)) << Log("coordinator.log");
  ASSERT_TRUE(WaitForAReport());
  ASSERT_EQ(Shell("scontrol requeue " + job + "_0").first, 0);
  ASSERT_TRUE(WaitForLine("coordinator.log", "joined from host", 60, 2)) << Log("coordinator.log");
  ASSERT_EQ(WaitExit(coordinator, 120), 0) << Log("coordinator.log");
  ExpectEveryTrialAccountedFor(12, 10);
  EXPECT_EQ(Count(Log("task-0.log"), "registered with the coordinator"), 2) << Log("task-0.log");
}

class K8sTest : public sweep_e2e::AgentsFixture {};

// The manifests read back as YAML carry what the cluster needs, and the agent command they
// hold, with the index Kubernetes sets, serves a coordinator here.
TEST_F(K8sTest, TheRenderedAgentCommandServesACoordinator) {
  if (Shell("/usr/bin/python3 -c 'import yaml'").first != 0) {
    GTEST_SKIP() << "python3-yaml is not installed: the manifests cannot be read back here";
  }
  Write("f.toml", sweep_e2e::BraninConfig("k8s", 6, "seed = 2\n", "steps = 3\n"));
  Output o = Sweep(
      "k8s render f.toml --agents 2 --cpu-slots 2 --image reg.example/sweep:1 "
      "--namespace ml --queue team-a --token-file tok");
  ASSERT_EQ(o.code, 0) << o.err;
  Write("manifests.yaml", o.out);
  auto [rc, text] = Shell(
      "/usr/bin/python3 -c 'import json, sys, yaml; "
      "print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))' " +
      (dir_ / "manifests.yaml").string());
  ASSERT_EQ(rc, 0) << text;
  const json docs = json::parse(text);
  ASSERT_EQ(docs.size(), 5u);
  json job;
  for (const json& d : docs) {
    if (d["kind"] == "Job") job = d;
    if (d["kind"] == "Secret") {
      EXPECT_EQ(d["stringData"]["token"], Trimmed(Log("tok")));
    }
  }
  ASSERT_TRUE(job.is_object()) << text;
  EXPECT_EQ(job["metadata"]["namespace"], "ml");
  EXPECT_EQ(job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "team-a");
  EXPECT_EQ(job["spec"]["completionMode"], "Indexed");
  // The command as the pod would run it: the index expanded, the coordinator and token here.
  int port = 0;
  pid_t coordinator = StartCoordinator("f.toml", &port);
  ASSERT_GT(port, 0) << Log("coordinator.log");
  std::string args;
  const json command = job["spec"]["template"]["spec"]["containers"][0]["command"];
  ASSERT_EQ(command[0], "sweep");
  for (size_t i = 1; i < command.size(); ++i) {
    std::string a = command[i];
    if (a.find(":7070") != std::string::npos) a = "127.0.0.1:" + std::to_string(port);
    if (a == "/etc/sweep/token/token") a = "tok";
    const size_t at = a.find("$(JOB_COMPLETION_INDEX)");
    if (at != std::string::npos) a.replace(at, 23, "1");
    args += " " + a;
  }
  Spawn(args, "agent.log", "JOB_COMPLETION_INDEX=1");
  ASSERT_EQ(WaitExit(coordinator, 60), 0) << Log("coordinator.log") << Log("agent.log");
  EXPECT_TRUE(PlacedOn("SELECT placement FROM trials").count("k8s-agent-1"))
      << Log("coordinator.log");
}

// Command trials start in the config's folder unless trial.workdir says otherwise: in the pods
// only the coordinator has it, and the render says so (the manifests are still written).
TEST_F(K8sTest, ACommandTrialInTheConfigsFolderIsWarnedOf) {
  const std::string config =
      "[sweep]\nname = \"cmd\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 2\n"
      "[parameters]\nx = 1\n[trial]\nkind = \"command\"\ncommand = [\"/bin/true\"]\n";
  const std::string render = " --agents 1 --cpu-slots 1 --image reg.example/sweep:1";
  for (const std::string workdir : {"", "workdir = \"sub\"\n", "workdir = \"/opt/job\"\n"}) {
    SCOPED_TRACE(workdir);
    Write("c.toml", config + workdir);
    Output o = Sweep("k8s render c.toml" + render);
    ASSERT_EQ(o.code, 0) << o.err;
    EXPECT_NE(o.out.find("kind: \"ConfigMap\""), std::string::npos);
    const bool warned =
        o.err.find("warning: c.toml: command trials start in trial.workdir") != std::string::npos;
    EXPECT_EQ(warned, workdir.find("/opt/job") == std::string::npos) << o.err;
  }
  // Other trials start nowhere in particular.
  Write("f.toml", sweep_e2e::BraninConfig("fn", 6));
  Output fn = Sweep("k8s render f.toml" + render);
  ASSERT_EQ(fn.code, 0) << fn.err;
  EXPECT_EQ(fn.err.find("warning"), std::string::npos) << fn.err;
}

// Trainer trials' checkpoints and command trials' folders: a relative checkpoint_dir or
// trials_dir would be in the coordinator's read-only mount of the config (refused); one that is
// not under /shared with --shared-claim stays in each agent pod (said).
TEST_F(K8sTest, TrialFoldersOutsideTheSharedClaimAreSaidOrRefused) {
  const std::string trainer =
      "[sweep]\nname = \"net\"\nmax_trials = 2\n[parameters]\nlr = 0.1\n[trainer]\n"
      "dataset = \"/data/fashion\"\n[trial]\n";
  const std::string command =
      "[sweep]\nname = \"cmd\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 2\n"
      "[parameters]\nx = 1\n[trial]\nkind = \"command\"\ncommand = [\"/opt/job/run\"]\n"
      "workdir = \"/opt/job\"\n";
  const std::string render = " --agents 2 --gpus-per-agent 1 --image reg.example/sweep:1";
  const std::string starts_over =
      "each agent pod keeps its trials' checkpoints to itself: a trial moved to another agent "
      "(its pod preempted or evicted) starts over; set checkpoint_dir = \"/shared/checkpoints\"";
  const std::string new_folder =
      "each agent pod keeps its trials' folders (their logs and files) to itself, lost with the "
      "pod; a trial moved to another agent starts in a new folder; set trials_dir = "
      "\"/shared/trials\"";
  struct Case {
    std::string config;
    std::string flags;
    std::string warning;  // "": none
  };
  for (const Case& c : std::vector<Case>{
           {trainer, "", "trial.checkpoint_dir is not set, so " + starts_over},
           {trainer + "checkpoint_dir = \"/ckpt\"\n", " --shared-claim team",
            "trial.checkpoint_dir is not under /shared, so " + starts_over},
           {trainer + "checkpoint_dir = \"/shared/ckpt\"\n", "",
            "trial.checkpoint_dir is under /shared, which only --shared-claim mounts, so " +
                starts_over},
           {trainer + "checkpoint_dir = \"/shared/ckpt\"\n", " --shared-claim team", ""},
           {command, "", "trial.trials_dir is not set, so " + new_folder},
           {command + "trials_dir = \"/shared/t\"\n", " --shared-claim team", ""}}) {
    SCOPED_TRACE(c.config + c.flags);
    Write("t.toml", c.config);
    Output o = Sweep("k8s render t.toml" + render + c.flags);
    ASSERT_EQ(o.code, 0) << o.err;
    EXPECT_NE(o.out.find("kind: \"StatefulSet\""), std::string::npos);
    if (c.warning.empty()) {
      EXPECT_EQ(o.err.find("warning"), std::string::npos) << o.err;
    } else {
      EXPECT_NE(o.err.find("warning: t.toml: " + c.warning), std::string::npos) << o.err;
    }
  }
  for (const auto& [config, key] : {std::pair<std::string, std::string>{
                                        trainer + "checkpoint_dir = \"ckpt\"\n", "checkpoint_dir"},
                                    {command + "trials_dir = \"runs\"\n", "trials_dir"}}) {
    Write("t.toml", config);
    Output o = Sweep("k8s render t.toml" + render + " --shared-claim team");
    EXPECT_EQ(o.code, 2) << o.out;
    EXPECT_NE(o.err.find("t.toml: trial." + key + " \"" + (key == "trials_dir" ? "runs" : "ckpt") +
                         "\" is relative, so in the pods it is in the config's folder, the "
                         "coordinator's read-only mount"),
              std::string::npos)
        << o.err;
    EXPECT_EQ(o.out, "");
  }
}

// A config rendered for a cluster is a new sweep's, checked as `run` checks one, but not against
// this machine's files (its dataset is the pods'): what the coordinator's pod would refuse is
// refused here, before anything is applied.
TEST_F(K8sTest, RenderChecksTheConfigAsANewSweepWithoutItsDataset) {
  const std::string render = " --agents 2 --gpus-per-agent 1 --image reg.example/sweep:1";
  const std::string trainer =
      "[sweep]\nname = \"net\"\nmax_trials = 4\n[trainer]\ndataset = \"/data/fashion\"\n";
  Write("d.toml", trainer + "devices = [0]\n");
  Output o = Sweep("k8s render d.toml" + render);
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.err.find("d.toml:6:11: trainer.devices: a sweep gives each trial the GPUs of the "
                       "slots it runs on"),
            std::string::npos)
      << o.err;
  Write("m.toml", trainer + "nesterov = true\n[parameters]\nmomentum = { values = [0.9, 0.0] }\n");
  o = Sweep("k8s render m.toml" + render);
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.err.find("would fail as it starts, with {\"momentum\":0.0}: nesterov: needs "
                       "momentum > 0"),
            std::string::npos)
      << o.err;
  Write("ok.toml", trainer + "[parameters]\nlr = { values = [0.1, 0.2] }\n");
  o = Sweep("k8s render ok.toml" + render);
  EXPECT_EQ(o.code, 0) << o.err;
  // No agent could run a trial: more slots than an agent offers, or the GPU backend on agents
  // of CPU slots.
  Write("two.toml", trainer + "[trial]\ngpus = 2\n");
  o = Sweep("k8s render two.toml" + render);
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.err.find("two.toml:7:8: trial.gpus: 2 slots per trial, but each agent offers 1 "
                       "(--gpus-per-agent 1): no agent could run a trial"),
            std::string::npos)
      << o.err;
  EXPECT_EQ(Sweep("k8s render two.toml --agents 2 --gpus-per-agent 2 --image r/s:1").code, 0);
  Write("cuda.toml", trainer + "backend = \"cuda\"\n");
  o = Sweep("k8s render cuda.toml --agents 2 --cpu-slots 4 --image r/s:1");
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.err.find("cuda.toml:6:11: trainer.backend = \"cuda\", and the agents offer CPU "
                       "slots (--cpu-slots 4): such trials would fail as they start"),
            std::string::npos)
      << o.err;
  EXPECT_EQ(Sweep("k8s render cuda.toml" + render).code, 0);
}

}  // namespace
