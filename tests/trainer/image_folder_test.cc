// Tests of image-folder datasets (format = "folder"): real Fashion-MNIST images exported as PNG
// (and some JPEG) class folders load to the IDX files' bytes in a defined order and train to
// the same numbers; the codecs and the resize; the dataset cache; and every kind of bad data,
// failing by name or skipped and counted.
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "augment.h"
#include "data.h"
#include "gtest/gtest.h"
#include "image_codec.h"
#include "image_folder.h"
#include "partial_epoch_util.h"
#include "test_util.h"

namespace sweep::trainer {
namespace {

namespace fs = std::filesystem;
using testing::IdxBytes;
using testing::TempDir;
using testing::WriteBytes;
using testing::WriteText;

const std::string kFashionDir = "/usr/share/datasets/fashion-mnist";
// Sorted, these give the labels 0..9 in Fashion-MNIST's order.
const std::vector<std::string> kFashionClasses = {
    "0_tshirt_top", "1_trouser", "2_pullover", "3_dress", "4_coat",
    "5_sandal",     "6_shirt",   "7_sneaker",  "8_bag",   "9_ankle_boot"};

std::vector<uint8_t> Bytes(const Result<std::vector<uint8_t>>& r) {
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : std::vector<uint8_t>{};
}

void WriteImage(const std::string& path, const Image& image, bool jpeg, int quality = 95) {
  fs::create_directories(fs::path(path).parent_path());
  WriteBytes(path, Bytes(jpeg ? EncodeJpeg(image, quality) : EncodePng(image)), false);
}

Image Gray(int h, int w, uint8_t v) { return Image{h, w, 1, std::vector<uint8_t>(h * w, v)}; }

// An image with structure and noise (JPEG must not find it trivial).
Image Pattern(int h, int w, int c, uint64_t seed) {
  Image im{h, w, c, {}};
  Rng rng(seed);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int ch = 0; ch < c; ++ch) {
        const double v = 128 + 80 * std::sin(0.07 * x * (ch + 1) + 0.05 * y) + 20 * rng.Uniform();
        im.pixels.push_back(static_cast<uint8_t>(std::clamp(v, 0.0, 255.0)));
      }
    }
  }
  return im;
}

// ---- Fashion-MNIST exported as class folders ----

struct Exported {
  std::vector<uint8_t> pixels;  // [n, 784] in the folder's order
  std::vector<int32_t> labels;
  std::vector<bool> jpeg;  // which samples were written as JPEG
};

// The first `n` samples of an IDX pair written as <root>/<class>/<index>.png (every
// `jpeg_every`-th as .jpg; 0: none), and those samples in the folder set's defined order:
// classes sorted, then files sorted within a class (here: by index).
Exported Export(const DatasetPtr& set, int64_t n, const std::string& root, int jpeg_every) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return set->labels[static_cast<size_t>(a)] < set->labels[static_cast<size_t>(b)];
  });
  Exported out;
  for (const int64_t i : order) {
    const int32_t label = set->labels[static_cast<size_t>(i)];
    const auto* px = set->u8.data() + i * 784;
    Image im{28, 28, 1, std::vector<uint8_t>(px, px + 784)};
    const bool jpeg = jpeg_every > 0 && i % jpeg_every == jpeg_every - 1;
    char name[32];
    std::snprintf(name, sizeof name, "%05lld.%s", static_cast<long long>(i), jpeg ? "jpg" : "png");
    WriteImage(root + "/" + kFashionClasses[static_cast<size_t>(label)] + "/" + name, im, jpeg);
    out.pixels.insert(out.pixels.end(), px, px + 784);
    out.labels.push_back(label);
    out.jpeg.push_back(jpeg);
  }
  return out;
}

// Trains `a` and `b` (two epochs) and expects the same numbers every epoch and on the test
// set, and b's label map to be Fashion-MNIST's classes.
void ExpectSameTraining(const TrainOptions& a, const TrainOptions& b) {
  std::vector<EpochReport> ea, eb;
  auto ra = Train(a, [&](const EpochReport& e) { return ea.push_back(e), true; });
  auto rb = Train(b, [&](const EpochReport& e) { return eb.push_back(e), true; });
  ASSERT_TRUE(ra.ok()) << ra.status().message();
  ASSERT_TRUE(rb.ok()) << rb.status().message();
  ASSERT_EQ(ea.size(), 2u);
  ASSERT_EQ(eb.size(), 2u);
  for (size_t e = 0; e < ea.size(); ++e) {
    EXPECT_EQ(ea[e].train_loss, eb[e].train_loss) << "epoch " << e + 1;
    EXPECT_EQ(ea[e].val_loss, eb[e].val_loss) << "epoch " << e + 1;
    EXPECT_EQ(ea[e].val_acc, eb[e].val_acc) << "epoch " << e + 1;
  }
  ASSERT_TRUE(ra->test_acc && rb->test_acc);
  EXPECT_EQ(*ra->test_acc, *rb->test_acc);
  EXPECT_EQ(rb->class_names, kFashionClasses);
  EXPECT_EQ(rb->skipped_files, 0);
}

class FashionFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kFashionDir + "/train-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << "Fashion-MNIST is not installed at " << kFashionDir;
    }
    // Decoded once for every test of the suite.
    static const Result<DatasetPtr> train = LoadIdx(kFashionDir + "/train-images-idx3-ubyte.gz",
                                                    kFashionDir + "/train-labels-idx1-ubyte.gz");
    static const Result<DatasetPtr> test = LoadIdx(kFashionDir + "/t10k-images-idx3-ubyte.gz",
                                                   kFashionDir + "/t10k-labels-idx1-ubyte.gz");
    ASSERT_TRUE(train.ok() && test.ok());
    train_ = *train;
    test_ = *test;
  }

  DatasetSpec Spec() const {
    DatasetSpec spec;
    spec.format = "folder";
    spec.train_images = dir_ / "train";
    spec.test_images = dir_ / "test";
    return spec;
  }

  TempDir dir_;
  DatasetPtr train_, test_;
};

TEST_F(FashionFolder, PngFolderHoldsTheIdxBytesInClassThenFileOrder) {
  const Exported train = Export(train_, 200, dir_ / "train", 0);
  const Exported test = Export(test_, 100, dir_ / "test", 0);
  const DatasetSpec spec = Spec();
  for (const bool is_test : {false, true}) {
    const Exported& want = is_test ? test : train;
    auto got = LoadCached(spec, is_test, "");
    ASSERT_TRUE(got.ok()) << got.status().message();
    const Dataset& d = **got;
    EXPECT_EQ(d.n, is_test ? 100 : 200);
    EXPECT_EQ(d.dim, 784);
    EXPECT_EQ(d.shape, (std::vector<int64_t>{28, 28}));
    EXPECT_EQ(d.num_classes, 10);
    EXPECT_EQ(d.class_names, kFashionClasses);
    EXPECT_EQ(std::vector<int32_t>(d.labels.begin(), d.labels.end()), want.labels);
    EXPECT_TRUE(std::vector<uint8_t>(d.u8.begin(), d.u8.end()) == want.pixels)
        << "the decoded pixels differ from the IDX file's";
    EXPECT_EQ(d.skipped_files, 0);
  }
}

// The same samples as an IDX pair and as a PNG folder train to the same numbers: the folder set
// is the IDX set, in the folder's order.
TEST_F(FashionFolder, TrainsToTheSameNumbersAsTheIdxFiles) {
  const Exported train = Export(train_, 200, dir_ / "train", 0);
  const Exported test = Export(test_, 100, dir_ / "test", 0);
  auto idx = [&](const std::string& name, const Exported& s) {
    const uint32_t n = static_cast<uint32_t>(s.labels.size());
    WriteBytes(dir_ / (name + "-images"), IdxBytes({n, 28, 28}, s.pixels), false);
    WriteBytes(dir_ / (name + "-labels"),
               IdxBytes({n}, std::vector<uint8_t>(s.labels.begin(), s.labels.end())), false);
  };
  idx("train", train);
  idx("test", test);
  TrainOptions o;
  o.dataset.train_images = dir_ / "train-images";
  o.dataset.train_labels = dir_ / "train-labels";
  o.dataset.test_images = dir_ / "test-images";
  o.dataset.test_labels = dir_ / "test-labels";
  o.hidden = {32};
  o.batch_size = 20;
  o.epochs = 2;
  o.seed = 11;
  o.backend = "cpu";
  o.cache_dir = dir_ / "cache";
  TrainOptions f = o;
  f.dataset = Spec();
  ExpectSameTraining(o, f);
}

// A streamed set (cache = "stream") gathers the held set's rows, from several threads at once,
// and trains to the same numbers: normalization, prefetch and decode threads included.
TEST_F(FashionFolder, StreamedSetGathersAndTrainsAsTheHeldOne) {
  Export(train_, 200, dir_ / "train", 5);
  Export(test_, 100, dir_ / "test", 0);
  DatasetSpec held = Spec(), streamed = Spec();
  streamed.cache = "stream";
  streamed.decode_threads = 3;
  auto a = LoadCached(held, false, "");
  auto b = LoadCached(streamed, false, "");
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().message();
  ASSERT_NE((*b)->stream, nullptr);
  EXPECT_TRUE((*b)->u8.empty());
  EXPECT_EQ((*b)->n, 200);
  EXPECT_EQ((*b)->dim, 784);
  EXPECT_EQ((*b)->class_names, kFashionClasses);
  std::vector<int32_t> rows(200);
  std::iota(rows.begin(), rows.end(), 0);
  std::mt19937 rng(3);
  std::shuffle(rows.begin(), rows.end(), rng);
  auto gather = [&](const Dataset& d, int64_t from, int64_t count, std::vector<float>* x,
                    std::vector<int32_t>* y) {
    x->resize(static_cast<size_t>(count * 784));
    y->resize(static_cast<size_t>(count));
    d.Gather(rows.data() + from, count, x->data(), y->data());
  };
  std::vector<float> xa, xb, xc;
  std::vector<int32_t> ya, yb, yc;
  gather(**a, 0, 200, &xa, &ya);
  // Two callers at once: one has the pool, the other decodes on its own thread.
  std::thread other([&] { gather(**b, 100, 100, &xc, &yc); });
  gather(**b, 0, 200, &xb, &yb);
  other.join();
  EXPECT_TRUE(xa == xb) << "streamed rows differ from the held set's";
  EXPECT_EQ(ya, yb);
  EXPECT_TRUE(std::equal(xc.begin(), xc.end(), xa.begin() + 100 * 784));
  EXPECT_TRUE(std::equal(yc.begin(), yc.end(), ya.begin() + 100));

  TrainOptions o;
  o.dataset = held;
  o.hidden = {32};
  o.normalize = true;
  o.augment_flip = true;
  o.augment_crop = 2;
  o.batch_size = 20;
  o.epochs = 2;
  o.seed = 5;
  o.backend = "cpu";
  o.cache_dir = dir_ / "cache";
  TrainOptions f = o;
  f.dataset = streamed;
  f.dataset.prefetch = 3;
  ExpectSameTraining(o, f);
}

