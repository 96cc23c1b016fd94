// IDX and CSV decoding, the dataset caches (in-process, and the machine-wide cache files) and
// the fixed validation split. Owned by the trainer. Decoders are pure; the in-process cache is
// guarded by one mutex, and a load runs outside it so loading one file never blocks readers of
// another; cache files are immutable once published, so processes share them without locks.
#include "data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
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
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string_view>

#include "base/utf8.h"
#include "file_util.h"
#include "rng.h"

namespace sweep::trainer {
namespace {

// Fixed so every trial, whatever its seed, holds out the same validation samples. Changing it
// changes every score a stored sweep was compared on: don't.
constexpr uint64_t kSplitSeed = 0x5EEDC0DE5A17ull;
// Datasets kept decoded at once; a worker usually trains on one, so this only bounds the
// memory a sweep over several datasets can pin.
constexpr size_t kMaxCachedDatasets = 4;

// A file read through zlib, which decompresses gzip data (detected by its magic bytes) and
// passes anything else through unchanged. Reads are bounded by what the caller asks for, so a
// header can be checked before the data is read, and a file (or a gzip bomb) larger than its
// header says costs no memory beyond what was declared.
class ZFile {
 public:
  ZFile() = default;
  ZFile(const ZFile&) = delete;
  ZFile& operator=(const ZFile&) = delete;
  ~ZFile() {
    if (f_ != nullptr) gzclose(f_);
  }

  Status Open(const std::string& path) {
    path_ = path;
    errno = 0;
    f_ = gzopen(path.c_str(), "rb");
    if (f_ == nullptr) {
      const int err = errno;
      const std::string why = err != 0 ? std::strerror(err) : "out of memory";
      if (err == ENOENT) return Status::NotFound(path + ": cannot open: " + why);
      return Status::IoError(path + ": cannot open: " + why);
    }
    gzbuffer(f_, 1 << 17);
    return Status::Ok();
  }

  // Appends up to `n` more bytes of the file to *out: fewer only at its end.
  Status Append(uint64_t n, std::vector<uint8_t>* out) {
    constexpr uint64_t kChunk = 1u << 20;
    while (n > 0) {
      const auto want = static_cast<unsigned>(std::min(n, kChunk));
      const size_t size = out->size();
      out->resize(size + want);
      const int got = gzread(f_, out->data() + size, want);
      out->resize(size + static_cast<size_t>(std::max(got, 0)));
      read_ += static_cast<uint64_t>(std::max(got, 0));
      if (got < static_cast<int>(want)) return Check();
      n -= want;
    }
    return Status::Ok();
  }

  // Reads the rest of the file through a small buffer; *rest: how many bytes it held.
  Status Skip(uint64_t* rest) {
    std::vector<uint8_t> scratch;
    *rest = 0;
    for (;;) {
      scratch.clear();
      const uint64_t before = read_;
      SWEEP_RETURN_IF_ERROR(Append(1u << 20, &scratch));
      *rest += read_ - before;
      if (scratch.size() < (1u << 20)) return Status::Ok();
    }
  }

 private:
  // After a short read: the end of the file, or the error that cut it short.
  Status Check() {
    int errnum = Z_OK;
    const char* msg = gzerror(f_, &errnum);
    const std::string zmsg = msg != nullptr ? msg : "";
    if (errnum == Z_BUF_ERROR) {
      return Status::Corruption(path_ + ": gzip data ends early (unexpected end of file) after " +
                                std::to_string(read_) + " bytes");
    }
    if (errnum == Z_ERRNO) return Status::IoError(path_ + ": read failed: " + std::strerror(errno));
    if (errnum != Z_OK) {
      // zlib's message may begin with the file's name: say it once.
      std::string why = zmsg;
      if (why.rfind(path_ + ": ", 0) == 0) why = why.substr(path_.size() + 2);
      return Status::Corruption(path_ + ": bad gzip data: " + why);
    }
    return Status::Ok();
  }

