// Image-folder datasets (image_folder.h): listing, parallel decoding, the config-time check and
// the shape probe. Owned by the trainer.
#include "image_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <thread>

#include "base/hash.h"
#include "image_codec.h"

namespace sweep::trainer {
namespace {

namespace fs = std::filesystem;

// Skipped files named in a Dataset (the rest are only counted).
constexpr size_t kSkippedShown = 10;
// Class folders deeper than this are taken for a loop of links.
constexpr int kMaxDepth = 32;

bool Hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// Every file under a class folder, hidden ones left out, as paths under it, sorted.
Status ListClassFiles(const fs::path& dir, std::vector<std::string>* out) {
  out->clear();
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::directory_entry& entry = *it;
    std::error_code type_ec;
    const bool is_dir = entry.is_directory(type_ec);
    if (Hidden(entry.path())) {
      if (is_dir) it.disable_recursion_pending();
      continue;
    }
    if (is_dir) {
      if (it.depth() >= kMaxDepth) {
        return Status::InvalidArgument(entry.path().string() + ": folders nested over " +
                                       std::to_string(kMaxDepth) + " deep (a loop of links?)");
      }
      continue;
    }
    out->push_back(entry.path().lexically_relative(dir).generic_string());
  }
  if (ec) return Status::IoError(dir.string() + ": cannot list: " + ec.message());
  std::sort(out->begin(), out->end());
  return Status::Ok();
}

// The class folders of `root`, sorted.
Status ListClasses(const fs::path& root, std::vector<std::string>* classes) {
  std::error_code ec;
  for (fs::directory_iterator it(root, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::error_code type_ec;
    if (!Hidden(it->path()) && it->is_directory(type_ec)) {
      classes->push_back(it->path().filename().string());
    }
  }
  if (ec) return Status::IoError(root.string() + ": cannot list: " + ec.message());
  std::sort(classes->begin(), classes->end());
  if (classes->empty()) {
    return Status::InvalidArgument(root.string() +
                                   ": holds no class folders (the layout is one subfolder per "
                                   "class, its images inside)");
  }
  return Status::Ok();
}

Result<fs::path> Root(const std::string& dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (st.type() == fs::file_type::not_found) {
    return Status::NotFound("no such folder '" + dir + "'");
  }
  if (ec) return Status::IoError("cannot reach '" + dir + "': " + ec.message());
  if (st.type() != fs::file_type::directory) {
    return Status::InvalidArgument("'" + dir + "' is not a folder (format = \"folder\" takes a " +
                                   "folder of class folders)");
  }
  fs::path root = fs::weakly_canonical(dir, ec);
  if (ec) root = dir;
  return root;
}

// The whole file, into *bytes (reused across calls).
Status ReadWhole(const std::string& path, std::vector<uint8_t>* bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(path + ": cannot open: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return Status::IoError(path + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Status::Corruption(path + ": not a regular file");
  bytes->resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes->size()) {
    const ssize_t r = ::read(fd, bytes->data() + got, bytes->size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::IoError(path + ": cannot read: " + std::strerror(errno));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  bytes->resize(got);
  return Status::Ok();
}

// Reads and decodes one file; errors name it.
Status ReadImage(const std::string& path, int height, int width, std::vector<uint8_t>* scratch,
                 Image* image) {
  SWEEP_RETURN_IF_ERROR(ReadWhole(path, scratch));
  return DecodeImage(*scratch, height, width, image).WithContext(path);
}

std::string Channels(int c) {
  return c == 1 ? "1 channel (gray)" : std::to_string(c) + " channels (RGB)";
}

std::string Size(const Image& im) {
  return std::to_string(im.width) + "x" + std::to_string(im.height);
}

// Half of the machine's memory: a decoded set larger than that would not fit beside training.
uint64_t DecodeBudgetBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return UINT64_MAX;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 2;
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// An image of the set must have the reference image's channels and size.
Status SameShape(const std::string& path, const Image& image, const std::string& ref_path,
                 const Image& ref) {
  if (image.channels != ref.channels) {
    return Status::Corruption(path + ": has " + Channels(image.channels) +
                              ", but the first image, " + ref_path + ", has " +
                              Channels(ref.channels) +
                              "; a set's images must all have the same channels (a palette PNG "
                              "decodes to RGB): convert them to one kind");
  }
  if (image.pixels.size() != ref.pixels.size()) {
    return Status::Corruption(path + ": " + Size(image) + " pixels, but the first image, " +
                              ref_path + ", is " + Size(ref) +
                              "; set dataset.image_size = [H, W] to resize them all");
  }
  return Status::Ok();
}

// The first image (in the set's order) that decodes: it sets the channels, and the size when
// image_size does not; an image that differs is a bad file. Files before it that do not decode
// go into problems[] (with on_bad_file = "skip"; else the first one is the error).
Status FirstImage(const FolderListing& l, const DatasetSpec& spec, std::vector<Status>* problems,
                  size_t* first, Image* image) {
  const bool skip = spec.on_bad_file == "skip";
  if (!skip && !l.empty_classes.empty()) {
    return Status::Corruption(l.root + "/" + l.classes[static_cast<size_t>(l.empty_classes[0])] +
                              ": class folder holds no images (on_bad_file = \"skip\" keeps "
                              "the class without samples)");
  }
  const size_t n = l.files.size();
  if (n == 0) return Status::Corruption(l.root + ": holds no image files");
  if (n >= static_cast<size_t>(INT32_MAX)) return Status::Corruption(l.root + ": too many files");
  const int want_h = spec.image_size.size() == 2 ? spec.image_size[0] : 0;
  const int want_w = spec.image_size.size() == 2 ? spec.image_size[1] : 0;
  std::vector<uint8_t> scratch;
  for (*first = 0; *first < n; ++*first) {
    Status s = ReadImage(l.files[*first], want_h, want_w, &scratch, image);
    if (s.ok()) return Status::Ok();
    if (!skip) return s;
    (*problems)[*first] = std::move(s);
  }
  return Status::Corruption(
      l.root + ": none of its " + std::to_string(n) +
      " files is a readable PNG or JPEG image (the first: " + (*problems)[0].message() + ")");
}

// The rows of a folder set decoded as they are asked for (RowStream), by the calling thread and
// a pool of helpers that each take the next row of the call. One call uses the pool at a time;
// a call that finds it busy (another replica's evaluation) decodes on its own thread.
class FolderStream final : public RowStream {
 public:
  FolderStream(FolderListing listing, const DatasetSpec& spec, Image ref, size_t ref_file,
               unsigned threads)
      : l_(std::move(listing)),
        skip_(spec.on_bad_file == "skip"),
        want_h_(spec.image_size.size() == 2 ? spec.image_size[0] : 0),
        want_w_(spec.image_size.size() == 2 ? spec.image_size[1] : 0),
        ref_(std::move(ref)),
        ref_path_(l_.files[ref_file]),
        row_(ref_.pixels.size()),
        bad_(new std::atomic<uint8_t>[l_.files.size()]()) {
    // Classes are contiguous in the listing: a bad file's stand-in comes from its own class.
    class_begin_.assign(l_.classes.size() + 1, l_.files.size());
    for (size_t i = l_.files.size(); i-- > 0;) class_begin_[static_cast<size_t>(l_.labels[i])] = i;
    for (size_t c = l_.classes.size(); c-- > 0;) {
      class_begin_[c] = std::min(class_begin_[c], class_begin_[c + 1]);
    }
    for (unsigned t = 1; t < threads; ++t) pool_.emplace_back([this] { Help(); });
  }

  ~FolderStream() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : pool_) t.join();
  }

  void Decode(const int32_t* idx, int64_t count, uint8_t* pixels, int32_t* y) const override {
    Run(Job{idx, count, pixels, nullptr, y, nullptr});
  }

  void DecodeFloats(const int32_t* idx, int64_t count, float* x, int32_t* y,
                    const RowFn* each) const override {
    Run(Job{idx, count, nullptr, x, y, each});
  }

  Status status() const override {
    std::lock_guard<std::mutex> lock(bad_mu_);
    return error_;
  }
  // The listing's labels, which the stream holds for the Dataset's view.
  const std::vector<int32_t>& labels() const { return l_.labels; }
  int64_t skipped_files() const override {
    std::lock_guard<std::mutex> lock(bad_mu_);
    return skipped_files_;
  }
  std::vector<std::string> skipped() const override {
    std::lock_guard<std::mutex> lock(bad_mu_);
    return skipped_;
  }

 private:
  struct Scratch {
    std::vector<uint8_t> bytes;
    Image image;
    std::vector<uint8_t> row;  // a row on its way to floats
  };
  struct Job {
    const int32_t* idx = nullptr;
    int64_t count = 0;
    uint8_t* pixels = nullptr;  // pixels, or
    float* x = nullptr;         // floats, then each(i, row) when each is set
    int32_t* y = nullptr;
    const RowFn* each = nullptr;
  };
  // A class whose files are bad this many times in a row is given up on.
  static constexpr size_t kMaxStandIns = 64;

  void Help() {
    Scratch scratch;
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      RunJob(&scratch);
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_ == 0) done_cv_.notify_all();
    }
  }