// JPEG is lossy: its samples come back close to the originals, and the PNG ones exact.
TEST_F(FashionFolder, JpegFilesDecodeCloseToTheirSource) {
  const Exported train = Export(train_, 200, dir_ / "train", 4);
  auto got = LoadCached(Spec(), false, "");
  ASSERT_TRUE(got.ok()) << got.status().message();
  const Dataset& d = **got;
  ASSERT_EQ(d.n, 200);
  int jpegs = 0;
  for (size_t i = 0; i < train.labels.size(); ++i) {
    const uint8_t* a = d.u8.data() + i * 784;
    const uint8_t* b = train.pixels.data() + i * 784;
    double diff = 0;
    for (int j = 0; j < 784; ++j) diff += std::abs(int{a[j]} - int{b[j]});
    if (train.jpeg[i]) {
      ++jpegs;
      EXPECT_LT(diff / 784, 4.0) << "sample " << i;
      EXPECT_GT(diff, 0) << "sample " << i << ": a JPEG that is lossless?";
    } else {
      EXPECT_EQ(diff, 0) << "sample " << i;
    }
  }
  EXPECT_EQ(jpegs, 50);
}

// A later trial maps the decoded set from the machine-wide cache instead of decoding it; a
// changed file is a new version, decoded again.
TEST_F(FashionFolder, LaterLoadsMapTheCacheFile) {
  Export(train_, 200, dir_ / "train", 0);
  const std::string cache = dir_ / "cache";
  fs::create_directories(cache);
  DatasetSpec spec = Spec();
  const int64_t decodes = DatasetDecodeCount(), maps = DatasetMapCount();
  auto first = LoadCached(spec, false, cache);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(DatasetDecodeCount() - decodes, 1);
  ClearDatasetCache();
  const auto start = std::chrono::steady_clock::now();
  auto second = LoadCached(spec, false, cache);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_TRUE((*second)->mapped);
  EXPECT_EQ(DatasetDecodeCount() - decodes, 1);
  EXPECT_GT(DatasetMapCount() - maps, 0);
  EXPECT_EQ((*second)->class_names, kFashionClasses);
  EXPECT_TRUE(std::equal((*first)->u8.begin(), (*first)->u8.end(), (*second)->u8.begin()));
  std::printf("mapped the cached folder set in %.1f ms\n", ms);
  // With cache = "off" nothing is written or mapped: this process decodes.
  ClearDatasetCache();
  spec.cache = "off";
  auto off = LoadCached(spec, false, cache);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE((*off)->mapped);
  EXPECT_EQ(DatasetDecodeCount() - decodes, 2);
  // One more image: a new listing, decoded again.
  spec.cache = "auto";
  ClearDatasetCache();
  WriteImage(dir_ / "train/1_trouser/99999.png", Gray(28, 28, 7), false);
  auto changed = LoadCached(spec, false, cache);
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ((*changed)->n, 201);
  EXPECT_EQ(DatasetDecodeCount() - decodes, 3);
}

// ---- codecs ----

TEST(ImageCodec, PngRoundTripsGrayAndRgb) {
  for (const int c : {1, 3}) {
    const Image im = Pattern(17, 23, c, 5);
    Image back;
    ASSERT_TRUE(DecodeImage(Bytes(EncodePng(im)), 0, 0, &back).ok());
    EXPECT_EQ(back.height, 17);
    EXPECT_EQ(back.width, 23);
    EXPECT_EQ(back.channels, c);
    EXPECT_TRUE(back.pixels == im.pixels);
  }
}

TEST(ImageCodec, JpegDecodesGrayAndRgbClose) {
  for (const int c : {1, 3}) {
    const Image im = Pattern(64, 48, c, 6);
    Image back;
    ASSERT_TRUE(DecodeImage(Bytes(EncodeJpeg(im, 95)), 0, 0, &back).ok());
    EXPECT_EQ(back.channels, c);
    ASSERT_EQ(back.pixels.size(), im.pixels.size());
    double diff = 0;
    for (size_t i = 0; i < im.pixels.size(); ++i) diff += std::abs(back.pixels[i] - im.pixels[i]);
    // Quality 95 with 4:2:0 chroma: a few levels off on average; a wrong color conversion is
    // tens.
    EXPECT_LT(diff / static_cast<double>(im.pixels.size()), 8.0);
  }
}

