#include "k8s.h"

#include <cctype>
#include <cstdio>

namespace sweep::cluster {

using json = nlohmann::ordered_json;

namespace {

constexpr const char* kTokenDir = "/etc/sweep/token";
constexpr const char* kConfigDir = "/etc/sweep/config";
constexpr const char* kDataDir = "/data";
constexpr const char* kSharedDir = "/shared";

json Labels(const K8sSweep& k, const char* component) {
  return {{"app.kubernetes.io/name", "sweep"},
          {"app.kubernetes.io/instance", K8sName(k.sweep_name)},
          {"app.kubernetes.io/component", component}};
}

json Metadata(const K8sSweep& k, const std::string& name, const char* component) {
  json m = {{"name", name}, {"labels", Labels(k, component)}};
  if (!k.ns.empty()) m["namespace"] = k.ns;
  return m;
}

// The token as a file only its owner reads (the agent and the coordinator refuse one that
// others can read).
json TokenVolume(const std::string& secret) {
  return {{"name", "token"}, {"secret", {{"secretName", secret}, {"defaultMode", 0400}}}};
}

// The config's key in its ConfigMap, which is also its file name in the coordinator's pod:
// Kubernetes takes only letters, digits, '-', '_' and '.' there, and the coordinator's shell
// command then needs no quoting. Other characters become '-'.
std::string ConfigKey(const std::string& file) {
  std::string key;
  for (char c : file) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    key += ok ? c : '-';
  }
  if (key.empty() || key == "." || key == "..") key = "sweep.toml";
  return key.substr(0, 253);
}

json SharedMount(const K8sSweep& k, json* volumes) {
  if (k.shared_claim.empty()) return nullptr;
  volumes->push_back(
      {{"name", "shared"}, {"persistentVolumeClaim", {{"claimName", k.shared_claim}}}});
  return {{"name", "shared"}, {"mountPath", kSharedDir}};
}

}  // namespace

std::string K8sName(const std::string& text, size_t max) {
  std::string out;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) {
      out += static_cast<char>(std::tolower(u));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  if (out.size() > max) out.resize(max);
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "sweep" : out;
}

Status CheckK8sSweep(const K8sSweep& k) {
  if (k.agents < 1) return Status::InvalidArgument("--agents: give 1 or more");
  if (k.gpus_per_agent < 0) return Status::InvalidArgument("--gpus-per-agent: must be >= 0");
  if (k.gpus_per_agent == 0 && k.cpu_slots < 1) {
    return Status::InvalidArgument(
        "give --gpus-per-agent K (GPU trials) or --cpu-slots N (CPU trials): each agent must "
        "offer something");
  }
  if (k.image.empty()) return Status::InvalidArgument("--image: must not be empty");
  if (!k.ns.empty() && K8sName(k.ns, 63) != k.ns) {
    return Status::InvalidArgument("--namespace " + k.ns +
                                   ": expected lower-case letters, digits and '-'");
  }
  if (k.grace_s < 1) return Status::InvalidArgument("--grace: must be at least 1 s");
  return Status::Ok();
}