  // One call's rows: on the pool when it is free, else on this thread.
  void Run(const Job& job) const {
    thread_local Scratch scratch;
    std::unique_lock<std::mutex> job_lock(job_mu_, std::try_to_lock);
    if (pool_.empty() || job.count < 2 || !job_lock.owns_lock()) {
      for (int64_t i = 0; i < job.count; ++i) RunRow(job, i, &scratch);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = job;
      next_.store(0);
      ++generation_;
      busy_ = static_cast<int>(pool_.size());
    }
    work_cv_.notify_all();
    RunJob(&scratch);
    // The helpers read job_ until they leave RunJob: the call returns after the last one has.
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return busy_ == 0; });
  }

  void RunJob(Scratch* scratch) const {
    for (;;) {
      const int64_t i = next_.fetch_add(1);
      if (i >= job_.count) return;
      RunRow(job_, i, scratch);
    }
  }

  void RunRow(const Job& job, int64_t i, Scratch* scratch) const {
    if (job.pixels != nullptr) {
      DecodeRow(job.idx[i], job.pixels + i * row_, job.y + i, scratch);
      return;
    }
    scratch->row.resize(row_);
    DecodeRow(job.idx[i], scratch->row.data(), job.y + i, scratch);
    float* out = job.x + i * static_cast<int64_t>(row_);
    // Division, as Dataset::Gather does for held pixels: 255 maps to exactly 1.
    for (size_t k = 0; k < row_; ++k) out[k] = static_cast<float>(scratch->row[k]) / 255.0f;
    if (job.each != nullptr) (*job.each)(i, out);
  }

  // File `file` into dst, or why not.
  Status DecodeFile(size_t file, uint8_t* dst, Scratch* scratch) const {
    const std::string& path = l_.files[file];
    Status s;
    try {
      s = ReadImage(path, want_h_, want_w_, &scratch->bytes, &scratch->image);
    } catch (const std::exception& e) {  // bad_alloc
      s = Status::IoError(path + ": cannot decode: " + e.what());
    }
    if (s.ok()) s = SameShape(path, scratch->image, ref_path_, ref_);
    if (s.ok()) std::memcpy(dst, scratch->image.pixels.data(), row_);
    return s;
  }

  void DecodeRow(int32_t row, uint8_t* dst, int32_t* label, Scratch* scratch) const {
    const size_t file = static_cast<size_t>(row);
    const int32_t c = l_.labels[file];
    *label = c;
    if (!bad_[file].load(std::memory_order_relaxed)) {
      Status s = DecodeFile(file, dst, scratch);
      if (s.ok()) return;
      Record(file, std::move(s));
    }
    if (skip_) {
      // The next good file of its class stands in, so the batch keeps its shape and labels.
      const size_t begin = class_begin_[static_cast<size_t>(c)];
      const size_t size = class_begin_[static_cast<size_t>(c) + 1] - begin;
      for (size_t k = 1; k < size && k <= kMaxStandIns; ++k) {
        const size_t other = begin + (file - begin + k) % size;
        if (bad_[other].load(std::memory_order_relaxed)) continue;
        Status s = DecodeFile(other, dst, scratch);
        if (s.ok()) return;
        Record(other, std::move(s));
      }
      Fail(Status::Corruption(l_.root + "/" + l_.classes[static_cast<size_t>(c)] +
                              ": no readable image found among its files near " + l_.files[file]));
    }
    std::memset(dst, 0, row_);
  }

  void Record(size_t file, Status why) const {
    if (bad_[file].exchange(1) != 0) return;
    std::lock_guard<std::mutex> lock(bad_mu_);
    ++skipped_files_;
    if (skipped_.size() < kSkippedShown) skipped_.push_back(why.message());
    if (!skip_ && error_.ok()) error_ = std::move(why);
  }

  void Fail(Status why) const {
    std::lock_guard<std::mutex> lock(bad_mu_);
    if (error_.ok()) error_ = std::move(why);
  }

  const FolderListing l_;
  const bool skip_;
  const int want_h_, want_w_;
  const Image ref_;
  const std::string ref_path_;
  const size_t row_;
  std::vector<size_t> class_begin_;  // [classes + 1]

  mutable std::mutex bad_mu_;
  const std::unique_ptr<std::atomic<uint8_t>[]> bad_;  // [files]: met and found bad
  mutable Status error_;
  mutable int64_t skipped_files_ = 0;
  mutable std::vector<std::string> skipped_;

  mutable std::mutex job_mu_;  // held by the call that has the pool
  mutable std::mutex mu_;
  mutable std::condition_variable work_cv_, done_cv_;
  mutable Job job_;
  mutable std::atomic<int64_t> next_{0};
  mutable uint64_t generation_ = 0;
  mutable int busy_ = 0;  // helpers still in this generation's job
  bool stop_ = false;
  std::vector<std::thread> pool_;  // last: the helpers start once the rest is ready
};

}  // namespace