  std::string path_;
  gzFile f_ = nullptr;
  uint64_t read_ = 0;
};

// The whole file (a CSV's text).
Result<std::vector<uint8_t>> ReadFile(const std::string& path) {
  ZFile f;
  SWEEP_RETURN_IF_ERROR(f.Open(path));
  std::vector<uint8_t> bytes;
  SWEEP_RETURN_IF_ERROR(f.Append(std::numeric_limits<uint64_t>::max(), &bytes));
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
  ZFile f;
  SWEEP_RETURN_IF_ERROR(f.Open(path));
  std::vector<uint8_t> b;
  SWEEP_RETURN_IF_ERROR(f.Append(4, &b));
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
  SWEEP_RETURN_IF_ERROR(f.Append(header - 4, &b));
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
  if (count >= std::numeric_limits<int32_t>::max()) {
    return Status::Corruption(path + ": too many items (" + std::to_string(count) + ")");
  }
  // The data the header declares, and no more: what follows it is only counted.
  const auto declared = static_cast<uint64_t>(count) * static_cast<uint64_t>(item);
  SWEEP_RETURN_IF_ERROR(f.Append(declared, &out.bytes));
  uint64_t rest = 0;
  if (out.bytes.size() == declared) SWEEP_RETURN_IF_ERROR(f.Skip(&rest));
  const auto data = static_cast<int64_t>(out.bytes.size() + rest);
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
  out.bytes.shrink_to_fit();
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

// Splits a CSV line into its fields. A field in double quotes may hold commas, and "" in it
// stands for a quote (RFC 4180 within one line; the quotes are not part of the value, and a
// doubled quote is left doubled: values are numbers, and names only go into messages). False
// when a quote opens a field that its line does not close.
bool SplitFields(std::string_view line, std::vector<std::string_view>* fields) {
  fields->clear();
  size_t start = 0;
  for (;;) {
    size_t i = start;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t comma;
    if (i < line.size() && line[i] == '"') {
      size_t close = i + 1;
      for (;; close += 2) {
        close = line.find('"', close);
        if (close == std::string_view::npos) return false;
        if (close + 1 >= line.size() || line[close + 1] != '"') break;
      }
      comma = line.find(',', close + 1);
      const std::string_view after =
          Trim(line.substr(close + 1, comma == std::string_view::npos ? comma : comma - close - 1));
      // Anything between the closing quote and the comma is kept, so the field reads as no
      // number and its message shows it.
      fields->push_back(after.empty() ? line.substr(i + 1, close - i - 1)
                                      : Trim(line.substr(start, comma - start)));
    } else {
      comma = line.find(',', start);
      fields->push_back(Trim(line.substr(start, comma - start)));
    }
    if (comma == std::string_view::npos) return true;
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

void Dataset::GatherPixels(const int32_t* idx, int64_t count, uint8_t* __restrict pixels,
                           int32_t* __restrict y) const {
  const size_t d = static_cast<size_t>(dim);
  for (int64_t i = 0; i < count; ++i) {
    const size_t row = static_cast<size_t>(idx[i]);
    std::memcpy(pixels + static_cast<size_t>(i) * d, u8.data() + row * d, d);
    y[i] = labels[row];
  }
}

DatasetPtr MakeDataset(Dataset meta, std::vector<uint8_t> u8, std::vector<float> f32,
                       std::vector<int32_t> labels) {
  struct Arrays {
    std::vector<uint8_t> u8;
    std::vector<float> f32;
    std::vector<int32_t> labels;
  };
  auto arrays = std::make_shared<Arrays>(Arrays{std::move(u8), std::move(f32), std::move(labels)});
  auto ds = std::make_shared<Dataset>(std::move(meta));
  ds->u8 = arrays->u8;
  ds->f32 = arrays->f32;
  ds->labels = arrays->labels;
  ds->storage = std::move(arrays);
  ds->mapped = false;
  return ds;
}

Status CheckTrainingLabels(const Dataset& data) {
  // For a CSV (one-dimensional samples): where the label may be instead, and `more` about why.
  auto other_column = [&](const std::string& more) -> std::string {
    if (data.shape.size() != 1) return "";
    return " (is the label in another column? label_column picks it: 0 by default, -1 for the "
           "last" +
           more + ")";
  };
  // One class is no classification: every prediction is right, and every trial would score 1.
  if (!data.labels.empty() && std::all_of(data.labels.begin(), data.labels.end(),
                                          [&](int32_t l) { return l == data.labels.front(); })) {
    return Status::Corruption(
        data.source + ": every label is " + std::to_string(data.labels.front()) +
        "; a classifier needs samples of at least two classes" + other_column(""));
  }
  if (data.num_classes <= 2) return Status::Ok();
  std::vector<bool> seen(static_cast<size_t>(data.num_classes), false);
  for (int32_t l : data.labels) seen[static_cast<size_t>(l)] = true;
  const int64_t empty = std::count(seen.begin(), seen.end(), false);
  // A set with several samples per class misses few by chance: more than half empty is wrong
  // numbering. A small one may miss many, but not three quarters (a stray 255 among 0..2).
  const bool small = data.n < 4 * static_cast<int64_t>(data.num_classes);
  if (small ? empty * 4 >= 3 * data.num_classes : empty * 2 > data.num_classes) {
    return Status::Corruption(
        data.source + ": labels go up to " + std::to_string(data.num_classes - 1) + ", but " +
        std::to_string(empty) + " of the classes 0 to " + std::to_string(data.num_classes - 1) +
        " have no sample; labels must be numbered 0 to C-1");
  }
  // Nearly every sample in a class of its own: the column read as the label numbers the rows
  // (an index pandas wrote) or identifies them; nothing can be learnt from it. (A small set of
  // many classes, a few-shot one, has a few samples per class: well under 90% distinct.)
  const int64_t distinct = data.num_classes - empty;
  if (data.n >= 20 && distinct * 10 > data.n * 9) {
    return Status::Corruption(
        data.source + ": " + std::to_string(data.n) + " samples hold " + std::to_string(distinct) +
        " distinct labels; a label that nearly every sample has alone numbers or names the "
        "samples, it is not a class" +
        other_column("; pandas' to_csv writes its row index first unless given index=False"));
  }
  return Status::Ok();
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
  Dataset meta;
  meta.source = images_path + " + " + labels_path;
  meta.n = n;
  meta.shape.assign(images->dims.begin() + 1, images->dims.end());
  meta.dim = static_cast<int64_t>(images->bytes.size()) / n;
  std::vector<int32_t> label_values(labels->bytes.begin(), labels->bytes.end());
  meta.num_classes = *std::max_element(label_values.begin(), label_values.end()) + 1;
  return MakeDataset(std::move(meta), std::move(images->bytes), {}, std::move(label_values));
}

Result<DatasetPtr> LoadCsv(const std::string& path, int label_column, std::optional<bool> header) {
  auto read = ReadFile(path);
  if (!read.ok()) return read.status();
  const std::string_view text(reinterpret_cast<const char*>(read->data()), read->size());
  Dataset meta;
  meta.source = path;
  std::vector<float> features;
  std::vector<int32_t> label_values;
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
    if (!SplitFields(line, &fields)) {
      return Status::Corruption(where +
                                ": a quote opens a field that does not close on this line (a "
                                "field cannot span lines)");
    }
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
      // Column names, unless said: a label that is no number ("label,0,1,...,783", as pandas
      // writes integer feature names). A first data row's bad feature is then reported.
      float v;
      const bool names = header.value_or(!ParseFloat(fields[label_at], &v));
      if (names) continue;
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
        label_values.push_back(label);
      } else {
        if (!parsed || !std::isfinite(v)) {
          return Status::Corruption(where + ": column " + std::to_string(c + 1) + ": " +
                                    Quote(fields[c]) + " is not a finite number");
        }
        features.push_back(v);
      }
    }
  }
  if (label_values.empty()) return Status::Corruption(path + ": holds no data rows");
  if (label_values.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Status::Corruption(path + ": too many rows");
  }
  meta.n = static_cast<int64_t>(label_values.size());
  meta.dim = columns - 1;
  meta.shape = {meta.dim};
  meta.num_classes = max_label + 1;
  features.shrink_to_fit();
  label_values.shrink_to_fit();
  return MakeDataset(std::move(meta), {}, std::move(features), std::move(label_values));
}

// ---- the machine-wide cache file ----
//
// One file per (dataset key): decoded arrays laid out so that a read-only mapping can be used
// in place. Files are immutable once published, so mapping needs no locks.
//   "SWEEPDS1"        magic and format version
//   header_bytes      uint32
//   header_crc        uint32 (CRC-32 of the header)
//   header            JSON: key, source, n, dim, num_classes, shape, dtype (u8 | f32),
//                     labels_offset, features_offset, file_bytes
//   labels            int32[n] at labels_offset (64-byte aligned)
//   features          u8 or f32 [n, dim] at features_offset (64-byte aligned)
// The payload has no checksum: a file is complete when published (the size is checked), and
// summing 50 MB on every map would cost a good part of what the cache saves.
namespace {

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
  static const char kZeros[64] = {};
  const std::vector<ByteRange> pieces = {
      {kCacheMagic, sizeof kCacheMagic},
      {&header_bytes, sizeof header_bytes},
      {&header_crc, sizeof header_crc},
      {text.data(), text.size()},
      {kZeros, labels_at - kCachePrefix - text.size()},
      {d.labels.data(), n * sizeof(int32_t)},
      {kZeros, features_at - labels_at - n * sizeof(int32_t)},
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

// Through the cache file when there is a cache dir, else (or on any cache trouble) decoded.
Result<DatasetPtr> LoadThroughFile(const DatasetSpec& spec, const std::string& images,
                                   const std::string& labels, const std::string& key,
                                   const std::string& identity, const std::string& cache_dir);

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

Result<DatasetPtr> LoadThroughFile(const DatasetSpec& spec, const std::string& images,
                                   const std::string& labels, const std::string& key,
                                   const std::string& identity, const std::string& cache_dir) {
  if (cache_dir.empty()) return Decode(spec, images, labels);
  // <identity>-<version>.sds: the identity part (which files) lets a new version find and
  // remove its stale predecessors.
  const std::string prefix = Hex(Fnv1a(identity)) + "-";
  const std::string name = prefix + Hex(Fnv1a(key)) + ".sds";
  const std::string path = cache_dir + "/" + name;
  auto mapped = MapCacheFile(path, key);
  if (mapped.ok()) return mapped;
  auto decoded = Decode(spec, images, labels);
  if (!decoded.ok()) return decoded;
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

}  // namespace

Result<DatasetPtr> LoadCached(const DatasetSpec& spec, bool test, const std::string& cache_dir) {
  const std::string& images = test ? spec.test_images : spec.train_images;
  const std::string& labels = test ? spec.test_labels : spec.train_labels;
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
  Result<DatasetPtr> r = LoadThroughFile(spec, images, labels, key, identity, cache_dir);
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