std::vector<json> K8sManifests(const K8sSweep& k) {
  const std::string base = K8sName(k.sweep_name);
  const std::string secret = base + "-token", config = base + "-config",
                    coordinator = base + "-coordinator", agents = base + "-agents";
  const std::string token_file = std::string(kTokenDir) + "/token";
  std::vector<json> out;

  json s = {{"apiVersion", "v1"}, {"kind", "Secret"}, {"type", "Opaque"}};
  s["metadata"] = Metadata(k, secret, "token");
  s["stringData"] = {{"token", k.token}};
  out.push_back(s);

  json cm = {{"apiVersion", "v1"}, {"kind", "ConfigMap"}};
  cm["metadata"] = Metadata(k, config, "config");
  const std::string config_key = ConfigKey(k.config_file);
  cm["data"] = {{config_key, k.config_text}};
  out.push_back(cm);

  // Headless: the name resolves to the coordinator's pod, which the StatefulSet keeps at one.
  json svc = {{"apiVersion", "v1"}, {"kind", "Service"}};
  svc["metadata"] = Metadata(k, coordinator, "coordinator");
  svc["spec"] = {{"clusterIP", "None"},
                 {"selector", Labels(k, "coordinator")},
                 {"ports", json::array({{{"name", "agents"}, {"port", k.port}}})}};
  out.push_back(svc);

  // `run --resume` goes on with the sweep the volume holds after a restart; once the sweep is
  // over the coordinator stays up (idle), so that `kubectl exec` can query its store.
  const std::string run = "sweep run " + std::string(kConfigDir) + "/" + config_key +
                          " --resume --db " + kDataDir +
                          "/sweeps.db --listen 0.0.0.0:" + std::to_string(k.port) +
                          " --token-file " + token_file + " --no-local && exec sleep infinity";
  json coord_volumes =
      json::array({TokenVolume(secret), {{"name", "config"}, {"configMap", {{"name", config}}}}});
  json coord_mounts = json::array({{{"name", "token"}, {"mountPath", kTokenDir}},
                                   {{"name", "config"}, {"mountPath", kConfigDir}},
                                   {{"name", "data"}, {"mountPath", kDataDir}}});
  if (json m = SharedMount(k, &coord_volumes); !m.is_null()) coord_mounts.push_back(m);
  json sts = {{"apiVersion", "apps/v1"}, {"kind", "StatefulSet"}};
  sts["metadata"] = Metadata(k, coordinator, "coordinator");
  sts["spec"] = {
      {"serviceName", coordinator},
      {"replicas", 1},
      {"selector", {{"matchLabels", Labels(k, "coordinator")}}},
      {"template",
       {{"metadata", {{"labels", Labels(k, "coordinator")}}},
        {"spec",
         {{"terminationGracePeriodSeconds", k.grace_s},
          {"containers",
           json::array({{{"name", "coordinator"},
                         {"image", k.image},
                         {"workingDir", kDataDir},
                         {"command", json::array({"/bin/sh", "-c", run})},
                         {"ports", json::array({{{"containerPort", k.port}, {"name", "agents"}}})},
                         {"volumeMounts", coord_mounts}}})},
          {"volumes", coord_volumes}}}}},
      {"volumeClaimTemplates",
       json::array({{{"metadata", {{"name", "data"}}},
                     {"spec",
                      {{"accessModes", json::array({"ReadWriteOnce"})},
                       {"resources", {{"requests", {{"storage", k.storage}}}}}}}}})}};
  out.push_back(sts);

  // An index's pod that exits 0 (the sweep is over) completes it; SIGTERM (a node drained, a
  // preemption) takes the agent's stop-at-checkpoint path within the grace period.
  json command =
      json::array({"sweep", "agent", "--connect", coordinator + ":" + std::to_string(k.port),
                   "--token-file", token_file, "--name", base + "-agent-$(JOB_COMPLETION_INDEX)"});
  json resources = json::object();
  if (k.gpus_per_agent > 0) {
    resources["limits"] = {{"nvidia.com/gpu", k.gpus_per_agent}};
  } else {
    command.push_back("--cpu-slots");
    command.push_back(std::to_string(k.cpu_slots));
    resources["requests"] = {{"cpu", k.cpu_slots}};
  }
  json agent_volumes = json::array({TokenVolume(secret)});
  json agent_mounts = json::array({{{"name", "token"}, {"mountPath", kTokenDir}}});
  if (json m = SharedMount(k, &agent_volumes); !m.is_null()) agent_mounts.push_back(m);
  json job = {{"apiVersion", "batch/v1"}, {"kind", "Job"}};
  job["metadata"] = Metadata(k, agents, "agent");
  if (!k.queue.empty()) {
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = k.queue;
  }
  job["spec"] = {{"completionMode", "Indexed"},
                 {"completions", k.agents},
                 {"parallelism", k.agents},
                 {"backoffLimit", 4 * k.agents},
                 {"template",
                  {{"metadata", {{"labels", Labels(k, "agent")}}},
                   {"spec",
                    {{"restartPolicy", "OnFailure"},
                     {"terminationGracePeriodSeconds", k.grace_s},
                     {"containers", json::array({{{"name", "agent"},
                                                  {"image", k.image},
                                                  {"command", command},
                                                  {"resources", resources},
                                                  {"volumeMounts", agent_mounts}}})},
                     {"volumes", agent_volumes}}}}}};
  // Kueue admits a queued Job by lifting its suspension.
  if (!k.queue.empty()) job["spec"]["suspend"] = true;
  out.push_back(job);
  return out;
}