Result<DatasetPtr> StreamImageFolder(const FolderListing& l, const DatasetSpec& spec) {
  std::vector<Status> problems(l.files.size());
  Image ref;
  size_t first = 0;
  SWEEP_RETURN_IF_ERROR(FirstImage(l, spec, &problems, &first, &ref));
  Dataset meta;
  meta.source = l.root;
  meta.n = static_cast<int64_t>(l.files.size());
  meta.dim = static_cast<int64_t>(ref.pixels.size());
  meta.shape = {ref.height, ref.width};
  if (ref.channels > 1) meta.shape.push_back(ref.channels);
  meta.num_classes = static_cast<int>(l.classes.size());
  meta.class_names = l.classes;
  const unsigned threads = spec.decode_threads > 0
                               ? static_cast<unsigned>(spec.decode_threads)
                               : std::max(1u, std::thread::hardware_concurrency());
  auto stream = std::make_shared<FolderStream>(l, spec, std::move(ref), first, threads);
  auto ds = std::make_shared<Dataset>(std::move(meta));
  ds->labels = stream->labels();
  ds->stream = stream;
  ds->storage = stream;
  return DatasetPtr(std::move(ds));
}

Result<FolderListing> ListImageFolder(const std::string& dir) {
  SWEEP_ASSIGN_OR_RETURN(const fs::path root, Root(dir));
  FolderListing l;
  l.root = root.string();
  SWEEP_RETURN_IF_ERROR(ListClasses(root, &l.classes));
  // Two 64-bit digests of (class, file, size, mtime) records, chained differently.
  uint64_t h1 = 0xcbf29ce484222325ULL, h2 = 0x243f6a8885a308d3ULL;
  std::vector<std::string> names;
  for (size_t k = 0; k < l.classes.size(); ++k) {
    const fs::path class_dir = root / l.classes[k];
    SWEEP_RETURN_IF_ERROR(ListClassFiles(class_dir, &names));
    if (names.empty()) l.empty_classes.push_back(static_cast<int>(k));
    for (const std::string& name : names) {
      const std::string path = (class_dir / name).string();
      struct stat st;
      std::string record = l.classes[k] + '\0' + name + '\0';
      if (::stat(path.c_str(), &st) == 0) {
        record += std::to_string(st.st_size) + '|' + std::to_string(st.st_mtim.tv_sec) + '.' +
                  std::to_string(st.st_mtim.tv_nsec);
      } else {
        record += "unreadable";
      }
      record += '\n';
      for (const char c : record) {
        h1 = (h1 ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
      }
      h2 = SplitMix64(h2 ^ Fnv1a64(record));
      l.files.push_back(path);
      l.labels.push_back(static_cast<int32_t>(k));
    }
  }
  l.version = std::to_string(l.files.size()) + "-" + Hex(h1) + Hex(h2);
  return l;
}

Result<DatasetPtr> DecodeImageFolder(const FolderListing& l, const DatasetSpec& spec) {
  const bool skip = spec.on_bad_file == "skip";
  const int want_h = spec.image_size.size() == 2 ? spec.image_size[0] : 0;
  const int want_w = spec.image_size.size() == 2 ? spec.image_size[1] : 0;
  const size_t n = l.files.size();
  std::vector<Status> problems(n);
  Image first_image;
  size_t first = 0;
  SWEEP_RETURN_IF_ERROR(FirstImage(l, spec, &problems, &first, &first_image));
  const Image& ref = first_image;
  const std::string& ref_path = l.files[first];
  const size_t row = ref.pixels.size();
  const uint64_t bytes = static_cast<uint64_t>(n) * row;
  if (bytes > DecodeBudgetBytes()) return StreamImageFolder(l, spec);
  // Without image_size every image must be the first's size: one more is read before the set's
  // memory is taken, so that an odd first image (a large photo among thumbnails) fails at once.
  if (!skip && want_h == 0 && first + 1 < n) {
    std::vector<uint8_t> buffer;
    Image image;
    Status s = ReadImage(l.files[first + 1], 0, 0, &buffer, &image);
    if (s.ok()) s = SameShape(l.files[first + 1], image, ref_path, ref);
    if (!s.ok()) return s;
  }
  std::vector<uint8_t> pixels(static_cast<size_t>(bytes));
  std::memcpy(pixels.data() + first * row, ref.pixels.data(), row);

  // 2. The rest, in parallel: each thread takes the next file, decodes it into its own image
  //    and copies it to its row.
  std::atomic<size_t> next{first + 1};
  std::atomic<bool> failed{false};
  auto work = [&] {
    std::vector<uint8_t> buffer;
    Image image;
    for (;;) {
      if (failed.load(std::memory_order_relaxed)) return;
      const size_t i = next.fetch_add(1);
      if (i >= n) return;
      Status s;
      try {
        s = ReadImage(l.files[i], want_h, want_w, &buffer, &image);
      } catch (const std::exception& e) {  // bad_alloc
        s = Status::IoError(l.files[i] + ": cannot decode: " + e.what());
      }
      if (s.ok()) s = SameShape(l.files[i], image, ref_path, ref);
      if (s.ok()) {
        std::memcpy(pixels.data() + i * row, image.pixels.data(), row);
      } else {
        problems[i] = std::move(s);
        if (!skip) failed.store(true, std::memory_order_relaxed);
      }
    }
  };
  unsigned threads = spec.decode_threads > 0 ? static_cast<unsigned>(spec.decode_threads)
                                             : std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<size_t>(threads, n - first));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();

  // 3. Bad files: the first (in order) fails the load; skipped, they leave their rows.
  Dataset meta;
  std::vector<int32_t> labels;
  labels.reserve(n);
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!problems[i].ok()) {
      if (!skip) return problems[i];
      ++meta.skipped_files;
      if (meta.skipped.size() < kSkippedShown) meta.skipped.push_back(problems[i].message());
      continue;
    }
    if (kept != i) std::memmove(pixels.data() + kept * row, pixels.data() + i * row, row);
    labels.push_back(l.labels[i]);
    ++kept;
  }
  pixels.resize(kept * row);
  pixels.shrink_to_fit();
  meta.source = l.root;
  meta.n = static_cast<int64_t>(kept);
  meta.dim = static_cast<int64_t>(row);
  meta.shape = {ref.height, ref.width};
  if (ref.channels > 1) meta.shape.push_back(ref.channels);
  meta.num_classes = static_cast<int>(l.classes.size());
  meta.class_names = l.classes;
  return MakeDataset(std::move(meta), std::move(pixels), {}, std::move(labels));
}

