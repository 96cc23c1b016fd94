// slurm and k8s: starting agents through a cluster manager (docs/clusters.md).
#include "cluster_commands.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "cluster/k8s.h"
#include "cluster/run_tool.h"
#include "cluster/slurm.h"
#include "executor/net_auth.h"
#include "output.h"
#include "sweep/config.h"

namespace sweep {

namespace {

std::string Absolute(const std::string& path) {
  std::error_code ec;
  const auto p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

// A tool's failure: its exit code and what it said, as one line.
Status ToolFailed(const std::string& tool, const cluster::ToolResult& r) {
  std::string said = r.err.empty() ? r.out : r.err;
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  return Status::Unavailable(tool + " failed (exit " + std::to_string(r.exit_code) + ")" +
                             (said.empty() ? "" : ": " + said));
}

// Runs a Slurm tool, passing its output through; its exit code, or a failure to start it.
int PassThrough(const std::vector<std::string>& argv) {
  auto r = cluster::RunTool(argv);
  if (!r.ok()) return Fail(r.status());
  std::cout << r->out;
  std::cerr << r->err;
  return r->exit_code == 0 ? kExitOk : kExitRuntime;
}

class ClusterCommands final : public CommandGroup {
 public:
  ClusterCommands(CLI::App& app, const char* argv0) : argv0_(argv0) {
    slurm_ = app.add_subcommand("slurm", "start agents as a Slurm job array");
    slurm_->require_subcommand(1);
    submit_ = slurm_->add_subcommand("submit", "submit one job array of agents (sbatch)");
    submit_->add_option("--agents", job_.agents, "array tasks, one agent each")
        ->required()
        ->check(WholeNumber(1, 100000));
    submit_->add_option("--gpus-per-agent", job_.gpus_per_agent, "GPUs each task asks for")
        ->check(WholeNumber(0, 64));
    submit_->add_option("--gpu-request", job_.gpu_request,
                        "how GPUs are asked for: gres (--gres=gpu:K) or gpus (--gpus=K)");
    submit_
        ->add_option("--cpu-slots", job_.cpu_slots,
                     "CPU slots per agent (--cpus-per-task); without GPUs, what it offers")
        ->check(WholeNumber(0, 1024));
    submit_->add_option("--time", job_.time, "each task's time limit, e.g. 4:00:00");
    submit_->add_option("--partition", job_.partition, "Slurm partition");
    submit_->add_option("--account", job_.account, "Slurm account");
    submit_->add_option("--sbatch-arg", job_.sbatch_args,
                        "one more sbatch option, e.g. --sbatch-arg=--qos=high (repeatable)");
    submit_->add_option("--signal", job_.signal,
                        "the warning before the kill (default B:USR1@120)");
    submit_
        ->add_option("--connect", job_.connect,
                     "the coordinator's HOST:PORT (as `sweep run --listen` prints it)")
        ->required();
    submit_->add_option("--token-file", job_.token_file, "the token file, where nodes read it")
        ->required();
    submit_->add_option("--retry-for", job_.retry_for,
                        "how long agents wait for the coordinator (their default: 10m)");
    submit_->add_option("--sweep-binary", job_.sweep_binary,
                        "sweep as the nodes reach it (default: this one)");
    submit_->add_option("--job-name", job_.job_name, "the job's name (default sweep-agents)");
    submit_->add_option("--output", job_.output, "each task's log (default sweep-agent-%A_%a.log)");
    submit_->add_flag("--dry-run", dry_run_, "print the batch script; submit nothing");
    submit_->footer(
        "Example: sweep slurm submit --agents 8 --gpus-per-agent 1 --time 4:00:00 \\\n"
        "           --connect login1:7070 --token-file ~/.sweep-token\n"
        "Prints the job id. Agents exit when the sweep is over, ending their tasks early.");
    // A job id and nothing else: `slurm cancel -- --user=me` would otherwise reach scancel and
    // cancel every job of that user.
    const CLI::Validator job_id(
        [](const std::string& id) -> std::string {
          const size_t task = id.find('_');
          auto digits = [](std::string_view d) {
            return !d.empty() && d.size() <= 20 &&
                   std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
          };
          const std::string_view v = id;
          if (digits(v.substr(0, task)) &&
              (task == std::string::npos || digits(v.substr(task + 1)))) {
            return "";
          }
          return "expected the job id submit printed (digits, or ID_TASK for one task), got '" +
                 id + "'";
        },
        "JOB_ID");
    status_ = slurm_->add_subcommand("status", "the job array's tasks (squeue)");
    status_->add_option("JOB", job_id_, "the job id submit printed")->required()->check(job_id);
    cancel_ = slurm_->add_subcommand("cancel", "cancel the job array (scancel)");
    cancel_->add_option("JOB", job_id_, "the job id submit printed")->required()->check(job_id);

    k8s_ = app.add_subcommand("k8s", "run a sweep on Kubernetes");
    k8s_->require_subcommand(1);
    render_ =
        k8s_->add_subcommand("render", "print the manifests for a sweep (kubectl apply -f -)");
    render_->add_option("CONFIG", config_path_, "sweep config (TOML)")->required();
    render_->add_option("--agents", k8s_sweep_.agents, "agent pods (an Indexed Job)")
        ->required()
        ->check(WholeNumber(1, 100000));
    render_->add_option("--gpus-per-agent", k8s_sweep_.gpus_per_agent, "nvidia.com/gpu per agent")
        ->check(WholeNumber(0, 64));
    render_
        ->add_option("--cpu-slots", k8s_sweep_.cpu_slots, "CPU slots per agent, when it has no GPU")
        ->check(WholeNumber(0, 1024));
    render_->add_option("--image", k8s_sweep_.image, "an image with sweep on its PATH")->required();
    render_->add_option("--namespace", k8s_sweep_.ns, "the namespace");
    render_->add_option("--queue", k8s_sweep_.queue, "Kueue's LocalQueue for the agents");
    render_->add_option("--storage", k8s_sweep_.storage,
                        "the coordinator's volume for the store (default 10Gi)");
    render_->add_option("--shared-claim", k8s_sweep_.shared_claim,
                        "a ReadWriteMany claim mounted at /shared on every pod (checkpoints)");
    render_->add_option("--token-file", token_file_, "the token (default: a new one)");
    render_->add_option("--grace", k8s_sweep_.grace_s,
                        "seconds from SIGTERM to SIGKILL for a pod (default 300)");
  }

  std::optional<int> Run() override {
    if (submit_->parsed()) return Submit();
    if (status_->parsed()) {
      return PassThrough(
          {"squeue", "--jobs", job_id_, "--array", "--format", "%.20i %.10T %.12M %.30R"});
    }
    if (cancel_->parsed()) return PassThrough({"scancel", job_id_});
    if (render_->parsed()) return Render();
    return std::nullopt;
  }

 private:
  int Submit() {
    if (job_.sweep_binary.empty()) job_.sweep_binary = SelfExe(argv0_);
    job_.token_file = Absolute(job_.token_file);
    if (Status s = cluster::CheckSlurmJob(job_); !s.ok()) return Fail(s);
    // The agents would refuse a token others can read; say so now, not in every task's log.
    if (auto token = executor::net::ReadTokenFile(job_.token_file); !token.ok()) {
      return Fail(token.status());
    }
    const std::string script = cluster::SlurmScript(job_);
    if (dry_run_) {
      std::cout << script;
      return kExitOk;
    }
    auto r = cluster::RunTool({"sbatch", "--parsable"}, script);
    if (!r.ok()) return Fail(r.status());
    if (r->exit_code != 0) return Fail(ToolFailed("sbatch", *r));
    std::string id = r->out.substr(0, r->out.find_first_of(";\n"));
    std::cout << id << "\n";
    std::cerr << "sweep: submitted job array " << id << " (" << job_.agents
              << " agent(s)); `sweep slurm status " << id << "` shows its tasks\n";
    return kExitOk;
  }

  int Render() {
    auto cfg = LoadConfig(config_path_, ConfigUse::kSweepElsewhere);
    if (!cfg.ok()) return Fail(cfg.status());
    k8s_sweep_.sweep_name = cfg->sweep.name;
    k8s_sweep_.config_file = std::filesystem::path(config_path_).filename().string();
    k8s_sweep_.config_text = cfg->text;
    if (Status s = cluster::CheckK8sSweep(k8s_sweep_); !s.ok()) return Fail(s);
    if (!token_file_.empty()) {
      auto token = executor::net::ReadTokenFile(token_file_);
      if (!token.ok()) return Fail(token.status());
      k8s_sweep_.token = *token;
    } else {
      auto token = executor::net::NewNonce();
      if (!token.ok()) return Fail(token.status());
      k8s_sweep_.token = *token;
    }
    if (Status s = CheckPodFolders(*cfg); !s.ok()) return Fail(s);
    if (Status s = CheckAgentsFit(*cfg); !s.ok()) return Fail(s);
    std::cout << cluster::ToYaml(cluster::K8sManifests(k8s_sweep_));
    WarnOfAConfigFolderWorkdir(*cfg);
    return kExitOk;
  }

  // A trial runs on one agent: its slots must fit one, and the GPU backend needs GPU agents.
  // Otherwise no pod could ever run a trial, found only once the manifests are applied.
  Status CheckAgentsFit(const SweepConfig& cfg) const {
    const bool gpus = k8s_sweep_.gpus_per_agent > 0;
    const int offer = gpus ? k8s_sweep_.gpus_per_agent : k8s_sweep_.cpu_slots;
    const std::string flag =
        std::string(gpus ? "--gpus-per-agent " : "--cpu-slots ") + std::to_string(offer);
    if (cfg.trial.slots > offer) {
      return Status::InvalidArgument(
          (cfg.where.slots.empty() ? config_path_ : cfg.where.slots) + ": trial.gpus: " +
          std::to_string(cfg.trial.slots) + " slots per trial, but each agent offers " +
          std::to_string(offer) + " (" + flag + "): no agent could run a trial; offer " +
          std::to_string(cfg.trial.slots) + " per agent, or lower trial.gpus");
    }
    if (gpus || cfg.trial.kind != TrialKind::kTrainer) return Status::Ok();
    std::string why;
    if (auto b = cfg.trainer.find("backend"); b != cfg.trainer.end() && *b == "cuda") {
      why = "trainer.backend = \"cuda\"";
    }
    if (const search::Parameter* p = cfg.search.space.Find("backend")) {
      const auto& values = p->distribution.values;
      if (std::find(values.begin(), values.end(), nlohmann::json("cuda")) != values.end()) {
        why = "parameters.backend takes \"cuda\"";
      }
    }
    if (why.empty()) return Status::Ok();
    const std::string& where = cfg.where.backend.empty() ? config_path_ : cfg.where.backend;
    return Status::InvalidArgument(where + ": " + why + ", and the agents offer CPU slots (" +
                                   flag +
                                   "): such trials would fail as they start; give "
                                   "--gpus-per-agent K, or train on the CPU (backend = \"cpu\")");
  }

  // Where trials keep their files in the pods: a trainer trial's checkpoints (checkpoint_dir), a
  // command trial's folder (trials_dir). A relative folder is the config's folder's, the
  // ConfigMap's read-only mount on the coordinator, which would fail at its start: refused.
  // Unset, or absolute outside /shared, each agent keeps its own, lost with its pod: said, not
  // refused (the image may mount storage there).
  Status CheckPodFolders(const SweepConfig& cfg) const {
    const bool trainer = cfg.trial.kind == TrialKind::kTrainer;
    if (!trainer && cfg.trial.kind != TrialKind::kCommand) return Status::Ok();
    const std::string key = trainer ? "checkpoint_dir" : "trials_dir";
    const std::string& dir = trainer ? cfg.trial.checkpoint_dir : cfg.trial.trials_dir;
    const std::string fix = "set " + key + " = \"/shared/" + (trainer ? "checkpoints" : "trials") +
                            "\" in [trial], with --shared-claim";
    if (!dir.empty() && dir.front() != '/') {
      return Status::InvalidArgument(config_path_ + ": trial." + key + " \"" + dir +
                                     "\" is relative, so in the pods it is in the config's "
                                     "folder, the coordinator's read-only mount of the config: " +
                                     fix);
    }
    const bool shared = dir == "/shared" || dir.starts_with("/shared/");
    if (shared && !k8s_sweep_.shared_claim.empty()) return Status::Ok();
    std::cerr << "sweep: warning: " << config_path_ << ": trial." << key
              << (shared        ? " is under /shared, which only --shared-claim mounts, so "
                  : dir.empty() ? " is not set, so "
                                : " is not under /shared, so ")
              << (trainer ? "each agent pod keeps its trials' checkpoints to itself: a trial "
                            "moved to another agent (its pod preempted or evicted) starts over; "
                          : "each agent pod keeps its trials' folders (their logs and files) to "
                            "itself, lost with the pod; a trial moved to another agent starts "
                            "in a new folder; ")
              << fix << "\n";
    return Status::Ok();
  }

  // A command trial starts in trial.workdir, by default the config's folder (a relative one is
  // in it): in the pods that is the ConfigMap's mount, which only the coordinator has, so every
  // trial would fail on the agents. Said, not refused: the image may hold that folder.
  void WarnOfAConfigFolderWorkdir(const SweepConfig& cfg) const {
    if (cfg.trial.kind != TrialKind::kCommand) return;
    std::error_code ec;
    const std::string base =
        std::filesystem::absolute(config_path_, ec).parent_path().lexically_normal().string();
    const std::string& dir = cfg.trial.workdir;
    if (dir != base && dir.rfind(base + "/", 0) != 0) return;
    std::cerr << "sweep: warning: " << config_path_
              << ": command trials start in trial.workdir, here the config's folder, which in "
                 "the pods is the config's mount: the coordinator's pod alone has it, so the "
                 "agents could not start a trial. Set trial.workdir to an absolute folder that "
                 "the agents' image holds with the program (or one under /shared, with "
                 "--shared-claim)\n";
  }

  const char* argv0_;
  CLI::App* slurm_ = nullptr;
  CLI::App* submit_ = nullptr;
  CLI::App* status_ = nullptr;
  CLI::App* cancel_ = nullptr;
  CLI::App* k8s_ = nullptr;
  CLI::App* render_ = nullptr;
  cluster::SlurmJob job_;
  bool dry_run_ = false;
  std::string job_id_;
  cluster::K8sSweep k8s_sweep_;
  std::string config_path_;
  std::string token_file_;
};

}  // namespace

std::unique_ptr<CommandGroup> AddClusterCommands(CLI::App& app, const char* argv0) {
  return std::make_unique<ClusterCommands>(app, argv0);
}

}  // namespace sweep