namespace {

// A scalar as YAML reads it back: strings in double quotes (JSON's escapes are YAML's), so
// "0400", "true" or "on" stay strings.
std::string Scalar(const json& v) { return v.dump(); }

// A key bare where YAML reads it back as that string ("apiVersion", "nvidia.com/gpu"), quoted
// otherwise.
std::string Key(const std::string& key) {
  static const char* const kWords[] = {"y",     "n",  "yes", "no",   "true",
                                       "false", "on", "off", "null", "~"};
  bool bare = !key.empty() && std::isalpha(static_cast<unsigned char>(key[0]));
  for (char c : key) {
    const unsigned char u = static_cast<unsigned char>(c);
    bare = bare && (std::isalnum(u) || c == '_' || c == '.' || c == '/' || c == '-');
  }
  for (const char* w : kWords) {
    std::string lower;
    for (char c : key) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    bare = bare && lower != w;
  }
  return bare ? key : json(key).dump();
}

// A file's text as a literal block keeps its lines as they are, where YAML allows: no carriage
// return, no first line starting with a space, no line of only blanks.
bool LiteralBlockFits(const std::string& text) {
  if (text.find('\n') == std::string::npos || text.find('\r') != std::string::npos) return false;
  if (text.front() == ' ' || text.front() == '\t') return false;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (!line.empty() && line.find_first_not_of(" \t") == std::string::npos) return false;
    start = end + 1;
  }
  return true;
}

void Emit(const json& v, int indent, std::string* out);

void EmitValueAfterKey(const json& v, int indent, std::string* out) {
  if (v.is_object() && !v.empty()) {
    *out += "\n";
    Emit(v, indent + 2, out);
  } else if (v.is_array() && !v.empty()) {
    *out += "\n";
    Emit(v, indent, out);
  } else if (v.is_string() && LiteralBlockFits(v.get_ref<const std::string&>())) {
    // A file's text (the config) as a literal block, readable in the manifest.
    const std::string& text = v.get_ref<const std::string&>();
    *out += text.back() == '\n' ? " |\n" : " |-\n";
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(start, end - start);
      *out += line.empty() ? "\n" : std::string(static_cast<size_t>(indent + 2), ' ') + line + "\n";
      start = end + 1;
    }
  } else {
    *out += " " + (v.is_object() ? "{}" : v.is_array() ? "[]" : Scalar(v)) + "\n";
  }
}

void Emit(const json& v, int indent, std::string* out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      *out += pad + Key(it.key()) + ":";
      EmitValueAfterKey(it.value(), indent, out);
    }
  } else if (v.is_array()) {
    for (const json& item : v) {
      if (item.is_object() && !item.empty()) {
        // "- key: value" with the item's other keys under the first.
        std::string nested;
        Emit(item, indent + 2, &nested);
        *out += pad + "- " + nested.substr(static_cast<size_t>(indent + 2));
      } else if (item.is_array() && !item.empty()) {
        *out += pad + "-\n";
        Emit(item, indent + 2, out);
      } else {
        *out += pad + "-";
        EmitValueAfterKey(item, indent, out);
      }
    }
  } else {
    *out += pad + Scalar(v) + "\n";
  }
}

}  // namespace

std::string ToYaml(const std::vector<json>& documents) {
  std::string out;
  for (const json& d : documents) {
    out += "---\n";
    Emit(d, 0, &out);
  }
  return out;
}

}  // namespace sweep::cluster
