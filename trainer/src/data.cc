// IDX and CSV decoding, the process-wide dataset cache and the fixed validation split.
// Owned by the trainer. Decoders are pure; the cache is guarded by one mutex, and a decode runs
// outside it so loading one file never blocks readers of another.
#include "data.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <list>
#include <mutex>
#include <numeric>
#include <string_view>

#include "rng.h"

namespace sweep::trainer {
namespace {

// Fixed so every trial, whatever its seed, holds out the same validation samples. Changing it
// changes every score a stored sweep was compared on: don't.
constexpr uint64_t kSplitSeed = 0x5EEDC0DE5A17ull;
// Datasets kept decoded at once; a worker usually trains on one, so this only bounds the
// memory a sweep over several datasets can pin.
constexpr size_t kMaxCachedDatasets = 4;

// Reads a whole file through zlib, which decompresses gzip data (detected by its magic bytes)
// and passes anything else through unchanged.
Result<std::vector<uint8_t>> ReadFile(const std::string& path) {
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    const std::string why = err != 0 ? std::strerror(err) : "out of memory";
    if (err == ENOENT) return Status::NotFound(path + ": cannot open: " + why);
    return Status::IoError(path + ": cannot open: " + why);
  }
  gzbuffer(f, 1 << 17);
  std::vector<uint8_t> bytes;
  size_t size = 0;
  constexpr unsigned kChunk = 1u << 20;
  for (;;) {
    bytes.resize(size + kChunk);
    const int got = gzread(f, bytes.data() + size, kChunk);
    if (got < 0) break;
    size += static_cast<size_t>(got);
    if (got < static_cast<int>(kChunk)) break;
  }
  int errnum = Z_OK;
  const char* msg = gzerror(f, &errnum);
  const std::string zmsg = msg != nullptr ? msg : "";
  gzclose(f);
  if (errnum == Z_BUF_ERROR) {
    return Status::Corruption(path + ": gzip data ends early (unexpected end of file) after " +
                              std::to_string(size) + " bytes");
  }
  if (errnum == Z_ERRNO) return Status::IoError(path + ": read failed: " + std::strerror(errno));
  if (errnum != Z_OK) return Status::Corruption(path + ": bad gzip data: " + zmsg);
  bytes.resize(size);
  bytes.shrink_to_fit();
  return bytes;
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct IdxFile {
  std::vector<uint8_t> bytes;  // the header is erased: just the data
  std::vector<int64_t> dims;   // dims[0]: item count
};

// Reads and checks an IDX file of unsigned bytes: `labels` wants 1 dimension (a label file),
// otherwise 2 or more (count, then each item's shape). The item count in the header must match
// the data exactly.
Result<IdxFile> ReadIdx(const std::string& path, bool labels) {
  auto read = ReadFile(path);
  if (!read.ok()) return read.status();
  std::vector<uint8_t>& b = read.value();
  if (b.size() < 4) {
    return Status::Corruption(path + ": not an IDX file (" + std::to_string(b.size()) +
                              " bytes, too short for the header)");
  }
  if (b[0] != 0 || b[1] != 0) {
    char magic[16];
    std::snprintf(magic, sizeof magic, "0x%02X%02X%02X%02X", b[0], b[1], b[2], b[3]);
    return Status::Corruption(path + ": not an IDX file (magic " + magic + ")");
  }
  if (b[2] != 0x08) {
    char type[8];
    std::snprintf(type, sizeof type, "0x%02X", b[2]);
    return Status::Corruption(path + ": IDX data type " + type +
                              " is not supported (only unsigned bytes, 0x08)");
  }
  const int ndims = b[3];
  const std::string_view kind = labels ? "label" : "image";
  if (labels ? ndims != 1 : ndims < 2) {
    return Status::Corruption(path + ": expected an IDX " + std::string(kind) + " file (" +
                              (labels ? "1 dimension" : "3 dimensions") + "), found " +
                              std::to_string(ndims) + (ndims == 1 ? " dimension" : " dimensions"));
  }
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (b.size() < header) {
    return Status::Corruption(path + ": IDX header is cut short (" + std::to_string(b.size()) +
                              " of " + std::to_string(header) + " bytes)");
  }
  IdxFile out;
  int64_t item = 1;  // bytes per item
  std::string shape;
  for (int d = 0; d < ndims; ++d) {
    const int64_t v = BigEndian32(b.data() + 4 + 4 * d);
    if (d > 0 && v == 0) {
      return Status::Corruption(path + ": IDX dimension " + std::to_string(d + 1) + " is 0");
    }
    if (d > 0) {
      item *= v;
      if (item > (int64_t{1} << 31)) {
        return Status::Corruption(path + ": IDX items are implausibly large");
      }
      if (d > 1) shape += 'x';
      shape += std::to_string(v);
    }
    out.dims.push_back(v);
  }
  const int64_t count = out.dims[0];
  const int64_t data = static_cast<int64_t>(b.size() - header);
  const int64_t found = data / item;
  const std::string plural = std::string(kind) + "s";
  if (found != count) {
    return Status::Corruption(path + ": expected " + std::to_string(count) + " " + plural +
                              (labels ? "" : " of " + shape) + ", found " + std::to_string(found) +
                              (data % item != 0 ? " and part of another" : ""));
  }
  if (data % item != 0) {
    return Status::Corruption(path + ": " + std::to_string(data % item) + " stray bytes after " +
                              std::to_string(count) + " " + plural);
  }
  if (count >= std::numeric_limits<int32_t>::max()) {
    return Status::Corruption(path + ": too many items (" + std::to_string(count) + ")");
  }
  b.erase(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(header));
  b.shrink_to_fit();
  out.bytes = std::move(b);
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

// Parses a whole field as a number; false when any of it is not.
bool ParseFloat(std::string_view s, float* v) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && ptr == s.data() + s.size();
}

void SplitFields(std::string_view line, std::vector<std::string_view>* fields) {
  fields->clear();
  size_t start = 0;
  for (;;) {
    const size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      fields->push_back(Trim(line.substr(start)));
      return;
    }
    fields->push_back(Trim(line.substr(start, comma - start)));
    start = comma + 1;
  }
}

std::string Quote(std::string_view s) {
  std::string out = "\"";
  out.append(s.substr(0, 40));
  if (s.size() > 40) out += "...";
  return out + "\"";
}

}  // namespace

