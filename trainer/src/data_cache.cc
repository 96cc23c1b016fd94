// The dataset caches behind LoadCached: this process's (one decode per file version) and the
// machine-wide cache files that every process maps read-only; and where those files live.
#include "data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "base/utf8.h"
#include "file_util.h"
#include "image_folder.h"

namespace sweep::trainer {
namespace {

// Datasets kept decoded at once; a worker usually trains on one, so this only bounds the
// memory a sweep over several datasets can pin.
constexpr size_t kMaxCachedDatasets = 4;

// ---- the machine-wide cache file ----
//
// One file per (dataset key): decoded arrays laid out so that a read-only mapping can be used
// in place. Files are immutable once published, so mapping needs no locks.
//   "SWEEPDS1"        magic and format version
//   header_bytes      uint32
//   header_crc        uint32 (CRC-32 of the header)
//   header            JSON: key, source, n, dim, num_classes, shape, dtype (u8 | f32),
//                     labels_offset, features_offset, file_bytes, payload_crc32; a folder
//                     set adds classes, skipped_files and skipped
//   labels            int32[n] at labels_offset (64-byte aligned)
//   features          u8 or f32 [n, dim] at features_offset (64-byte aligned)
// payload_crc32 is the CRC-32 of labels then features: a file damaged in place is decoded
// again, never trained on.

constexpr char kCacheMagic[8] = {'S', 'W', 'E', 'E', 'P', 'D', 'S', '1'};
constexpr size_t kCachePrefix = sizeof kCacheMagic + 2 * sizeof(uint32_t);

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t AlignUp64(uint64_t n) { return (n + 63) / 64 * 64; }

// The mapping's owner: unmaps when the last Dataset viewing it is gone.
struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr != nullptr) ::munmap(addr, size);
  }
};

std::atomic<int64_t> g_decodes{0};
std::atomic<int64_t> g_maps{0};

// The CRC-32 of a cache file's labels, then its features (zlib's, at several GB/s).
uint32_t PayloadCrc(std::span<const int32_t> labels, const void* features, uint64_t bytes) {
  uLong crc = crc32(0, nullptr, 0);
  // zlib takes at most 4 GiB a call.
  auto add = [&crc](const void* data, uint64_t size) {
    const Bytef* p = static_cast<const Bytef*>(data);
    while (size > 0) {
      const uInt chunk = static_cast<uInt>(std::min<uint64_t>(size, uint64_t{1} << 30));
      crc = crc32(crc, p, chunk);
      p += chunk;
      size -= chunk;
    }
  };
  add(labels.data(), labels.size_bytes());
  add(features, bytes);
  return static_cast<uint32_t>(crc);
}

