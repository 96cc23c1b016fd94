// The coordinator's entry points (RunSweep, ResumeSweep), the runners a sweep gets by default,
// and what `run` checks before it opens a store.
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/hash.h"
#include "coordinator_loop.h"
#include "executor/net_auth.h"
#include "executor/transport.h"
#include "output.h"

namespace sweep {

uint64_t TrialSeed(uint64_t sweep_seed, int64_t number) {
  uint64_t z = SplitMix64(SplitMix64(sweep_seed) ^ static_cast<uint64_t>(number));
  return z & 0x7FFFFFFFFFFFFFFFULL;  // fits a signed 64-bit column
}

Status FitsHere(const SweepConfig& config, const RunOptions& options, int local_slots,
                bool local_gpus) {
  if (options.listen_host.empty() && config.trial.slots > local_slots) {
    return Status::InvalidArgument((config.where.slots.empty() ? config.path : config.where.slots) +
                                   ": trial.gpus: " + std::to_string(config.trial.slots) +
                                   " slots per trial, but this machine offers " +
                                   std::to_string(local_slots) +
                                   " (add agents with --listen, or lower it)");
  }
  // Where this machine cannot hold a trial, only agents run them, and theirs count.
  if (options.local_slots && local_slots >= config.trial.slots) {
    return MakeTrialKindRules(config)->CheckHere(local_gpus);
  }
  return Status::Ok();
}

store::LockWait SweepLockWait(const RunOptions& options, const std::string& path) {
  // Another process holding a write transaction (a sqlite3 shell, a viewer) does not end the
  // sweep: its writes wait, said every half minute, for up to ten minutes.
  // An interrupt (Ctrl-C) ends the wait: nothing can be recorded meanwhile, so the sweep
  // stops where it is, and resume goes on from what was stored.
  std::ostream* log = options.log;
  return {std::chrono::minutes(10),
          [log, interrupt = options.interrupt, path, said = -1.0](double waited_s) mutable {
            if (interrupt != nullptr && interrupt->load()) return false;
            if (log == nullptr || (said >= 0 && waited_s < said + 30)) return true;
            said = waited_s;
            *log << "sweep: " << path
                 << " is locked by another process (a sqlite3 shell or a viewer holding a write "
                    "transaction?); waiting to write, "
                 << static_cast<int>(waited_s) << " s so far (Ctrl-C stops the sweep)\n";
            return true;
          }};
}

Result<RunnerSet> DefaultRunners(const SweepConfig& config, const RunOptions& options) {
  RunnerSet runners;
  std::vector<executor::Slot> slots;
  if (options.local_slots) slots = executor::DiscoverLocalSlots(config.executor.cpu_slots);
  runners.Add(
      std::make_unique<LocalRunner>(options.worker_command, options.worker_env, std::move(slots),
                                    static_cast<int64_t>(config.trial.heartbeat_timeout_s * 1000)));
  if (!options.listen_host.empty()) {
    SWEEP_ASSIGN_OR_RETURN(
        auto hub, HubRunner::Listen(options.listen_host, options.listen_port, options.token,
                                    config.executor.agent_timeout_s, options.log));
    runners.Add(std::move(hub));
  }
  return runners;
}

namespace {

// A sweep that stopped on a storage or system error after it was recorded can be resumed: say
// so, since the store's own advice ("run the command again") would be refused by `run`.
Result<RunSummary> WithResumeHint(Result<RunSummary> result, store::Store& store,
                                  const std::string& name) {
  if (result.ok()) return result;
  const Status& s = result.status();
  bool resumable = s.code() == Status::Code::kIoError || s.code() == Status::Code::kCorruption ||
                   s.code() == Status::Code::kInternal;
  // A file removed or replaced: the store's message says what is left and where.
  if (!resumable || store.file_lost()) return result;
  auto sweep = store.FindSweep(name);
  if (!sweep.ok()) return result;
  return s.WithMessage(s.message() + "\nsweep '" + name +
                       "' stopped; what it had committed is kept. Once the cause is fixed, `" +
                       ResumeCommand(*sweep, store.path()) + "` continues it.");
}

}  // namespace

std::string UnusableCacheDir(const std::string& dir) {
  if (dir.empty()) return "";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ec.message();
  if (!std::filesystem::is_directory(dir, ec)) return "not a folder";
  if (::access(dir.c_str(), W_OK) != 0) return std::strerror(errno);
  return "";
}

Status CheckRunHere(const SweepConfig& config, const RunOptions& options) {
  std::vector<executor::Slot> slots;
  if (options.local_slots) slots = executor::DiscoverLocalSlots(config.executor.cpu_slots);
  const bool gpus = std::any_of(slots.begin(), slots.end(), [](const auto& s) { return s.gpu; });
  return FitsHere(config, options, static_cast<int>(slots.size()), gpus);
}

Status CheckCanListen(const RunOptions& options) {
  // Listened on, and let go, the same way the sweep's own listening does; port 0 is always free.
  if (options.listen_host.empty() || options.listen_port == 0) return Status::Ok();
  boost::asio::io_context io;
  auto probe = executor::net::MakeTcpTransport(io);
  auto bound = probe->Listen(options.listen_host, options.listen_port, [](auto&&) {});
  if (!bound.ok()) return bound.status();
  probe->StopListening();
  return Status::Ok();
}

Result<RunSummary> RunSweepWith(const SweepConfig& config, store::Store& store,
                                const RunOptions& options, const CoordinatorSeams& seams) {
  return WithResumeHint(Coordinator(store, options, seams).Start(config), store, config.sweep.name);
}

Result<RunSummary> ResumeSweepWith(const std::string& name, store::Store& store,
                                   const RunOptions& options, const CoordinatorSeams& seams) {
  return WithResumeHint(Coordinator(store, options, seams).Resume(name), store, name);
}

Result<RunSummary> RunSweep(const SweepConfig& config, store::Store& store,
                            const RunOptions& options) {
  return RunSweepWith(config, store, options, {});
}

Result<RunSummary> ResumeSweep(const std::string& name, store::Store& store,
                               const RunOptions& options) {
  return ResumeSweepWith(name, store, options, {});
}

}  // namespace sweep
