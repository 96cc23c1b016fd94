// The cluster launchers' pure parts: the Slurm batch script, the Kubernetes manifests and their
// YAML. What the script and manifests do on a real cluster is in tests/e2e/cluster_test.cc.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cluster/k8s.h"
#include "cluster/slurm.h"

namespace sweep::cluster {
namespace {

using json = nlohmann::ordered_json;

SlurmJob Job() {
  SlurmJob job;
  job.agents = 4;
  job.gpus_per_agent = 2;
  job.connect = "login1:7070";
  job.token_file = "/home/me/.sweep-token";
  job.sweep_binary = "/opt/sweep/bin/sweep";
  return job;
}

bool HasLine(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

TEST(SlurmScriptTest, OneAgentPerArrayTaskWithTheWarningSignalAndRequeue) {
  SlurmJob job = Job();
  job.time = "4:00:00";
  job.partition = "gpu";
  job.account = "lab";
  job.sbatch_args = {"--qos=high", "--constraint=h100"};
  const std::string s = SlurmScript(job);
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u);
  for (const char* line :
       {"#SBATCH --array=0-3", "#SBATCH --gres=gpu:2", "#SBATCH --time=4:00:00",
        "#SBATCH --partition=gpu", "#SBATCH --account=lab", "#SBATCH --signal=B:USR1@120",
        "#SBATCH --requeue", "#SBATCH --qos=high", "#SBATCH --constraint=h100"}) {
    EXPECT_TRUE(HasLine(s, line)) << line << "\n" << s;
  }
  // The agent is the batch shell (exec), so B: signals reach it; its GPUs are Slurm's.
  EXPECT_NE(s.find("\nexec '/opt/sweep/bin/sweep' agent --connect 'login1:7070' --token-file "
                   "'/home/me/.sweep-token' --name \"slurm-"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("--cpu-slots"), std::string::npos) << s;
  // When the sweep is over, the agent cancels the array's tasks that have not started.
  EXPECT_NE(s.find(" --cancel-pending-array\n"), std::string::npos) << s;
  job.gpu_request = "gpus";
  EXPECT_TRUE(HasLine(SlurmScript(job), "#SBATCH --gpus=2"));
}

TEST(SlurmScriptTest, CpuAgentsOfferWhatSlurmGaveTheirTask) {
  SlurmJob job = Job();
  job.gpus_per_agent = 0;
  job.cpu_slots = 3;
  const std::string s = SlurmScript(job);
  EXPECT_TRUE(HasLine(s, "#SBATCH --cpus-per-task=3")) << s;
  EXPECT_EQ(s.find("--gres"), std::string::npos);
  EXPECT_NE(s.find("--cpu-slots \"${SLURM_CPUS_PER_TASK:-3}\""), std::string::npos) << s;
}

TEST(SlurmScriptTest, PathsAreOneShellWordWhateverTheyHold) {
  SlurmJob job = Job();
  job.token_file = "/home/o'brien/tok $(rm -rf ~)";
  const std::string s = SlurmScript(job);
  EXPECT_NE(s.find("--token-file '/home/o'\\''brien/tok $(rm -rf ~)'"), std::string::npos) << s;
  EXPECT_EQ(ShellQuote("a'b"), "'a'\\''b'");
}

TEST(SlurmScriptTest, BadOptionsAreRefusedByFlag) {
  auto refused = [](SlurmJob job, const std::string& words) {
    const Status s = CheckSlurmJob(job);
    EXPECT_FALSE(s.ok()) << words;
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
  };
  EXPECT_TRUE(CheckSlurmJob(Job()).ok());
  SlurmJob j = Job();
  j.agents = 0;
  refused(j, "--agents");
  j = Job();
  j.gpus_per_agent = 0;
  refused(j, "--cpu-slots");
  j = Job();
  j.connect = "login1";
  refused(j, "--connect");
  // What `sweep agent` refuses: every task would end at once.
  j.connect = "login1:99999";
  refused(j, "--connect 'login1:99999': the port must be a number in 0..65535");
  j.connect = ":7070";
  refused(j, "--connect ':7070': no host");
  j = Job();
  j.retry_for = "bogus";
  refused(j, "--retry-for bogus: expected a duration such as 90s, 10m or 2h, or 'forever'");
  j = Job();
  j.retry_for = "forever";
  EXPECT_TRUE(CheckSlurmJob(j).ok());
  j = Job();
  j.gpu_request = "mig";
  refused(j, "--gpu-request");
  // A line break would add a directive, or a command, of the value's making.
  j = Job();
  j.partition = "gpu\n#SBATCH --exclusive";
  refused(j, "--partition: must be one line");
  j = Job();
  j.sbatch_args = {"qos=high"};
  refused(j, "--sbatch-arg qos=high");
  // sbatch reads a word: the rest of a value with a space would be dropped.
  j = Job();
  j.output = "/shared/my logs/%A_%a.log";
  refused(j, "--output '/shared/my logs/%A_%a.log': sbatch reads its #SBATCH lines a word");
  j = Job();
  j.sbatch_args = {"--comment=\"a b\""};
  refused(j, "--sbatch-arg '--comment=\"a b\"'");
}

// The warning must reach the agent (the batch shell) as a signal it stops on, and come within
// the time limit.
TEST(SlurmScriptTest, TheWarningSignalIsOneTheAgentStopsOnWithinTheTimeLimit) {
  auto check = [](const std::string& signal, const std::string& time) {
    SlurmJob j = Job();
    j.signal = signal;
    j.time = time;
    return CheckSlurmJob(j);
  };
  for (const auto& [signal, time] : std::vector<std::pair<std::string, std::string>>{
           {"B:USR1@120", "4:00:00"},
           {"B:USR1@25", "1"},
           {"RB:SIGTERM@300", "1-00:00:00"},
           {"B:10", "2"},  // 60 s before, Slurm's default
           {"B:HUP@120", "2:01"},
           {"B:USR1@120", "3-0"},
           {"B:USR1@600", "UNLIMITED"},
           {"B:INT@600", "0"},  // no limit
           {"B:usr1@120", ""}}) {
    EXPECT_TRUE(check(signal, time).ok())
        << signal << " " << time << ": " << check(signal, time).message();
  }
  auto refused = [&](const std::string& signal, const std::string& time, const std::string& words) {
    const Status s = check(signal, time);
    EXPECT_FALSE(s.ok()) << signal << " " << time;
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
  };
  refused("USR1@120", "", "--signal USR1@120: give it as B:SIGNAL@SECONDS");
  refused("R:USR1@120", "", "without \"B:\" Slurm signals a job's steps only");
  refused("B:USR2@120", "", "the agent stops its trials on USR1, TERM, INT or HUP");
  refused("B:KILL", "", "USR1, TERM, INT or HUP");
  refused("B:USR1@2m", "", "the seconds after @ must be a whole number in 0..65535");
  refused("B:USR1@70000", "", "0..65535");
  refused("B:USR1@120", "4h", "--time 4h: expected Slurm's time format");
  refused("B:USR1@120", "1:2:3:4", "--time 1:2:3:4");
  refused("B:USR1@120", "-1", "--time -1");
  refused("B:USR1@120", "2",
          "the warning comes 120 s before the end, and --time 2 gives each "
          "task 120 s: it would stop every agent as it starts");
  refused("B:USR1@120", "2:00", "gives each task 120 s");
  refused("B:USR1@120", "0:02:00", "gives each task 120 s");
  refused("B:USR1@120", "0-0:2", "gives each task 120 s");
  refused("B:10", "1", "the warning comes 60 s before the end");
}

K8sSweep Sweep() {
  K8sSweep k;
  k.sweep_name = "Fashion CNN_v2";
  k.config_file = "fashion.toml";
  k.config_text = "[sweep]\nname = \"Fashion CNN_v2\"\n";
  k.agents = 3;
  k.gpus_per_agent = 2;
  k.image = "registry.example/sweep:1";
  k.ns = "ml";
  k.token = "secret-token";
  return k;
}

const json* Find(const std::vector<json>& docs, const std::string& kind) {
  for (const json& d : docs) {
    if (d["kind"] == kind) return &d;
  }
  return nullptr;
}

TEST(K8sManifestsTest, ASecretAStatefulCoordinatorAServiceAndAnIndexedJobOfAgents) {
  const std::vector<json> docs = K8sManifests(Sweep());
  ASSERT_EQ(docs.size(), 5u);
  const json* secret = Find(docs, "Secret");
  ASSERT_NE(secret, nullptr);
  EXPECT_EQ((*secret)["stringData"]["token"], "secret-token");
  EXPECT_EQ((*secret)["metadata"]["name"], "fashion-cnn-v2-token");
  EXPECT_EQ((*secret)["metadata"]["namespace"], "ml");
  const json* config = Find(docs, "ConfigMap");
  ASSERT_NE(config, nullptr);
  EXPECT_EQ((*config)["data"]["fashion.toml"], Sweep().config_text);

  const json* sts = Find(docs, "StatefulSet");
  ASSERT_NE(sts, nullptr);
  EXPECT_EQ((*sts)["spec"]["replicas"], 1);
  const json& claim = (*sts)["spec"]["volumeClaimTemplates"][0];
  EXPECT_EQ(claim["spec"]["resources"]["requests"]["storage"], "10Gi");
  const json& coordinator = (*sts)["spec"]["template"]["spec"]["containers"][0];
  const std::string run = coordinator["command"][2];
  EXPECT_NE(run.find("sweep run /etc/sweep/config/fashion.toml --resume --db /data/sweeps.db "
                     "--listen 0.0.0.0:7070 --token-file /etc/sweep/token/token --no-local"),
            std::string::npos)
      << run;
  const json* svc = Find(docs, "Service");
  ASSERT_NE(svc, nullptr);
  EXPECT_EQ((*svc)["spec"]["selector"], (*sts)["spec"]["template"]["metadata"]["labels"]);
  EXPECT_EQ((*sts)["spec"]["serviceName"], (*svc)["metadata"]["name"]);

  const json* job = Find(docs, "Job");
  ASSERT_NE(job, nullptr);
  EXPECT_EQ((*job)["spec"]["completionMode"], "Indexed");
  EXPECT_EQ((*job)["spec"]["completions"], 3);
  EXPECT_EQ((*job)["spec"]["parallelism"], 3);
  EXPECT_FALSE((*job)["metadata"]["labels"].contains("kueue.x-k8s.io/queue-name"));
  EXPECT_FALSE((*job)["spec"].contains("suspend"));
  const json& pod = (*job)["spec"]["template"]["spec"];
  EXPECT_EQ(pod["terminationGracePeriodSeconds"], 300);
  const json& agent = pod["containers"][0];
  EXPECT_EQ(agent["resources"]["limits"]["nvidia.com/gpu"], 2);
  const std::vector<std::string> command = agent["command"];
  EXPECT_EQ(command, (std::vector<std::string>{"sweep", "agent", "--connect",
                                               "fashion-cnn-v2-coordinator:7070", "--token-file",
                                               "/etc/sweep/token/token", "--name",
                                               "fashion-cnn-v2-agent-$(JOB_COMPLETION_INDEX)"}));
  // The token reaches the agents from the Secret, readable by its owner only.
  EXPECT_EQ(pod["volumes"][0]["secret"]["secretName"], (*secret)["metadata"]["name"]);
  EXPECT_EQ(pod["volumes"][0]["secret"]["defaultMode"], 0400);
}

// A config file name Kubernetes would refuse as a ConfigMap key (a space, a ';') becomes one
// it takes, and the coordinator's shell command reads that file as one word.
TEST(K8sManifestsTest, AConfigFileNameBecomesAKeyKubernetesTakes) {
  K8sSweep k = Sweep();
  k.config_file = "my conf;x.toml";
  const std::vector<json> docs = K8sManifests(k);
  const json* config = Find(docs, "ConfigMap");
  ASSERT_NE(config, nullptr);
  EXPECT_EQ((*config)["data"], json({{"my-conf-x.toml", k.config_text}}));
  const json* sts = Find(docs, "StatefulSet");
  ASSERT_NE(sts, nullptr);
  const std::string run = (*sts)["spec"]["template"]["spec"]["containers"][0]["command"][2];
  EXPECT_EQ(run.find("sweep run /etc/sweep/config/my-conf-x.toml --resume "), 0u) << run;
}

TEST(K8sManifestsTest, AQueueGoesThroughKueueAndCpuAgentsAskForTheirSlots) {
  K8sSweep k = Sweep();
  k.queue = "team-a";
  k.gpus_per_agent = 0;
  k.cpu_slots = 4;
  k.shared_claim = "checkpoints";
  const std::vector<json> docs = K8sManifests(k);
  const json& job = *Find(docs, "Job");
  EXPECT_EQ(job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "team-a");
  EXPECT_EQ(job["spec"]["suspend"], true);
  const json& agent = job["spec"]["template"]["spec"]["containers"][0];
  EXPECT_FALSE(agent["resources"].contains("limits"));
  EXPECT_EQ(agent["resources"]["requests"]["cpu"], 4);
  EXPECT_EQ(agent["command"][8], "--cpu-slots");
  EXPECT_EQ(agent["command"][9], "4");
  EXPECT_EQ(agent["volumeMounts"][1]["mountPath"], "/shared");
  EXPECT_EQ(job["spec"]["template"]["spec"]["volumes"][1]["persistentVolumeClaim"]["claimName"],
            "checkpoints");
}

TEST(K8sManifestsTest, BadOptionsAreRefusedByFlag) {
  K8sSweep k = Sweep();
  EXPECT_TRUE(CheckK8sSweep(k).ok());
  k.gpus_per_agent = 0;
  EXPECT_NE(CheckK8sSweep(k).message().find("--cpu-slots"), std::string::npos);
  k = Sweep();
  k.ns = "ML team";
  EXPECT_NE(CheckK8sSweep(k).message().find("--namespace ML team"), std::string::npos);
  EXPECT_EQ(K8sName("Fashion CNN_v2!"), "fashion-cnn-v2");
  EXPECT_EQ(K8sName("___"), "sweep");
}

TEST(K8sYamlTest, KeysBareWhereSafeStringsQuotedFilesAsBlocks) {
  json doc = {
      {"apiVersion", "v1"},
      {"on", "yes"},
      {"mode", "0400"},
      {"n", 256},
      {"list", json::array({"a", json::array({1, 2}), json::object({{"k", "v"}, {"j", 1}})})},
      {"file", "line one\n  indented\n"},
      {"blank", "a\n  \nb"}};
  const std::string yaml = ToYaml({doc});
  EXPECT_EQ(yaml,
            "---\n"
            "apiVersion: \"v1\"\n"
            "\"on\": \"yes\"\n"
            "mode: \"0400\"\n"
            "\"n\": 256\n"
            "list:\n"
            "- \"a\"\n"
            "-\n"
            "  - 1\n"
            "  - 2\n"
            "- k: \"v\"\n"
            "  j: 1\n"
            "file: |\n"
            "  line one\n"
            "    indented\n"
            "blank: \"a\\n  \\nb\"\n");
}

}  // namespace
}  // namespace sweep::cluster