Result<DatasetPtr> LoadImageFolder(const std::string& dir, const DatasetSpec& spec) {
  SWEEP_ASSIGN_OR_RETURN(const FolderListing listing, ListImageFolder(dir));
  return DecodeImageFolder(listing, spec);
}

Result<TensorShape> ProbeFolderShape(const DatasetSpec& spec) {
  constexpr int kTries = 16;
  auto root = Root(spec.train_images);
  if (!root.ok()) return Status::NotFound(root.status().message());
  std::vector<std::string> classes, names;
  if (!ListClasses(*root, &classes).ok()) return Status::NotFound(spec.train_images);
  const int want_h = spec.image_size.size() == 2 ? spec.image_size[0] : 0;
  const int want_w = spec.image_size.size() == 2 ? spec.image_size[1] : 0;
  int tries = 0;
  std::vector<uint8_t> scratch;
  Image image;
  for (const std::string& c : classes) {
    if (!ListClassFiles(*root / c, &names).ok()) continue;
    for (const std::string& name : names) {
      if (ReadImage((*root / c / name).string(), want_h, want_w, &scratch, &image).ok()) {
        return TensorShape{image.channels, image.height, image.width};
      }
      if (++tries == kTries) return Status::NotFound(spec.train_images + ": no image found");
    }
  }
  return Status::NotFound(spec.train_images + ": no image found");
}