// Maps the cache file at `path` if it holds `key`. NotFound when there is none; Corruption for
// a damaged or foreign one (a 64-bit name clash, an older format). Both mean: decode instead.
Result<DatasetPtr> MapCacheFile(const std::string& path, const std::string& key) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound(path);
  const Status bad = Status::Corruption(path);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kCachePrefix)) {
    return bad;
  }
  char prefix[kCachePrefix];
  if (::pread(fd, prefix, sizeof prefix, 0) != static_cast<ssize_t>(sizeof prefix) ||
      std::memcmp(prefix, kCacheMagic, sizeof kCacheMagic) != 0) {
    return bad;
  }
  uint32_t header_bytes = 0, header_crc = 0;
  std::memcpy(&header_bytes, prefix + 8, 4);
  std::memcpy(&header_crc, prefix + 12, 4);
  if (header_bytes > (1u << 20) ||
      kCachePrefix + header_bytes > static_cast<uint64_t>(st.st_size)) {
    return bad;
  }
  std::string text(header_bytes, '\0');
  if (::pread(fd, text.data(), header_bytes, kCachePrefix) != static_cast<ssize_t>(header_bytes) ||
      crc32(0, reinterpret_cast<const Bytef*>(text.data()), header_bytes) != header_crc) {
    return bad;
  }
  Dataset meta;
  uint64_t labels_at = 0, features_at = 0, file_bytes = 0;
  uint32_t payload_crc = 0;
  bool f32 = false;
  try {
    const nlohmann::json h = nlohmann::json::parse(text);
    if (h.at("key").get<std::string>() != Utf8Text(key, /*lossless=*/true)) {
      return bad;  // a hash clash
    }
    meta.source = h.at("source").get<std::string>();
    meta.n = h.at("n").get<int64_t>();
    meta.dim = h.at("dim").get<int64_t>();
    meta.num_classes = h.at("num_classes").get<int>();
    meta.shape = h.at("shape").get<std::vector<int64_t>>();
    f32 = h.at("dtype").get<std::string>() == "f32";
    labels_at = h.at("labels_offset").get<uint64_t>();
    features_at = h.at("features_offset").get<uint64_t>();
    file_bytes = h.at("file_bytes").get<uint64_t>();
    payload_crc = h.at("payload_crc32").get<uint32_t>();  // absent in older files: decoded again
    // A folder set's label map and what was skipped decoding it.
    meta.class_names = h.value("classes", std::vector<std::string>{});
    meta.skipped_files = h.value("skipped_files", int64_t{0});
    meta.skipped = h.value("skipped", std::vector<std::string>{});
  } catch (const std::exception&) {
    return bad;
  }
  const uint64_t n = static_cast<uint64_t>(meta.n), dim = static_cast<uint64_t>(meta.dim);
  const uint64_t feature_bytes = n * dim * (f32 ? sizeof(float) : 1);
  if (meta.n <= 0 || meta.dim <= 0 || meta.num_classes < 1 ||
      file_bytes != static_cast<uint64_t>(st.st_size) || labels_at % 64 != 0 ||
      features_at % 64 != 0 || labels_at + n * 4 > features_at ||
      features_at + feature_bytes != file_bytes) {
    return bad;
  }
  // MAP_POPULATE: fault the pages in now, not row by row in the first epoch's gathers.
  void* addr = ::mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (addr == MAP_FAILED) return bad;
  auto mapping = std::make_shared<Mapping>();
  mapping->addr = addr;
  mapping->size = file_bytes;
  const char* base = static_cast<const char*>(addr);
  auto ds = std::make_shared<Dataset>(std::move(meta));
  ds->labels = {reinterpret_cast<const int32_t*>(base + labels_at), n};
  // A file damaged in place (its header intact) is found by its checksum; and labels, which
  // index the model's outputs, are checked besides. The caller decodes the data again and
  // replaces the file.
  const int32_t classes = ds->num_classes;
  if (PayloadCrc(ds->labels, base + features_at, feature_bytes) != payload_crc ||
      !std::all_of(ds->labels.begin(), ds->labels.end(),
                   [classes](int32_t l) { return l >= 0 && l < classes; })) {
    return bad;
  }
  if (f32) {
    ds->f32 = {reinterpret_cast<const float*>(base + features_at), n * dim};
  } else {
    ds->u8 = {reinterpret_cast<const uint8_t*>(base + features_at), n * dim};
  }
  ds->storage = std::move(mapping);
  ds->mapped = true;
  g_maps.fetch_add(1);
  return DatasetPtr(std::move(ds));
}