void Dataset::Gather(const int32_t* idx, int64_t count, float* __restrict x,
                     int32_t* __restrict y) const {
  const int64_t d = dim;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t row = idx[i];
    float* __restrict dst = x + i * d;
    if (!u8.empty()) {
      const uint8_t* __restrict src = u8.data() + row * d;
      // Division, not a multiply by 1/255: 255 must map to exactly 1.
      for (int64_t j = 0; j < d; ++j) dst[j] = static_cast<float>(src[j]) / 255.0f;
    } else {
      std::memcpy(dst, f32.data() + row * d, static_cast<size_t>(d) * sizeof(float));
    }
    y[i] = labels[static_cast<size_t>(row)];
  }
}

Result<DatasetPtr> LoadIdx(const std::string& images_path, const std::string& labels_path) {
  auto images = ReadIdx(images_path, /*labels=*/false);
  if (!images.ok()) return images.status();
  auto labels = ReadIdx(labels_path, /*labels=*/true);
  if (!labels.ok()) return labels.status();
  const int64_t n = images->dims[0];
  if (labels->dims[0] != n) {
    return Status::Corruption(labels_path + ": " + std::to_string(labels->dims[0]) +
                              " labels for " + std::to_string(n) + " images in " + images_path);
  }
  if (n == 0) return Status::Corruption(images_path + ": holds no images");
  auto ds = std::make_shared<Dataset>();
  ds->source = images_path + " + " + labels_path;
  ds->n = n;
  ds->shape.assign(images->dims.begin() + 1, images->dims.end());
  ds->dim = static_cast<int64_t>(images->bytes.size()) / n;
  ds->u8 = std::move(images->bytes);
  ds->labels.assign(labels->bytes.begin(), labels->bytes.end());
  ds->num_classes = *std::max_element(ds->labels.begin(), ds->labels.end()) + 1;
  return DatasetPtr(std::move(ds));
}

