// Slurm: the batch script `sweep slurm submit` hands to sbatch, one sweep agent per task of a job
// array. Pure: the script is a function of the options; running sbatch is the command's job.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace sweep::cluster {

struct SlurmJob {
  int agents = 0;                    // array tasks, one agent each (>= 1)
  int gpus_per_agent = 0;            // GPUs each task asks for; 0: CPU slots only
  std::string gpu_request = "gres";  // "gres" (--gres=gpu:K) or "gpus" (--gpus=K)
  int cpu_slots = 0;                 // CPU slots each agent offers (and --cpus-per-task); 0: none
  std::string time;                  // --time, as Slurm reads it ("4:00:00", "1-00:00:00")
  std::string partition;
  std::string account;
  std::vector<std::string> sbatch_args;  // passed through, each as one #SBATCH line
  std::string connect;                   // the coordinator's HOST:PORT
  std::string token_file;                // on storage every node reaches
  std::string signal = "B:USR1@120";     // the warning before a time limit or preemption
  std::string job_name = "sweep-agents";
  std::string output = "sweep-agent-%A_%a.log";
  std::string sweep_binary;  // the sweep the nodes run (an absolute path)
  std::string retry_for;     // agents' --retry-for; empty: theirs
};

// What is wrong with the options, naming the flag; Ok when nothing.
Status CheckSlurmJob(const SlurmJob& job);

// The batch script (sbatch reads it on its standard input).
std::string SlurmScript(const SlurmJob& job);

// `text` as one word for sh: in single quotes, its own quotes escaped.
std::string ShellQuote(const std::string& text);

}  // namespace sweep::cluster