TEST(ImageCodec, ResizeKeepsAConstantAndAveragesWhenShrinking) {
  const Image flat = Gray(30, 40, 77);
  std::vector<uint8_t> out(15 * 20);
  ResizeBilinear(flat.pixels.data(), 30, 40, 1, out.data(), 15, 20);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t v) { return v == 77; }));
  out.resize(33 * 45);
  ResizeBilinear(flat.pixels.data(), 30, 40, 1, out.data(), 33, 45);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t v) { return v == 77; }));
  // A one-pixel checkerboard shrunk 4x: every source pixel counts, so every output is grey
  // (a filter that only reads the nearest pixels would give 0 or 255).
  std::vector<uint8_t> board(64 * 64);
  for (int y = 0; y < 64; ++y) {
    for (int x = 0; x < 64; ++x) board[static_cast<size_t>(y * 64 + x)] = (x + y) % 2 ? 255 : 0;
  }
  std::vector<uint8_t> small(16 * 16);
  ResizeBilinear(board.data(), 64, 64, 1, small.data(), 16, 16);
  for (uint8_t v : small) EXPECT_NEAR(v, 127.5, 12);
}

// Shrinking a JPEG to a quarter decodes at 1/4 scale by the DCT: close to decoding it whole
// and resizing.
TEST(ImageCodec, JpegShrinksByItsDctCloseToAFullDecodeAndResize) {
  const Image im = Pattern(256, 256, 3, 7);
  const std::vector<uint8_t> jpeg = Bytes(EncodeJpeg(im, 90));
  Image full, scaled;
  ASSERT_TRUE(DecodeImage(jpeg, 0, 0, &full).ok());
  ASSERT_TRUE(DecodeImage(jpeg, 64, 64, &scaled).ok());
  ASSERT_EQ(scaled.height, 64);
  ASSERT_EQ(scaled.width, 64);
  std::vector<uint8_t> resized(64 * 64 * 3);
  ResizeBilinear(full.pixels.data(), 256, 256, 3, resized.data(), 64, 64);
  double diff = 0;
  for (size_t i = 0; i < resized.size(); ++i) diff += std::abs(resized[i] - scaled.pixels[i]);
  EXPECT_LT(diff / static_cast<double>(resized.size()), 6.0);
}

// ---- bad data ----

// A folder of two classes with `per_class` good 8x8 gray PNGs each.
// One epoch of batches of 2 on `spec`, the cache in `dir`: for tests of what a load refuses.
TrainOptions OneEpochOn(const TempDir& dir, const DatasetSpec& spec) {
  TrainOptions o;
  o.dataset = spec;
  o.batch_size = 2;
  o.epochs = 1;
  o.cache_dir = dir / "cache";
  return o;
}

DatasetSpec SmallFolder(const TempDir& dir, int per_class = 4) {
  for (const char* c : {"cat", "dog"}) {
    for (int i = 0; i < per_class; ++i) {
      WriteImage(dir / ("train/" + std::string(c) + "/" + std::to_string(i) + ".png"),
                 Gray(8, 8, static_cast<uint8_t>(10 * i + (c[0] == 'd' ? 100 : 0))), false);
    }
  }
  DatasetSpec spec;
  spec.format = "folder";
  spec.train_images = dir / "train";
  return spec;
}

// Loads `spec` and expects an error naming `name`, then loads it with on_bad_file = "skip" and
// expects `kept` samples and `skipped` skipped files.
void ExpectNamedThenSkipped(DatasetSpec spec, const std::string& name, const std::string& why,
                            int64_t kept, int64_t skipped) {
  ClearDatasetCache();
  auto bad = LoadCached(spec, false, "");
  ASSERT_FALSE(bad.ok()) << "loaded a set with " << name;
  EXPECT_NE(bad.status().message().find(name), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find(why), std::string::npos) << bad.status().message();
  spec.on_bad_file = "skip";
  auto ok = LoadCached(spec, false, "");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ((*ok)->n, kept);
  EXPECT_EQ((*ok)->skipped_files, skipped);
  ASSERT_FALSE((*ok)->skipped.empty() && skipped > 0);
  if (skipped > 0) {
    EXPECT_NE((*ok)->skipped[0].find(name), std::string::npos);
  }
}

TEST(BadFiles, TruncatedPngIsNamedOrSkipped) {
  TempDir dir;
  const DatasetSpec spec = SmallFolder(dir);
  std::vector<uint8_t> png = Bytes(EncodePng(Pattern(8, 8, 1, 1)));
  png.resize(png.size() / 2);
  WriteBytes(dir / "train/cat/2b.png", png, false);
  ExpectNamedThenSkipped(spec, "cat/2b.png", "bad PNG", 8, 1);
}

TEST(BadFiles, TruncatedJpegIsNamedOrSkipped) {
  TempDir dir;
  const DatasetSpec spec = SmallFolder(dir);
  std::vector<uint8_t> jpeg = Bytes(EncodeJpeg(Pattern(8, 8, 1, 1), 90));
  jpeg.resize(jpeg.size() * 2 / 3);
  WriteBytes(dir / "train/dog/1b.jpg", jpeg, false);
  ExpectNamedThenSkipped(spec, "dog/1b.jpg", "bad JPEG", 8, 1);
}