Result<DatasetPtr> LoadCsv(const std::string& path, int label_column) {
  auto read = ReadFile(path);
  if (!read.ok()) return read.status();
  const std::string_view text(reinterpret_cast<const char*>(read->data()), read->size());
  auto ds = std::make_shared<Dataset>();
  ds->source = path;
  std::vector<std::string_view> fields;
  int64_t columns = -1;
  int64_t label_at = -1;
  int max_label = -1;
  size_t pos = 0;
  bool first = true;
  for (int64_t line_no = 1; pos < text.size(); ++line_no) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (Trim(line).empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    SplitFields(line, &fields);
    const int64_t ncols = static_cast<int64_t>(fields.size());
    if (columns < 0) {
      columns = ncols;
      label_at = label_column < 0 ? ncols + label_column : label_column;
      if (label_at < 0 || label_at >= ncols) {
        return Status::InvalidArgument(where + ": label_column " + std::to_string(label_column) +
                                       " is out of range for " + std::to_string(ncols) +
                                       " columns");
      }
      if (ncols < 2) {
        return Status::Corruption(where + ": need a label and at least one feature column, found " +
                                  std::to_string(ncols) + " column");
      }
    } else if (ncols != columns) {
      return Status::Corruption(where + ": expected " + std::to_string(columns) +
                                " columns, found " + std::to_string(ncols));
    }
    if (first) {
      first = false;
      // A header is a first row with anything that is not a number in it.
      float v;
      const bool header =
          std::any_of(fields.begin(), fields.end(), [&](auto f) { return !ParseFloat(f, &v); });
      if (header) continue;
    }
    for (int64_t c = 0; c < ncols; ++c) {
      float v = 0;
      const bool parsed = ParseFloat(fields[c], &v);
      if (c == label_at) {
        if (!parsed || !(v >= 0) || v != std::floor(v) || v >= kMaxClasses) {
          return Status::Corruption(where + ": label " + Quote(fields[c]) +
                                    " is not a class index (an integer in [0, " +
                                    std::to_string(kMaxClasses) + "))");
        }
        const int label = static_cast<int>(v);
        max_label = std::max(max_label, label);
        ds->labels.push_back(label);
      } else {
        if (!parsed || !std::isfinite(v)) {
          return Status::Corruption(where + ": column " + std::to_string(c + 1) + ": " +
                                    Quote(fields[c]) + " is not a finite number");
        }
        ds->f32.push_back(v);
      }
    }
  }
  if (ds->labels.empty()) return Status::Corruption(path + ": holds no data rows");
  if (ds->labels.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Status::Corruption(path + ": too many rows");
  }
  ds->n = static_cast<int64_t>(ds->labels.size());
  ds->dim = columns - 1;
  ds->shape = {ds->dim};
  ds->num_classes = max_label + 1;
  ds->f32.shrink_to_fit();
  ds->labels.shrink_to_fit();
  return DatasetPtr(std::move(ds));
}

namespace {

struct Cache {
  std::mutex mu;
  struct Entry {
    std::string key;
    std::shared_future<Result<DatasetPtr>> value;
  };
  std::list<Entry> entries;  // most recently used first
  int64_t decodes = 0;
};

Cache& GetCache() {
  static Cache* cache = new Cache;  // never destroyed: worker threads may outlive statics
  return *cache;
}

// "path|size|mtime" of the file, or "" when it can't be stat'ed (the decoder then reports why).
std::string FileKey(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(path, ec);
  if (ec) return "";
  const auto size = fs::file_size(canonical, ec);
  if (ec) return "";
  const auto mtime = fs::last_write_time(canonical, ec);
  if (ec) return "";
  return canonical.string() + "|" + std::to_string(size) + "|" +
         std::to_string(mtime.time_since_epoch().count());
}

Result<DatasetPtr> Decode(const DatasetSpec& spec, const std::string& images,
                          const std::string& labels) {
  try {
    if (spec.format == "csv") return LoadCsv(images, spec.label_column);
    return LoadIdx(images, labels);
  } catch (const std::exception& e) {  // bad_alloc on a huge file
    return Status::IoError(images + ": cannot load: " + e.what());
  }
}

}  // namespace

Result<DatasetPtr> LoadCached(const DatasetSpec& spec, bool test) {
  const std::string& images = test ? spec.test_images : spec.train_images;
  const std::string& labels = test ? spec.test_labels : spec.train_labels;
  const bool csv = spec.format == "csv";
  std::string key = spec.format + "|" + (csv ? std::to_string(spec.label_column) : "") + "|";
  const std::string images_key = FileKey(images);
  const std::string labels_key = csv ? "-" : FileKey(labels);
  if (images_key.empty() || labels_key.empty()) return Decode(spec, images, labels);
  key += images_key + "|" + labels_key;

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
      ++cache.decodes;
    }
  }
  // Waited for outside the lock: another thread may still be decoding this very key.
  if (pending.valid()) return pending.get();
  Result<DatasetPtr> r = Decode(spec, images, labels);
  promise.set_value(r);
  if (!r.ok()) {  // don't keep failures: the next trial may find the file fixed
    std::lock_guard<std::mutex> lock(cache.mu);
    cache.entries.remove_if([&](const Cache::Entry& e) { return e.key == key; });
  }
  return r;
}

void ClearDatasetCache() {
  Cache& cache = GetCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  cache.entries.clear();
}

int64_t DatasetDecodeCount() {
  Cache& cache = GetCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  return cache.decodes;
}

Split MakeSplit(int64_t n, double validation_fraction) {
  std::vector<int32_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  Rng rng(kSplitSeed);
  rng.Shuffle(perm.data(), n);
  const double f = std::clamp(validation_fraction, 0.0, 1.0);
  // The epsilon keeps 0.1 * 60000 at 6000 whatever the rounding of the product.
  const int64_t n_val = std::min<int64_t>(n, static_cast<int64_t>(std::floor(n * f + 1e-9)));
  Split split;
  split.train.assign(perm.begin(), perm.end() - n_val);
  split.val.assign(perm.end() - n_val, perm.end());
  std::sort(split.val.begin(), split.val.end());
  return split;
}

}  // namespace sweep::trainer