Status WriteCacheFile(const std::string& path, const std::string& key, const Dataset& d,
                      Publish publish) {
  const bool f32 = d.u8.empty();
  const uint64_t n = static_cast<uint64_t>(d.n);
  const uint64_t feature_bytes = f32 ? d.f32.size_bytes() : d.u8.size_bytes();
  // JSON holds UTF-8 only: a path reached through a link may not be (its target's real name).
  nlohmann::json h = {{"key", Utf8Text(key, /*lossless=*/true)},
                      {"source", Utf8Text(d.source)},
                      {"n", d.n},
                      {"dim", d.dim},
                      {"num_classes", d.num_classes},
                      {"shape", d.shape},
                      {"dtype", f32 ? "f32" : "u8"}};
  if (!d.class_names.empty()) {
    // Names for showing (labels are their places): a name that is not UTF-8 is shown escaped.
    std::vector<std::string> names, skipped;
    for (const std::string& c : d.class_names) names.push_back(Utf8Text(c));
    for (const std::string& why : d.skipped) skipped.push_back(Utf8Text(why));
    h["classes"] = names;
    h["skipped_files"] = d.skipped_files;
    h["skipped"] = skipped;
  }
  // The header's length depends on the offsets it holds: size it with generous placeholders.
  h["labels_offset"] = h["features_offset"] = h["file_bytes"] = uint64_t{1} << 60;
  // The data's own checksum: a file damaged in place is decoded again, never trained on.
  h["payload_crc32"] = PayloadCrc(
      d.labels,
      f32 ? static_cast<const void*>(d.f32.data()) : static_cast<const void*>(d.u8.data()),
      feature_bytes);
  const uint64_t labels_at = AlignUp64(kCachePrefix + h.dump().size());
  const uint64_t features_at = AlignUp64(labels_at + n * sizeof(int32_t));
  h["labels_offset"] = labels_at;
  h["features_offset"] = features_at;
  h["file_bytes"] = features_at + feature_bytes;
  const std::string text = h.dump();
  const uint32_t header_bytes = static_cast<uint32_t>(text.size());
  const uint32_t header_crc =
      static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(text.data()), header_bytes));
  // The header came out shorter than its placeholders' size: its padding can exceed 63 bytes.
  const uint64_t header_pad = labels_at - kCachePrefix - text.size();
  const uint64_t labels_pad = features_at - labels_at - n * sizeof(int32_t);
  const std::vector<char> zeros(std::max(header_pad, labels_pad), 0);
  const std::vector<ByteRange> pieces = {
      {kCacheMagic, sizeof kCacheMagic},
      {&header_bytes, sizeof header_bytes},
      {&header_crc, sizeof header_crc},
      {text.data(), text.size()},
      {zeros.data(), header_pad},
      {d.labels.data(), n * sizeof(int32_t)},
      {zeros.data(), labels_pad},
      {f32 ? static_cast<const void*>(d.f32.data()) : d.u8.data(), feature_bytes}};
  return WriteFileAtomically(path, pieces, publish);
}

// Cache files of the same dataset files under older sizes or mtimes: never mapped again.
// Unlinking one another process still maps is safe (the mapping keeps the pages).
void RemoveStaleCacheFiles(const std::string& dir, const std::string& prefix,
                           const std::string& keep) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name != keep && name.rfind(prefix, 0) == 0 && name.size() == keep.size() &&
        name.ends_with(".sds")) {
      std::filesystem::remove(entry.path(), ec);
    }
  }
  // And what decodes of these files killed while they wrote their cache file left.
  RemoveAbandonedTemporaries(dir, [&](std::string_view target) {
    return target.starts_with(prefix) && target.ends_with(".sds");
  });
}

// ---- this process's cache ----
//
// One mutex guards the list; a load runs outside it, so loading one file never blocks readers
// of another, and callers of a key being loaded wait on its future.
struct Cache {
  std::mutex mu;
  struct Entry {
    std::string key;
    std::shared_future<Result<DatasetPtr>> value;
  };
  std::list<Entry> entries;  // most recently used first
};

Cache& GetCache() {
  static Cache* cache = new Cache;  // never destroyed: worker threads may outlive statics
  return *cache;
}

struct FileIdentity {
  std::string path;     // canonical
  std::string version;  // size|mtime
};

// The file's canonical path and "size|mtime", or nullopt when it can't be stat'ed (the
// decoder then reports why).
std::optional<FileIdentity> Identify(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(path, ec);
  if (ec) return std::nullopt;
  const auto size = fs::file_size(canonical, ec);
  if (ec) return std::nullopt;
  const auto mtime = fs::last_write_time(canonical, ec);
  if (ec) return std::nullopt;
  return FileIdentity{canonical.string(), std::to_string(size) + "|" +
                                              std::to_string(mtime.time_since_epoch().count())};
}