// A header that claims more pixels than we decode is refused before any is allocated.
TEST(BadFiles, AnImageTooLargeIsRefusedFromItsHeader) {
  Image out;
  // PNG: IHDR's width and height at bytes 16 and 20, its CRC (type and data) at 29.
  std::vector<uint8_t> png = Bytes(EncodePng(Pattern(8, 8, 1, 1)));
  for (int at : {16, 20}) {
    png[at] = 0, png[at + 1] = 0, png[at + 2] = 0x4E, png[at + 3] = 0x20;  // 20000
  }
  const uint32_t crc = static_cast<uint32_t>(crc32(0, png.data() + 12, 17));
  for (int k = 0; k < 4; ++k) png[29 + k] = static_cast<uint8_t>(crc >> (24 - 8 * k));
  Status s = DecodeImage(png, 0, 0, &out);
  EXPECT_NE(s.message().find("PNG of 20000x20000 is too large"), std::string::npos) << s.message();
  // Past the sides' limit, the size is said before libpng refuses the header.
  png[16] = 0, png[17] = 0, png[18] = 0xC3, png[19] = 0x50;  // 50000
  s = DecodeImage(png, 0, 0, &out);
  EXPECT_EQ(s.message(), "PNG of 50000x20000 is too large (sides up to 32768)");
  // JPEG: the frame header's width (after FF C0, its length, precision and height).
  std::vector<uint8_t> jpeg = Bytes(EncodeJpeg(Pattern(8, 8, 1, 1), 90));
  size_t sof = 0;
  while (sof + 8 < jpeg.size() && !(jpeg[sof] == 0xFF && jpeg[sof + 1] == 0xC0)) ++sof;
  ASSERT_LT(sof + 8, jpeg.size());
  jpeg[sof + 7] = 0x9C, jpeg[sof + 8] = 0x40;  // 40000
  s = DecodeImage(jpeg, 0, 0, &out);
  EXPECT_NE(s.message().find("JPEG of 40000x8 is too large"), std::string::npos) << s.message();
}

// With "skip", a large first image leaves out every file of another size: a set left with one
// class says what was left out, not only that one class remains.
TEST(BadFiles, ASetLeftWithOneClassBySkippedFilesSaysSo) {
  TempDir dir;
  DatasetSpec spec = SmallFolder(dir);
  WriteImage(dir / "train/cat/-big.png", Gray(16, 16, 1), false);  // sorts first
  spec.on_bad_file = "skip";
  auto r = Train(OneEpochOn(dir, spec), nullptr);
  ASSERT_FALSE(r.ok());
  const std::string& said = r.status().message();
  EXPECT_NE(said.find(": every label is 0 (class 'cat'); a classifier needs samples of at least "
                      "two classes; 8 bad file(s) were left out, the first: "),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("8x8 pixels, but the first image"), std::string::npos) << said;
}

TEST(BadFiles, AFileThatIsNoImageIsNamedOrSkipped) {
  TempDir dir;
  const DatasetSpec spec = SmallFolder(dir);
  WriteText(dir / "train/dog/notes.txt", "not a picture");
  ExpectNamedThenSkipped(spec, "dog/notes.txt", "not a PNG or JPEG image", 8, 1);
}

TEST(BadFiles, AnUnreadableFileIsNamedOrSkipped) {
  TempDir dir;
  const DatasetSpec spec = SmallFolder(dir);
  fs::create_symlink(dir / "nowhere.png", dir / "train/cat/0a.png");
  ExpectNamedThenSkipped(spec, "cat/0a.png", "cannot open", 8, 1);
  if (::geteuid() != 0) {  // root reads files whatever their mode
    fs::remove(dir / "train/cat/0a.png");
    WriteImage(dir / "train/cat/0c.png", Gray(8, 8, 1), false);
    ::chmod((dir / "train/cat/0c.png").c_str(), 0);
    ExpectNamedThenSkipped(spec, "cat/0c.png", "Permission denied", 8, 1);
  }
}

TEST(BadFiles, AnEmptyClassFolderIsNamedOrKeptWithoutSamples) {
  TempDir dir;
  const DatasetSpec spec = SmallFolder(dir);
  fs::create_directories(dir / "train/bird");
  ExpectNamedThenSkipped(spec, "train/bird", "holds no images", 8, 0);
  DatasetSpec skip = spec;
  skip.on_bad_file = "skip";
  auto d = LoadCached(skip, false, "");
  ASSERT_TRUE(d.ok());
  // The class keeps its label (bird: 0), so labels stay the sorted class names.
  EXPECT_EQ((*d)->class_names, (std::vector<std::string>{"bird", "cat", "dog"}));
  EXPECT_EQ((*d)->num_classes, 3);
  EXPECT_EQ((*d)->labels[0], 1);
}

TEST(BadFiles, AnImageOfOtherChannelsIsNamedOrSkipped) {
  TempDir dir;
  const DatasetSpec spec = SmallFolder(dir);
  WriteImage(dir / "train/dog/9.png", Pattern(8, 8, 3, 2), false);
  ExpectNamedThenSkipped(spec, "dog/9.png", "has 3 channels (RGB), but the first image", 8, 1);
}

TEST(BadFiles, AnImageOfAnotherSizeIsNamedUnlessResized) {
  TempDir dir;
  DatasetSpec spec = SmallFolder(dir);
  WriteImage(dir / "train/dog/9.png", Gray(10, 8, 3), false);
  ExpectNamedThenSkipped(spec, "dog/9.png", "image_size", 8, 1);
  spec.image_size = {6, 6};
  ClearDatasetCache();
  auto d = LoadCached(spec, false, "");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ((*d)->n, 9);
  EXPECT_EQ((*d)->shape, (std::vector<int64_t>{6, 6}));
  // A constant image stays that constant through the resize.
  const uint8_t* last = (*d)->u8.data() + 8 * 36;
  EXPECT_TRUE(std::all_of(last, last + 36, [](uint8_t v) { return v == 3; }));
}

