// Durable file writes for checkpoints and the dataset cache: a fresh temporary file next to the
// target, fsync, then an atomic publish (rename, or link for first-writer-wins), then fsync of
// the directory. Readers never see a partial file. Thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sweep::trainer {

struct ByteRange {
  const void* data;
  size_t size;
};

enum class Publish {
  kReplace,    // rename over whatever is there (checkpoints: the newest wins)
  kFirstWins,  // keep an existing file (a cache entry someone else just wrote is as good)
};

// Writes pieces back to back to `path`. With kFirstWins, *published (when not null) says
// whether this call's file is the one now at `path`. IoError names the file and the reason.
Status WriteFileAtomically(const std::string& path, const std::vector<ByteRange>& pieces,
                           Publish publish, bool* published = nullptr);

// Deletes the temporary files in `dir` that a writer killed mid-write left behind (a checkpoint
// of hundreds of MB, a decoded dataset): those of a target name for which `ours` is true, whose
// writing process is no longer alive on this machine. Best effort: errors are ignored.
void RemoveAbandonedTemporaries(const std::string& dir,
                                const std::function<bool(std::string_view target)>& ours);

}  // namespace sweep::trainer