Result<int64_t> CountFolderSamples(const std::string& dir) {
  SWEEP_ASSIGN_OR_RETURN(const fs::path root, Root(dir));
  std::vector<std::string> classes, names;
  SWEEP_RETURN_IF_ERROR(ListClasses(root, &classes));
  int64_t n = 0;
  for (const std::string& c : classes) {
    SWEEP_RETURN_IF_ERROR(ListClassFiles(root / c, &names));
    n += static_cast<int64_t>(names.size());
  }
  return n;
}

Status CheckImageFolders(const DatasetSpec& spec, std::string* field) {
  auto check = [&](const std::string& dir, std::vector<std::string>* classes) -> Status {
    SWEEP_ASSIGN_OR_RETURN(const fs::path root, Root(dir));
    SWEEP_RETURN_IF_ERROR(ListClasses(root, classes));
    bool found = false;
    const bool skip = spec.on_bad_file == "skip";
    std::vector<std::string> names;
    std::vector<uint8_t> head(8);
    for (const std::string& c : *classes) {
      SWEEP_RETURN_IF_ERROR(ListClassFiles(root / c, &names));
      if (names.empty() && !skip) {
        return Status::InvalidArgument((root / c).string() +
                                       ": class folder holds no images (on_bad_file = \"skip\" "
                                       "keeps the class without samples)");
      }
      // Each class's files up to its first image, so a class of no images is seen here, not as
      // every trial starts; with on_bad_file = "error", a file that is none fails the load.
      for (const std::string& name : names) {
        const std::string path = (root / c / name).string();
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        const ssize_t got = fd < 0 ? -1 : ::read(fd, head.data(), head.size());
        if (fd >= 0) ::close(fd);
        if (got > 0 && SniffImage(std::span<const uint8_t>(
                           head.data(), static_cast<size_t>(got))) != ImageFormat::kUnknown) {
          found = true;
          break;
        }
        if (!skip) {
          return Status::InvalidArgument(path + ": " +
                                         (got < 0    ? "cannot be read"
                                          : got == 0 ? "empty file, not an image"
                                                     : "not a PNG or JPEG image") +
                                         " (on_bad_file = \"skip\" leaves such files out)");
        }
      }
    }
    if (!found) return Status::InvalidArgument(root.string() + ": holds no PNG or JPEG images");
    return Status::Ok();
  };
  std::vector<std::string> train_classes, test_classes;
  *field = "train";
  SWEEP_RETURN_IF_ERROR(check(spec.train_images, &train_classes));
  if (spec.test_images.empty()) {
    field->clear();
    return Status::Ok();
  }
  *field = "test";
  SWEEP_RETURN_IF_ERROR(check(spec.test_images, &test_classes));
  if (test_classes != train_classes) {
    auto list = [](const std::vector<std::string>& a, const std::vector<std::string>& b) {
      std::vector<std::string> only;
      std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(only));
      std::string text;
      for (size_t i = 0; i < only.size() && i < 5; ++i) {
        text += (text.empty() ? "'" : ", '") + only[i] + "'";
      }
      if (only.size() > 5) text += " and " + std::to_string(only.size() - 5) + " more";
      return text;
    };
    const std::string extra = list(test_classes, train_classes);
    const std::string missing = list(train_classes, test_classes);
    return Status::InvalidArgument(
        spec.test_images + ": its classes are not the training folder's (" +
        (extra.empty() ? "" : extra + " only in test") +
        (extra.empty() || missing.empty() ? "" : "; ") +
        (missing.empty() ? "" : missing + " missing") +
        "); labels are the sorted class names, so both need the same class folders");
  }
  field->clear();
  return Status::Ok();
}

}  // namespace sweep::trainer