// Skipped files are counted into the trial's result.
TEST(BadFiles, TrainingReportsTheSkippedCount) {
  TempDir dir;
  DatasetSpec spec = SmallFolder(dir, 12);
  WriteText(dir / "train/dog/readme.txt", "x");
  WriteText(dir / "train/cat/empty.png", "");
  spec.on_bad_file = "skip";
  TrainOptions o;
  o.dataset = spec;
  o.hidden = {4};
  o.batch_size = 4;
  o.epochs = 1;
  o.validation_fraction = 0.25;
  o.backend = "cpu";
  o.cache_dir = dir / "cache";
  auto r = Train(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->skipped_files, 2);
  EXPECT_EQ(r->class_names, (std::vector<std::string>{"cat", "dog"}));
  auto summary = DescribeDataset(spec, false, dir / "cache");
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_EQ(summary->samples, 24);
  EXPECT_EQ(summary->class_counts, (std::vector<int64_t>{12, 12}));
  EXPECT_EQ(summary->skipped_files, 2);
  EXPECT_EQ(summary->skipped.size(), 2u);
}

// Streamed, a bad file is met as it is gathered: it fails the trial naming it, or with
// on_bad_file = "skip" is counted and a good file of its class takes its place.
TEST(BadFiles, AStreamedSetNamesOrSkipsABadFileAsItMeetsIt) {
  TempDir dir;
  DatasetSpec spec = SmallFolder(dir, 12);
  WriteText(dir / "train/dog/5b.png", "not a picture");
  spec.cache = "stream";
  spec.decode_threads = 2;
  TrainOptions o;
  o.dataset = spec;
  o.hidden = {4};
  o.batch_size = 5;
  o.epochs = 2;
  o.validation_fraction = 0.2;
  o.backend = "cpu";
  o.cache_dir = dir / "cache";
  int epochs = 0;
  auto r = Train(o, [&](const EpochReport&) { return ++epochs, true; });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("dog/5b.png"), std::string::npos) << r.status().message();
  EXPECT_EQ(epochs, 0) << "an epoch was reported with a bad file in it";

  o.dataset.on_bad_file = "skip";
  r = Train(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->skipped_files, 1);
  // The bad file's row holds another dog.
  auto d = LoadCached(o.dataset, false, "");
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ((*d)->n, 25);
  auto listing = ListImageFolder(spec.train_images);
  ASSERT_TRUE(listing.ok());
  const auto at = std::find(listing->files.begin(), listing->files.end(),
                            (fs::path(spec.train_images) / "dog/5b.png").string());
  ASSERT_NE(at, listing->files.end());
  int32_t bad_row = static_cast<int32_t>(at - listing->files.begin());
  std::vector<float> x(64);
  int32_t y = -1;
  (*d)->Gather(&bad_row, 1, x.data(), &y);
  EXPECT_EQ(y, 1);
  EXPECT_GE(x[0] * 255.0f, 100.0f) << "a dog's pixels (100 and up) stand in";
  EXPECT_EQ((*d)->stream->skipped_files(), 1);
  ASSERT_EQ((*d)->stream->skipped().size(), 1u);
  EXPECT_NE((*d)->stream->skipped()[0].find("dog/5b.png"), std::string::npos);
}

// ---- augmentation ----

// The crop and flip of a channels-last image: every output is the image shifted by some
// (dy, dx) within the crop and perhaps mirrored, zero outside, exactly; over many samples
// every shift and both mirrorings occur.
TEST(Augment, CropAndFlipMoveWholePixels) {
  for (const int C : {1, 3}) {
    const int H = 7, W = 9, crop = 3;
    InputTransform t;
    t.shape = {C, H, W};
    t.crop = crop;
    t.flip = true;
    t.seed = 17;
    std::vector<float> image(static_cast<size_t>(C * H * W));
    for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<float>(i + 1);
    auto moved = [&](int dy, int dx, bool mirror) {
      std::vector<float> out(image.size(), 0.0f);
      for (int h = 0; h < H; ++h) {
        for (int w = 0; w < W; ++w) {
          const int sh = h + dy, sw = (mirror ? W - 1 - w : w) + dx;
          if (sh < 0 || sh >= H || sw < 0 || sw >= W) continue;
          for (int c = 0; c < C; ++c) {
            out[static_cast<size_t>((h * W + w) * C + c)] =
                image[static_cast<size_t>((sh * W + sw) * C + c)];
          }
        }
      }
      return out;
    };
    std::set<std::tuple<int, int, bool>> seen;
    for (int64_t position = 0; position < 600; ++position) {
      std::vector<float> x = image;
      t.Apply(x.data(), 1, /*augment=*/true, 2, position);
      bool found = false;
      for (int dy = -crop; dy <= crop && !found; ++dy) {
        for (int dx = -crop; dx <= crop && !found; ++dx) {
          for (const bool mirror : {false, true}) {
            if (moved(dy, dx, mirror) == x) {
              seen.insert({dy, dx, mirror});
              found = true;
              break;
            }
          }
        }
      }
      ASSERT_TRUE(found) << "C " << C << ", position " << position << ": not a shift or flip";
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>((2 * crop + 1) * (2 * crop + 1) * 2)) << "C " << C;
  }
}

