// Kubernetes: the manifests `sweep k8s render` prints for a sweep. The coordinator runs as a
// StatefulSet of one, with a persistent volume for the SQLite file; agents run as an Indexed Job
// that connects to it through a Service; a Secret holds the token. Pure: the manifests are a
// function of the options.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace sweep::cluster {

struct K8sSweep {
  std::string sweep_name;        // [sweep] name: the resources' names start with it
  std::string config_file;       // the config's file name, as the coordinator reads it
  std::string config_text;       // its contents (a ConfigMap)
  int agents = 0;                // the Job's completions and parallelism
  int gpus_per_agent = 0;        // nvidia.com/gpu per agent; 0: CPU slots
  int cpu_slots = 0;             // CPU slots per agent (its CPU request) when it has no GPU
  std::string image;             // holds `sweep` on PATH (and what command trials run)
  std::string ns;                // the namespace; empty: the one kubectl uses
  std::string queue;             // Kueue's LocalQueue; empty: no Kueue
  std::string token;             // the Secret's
  std::string storage = "10Gi";  // the coordinator's volume (SQLite file, trial folders)
  std::string shared_claim;  // a ReadWriteMany claim mounted at /shared everywhere (checkpoints)
  int port = 7070;
  int grace_s = 300;  // time from SIGTERM to SIGKILL for an agent: its trials' checkpoints
};

// What is wrong with the options, naming the flag; Ok when nothing.
Status CheckK8sSweep(const K8sSweep& k);

// The manifests, in the order to apply them: Secret, ConfigMap, Service, StatefulSet, Job.
std::vector<nlohmann::ordered_json> K8sManifests(const K8sSweep& k);

// A name Kubernetes takes (RFC 1123 label: lower case, digits and '-', at most `max` long).
std::string K8sName(const std::string& text, size_t max = 40);

// The manifests as one YAML stream: block style, documents separated by "---".
std::string ToYaml(const std::vector<nlohmann::ordered_json>& documents);

}  // namespace sweep::cluster