Result<DatasetPtr> Decode(const DatasetSpec& spec, const std::string& images,
                          const std::string& labels) {
  g_decodes.fetch_add(1);
  try {
    if (spec.format == "csv") return LoadCsv(images, spec.label_column, spec.header);
    return LoadIdx(images, labels);
  } catch (const std::exception& e) {  // bad_alloc on a huge file
    return Status::IoError(images + ": cannot load: " + e.what());
  }
}

using Decoder = std::function<Result<DatasetPtr>()>;

Result<DatasetPtr> LoadThroughFile(const Decoder& decode, const std::string& key,
                                   const std::string& identity, const std::string& cache_dir) {
  if (cache_dir.empty()) return decode();
  // <identity>-<version>.sds: the identity part (which files) lets a new version find and
  // remove its stale predecessors.
  const std::string prefix = Hex(Fnv1a(identity)) + "-";
  const std::string name = prefix + Hex(Fnv1a(key)) + ".sds";
  const std::string path = cache_dir + "/" + name;
  auto mapped = MapCacheFile(path, key);
  if (mapped.ok()) return mapped;
  auto decoded = decode();
  if (!decoded.ok() || (*decoded)->stream != nullptr) return decoded;  // a stream holds no rows
  // No file: the first of several racing processes to publish wins. A bad one: replace it.
  const Publish publish =
      mapped.status().code() == Status::Code::kNotFound ? Publish::kFirstWins : Publish::kReplace;
  if (!WriteCacheFile(path, key, **decoded, publish).ok()) return decoded;
  RemoveStaleCacheFiles(cache_dir, prefix, name);
  // Map what was published (ours, or an identical one that won the race), so this process
  // shares the page cache with the others instead of keeping a private copy.
  mapped = MapCacheFile(path, key);
  if (mapped.ok()) return mapped;
  return decoded;
}

// Through this process's cache, then the file cache in cache_dir (none when empty).
Result<DatasetPtr> LoadKeyed(const std::string& key, const std::string& identity,
                             const Decoder& decode, const std::string& cache_dir) {
  Cache& cache = GetCache();
  std::promise<Result<DatasetPtr>> promise;
  std::shared_future<Result<DatasetPtr>> pending;
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    for (auto it = cache.entries.begin(); it != cache.entries.end(); ++it) {
      if (it->key == key) {
        cache.entries.splice(cache.entries.begin(), cache.entries, it);
        pending = it->value;
        break;
      }
    }
    if (!pending.valid()) {
      cache.entries.push_front({key, promise.get_future().share()});
      while (cache.entries.size() > kMaxCachedDatasets) cache.entries.pop_back();
    }
  }
  // Waited for outside the lock: another thread may still be loading this very key.
  if (pending.valid()) return pending.get();
  Result<DatasetPtr> r = LoadThroughFile(decode, key, identity, cache_dir);
  promise.set_value(r);
  // Failures are not kept (the next trial may find the file fixed), nor streams: each trial
  // gets its own, with its decode threads and its count of bad files.
  if (!r.ok() || (*r)->stream != nullptr) {
    std::lock_guard<std::mutex> lock(cache.mu);
    cache.entries.remove_if([&](const Cache::Entry& e) { return e.key == key; });
  }
  return r;
}

// A folder set: its key is the reading options, the folder, and its listing's digest of every
// file's path, size and mtime (listing a folder of 60,000 files takes tens of milliseconds).
Result<DatasetPtr> LoadFolderCached(const DatasetSpec& spec, const std::string& dir,
                                    const std::string& cache_dir) {
  SWEEP_ASSIGN_OR_RETURN(FolderListing listing, ListImageFolder(dir));
  if (spec.cache == "stream") return StreamImageFolder(listing, spec);
  std::string reading = spec.on_bad_file;
  for (int side : spec.image_size) reading += "," + std::to_string(side);
  const std::string identity = "folder|" + reading + "|" + listing.root;
  const std::string key = identity + "|" + listing.version;
  const Decoder decode = [&]() -> Result<DatasetPtr> {
    g_decodes.fetch_add(1);
    try {
      return DecodeImageFolder(listing, spec);
    } catch (const std::exception& e) {  // bad_alloc
      return Status::IoError(listing.root + ": cannot load: " + e.what());
    }
  };
  return LoadKeyed(key, identity, decode, cache_dir);
}

}  // namespace