// ---- config-time checks (sweep's dataset check calls these) ----

TEST(CheckImageFolders, AFolderWithNoImagesIsRefusedByKey) {
  TempDir dir;
  DatasetSpec spec;
  spec.format = "folder";
  spec.train_images = dir / "train";
  std::string field;
  Status s = CheckImageFolders(spec, &field);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(field, "train");
  EXPECT_NE(s.message().find("no such folder"), std::string::npos) << s.message();
  fs::create_directories(dir / "train");
  s = CheckImageFolders(spec, &field);
  EXPECT_NE(s.message().find("no class folders"), std::string::npos) << s.message();
  fs::create_directories(dir / "train/a");
  fs::create_directories(dir / "train/b");
  WriteText(dir / "train/a/x.txt", "text");
  WriteText(dir / "train/b/y.txt", "text");
  spec.on_bad_file = "skip";
  s = CheckImageFolders(spec, &field);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(field, "train");
  EXPECT_NE(s.message().find("holds no PNG or JPEG images"), std::string::npos) << s.message();
  WriteImage(dir / "train/b/z.png", Gray(4, 4, 1), false);
  s = CheckImageFolders(spec, &field);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(field, "");
  // With on_bad_file = "error", a class whose files before its first image include one that is
  // none fails the load: refused here, naming the file.
  spec.on_bad_file = "error";
  s = CheckImageFolders(spec, &field);
  EXPECT_EQ(field, "train");
  EXPECT_EQ(s.message(), (dir / "train/a/x.txt") +
                             ": not a PNG or JPEG image (on_bad_file = \"skip\" leaves such files "
                             "out)");
  fs::remove(dir / "train/a/x.txt");
  WriteImage(dir / "train/a/w.png", Gray(4, 4, 1), false);
  s = CheckImageFolders(spec, &field);
  EXPECT_NE(s.message().find("y.txt: not a PNG or JPEG image"), std::string::npos) << s.message();
  // Only the files up to each class's first image are read: the load finds the rest.
  fs::rename(dir / "train/b/y.txt", dir / "train/b/zz.txt");
  EXPECT_TRUE(CheckImageFolders(spec, &field).ok());
  WriteText(dir / "train/a/0.png", "");
  s = CheckImageFolders(spec, &field);
  EXPECT_NE(s.message().find("0.png: empty file, not an image"), std::string::npos) << s.message();
}

TEST(CheckImageFolders, TestClassesMustBeTheTrainingClasses) {
  TempDir dir;
  DatasetSpec spec = SmallFolder(dir);
  spec.test_images = dir / "test";
  WriteImage(dir / "test/cat/0.png", Gray(8, 8, 1), false);
  WriteImage(dir / "test/cow/0.png", Gray(8, 8, 1), false);
  std::string field;
  Status s = CheckImageFolders(spec, &field);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(field, "test");
  EXPECT_NE(s.message().find("'cow' only in test; 'dog' missing"), std::string::npos)
      << s.message();
  // Loading refuses it too.
  auto r = Train(OneEpochOn(dir, spec), nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("class folders are not the training folder's"),
            std::string::npos)
      << r.status().message();
  fs::rename(dir / "test/cow", dir / "test/dog");
  EXPECT_TRUE(CheckImageFolders(spec, &field).ok());
  // An empty class folder is refused here unless on_bad_file = "skip".
  fs::create_directories(dir / "train/emu");
  fs::create_directories(dir / "test/emu");
  s = CheckImageFolders(spec, &field);
  EXPECT_EQ(field, "train");
  EXPECT_NE(s.message().find("emu: class folder holds no images"), std::string::npos)
      << s.message();
  spec.on_bad_file = "skip";
  EXPECT_TRUE(CheckImageFolders(spec, &field).ok());
}

