// The dataset decoders of data.h, uncached: IDX (MNIST layout) and CSV, either one gzipped or
// raw, read through zlib with reads bounded by what the header declares. Pure functions.
#include "data.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string_view>
#include <tuple>

namespace sweep::trainer {
namespace {

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

  // Whether the file is read as it is (not gzip data); known once something was read.
  bool raw() const { return gzdirect(f_) == 1; }

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
  int64_t item = 1;            // bytes per item
  std::string shape;           // of an item: "28x28"
};

// Reads and checks an IDX file's header, of unsigned bytes: `labels` wants 1 dimension (a
// label file), otherwise 2 or more (count, then each item's shape). Fills dims, item and shape.
Status ReadIdxHeader(ZFile& f, const std::string& path, bool labels, IdxFile* out) {
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
  for (int d = 0; d < ndims; ++d) {
    const int64_t v = BigEndian32(b.data() + 4 + 4 * d);
    if (d > 0 && v == 0) {
      return Status::Corruption(path + ": IDX dimension " + std::to_string(d + 1) + " is 0");
    }
    if (d > 0) {
      out->item *= v;
      if (out->item > (int64_t{1} << 31)) {
        return Status::Corruption(path + ": IDX items are implausibly large");
      }
      if (d > 1) out->shape += 'x';
      out->shape += std::to_string(v);
    }
    out->dims.push_back(v);
  }
  if (out->dims[0] >= std::numeric_limits<int32_t>::max()) {
    return Status::Corruption(path + ": too many items (" + std::to_string(out->dims[0]) + ")");
  }
  return Status::Ok();
}

// The file's data after its header, `data` bytes, must be the items the header declares.
Status CheckIdxData(const std::string& path, bool labels, const IdxFile& h, uint64_t data_bytes) {
  const auto data = static_cast<int64_t>(data_bytes);
  const int64_t item = h.item, count = h.dims[0];
  const int64_t found = data / item;
  const std::string plural = std::string(labels ? "label" : "image") + "s";
  if (found != count) {
    return Status::Corruption(path + ": expected " + std::to_string(count) + " " + plural +
                              (labels ? "" : " of " + h.shape) + ", found " +
                              std::to_string(found) +
                              (data % item != 0 ? " and part of another" : ""));
  }
  if (data % item != 0) {
    return Status::Corruption(path + ": " + std::to_string(data % item) + " stray bytes after " +
                              std::to_string(count) + " " + plural);
  }
  return Status::Ok();
}

// Reads and checks an IDX file of unsigned bytes (see ReadIdxHeader). The item count in the
// header must match the data exactly.
Result<IdxFile> ReadIdx(const std::string& path, bool labels) {
  ZFile f;
  SWEEP_RETURN_IF_ERROR(f.Open(path));
  IdxFile out;
  SWEEP_RETURN_IF_ERROR(ReadIdxHeader(f, path, labels, &out));
  const int64_t item = out.item;
  const int64_t count = out.dims[0];
  // The data the header declares, and no more: what follows it is only counted.
  const auto declared = static_cast<uint64_t>(count) * static_cast<uint64_t>(item);
  SWEEP_RETURN_IF_ERROR(f.Append(declared, &out.bytes));
  uint64_t rest = 0;
  if (out.bytes.size() == declared) SWEEP_RETURN_IF_ERROR(f.Skip(&rest));
  SWEEP_RETURN_IF_ERROR(CheckIdxData(path, labels, out, out.bytes.size() + rest));
  out.bytes.shrink_to_fit();
  return out;
}

// An image file's count and its label file's must agree, and not be 0.
Status CheckIdxCounts(const std::string& images_path, int64_t images,
                      const std::string& labels_path, int64_t labels) {
  if (labels != images) {
    return Status::Corruption(labels_path + ": " + std::to_string(labels) + " labels for " +
                              std::to_string(images) + " images in " + images_path);
  }
  if (images == 0) return Status::Corruption(images_path + ": holds no images");
  return Status::Ok();
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

Result<IdxPair> ReadIdxPairHeaders(const std::string& images_path, const std::string& labels_path) {
  IdxFile images, labels;
  for (auto [path, is_labels, out] :
       {std::tuple{&images_path, false, &images}, std::tuple{&labels_path, true, &labels}}) {
    ZFile f;
    SWEEP_RETURN_IF_ERROR(f.Open(*path));
    SWEEP_RETURN_IF_ERROR(ReadIdxHeader(f, *path, is_labels, out));
    // An uncompressed file's data is its size less its header: a cut file is found unread.
    if (f.raw()) {
      std::error_code ec;
      const uintmax_t size = std::filesystem::file_size(*path, ec);
      const uint64_t header = 4 + 4 * out->dims.size();
      if (!ec && size >= header) {
        SWEEP_RETURN_IF_ERROR(CheckIdxData(*path, is_labels, *out, size - header));
      }
    }
  }
  SWEEP_RETURN_IF_ERROR(CheckIdxCounts(images_path, images.dims[0], labels_path, labels.dims[0]));
  return IdxPair{images.dims[0], images.shape};
}

Result<DatasetPtr> LoadIdx(const std::string& images_path, const std::string& labels_path) {
  auto images = ReadIdx(images_path, /*labels=*/false);
  if (!images.ok()) return images.status();
  auto labels = ReadIdx(labels_path, /*labels=*/true);
  if (!labels.ok()) return labels.status();
  const int64_t n = images->dims[0];
  SWEEP_RETURN_IF_ERROR(CheckIdxCounts(images_path, n, labels_path, labels->dims[0]));
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

}  // namespace sweep::trainer