Result<DatasetPtr> LoadCached(const DatasetSpec& spec, bool test, const std::string& cache_dir) {
  const std::string& images = test ? spec.test_images : spec.train_images;
  const std::string& labels = test ? spec.test_labels : spec.train_labels;
  const std::string file_cache = spec.cache == "off" ? "" : cache_dir;
  if (spec.format == "folder") return LoadFolderCached(spec, images, file_cache);
  const bool csv = spec.format == "csv";
  const auto images_id = Identify(images);
  const auto labels_id =
      csv ? std::optional<FileIdentity>(FileIdentity{"-", "-"}) : Identify(labels);
  if (!images_id || !labels_id) return Decode(spec, images, labels);
  const std::string csv_reading =
      csv ? std::to_string(spec.label_column) +
                (spec.header ? (*spec.header ? ",header" : ",no header") : "")
          : "";
  const std::string identity =
      spec.format + "|" + csv_reading + "|" + images_id->path + "|" + labels_id->path;
  const std::string key = identity + "|" + images_id->version + "|" + labels_id->version;
  return LoadKeyed(
      key, identity, [&] { return Decode(spec, images, labels); }, file_cache);
}

void ClearDatasetCache() {
  Cache& cache = GetCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  cache.entries.clear();
}

Result<DatasetSummary> DescribeDataset(const DatasetSpec& spec, bool test,
                                       const std::string& cache_dir) {
  std::string dir = cache_dir;
  if (dir.empty()) {
    dir = DefaultCacheDir();
  } else {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (!std::filesystem::is_directory(dir, ec)) dir.clear();
  }
  SWEEP_ASSIGN_OR_RETURN(const DatasetPtr d, LoadCached(spec, test, dir));
  DatasetSummary s;
  s.source = d->source;
  s.samples = d->n;
  s.shape = d->shape;
  s.num_classes = d->num_classes;
  s.class_names = d->class_names;
  s.class_counts.assign(static_cast<size_t>(d->num_classes), 0);
  for (const int32_t label : d->labels) ++s.class_counts[static_cast<size_t>(label)];
  s.skipped_files = d->skipped_files;
  s.skipped = d->skipped;
  return s;
}

int64_t DatasetDecodeCount() { return g_decodes.load(); }
int64_t DatasetMapCount() { return g_maps.load(); }

std::string DefaultCacheDir() {
  namespace fs = std::filesystem;
  auto usable = [](const fs::path& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    return fs::is_directory(dir, ec) && ::access(dir.c_str(), W_OK | X_OK) == 0;
  };
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/' && usable(fs::path(xdg) / "sweep")) {
    return (fs::path(xdg) / "sweep").string();
  }
  // A home that does not exist (services run with HOME=/nonexistent) is not made: only the
  // cache folder inside one that does.
  const char* home = std::getenv("HOME");
  std::error_code home_ec;
  if (home != nullptr && home[0] == '/' && fs::is_directory(home, home_ec) &&
      usable(fs::path(home) / ".cache" / "sweep")) {
    return (fs::path(home) / ".cache" / "sweep").string();
  }
  // /tmp is shared: the directory must be ours, private, and not a link someone planted.
  const std::string tmp = "/tmp/sweep-cache-" + std::to_string(::getuid());
  ::mkdir(tmp.c_str(), 0700);
  struct stat st;
  if (::lstat(tmp.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::getuid() &&
      (st.st_mode & 077) == 0 && ::access(tmp.c_str(), W_OK | X_OK) == 0) {
    return tmp;
  }
  return "";
}

}  // namespace sweep::trainer