// An image_size whose batches alone cannot fit is refused before any image is decoded at that
// size, naming image_size (not an allocation failure that names the model's widths).
TEST(CheckImageFolders, AnImageSizeWhoseBatchesCannotFitIsRefusedByName) {
  TempDir dir;
  TrainOptions o = OneEpochOn(dir, SmallFolder(dir));
  o.dataset.image_size = {30000, 30000};
  o.batch_size = 64;  // 3 batches of 64 x 9e8 floats: 644 GiB
  auto r = Train(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(r.status().message().rfind("dataset.image_size = [30000, 30000]: 3 batches of 64 "
                                       "images that size (those gathered ahead and the one in "
                                       "use) take at least 643.7 GiB as floats, ",
                                       0),
            0u)
      << r.status().message();
  EXPECT_NE(r.status().message().find("; make image_size or batch_size smaller"),
            std::string::npos);
}

// ---- options ----

TEST(FolderOptions, KeysBelongToTheirFormat) {
  TrainOptions o;
  using nlohmann::json;
  Status s = ApplyOption(&o, "dataset",
                         json{{"format", "folder"}, {"train", "/t"}, {"image_size", {32, 24}}});
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(o.dataset.train_images, "/t");
  EXPECT_EQ(o.dataset.image_size, (std::vector<int>{32, 24}));
  EXPECT_TRUE(Validate(o).ok());
  s = ApplyOption(&o, "dataset", json{{"format", "folder"}, {"train_images", "/t"}});
  EXPECT_NE(s.message().find("dataset.train_images: not a key of format = \"folder\""),
            std::string::npos)
      << s.message();
  s = ApplyOption(&o, "dataset", json{{"train_images", "/t"}, {"image_size", {3, 3}}});
  EXPECT_NE(s.message().find("dataset.image_size: only for format = \"folder\""), std::string::npos)
      << s.message();
  s = ApplyOption(&o, "dataset",
                  json{{"format", "folder"}, {"train", "/t"}, {"image_size", {0, 3}}});
  EXPECT_FALSE(s.ok());
  ASSERT_TRUE(ApplyOption(&o, "dataset",
                          json{{"format", "folder"}, {"train", "/t"}, {"on_bad_file", "ignore"}})
                  .ok());
  EXPECT_NE(Validate(o).message().find("on_bad_file"), std::string::npos);
  ASSERT_TRUE(
      ApplyOption(&o, "dataset", json{{"format", "folder"}, {"train", "/t"}, {"cache", "maybe"}})
          .ok());
  EXPECT_NE(Validate(o).message().find("dataset.cache"), std::string::npos);
  ASSERT_TRUE(
      ApplyOption(&o, "dataset", json{{"format", "folder"}, {"train", "/t"}, {"cache", "stream"}})
          .ok());
  EXPECT_TRUE(Validate(o).ok()) << Validate(o).message();
  ASSERT_TRUE(ApplyOption(&o, "dataset", json{{"train_images", "/t"}, {"cache", "stream"}}).ok());
  EXPECT_NE(Validate(o).message().find("only for format = \"folder\""), std::string::npos)
      << Validate(o).message();
  s = ApplyOption(&o, "dataset", json{{"format", "folder"}, {"train", "/t"}, {"prefetch", 65}});
  EXPECT_NE(s.message().find("dataset.prefetch"), std::string::npos) << s.message();
}

// A CNN on RGB images resized to image_size, with the random crop: trains, and the probe
// gives the model the resized shape before anything is decoded.
// A small CNN (one stage of 4 channels, no hidden layer) on the folder set dir/train, batch 4,
// a quarter held out, decoded on two threads, on the CPU.
TrainOptions FolderCnnOptions(const TempDir& dir) {
  TrainOptions o;
  o.dataset.format = "folder";
  o.dataset.train_images = dir / "train";
  o.dataset.decode_threads = 2;
  o.model = "cnn";
  o.channels = {4};
  o.convs_per_stage = 1;
  o.hidden = {};
  o.batch_size = 4;
  o.validation_fraction = 0.25;
  o.backend = "cpu";
  o.cache_dir = dir / "cache";
  return o;
}

TEST(FolderTraining, CnnOnResizedRgbImages) {
  TempDir dir;
  for (int i = 0; i < 16; ++i) {
    const bool red = i % 2 == 0;
    Image im = Pattern(20 + i % 3, 18, 3, static_cast<uint64_t>(i));
    for (size_t p = 0; p < im.pixels.size(); p += 3) im.pixels[p + (red ? 0 : 2)] = 250;
    WriteImage(dir / ((red ? "train/red/" : "train/blue/") + std::to_string(i) + ".jpg"), im, true);
  }
  TrainOptions o = FolderCnnOptions(dir);
  o.dataset.image_size = {12, 12};
  o.augment_crop = 2;
  o.epochs = 2;
  auto shape = ProbeFolderShape(o.dataset);
  ASSERT_TRUE(shape.ok()) << shape.status().message();
  EXPECT_EQ(*shape, (TensorShape{3, 12, 12}));
  auto r = Train(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->epochs_done, 2);
}

// A streamed folder set (decoded batch by batch, cropped and flipped on its decode threads),
// stopped within epochs and resumed: the Batcher decodes from the stopped step on, and the run
// ends as the one straight through does, bit for bit.
TEST(FolderTraining, AStreamedSetStoppedWithinEpochsEndsAsIfNeverStopped) {
  TempDir dir;
  for (const char* split : {"train", "test"}) {
    const int n = split[1] == 'r' ? 48 : 8;
    for (int i = 0; i < 2 * n; ++i) {
      Image im = Pattern(8, 8, 1, static_cast<uint64_t>(i) + (split[1] == 'r' ? 0 : 1000));
      if (i % 2 == 0) {
        for (int p = 0; p < 32; ++p) im.pixels[static_cast<size_t>(p)] = 240;  // top half lit
      }
      WriteImage(dir / (std::string(split) + (i % 2 == 0 ? "/top/" : "/plain/") +
                        std::to_string(i) + ".png"),
                 im, false);
    }
  }
  TrainOptions o = FolderCnnOptions(dir);  // 72 training rows: 18 steps an epoch
  o.dataset.test_images = dir / "test";
  o.dataset.cache = "stream";
  o.augment_crop = 1;
  o.augment_flip = true;
  o.epochs = 4;
  testing::ExpectStopsWithinEpochsChangeNothing(o, dir);
}

}  // namespace
}  // namespace sweep::trainer
