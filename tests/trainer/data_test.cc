// Tests of the dataset loaders (IDX raw and gzipped, CSV), their error messages, the dataset
// cache, the fixed validation split and the background batcher. Each test writes its own
// files into a fresh temporary directory.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <numeric>
#include <set>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "batcher.h"
#include "data.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace sweep::trainer {
namespace {

using testing::IdxBytes;
using testing::TempDir;
using testing::WriteBytes;
using testing::WriteText;

template <typename T>
std::vector<T> ToVector(std::span<const T> s) {
  return std::vector<T>(s.begin(), s.end());
}

// 3 images of 2x2 and their labels.
const std::vector<uint8_t> kPixels = {0, 255, 51, 102, 1, 2, 3, 4, 10, 20, 30, 40};
const std::vector<uint8_t> kLabels = {2, 0, 1};

class IdxTest : public ::testing::TestWithParam<bool> {};  // param: gzipped

TEST_P(IdxTest, RoundTrip) {
  TempDir dir;
  const bool gz = GetParam();
  WriteBytes(dir / "img", IdxBytes({3, 2, 2}, kPixels), gz);
  WriteBytes(dir / "lbl", IdxBytes({3}, kLabels), gz);
  auto ds = LoadIdx(dir / "img", dir / "lbl");
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  const Dataset& d = **ds;
  EXPECT_EQ(d.n, 3);
  EXPECT_EQ(d.dim, 4);
  EXPECT_EQ(d.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(d.num_classes, 3);
  EXPECT_EQ(ToVector(d.labels), (std::vector<int32_t>{2, 0, 1}));
  const int32_t rows[] = {0, 2};
  float x[8];
  int32_t y[2];
  d.Gather(rows, 2, x, y);
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_EQ(x[1], 1.0f);  // 255 maps to exactly 1
  EXPECT_FLOAT_EQ(x[2], 0.2f);
  EXPECT_FLOAT_EQ(x[3], 0.4f);
  EXPECT_FLOAT_EQ(x[4], 10.0f / 255.0f);
  EXPECT_EQ(y[0], 2);
  EXPECT_EQ(y[1], 1);
}

std::string GzName(const ::testing::TestParamInfo<bool>& p) { return p.param ? "Gzip" : "Raw"; }
INSTANTIATE_TEST_SUITE_P(RawAndGzip, IdxTest, ::testing::Bool(), GzName);

// Loads images `img` with labels `lbl` (each written gzipped when its flag says so) and returns
// the error message ("" when it loaded).
std::string IdxError(const TempDir& dir, const std::vector<uint8_t>& img,
                     const std::vector<uint8_t>& lbl, bool gz = false) {
  WriteBytes(dir / "images.idx", img, gz);
  WriteBytes(dir / "labels.idx", lbl, gz);
  auto ds = LoadIdx(dir / "images.idx", dir / "labels.idx");
  return ds.ok() ? "" : ds.status().message();
}

// What a config reads before a sweep starts: the headers, never gzipped data. A header of a
// million images with none after it is counted; one the load would refuse is refused the same.
TEST(IdxErrors, TrainingSamplesReadsOnlyTheHeaders) {
  TempDir dir;
  WriteBytes(dir / "img", IdxBytes({1000000, 28, 28}, {}), true);
  WriteBytes(dir / "lbl", IdxBytes({1000000}, {}), true);
  DatasetSpec spec;
  spec.train_images = dir / "img";
  spec.train_labels = dir / "lbl";
  Result<std::optional<int64_t>> n = TrainingSamples(spec);
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(*n, 1000000);
  WriteBytes(dir / "few", IdxBytes({999}, {}), true);
  spec.test_images = dir / "img";
  spec.test_labels = dir / "few";
  n = TrainingSamples(spec);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(),
            (dir / "few") + ": 999 labels for 1000000 images in " + (dir / "img"));
  spec.test_images = dir / "few";  // swapped
  n = TrainingSamples(spec);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(),
            (dir / "few") + ": expected an IDX image file (3 dimensions), found 1 dimension");
  // Test images of another shape, and an uncompressed file cut short, are found unread.
  WriteBytes(dir / "wide", IdxBytes({999, 14, 56}, {}), true);
  spec.test_images = dir / "wide";
  n = TrainingSamples(spec);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(), (dir / "wide") + ": images of 14x56, the training set's 28x28");
  WriteBytes(dir / "cut", IdxBytes({999, 28, 28}, std::vector<uint8_t>(28 * 28 * 500 + 3)), false);
  spec.test_images = dir / "cut";
  n = TrainingSamples(spec);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(),
            (dir / "cut") + ": expected 999 images of 28x28, found 500 and part of another");
  spec.format = "csv";
  n = TrainingSamples(spec);
  ASSERT_TRUE(n.ok());
  EXPECT_FALSE(n->has_value());
}

// An image folder's samples are its class folders' files, counted unopened; with on_bad_file =
// "skip" some may be left out, so no count is given.
TEST(IdxErrors, TrainingSamplesCountsAFoldersFiles) {
  TempDir dir;
  for (const std::string c : {"cat", "dog"}) {
    std::filesystem::create_directories(dir / ("train/" + c + "/deeper"));
    for (const std::string f : {"a.png", "b.png", "deeper/c.png"}) {
      WriteBytes(dir / ("train/" + c + "/" + f), {0x89, 'P', 'N', 'G'}, false);
    }
  }
  DatasetSpec spec;
  spec.format = "folder";
  spec.train_images = dir / "train";
  Result<std::optional<int64_t>> n = TrainingSamples(spec);
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(*n, 6);
  spec.on_bad_file = "skip";
  n = TrainingSamples(spec);
  ASSERT_TRUE(n.ok());
  EXPECT_FALSE(n->has_value());
}

// The size checks Train() makes as it loads a set, from the options and a count alone.
TEST(IdxErrors, CheckTrainingSetSizeSaysWhatTrainWould) {
  TrainOptions o;
  o.batch_size = 128;
  o.validation_fraction = 0.1;
  EXPECT_TRUE(CheckTrainingSetSize(o, 60000).ok());
  EXPECT_EQ(CheckTrainingSetSize(o, 100).message(),
            "training set has 90 samples after the validation split, fewer than batch_size 128");
  o.max_train_samples = 100;
  EXPECT_EQ(CheckTrainingSetSize(o, 60000).message(),
            "training set has 100 samples after the validation split, fewer than batch_size 128");
  o.max_train_samples = 0;
  o.validation_fraction = 0.001;
  EXPECT_EQ(CheckTrainingSetSize(o, 500).message(),
            "validation_fraction = 0.001 of 500 training samples is less than one sample; give "
            "at least 1/500 of them, or a larger training set");
}

// A file much larger than its header declares (a wrong file, a gzip bomb) is refused without
// holding it: the header is checked first, only the declared data is kept, the rest is counted.
TEST(IdxErrors, DataBeyondTheHeaderIsCountedNotHeld) {
  TempDir dir;
  const std::string big = dir / "big.gz";
  constexpr int kMiB = 1 << 20;
  const std::vector<uint8_t> header = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2};
  std::vector<uint8_t> zeros(kMiB);
  auto write = [&](uint8_t type, int mib) {
    gzFile f = gzopen(big.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::vector<uint8_t> h = header;
    h[2] = type;
    ASSERT_EQ(gzwrite(f, h.data(), static_cast<unsigned>(h.size())), static_cast<int>(h.size()));
    for (int i = 0; i < mib; ++i) ASSERT_EQ(gzwrite(f, zeros.data(), kMiB), kMiB);
    ASSERT_EQ(gzclose(f), Z_OK);
  };
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  write(0x08, 256);  // 2 images of 2x2, then 256 MiB of zeros (about 250 KB gzipped)
  auto ds = LoadIdx(big, dir / "labels.idx");
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().message(),
            big + ": expected 2 images of 2x2, found " + std::to_string(256 * kMiB / 4));
  write(0x0D, 256);  // refused by its header alone
  ds = LoadIdx(big, dir / "labels.idx");
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().message(),
            big + ": IDX data type 0x0D is not supported (only unsigned bytes, 0x08)");
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "KiB more at the peak";
}

TEST(IdxErrors, EveryMalformedFileIsNamed) {
  TempDir dir;
  const auto good_img = IdxBytes({3, 2, 2}, kPixels);
  const auto good_lbl = IdxBytes({3}, kLabels);
  const std::string img = dir / "images.idx", lbl = dir / "labels.idx";
  EXPECT_EQ(IdxError(dir, good_img, good_lbl), "");

  EXPECT_EQ(IdxError(dir, good_img, IdxBytes({3}, {2, 0})), lbl + ": expected 3 labels, found 2");
  EXPECT_EQ(IdxError(dir, good_img, IdxBytes({3}, {2, 0, 1, 1})),
            lbl + ": expected 3 labels, found 4");
  EXPECT_EQ(IdxError(dir, IdxBytes({3, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8}), good_lbl),
            img + ": expected 3 images of 2x2, found 2 and part of another");
  EXPECT_EQ(IdxError(dir, IdxBytes({2, 2, 2}, kPixels), IdxBytes({2}, {1, 0})),
            img + ": expected 2 images of 2x2, found 3");
  EXPECT_EQ(IdxError(dir, good_img, IdxBytes({2}, {1, 0})),
            lbl + ": 2 labels for 3 images in " + img);
  EXPECT_EQ(IdxError(dir, {0x1f, 0x00, 0x08, 0x03, 0, 0, 0, 0}, good_lbl),
            img + ": not an IDX file (magic 0x1F000803)");
  EXPECT_EQ(IdxError(dir, {0, 0}, good_lbl),
            img + ": not an IDX file (2 bytes, too short for the header)");
  std::vector<uint8_t> floats = good_img;
  floats[2] = 0x0D;
  EXPECT_EQ(IdxError(dir, floats, good_lbl),
            img + ": IDX data type 0x0D is not supported (only unsigned bytes, 0x08)");
  EXPECT_EQ(IdxError(dir, good_lbl, good_img),
            img + ": expected an IDX image file (3 dimensions), found 1 dimension");
  EXPECT_EQ(IdxError(dir, good_img, good_img),
            lbl + ": expected an IDX label file (1 dimension), found 3 dimensions");
  EXPECT_EQ(IdxError(dir, std::vector<uint8_t>(good_img.begin(), good_img.begin() + 10), good_lbl),
            img + ": IDX header is cut short (10 of 16 bytes)");
  EXPECT_EQ(IdxError(dir, IdxBytes({3, 0, 2}, {}), good_lbl), img + ": IDX dimension 2 is 0");
  EXPECT_EQ(IdxError(dir, IdxBytes({0, 2, 2}, {}), IdxBytes({0}, {})), img + ": holds no images");

  // Gzip data cut short: the zlib error, not a count mismatch.
  WriteBytes(dir / "full.gz", IdxBytes({3, 2, 2}, kPixels), /*gz=*/true);
  std::ifstream in(dir / "full.gz", std::ios::binary);
  std::vector<uint8_t> gz((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(gz.size(), 12u);
  gz.erase(gz.end() - 12, gz.end());  // cut the trailer and a little data
  WriteBytes(dir / "cut.gz", gz, /*gz=*/false);
  auto cut = LoadIdx(dir / "cut.gz", dir / "labels.idx");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find(dir / "cut.gz" + ": gzip data ends early"),
            std::string::npos)
      << cut.status().message();

  // Corrupt gzip data (its checksum no longer matches): zlib's words, the file named once.
  std::ifstream whole(dir / "full.gz", std::ios::binary);
  std::vector<uint8_t> bad((std::istreambuf_iterator<char>(whole)), {});
  bad[bad.size() - 6] ^= 0xff;  // a byte of the CRC-32 trailer
  WriteBytes(dir / "crc.gz", bad, /*gz=*/false);
  auto crc = LoadIdx(dir / "crc.gz", dir / "labels.idx");
  ASSERT_FALSE(crc.ok());
  EXPECT_EQ(crc.status().message(), dir / "crc.gz" + ": bad gzip data: incorrect data check");

  auto missing = LoadIdx(dir / "nope", lbl);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(missing.status().message(), dir / "nope" + ": cannot open: No such file or directory");
}

// Labels must be numbered 0..C-1: a stray label far above the others leaves most classes
// without a sample and is refused; a set too small to hold every class is not judged.
TEST(Labels, MostlyEmptyClassesAreRefused) {
  TempDir dir;
  std::vector<uint8_t> labels;
  for (int i = 0; i < 1200; ++i) labels.push_back(static_cast<uint8_t>(i % 10));
  labels[7] = 255;
  WriteBytes(dir / "images.idx", IdxBytes({1200, 1, 1}, std::vector<uint8_t>(1200, 3)), false);
  WriteBytes(dir / "labels.idx", IdxBytes({1200}, labels), false);
  auto stray = LoadIdx(dir / "images.idx", dir / "labels.idx");
  ASSERT_TRUE(stray.ok()) << stray.status().message();
  EXPECT_EQ(CheckTrainingLabels(**stray).message(),
            (*stray)->source +
                ": labels go up to 255, but 245 of the classes 0 to 255 have no "
                "sample; labels must be numbered 0 to C-1");
  labels[7] = 7;
  WriteBytes(dir / "labels.idx", IdxBytes({1200}, labels), false);
  auto dense = LoadIdx(dir / "images.idx", dir / "labels.idx");
  ASSERT_TRUE(dense.ok());
  EXPECT_TRUE(CheckTrainingLabels(**dense).ok());
  // Three samples of classes {0, 5, 9}: too few to say the numbering is wrong.
  WriteBytes(dir / "images.idx", IdxBytes({3, 1, 1}, {1, 2, 3}), false);
  WriteBytes(dir / "labels.idx", IdxBytes({3}, {0, 5, 9}), false);
  auto few = LoadIdx(dir / "images.idx", dir / "labels.idx");
  ASSERT_TRUE(few.ok());
  EXPECT_TRUE(CheckTrainingLabels(**few).ok());
  // One class, whatever its number: nothing to learn.
  WriteBytes(dir / "labels.idx", IdxBytes({3}, {1, 1, 1}), false);
  auto one = LoadIdx(dir / "images.idx", dir / "labels.idx");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(CheckTrainingLabels(**one).message(),
            (*one)->source +
                ": every label is 1; a classifier needs samples of at least two "
                "classes");
  // A CSV read with the label in the wrong column (a constant pixel): says how to pick it.
  std::ofstream(dir / "pixels.csv") << "0,0.5,1\n0,0.25,0\n0,0.75,1\n";
  auto csv = LoadCsv(dir / "pixels.csv", 0);
  ASSERT_TRUE(csv.ok()) << csv.status().message();
  EXPECT_NE(CheckTrainingLabels(**csv).message().find(
                "every label is 0; a classifier needs samples of at least two classes (is the "
                "label in another column? label_column picks it"),
            std::string::npos)
      << CheckTrainingLabels(**csv).message();
}

TEST(Csv, RoundTripWithAndWithoutHeader) {
  TempDir dir;
  WriteText(dir / "h.csv", "f1,label,f2\r\n0.5, 1 ,-2\r\n\r\n1.5,0,3e2\r\n");
  auto h = LoadCsv(dir / "h.csv", 1);
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ((*h)->n, 2);
  EXPECT_EQ((*h)->dim, 2);
  EXPECT_EQ((*h)->num_classes, 2);
  EXPECT_EQ(ToVector((*h)->f32), (std::vector<float>{0.5f, -2.0f, 1.5f, 300.0f}));  // as-is
  EXPECT_EQ(ToVector((*h)->labels), (std::vector<int32_t>{1, 0}));

  WriteText(dir / "n.csv", "3,0.25,0.75\n1,1,2");  // no header, no final newline
  auto n = LoadCsv(dir / "n.csv", 0);
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ((*n)->n, 2);
  EXPECT_EQ((*n)->num_classes, 4);
  EXPECT_EQ(ToVector((*n)->labels), (std::vector<int32_t>{3, 1}));
  float x[2];
  int32_t y;
  const int32_t row = 1;
  (*n)->Gather(&row, 1, x, &y);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], 2.0f);
  EXPECT_EQ(y, 1);

  WriteText(dir / "l.csv", "0.25,0.75,3\n1,2,1\n");
  auto last = LoadCsv(dir / "l.csv", -1);  // counted from the end
  ASSERT_TRUE(last.ok()) << last.status().message();
  EXPECT_EQ(ToVector((*last)->labels), (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(ToVector((*last)->f32), (std::vector<float>{0.25f, 0.75f, 1.0f, 2.0f}));
}

std::string CsvError(const TempDir& dir, const std::string& text, int label_column = 0) {
  WriteText(dir / "d.csv", text);
  auto ds = LoadCsv(dir / "d.csv", label_column);
  return ds.ok() ? "" : ds.status().message();
}

TEST(Csv, ErrorsNameFileAndLine) {
  TempDir dir;
  const std::string f = dir / "d.csv";
  EXPECT_EQ(CsvError(dir, "label,a,b\n1,2,3\n0,1\n"), f + ":3: expected 3 columns, found 2");
  EXPECT_EQ(CsvError(dir, "1,2,3\n0,x,1\n"), f + ":2: column 2: \"x\" is not a finite number");
  EXPECT_EQ(CsvError(dir, "1,2,3\n0,nan,1\n"), f + ":2: column 2: \"nan\" is not a finite number");
  EXPECT_EQ(CsvError(dir, "1,2\n1.5,1\n"),
            f + ":2: label \"1.5\" is not a class index (an integer in [0, 100000))");
  EXPECT_EQ(CsvError(dir, "1,2\n-1,1\n"),
            f + ":2: label \"-1\" is not a class index (an integer in [0, 100000))");
  EXPECT_EQ(CsvError(dir, "1,2\n1,2\n", 5), f + ":1: label_column 5 is out of range for 2 columns");
  EXPECT_EQ(CsvError(dir, "a,b\n"), f + ": holds no data rows");
  EXPECT_EQ(CsvError(dir, ""), f + ": holds no data rows");
  EXPECT_EQ(CsvError(dir, "1\n2\n"),
            f + ":1: need a label and at least one feature column, found 1 column");
  // A first row of numbers is data, not a header, so its bad label is reported.
  EXPECT_EQ(CsvError(dir, "3.5,1\n"),
            f + ":1: label \"3.5\" is not a class index (an integer in [0, 100000))");
  // So is a bad feature value in a first row with a label: it is data, not column names.
  EXPECT_EQ(CsvError(dir, "1,0.5,NA\n0,1,2\n"), f + ":1: column 3: \"NA\" is not a finite number");
}

// Quoted fields may hold commas (RFC 4180 within a line); a quote left open is named.
TEST(Csv, QuotedFieldsMayHoldCommas) {
  TempDir dir;
  WriteText(dir / "q.csv",
            "\"label\",\"width, cm\",\"say \"\"hi\"\"\"\n\"1\", \"0.5\" ,2\n0,1,\"3\"\n");
  auto q = LoadCsv(dir / "q.csv", 0);
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ((*q)->n, 2);
  EXPECT_EQ((*q)->dim, 2);
  EXPECT_EQ(ToVector((*q)->f32), (std::vector<float>{0.5f, 2.0f, 1.0f, 3.0f}));
  EXPECT_EQ(ToVector((*q)->labels), (std::vector<int32_t>{1, 0}));
  const std::string f = dir / "d.csv";
  EXPECT_EQ(CsvError(dir, "1,\"2,5\",3\n"), f + ":1: column 2: \"2,5\" is not a finite number");
  EXPECT_EQ(CsvError(dir, "1,2,3\n0,\"4,5\n"),
            f + ":2: a quote opens a field that does not close on this line (a field cannot "
                "span lines)");
  EXPECT_EQ(CsvError(dir, "1,\"2\"x,3\n"), f + ":1: column 2: \"\"2\"x\" is not a finite number");
}

// A column that gives nearly every row a label of its own (the row index pandas writes first)
// is refused as a label, with a hint.
TEST(Labels, ARowNumberIsNotAClass) {
  TempDir dir;
  std::string text = ",label,a\n";
  for (int i = 0; i < 40; ++i) {
    text += std::to_string(i) + "," + std::to_string(i % 3) + ",0.5\n";
  }
  WriteText(dir / "indexed.csv", text);
  auto indexed = LoadCsv(dir / "indexed.csv", 0);
  ASSERT_TRUE(indexed.ok()) << indexed.status().message();
  EXPECT_EQ(CheckTrainingLabels(**indexed).message(),
            dir / "indexed.csv" +
                ": 40 samples hold 40 distinct labels; a label that nearly every sample has alone "
                "numbers or names the samples, it is not a class (is the label in another "
                "column? label_column picks it: 0 by default, -1 for the last; pandas' to_csv "
                "writes its row index first unless given index=False)");
  auto right = LoadCsv(dir / "indexed.csv", 1);
  ASSERT_TRUE(right.ok()) << right.status().message();
  EXPECT_TRUE(CheckTrainingLabels(**right).ok());
}

// Integer feature names with a named label (as pandas writes them) are a header; `header` says
// what the first row is where its look does not: names that are all numbers, or a first data
// row that must not be skipped.
TEST(Csv, HeaderCanBeSaid) {
  TempDir dir;
  WriteText(dir / "pandas.csv", "label,0,1\n1,0.5,0.25\n0,1,2\n");
  auto pandas = LoadCsv(dir / "pandas.csv", 0);
  ASSERT_TRUE(pandas.ok()) << pandas.status().message();
  EXPECT_EQ((*pandas)->n, 2);
  WriteText(dir / "numbered.csv", "0,1,2\n1,0.5,0.25\n0,1,2\n");
  auto detected = LoadCsv(dir / "numbered.csv", 0);
  ASSERT_TRUE(detected.ok()) << detected.status().message();
  EXPECT_EQ((*detected)->n, 3);  // numbers: read as data
  auto named = LoadCsv(dir / "numbered.csv", 0, true);
  ASSERT_TRUE(named.ok()) << named.status().message();
  EXPECT_EQ((*named)->n, 2);
  EXPECT_EQ(ToVector((*named)->labels), (std::vector<int32_t>{1, 0}));
  WriteText(dir / "words.csv", "a,b,c\n1,2,3\n");
  EXPECT_EQ(LoadCsv(dir / "words.csv", 0, false).status().message(),
            dir / "words.csv" + ":1: label \"a\" is not a class index (an integer in [0, 100000))");
}

TEST(Cache, DecodesOnceAndNoticesRewrites) {
  TempDir dir;
  WriteBytes(dir / "img.gz", IdxBytes({3, 2, 2}, kPixels), true);
  WriteBytes(dir / "lbl.gz", IdxBytes({3}, kLabels), true);
  DatasetSpec spec;
  spec.train_images = dir / "img.gz";
  spec.train_labels = dir / "lbl.gz";
  const int64_t before = DatasetDecodeCount();
  // Concurrent first loads share one decode.
  std::vector<DatasetPtr> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto r = LoadCached(spec, false, "");
      if (r.ok()) got[static_cast<size_t>(t)] = *r;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(DatasetDecodeCount() - before, 1);
  for (const auto& p : got) EXPECT_EQ(p, got[0]);
  ASSERT_NE(got[0], nullptr);

  // A relative spelling of the same file hits the same entry.
  DatasetSpec rel = spec;
  rel.train_images = std::filesystem::relative(spec.train_images).string();
  auto again = LoadCached(rel, false, "");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, got[0]);
  EXPECT_EQ(DatasetDecodeCount() - before, 1);

  // A rewritten file (new size) is decoded again.
  auto img = IdxBytes({4, 2, 2}, kPixels);
  img.insert(img.end(), {9, 9, 9, 9});
  WriteBytes(dir / "img.gz", img, true);
  WriteBytes(dir / "lbl.gz", IdxBytes({4}, {2, 0, 1, 1}), true);
  auto fresh = LoadCached(spec, false, "");
  ASSERT_TRUE(fresh.ok()) << fresh.status().message();
  EXPECT_EQ((*fresh)->n, 4);
  EXPECT_EQ(DatasetDecodeCount() - before, 2);

  // Clearing drops the entry: the next load decodes again.
  ClearDatasetCache();
  ASSERT_TRUE(LoadCached(spec, false, "").ok());
  EXPECT_EQ(DatasetDecodeCount() - before, 3);

  // Failures are not cached: a fixed file loads.
  WriteBytes(dir / "lbl.gz", IdxBytes({4}, {1}), true);
  EXPECT_FALSE(LoadCached(spec, false, "").ok());
  WriteBytes(dir / "lbl.gz", IdxBytes({4}, {1, 1, 1, 1}), true);
  auto fixed = LoadCached(spec, false, "");
  EXPECT_TRUE(fixed.ok());
}

// ---- the machine-wide cache file, across processes ----

// In a forked child: loads `spec` through the cache in `cache_dir` with this process's own
// cache emptied, and exits 0 when it got the expected data, having decoded `decodes` times.
// (_exit: the child must not run the parent's gtest teardown.)
void LoadInChild(const DatasetSpec& spec, const std::string& cache_dir, int64_t decodes) {
  ClearDatasetCache();
  const int64_t before = DatasetDecodeCount();
  auto r = LoadCached(spec, false, cache_dir);
  const bool ok = r.ok() && (*r)->mapped && (*r)->n == 3 &&
                  std::vector<uint8_t>((*r)->u8.begin(), (*r)->u8.end()) == kPixels &&
                  (decodes < 0 || DatasetDecodeCount() - before == decodes);
  ::_exit(ok ? 0 : 1);
}

int Wait(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<std::string> CacheFiles(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(CacheFile, SecondProcessMapsWithoutDecoding) {
  TempDir dir;
  const std::string cache = dir / "cache";
  std::filesystem::create_directories(cache);
  WriteBytes(dir / "img.gz", IdxBytes({3, 2, 2}, kPixels), true);
  WriteBytes(dir / "lbl", IdxBytes({3}, kLabels), false);
  DatasetSpec spec;
  spec.train_images = dir / "img.gz";
  spec.train_labels = dir / "lbl";

  // The first process decodes and publishes the file...
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) LoadInChild(spec, cache, 1);
  ASSERT_EQ(Wait(pid), 0) << "first process";
  const auto files = CacheFiles(cache);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_TRUE(files[0].ends_with(".sds")) << files[0];
  // The padding before the labels and before the features is zeros (the header, shorter than
  // the placeholders it was sized with, can leave more than 63 bytes of it).
  {
    std::ifstream f(cache + "/" + files[0], std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ASSERT_GE(bytes.size(), 16u);
    uint32_t header_bytes = 0;
    std::memcpy(&header_bytes, bytes.data() + 8, 4);
    const nlohmann::json h = nlohmann::json::parse(bytes.substr(16, header_bytes));
    const size_t labels_at = h.at("labels_offset").get<size_t>();
    const size_t features_at = h.at("features_offset").get<size_t>();
    const size_t labels_end = labels_at + kLabels.size() * sizeof(int32_t);
    ASSERT_LE(features_at, bytes.size());
    for (const auto& [from, to] :
         {std::pair{16 + size_t{header_bytes}, labels_at}, std::pair{labels_end, features_at}}) {
      EXPECT_EQ(bytes.substr(from, to - from), std::string(to - from, '\0'))
          << "padding [" << from << ", " << to << ")";
    }
  }

  // ...a second maps it without decoding...
  pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) LoadInChild(spec, cache, 0);
  EXPECT_EQ(Wait(pid), 0) << "second process";

  // ...and so does this one, with the same contents as a decode.
  ClearDatasetCache();
  const int64_t decodes = DatasetDecodeCount(), maps = DatasetMapCount();
  auto mapped = LoadCached(spec, false, cache);
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  EXPECT_EQ(DatasetDecodeCount(), decodes);
  EXPECT_EQ(DatasetMapCount(), maps + 1);
  EXPECT_TRUE((*mapped)->mapped);
  auto decoded = LoadIdx(spec.train_images, spec.train_labels);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ((*mapped)->source, (*decoded)->source);
  EXPECT_EQ((*mapped)->shape, (*decoded)->shape);
  EXPECT_EQ((*mapped)->num_classes, (*decoded)->num_classes);
  EXPECT_EQ(ToVector((*mapped)->labels), ToVector((*decoded)->labels));
  EXPECT_EQ(ToVector((*mapped)->u8), ToVector((*decoded)->u8));
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*mapped)->labels.data()) % 64, 0u);

  // A new mtime (same size, same bytes) is a new key: decoded again, and the stale file goes,
  // with what a decode killed while it wrote its cache file left.
  std::ofstream(cache + "/" + files[0] + ".tmp." + std::to_string(testing::DeadPid()) + ".0.1")
      << "partial";
  ClearDatasetCache();
  struct timespec times[2] = {{0, UTIME_OMIT}, {1000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, spec.train_images.c_str(), times, 0), 0);
  auto fresh = LoadCached(spec, false, cache);
  ASSERT_TRUE(fresh.ok()) << fresh.status().message();
  EXPECT_EQ(DatasetDecodeCount(), decodes + 1);
  const auto after = CacheFiles(cache);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_NE(after[0], files[0]);
  // Same identity prefix (the same files), another version.
  EXPECT_EQ(after[0].substr(0, 17), files[0].substr(0, 17));

  // A damaged cache file (cut short) is not used: the dataset is decoded and the file replaced,
  // so the next process maps again.
  ClearDatasetCache();
  std::filesystem::resize_file(cache + "/" + after[0], 100);
  auto repaired = LoadCached(spec, false, cache);
  ASSERT_TRUE(repaired.ok()) << repaired.status().message();
  EXPECT_EQ(DatasetDecodeCount(), decodes + 2);
  EXPECT_EQ(ToVector((*repaired)->u8), kPixels);
  pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) LoadInChild(spec, cache, 0);
  EXPECT_EQ(Wait(pid), 0) << "after the repair";

  // Data damaged in place (the header and size intact) is found too, by the data's checksum:
  // a label out of range would index outside the model's outputs, a pixel would train wrong.
  auto damage = [&](const char* offset_key, const void* bytes, size_t size) {
    ClearDatasetCache();
    const std::string file = cache + "/" + CacheFiles(cache)[0];
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    char prefix[16];
    f.read(prefix, sizeof prefix);
    uint32_t header_bytes = 0;
    std::memcpy(&header_bytes, prefix + 8, 4);
    std::string header(header_bytes, '\0');
    f.read(header.data(), header_bytes);
    f.seekp(nlohmann::json::parse(header).at(offset_key).get<int64_t>());
    f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(size));
  };
  const int32_t far = 100'000'000;
  damage("labels_offset", &far, sizeof far);
  auto relabelled = LoadCached(spec, false, cache);
  ASSERT_TRUE(relabelled.ok()) << relabelled.status().message();
  EXPECT_EQ(DatasetDecodeCount(), decodes + 3);
  EXPECT_EQ(ToVector((*relabelled)->labels), ToVector((*decoded)->labels));
  const uint8_t pixel = static_cast<uint8_t>(kPixels[0] + 1);
  damage("features_offset", &pixel, 1);
  auto repixelled = LoadCached(spec, false, cache);
  ASSERT_TRUE(repixelled.ok()) << repixelled.status().message();
  EXPECT_EQ(DatasetDecodeCount(), decodes + 4);
  EXPECT_EQ(ToVector((*repixelled)->u8), kPixels);
}

// A dataset reached through a link whose target's name is not UTF-8 (the way round such names
// that sweep itself suggests): the cache file's header, which is JSON, keeps the target's real
// path escaped, losslessly, so the file is written, found again, and told apart from a name
// that differs in that byte alone.
TEST(CacheFile, ATargetWhoseNameIsNotUtf8IsCached) {
  TempDir dir;
  const std::string cache = dir / "cache";
  std::filesystem::create_directories(cache);
  for (const char* name : {"fm\xe9", "fm\xe8"}) {
    const std::filesystem::path folder = dir / name;
    std::filesystem::create_directories(folder);
    WriteBytes(folder / "img.gz", IdxBytes({3, 2, 2}, kPixels), true);
    WriteBytes(folder / "lbl", IdxBytes({3}, kLabels), false);
  }
  std::filesystem::create_directory_symlink(dir / "fm\xe9", dir / "link");
  DatasetSpec spec;
  spec.train_images = dir / "link/img.gz";
  spec.train_labels = dir / "link/lbl";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) LoadInChild(spec, cache, 1);
  ASSERT_EQ(Wait(pid), 0) << "first process";
  ASSERT_EQ(CacheFiles(cache).size(), 1u);
  pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) LoadInChild(spec, cache, 0);
  EXPECT_EQ(Wait(pid), 0) << "second process";
  DatasetSpec other = spec;
  other.train_images = dir / "fm\xe8/img.gz";
  other.train_labels = dir / "fm\xe8/lbl";
  pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) LoadInChild(other, cache, 1);
  EXPECT_EQ(Wait(pid), 0) << "the other folder";
  EXPECT_EQ(CacheFiles(cache).size(), 2u);
}

TEST(CacheFile, ConcurrentFirstUseIsSafe) {
  TempDir dir;
  const std::string cache = dir / "cache";
  std::filesystem::create_directories(cache);
  WriteBytes(dir / "img", IdxBytes({3, 2, 2}, kPixels), false);
  WriteBytes(dir / "lbl", IdxBytes({3}, kLabels), false);
  DatasetSpec spec;
  spec.train_images = dir / "img";
  spec.train_labels = dir / "lbl";
  std::vector<pid_t> pids;
  for (int i = 0; i < 6; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) LoadInChild(spec, cache, -1);  // some decode, some map: all must succeed
    pids.push_back(pid);
  }
  for (pid_t pid : pids) EXPECT_EQ(Wait(pid), 0);
  const auto files = CacheFiles(cache);
  ASSERT_EQ(files.size(), 1u) << files.size();  // one winner, no temporary files left
  EXPECT_TRUE(files[0].ends_with(".sds"));
}

TEST(CacheFile, DefaultDirectoryFollowsXdgThenHome) {
  TempDir dir;
  const char* old_xdg = std::getenv("XDG_CACHE_HOME");
  const std::string keep = old_xdg != nullptr ? old_xdg : "";
  ::setenv("XDG_CACHE_HOME", dir.path().c_str(), 1);
  EXPECT_EQ(DefaultCacheDir(), dir / "sweep");
  EXPECT_TRUE(std::filesystem::is_directory(dir / "sweep"));
  ::setenv("XDG_CACHE_HOME", "relative/path", 1);  // not absolute: ignored, as the spec says
  EXPECT_NE(DefaultCacheDir(), "relative/path/sweep");
  // A home that does not exist is not created: the cache goes to /tmp.
  ::unsetenv("XDG_CACHE_HOME");
  const char* old_home = std::getenv("HOME");
  const std::string keep_home = old_home != nullptr ? old_home : "";
  ::setenv("HOME", (dir / "no-such-home").c_str(), 1);
  EXPECT_EQ(DefaultCacheDir(), "/tmp/sweep-cache-" + std::to_string(::getuid()));
  EXPECT_FALSE(std::filesystem::exists(dir / "no-such-home"));
  ::setenv("HOME", dir.path().c_str(), 1);
  EXPECT_EQ(DefaultCacheDir(), dir / ".cache/sweep");
  if (old_home != nullptr) {
    ::setenv("HOME", keep_home.c_str(), 1);
  } else {
    ::unsetenv("HOME");
  }
  if (old_xdg != nullptr) {
    ::setenv("XDG_CACHE_HOME", keep.c_str(), 1);
  } else {
    ::unsetenv("XDG_CACHE_HOME");
  }
}

TEST(Split, FixedDisjointAndComplete) {
  const Split a = MakeSplit(1000, 0.1);
  const Split b = MakeSplit(1000, 0.1);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.val, b.val);
  EXPECT_EQ(a.val.size(), 100u);
  EXPECT_EQ(a.train.size(), 900u);
  EXPECT_TRUE(std::is_sorted(a.val.begin(), a.val.end()));
  std::vector<int32_t> all = a.train;
  all.insert(all.end(), a.val.begin(), a.val.end());
  std::sort(all.begin(), all.end());
  std::vector<int32_t> expect(1000);
  std::iota(expect.begin(), expect.end(), 0);
  EXPECT_EQ(all, expect);
  EXPECT_EQ(MakeSplit(60000, 0.1).val.size(), 6000u);
  EXPECT_TRUE(MakeSplit(10, 0.0).val.empty());
  // Pinned: stored sweeps were scored on this split; a change here changes what they mean.
  EXPECT_EQ(MakeSplit(20, 0.3).val, (std::vector<int32_t>{11, 13, 15, 16, 17, 19}));
}

TEST(Batcher, GathersEachEpochInOrderAndStopsMidEpoch) {
  Dataset meta;
  meta.n = 10;
  meta.dim = 2;
  meta.num_classes = 10;
  std::vector<float> features;
  std::vector<int32_t> labels;
  for (int i = 0; i < 10; ++i) {
    features.push_back(static_cast<float>(i));
    features.push_back(static_cast<float>(-i));
    labels.push_back(i);
  }
  const DatasetPtr ds = MakeDataset(meta, {}, std::move(features), std::move(labels));
  std::vector<int32_t> order = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  {
    Batcher batcher(ds, 3);
    for (int epoch = 0; epoch < 3; ++epoch) {
      std::rotate(order.begin(), order.begin() + 1, order.end());
      batcher.StartEpoch(order.data(), 3);
      double wait = 0;
      for (int s = 0; s < 3; ++s) {
        const Batcher::Batch b = batcher.Next(0, &wait);
        for (int i = 0; i < 3; ++i) {
          const int32_t row = order[static_cast<size_t>(s * 3 + i)];
          EXPECT_EQ(b.y[i], row);
          EXPECT_EQ(b.x[2 * i], static_cast<float>(row));
          EXPECT_EQ(b.x[2 * i + 1], static_cast<float>(-row));
        }
      }
      EXPECT_GE(wait, 0.0);
    }
    batcher.StartEpoch(order.data(), 3);
    double wait = 0;
    batcher.Next(0, &wait);
    // The destructor must stop the producer with batches unread.
  }
}

// Several consumers (replicas) each get every batch; a slot is reused only when all of them
// are past it, however far apart they run within the allowed lag.
TEST(Batcher, EveryConsumerSeesEveryBatch) {
  Dataset meta;
  meta.n = 40;
  meta.dim = 1;
  meta.num_classes = 40;
  std::vector<float> features;
  std::vector<int32_t> labels;
  for (int i = 0; i < 40; ++i) {
    features.push_back(static_cast<float>(i));
    labels.push_back(i);
  }
  const DatasetPtr ds = MakeDataset(meta, {}, std::move(features), std::move(labels));
  std::vector<int32_t> order(40);
  std::iota(order.begin(), order.end(), 0);
  std::reverse(order.begin(), order.end());
  Batcher batcher(ds, 4, /*consumers=*/3, /*depth=*/2, /*lag=*/2);
  for (int epoch = 0; epoch < 2; ++epoch) {
    batcher.StartEpoch(order.data(), 10);
    std::vector<std::thread> threads;
    std::vector<int> bad(3, 0);
    for (int c = 0; c < 3; ++c) {
      threads.emplace_back([&, c] {
        double wait = 0;
        for (int k = 0; k < 10; ++k) {
          const Batcher::Batch b = batcher.Next(c, &wait);
          if (c == 1) std::this_thread::yield();  // a slow one
          for (int i = 0; i < 4; ++i) {
            const int32_t row = order[static_cast<size_t>(k * 4 + i)];
            bad[static_cast<size_t>(c)] += b.y[i] != row || b.x[i] != static_cast<float>(row);
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(bad, (std::vector<int>{0, 0, 0}));
  }
}

// A consumer that fails keeps its slot; one that runs ahead of it waits for that slot for ever,
// unless the failing one cancels: then every Next, a blocked one too, returns nulls.
TEST(Batcher, CancelReleasesAConsumerWaitingForAFailedOne) {
  Dataset meta;
  meta.n = 64;
  meta.dim = 1;
  meta.num_classes = 2;
  std::vector<float> features(64, 0.5f);
  std::vector<int32_t> labels(64, 1);
  const DatasetPtr ds = MakeDataset(meta, {}, std::move(features), std::move(labels));
  std::vector<int32_t> order(64);
  std::iota(order.begin(), order.end(), 0);
  Batcher batcher(ds, 2, /*consumers=*/2, /*depth=*/2, /*lag=*/1);
  batcher.StartEpoch(order.data(), 32);
  double wait = 0;
  ASSERT_NE(batcher.Next(1, &wait).x, nullptr);  // consumer 1 takes batch 0, then fails
  std::promise<int> taken;
  std::thread ahead([&] {
    double w = 0;
    int k = 0;
    while (batcher.Next(0, &w).y != nullptr) ++k;
    taken.set_value(k);
  });
  std::future<int> done = taken.get_future();
  // Slots: depth 2 + lag 1 + 1 = 4, so consumer 0 gets batches 0..3 and then waits.
  EXPECT_EQ(done.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  batcher.Cancel();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  ahead.join();
  EXPECT_EQ(done.get(), 4);
  EXPECT_EQ(batcher.Next(1, &wait).x, nullptr);
}

// A backend's allocator (pinned memory on a GPU) holds every slot, and gets each one back.
TEST(Batcher, SlotsComeFromTheGivenAllocator) {
  class CountingAllocator final : public HostAllocator {
   public:
    void* Allocate(size_t bytes) override {
      ++live;
      blocks.emplace_back(new char[bytes]);
      return blocks.back().get();
    }
    void Free(void* p) override {
      --live;
      for (const auto& b : blocks) freed += b.get() == p;
    }
    int live = 0, freed = 0;
    std::vector<std::unique_ptr<char[]>> blocks;
  };
  Dataset meta;
  meta.n = 8;
  meta.dim = 3;
  meta.num_classes = 8;
  std::vector<float> features;
  std::vector<int32_t> labels;
  for (int i = 0; i < 8; ++i) {
    for (int d = 0; d < 3; ++d) features.push_back(static_cast<float>(10 * i + d));
    labels.push_back(i);
  }
  const DatasetPtr ds = MakeDataset(meta, {}, std::move(features), std::move(labels));
  std::vector<int32_t> order = {7, 6, 5, 4, 3, 2, 1, 0};
  CountingAllocator alloc;
  {
    Batcher batcher(ds, 2, /*consumers=*/1, /*depth=*/2, /*lag=*/0, &alloc);
    EXPECT_EQ(alloc.live, 3);  // depth + the one the consumer holds
    batcher.StartEpoch(order.data(), 4);
    double wait = 0;
    for (int s = 0; s < 4; ++s) {
      const Batcher::Batch b = batcher.Next(0, &wait);
      bool inside = false;
      for (const auto& block : alloc.blocks) {
        inside = inside || reinterpret_cast<const char*>(b.x) == block.get();
      }
      EXPECT_TRUE(inside) << "batch " << s << " is not in an allocated block";
      for (int i = 0; i < 2; ++i) {
        const int32_t row = order[static_cast<size_t>(2 * s + i)];
        EXPECT_EQ(b.y[i], row);
        EXPECT_EQ(b.x[3 * i + 2], static_cast<float>(10 * row + 2));
      }
    }
  }
  EXPECT_EQ(alloc.live, 0);
  EXPECT_EQ(alloc.freed, 3);
}

// 3000 images of 784 pseudo-random pixels, labels 0..9 in turn: Fashion-MNIST's shape.
DatasetPtr PixelSet() {
  Dataset meta;
  meta.n = 3000;
  meta.dim = 784;
  meta.num_classes = 10;
  std::vector<uint8_t> pixels(static_cast<size_t>(meta.n * meta.dim));
  uint32_t state = 12345;
  for (uint8_t& p : pixels) {
    state = state * 1664525u + 1013904223u;
    p = static_cast<uint8_t>(state >> 24);
  }
  std::vector<int32_t> labels(static_cast<size_t>(meta.n));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
  return MakeDataset(meta, std::move(pixels), {}, std::move(labels));
}

// A batch large enough is split among gather threads, each writing its own rows: the batches
// are the same as one thread gathers, for every consumer, epoch after epoch, with a last share
// shorter than the others; and the Batcher stops its helpers with batches unread.
TEST(Batcher, ThreadsSharingAGatherWriteWhatOneThreadWrites) {
  const DatasetPtr ds = PixelSet();
  const Dataset& meta = *ds;
  // 1499 x 784 floats: 17 shares of 2^18 bytes; 8 threads take 188 rows each, the last 183.
  const int batch = 1499;

  // A small batch stays with one thread, and no more threads than asked for are used.
  EXPECT_EQ(Batcher(ds, 64, 1, kPrefetchDepth, 0, nullptr, 4).gather_parts(), 1);
  EXPECT_EQ(Batcher(ds, batch, 1, kPrefetchDepth, 0, nullptr, 2).gather_parts(), 2);
  EXPECT_EQ(Batcher(ds, batch, 1, kPrefetchDepth, 0, nullptr, 1).gather_parts(), 1);

  std::vector<int32_t> order(static_cast<size_t>(meta.n));
  std::iota(order.begin(), order.end(), 0);
  const size_t batch_floats = static_cast<size_t>(batch * meta.dim);
  {
    Batcher batcher(ds, batch, /*consumers=*/2, kPrefetchDepth, /*lag=*/1, nullptr, 8);
    ASSERT_EQ(batcher.gather_parts(), 8);
    for (int epoch = 0; epoch < 3; ++epoch) {
      std::rotate(order.begin(), order.begin() + 777, order.end());
      batcher.StartEpoch(order.data(), 2);
      std::vector<std::thread> threads;
      std::vector<int> bad(2, 0);
      for (int c = 0; c < 2; ++c) {
        threads.emplace_back([&, c] {
          double wait = 0;
          std::vector<float> x(batch_floats);
          std::vector<int32_t> y(static_cast<size_t>(batch));
          for (int k = 0; k < 2; ++k) {
            const Batcher::Batch b = batcher.Next(c, &wait);
            ds->Gather(order.data() + static_cast<ptrdiff_t>(k) * batch, batch, x.data(), y.data());
            bad[static_cast<size_t>(c)] +=
                std::memcmp(b.x, x.data(), x.size() * sizeof(float)) != 0 ||
                std::memcmp(b.y, y.data(), y.size() * sizeof(int32_t)) != 0;
          }
        });
      }
      for (auto& t : threads) t.join();
      EXPECT_EQ(bad, (std::vector<int>{0, 0})) << "epoch " << epoch;
    }
    batcher.StartEpoch(order.data(), 2);
    double wait = 0;
    batcher.Next(0, &wait);
  }
}

// For a device that scales pixels itself, batches of an IDX set hold its bytes as stored (a
// quarter of the floats' size, so a batch needs fewer gather threads); they scale to exactly
// the floats Gather writes. A set of floats has no pixels: its batches stay floats.
TEST(Batcher, PixelBatchesHoldTheSetsBytes) {
  const DatasetPtr ds = PixelSet();
  Dataset meta = *ds;  // the shape, for the set of floats below
  const int batch = 1499;
  std::vector<int32_t> order(static_cast<size_t>(meta.n));
  std::iota(order.begin(), order.end(), 0);
  std::reverse(order.begin(), order.end());
  // 1499 x 784 bytes are 4 shares of 2^18 (as floats, 17); 2999 rows are 8.
  EXPECT_EQ(Batcher(ds, batch, 1, kPrefetchDepth, 0, nullptr, 16, true).gather_parts(), 4);
  EXPECT_EQ(Batcher(ds, batch, 1, kPrefetchDepth, 0, nullptr, 16, false).gather_parts(), 16);
  Batcher batcher(ds, 2999, 1, kPrefetchDepth, 0, nullptr, 8, /*pixels=*/true);
  ASSERT_TRUE(batcher.pixels());
  EXPECT_EQ(batcher.gather_parts(), 8);
  batcher.StartEpoch(order.data(), 1);
  double wait = 0;
  const Batcher::Batch b = batcher.Next(0, &wait);
  ASSERT_NE(b.pixels, nullptr);
  EXPECT_EQ(b.x, nullptr);
  std::vector<float> x(static_cast<size_t>(2999 * meta.dim));
  std::vector<int32_t> y(2999);
  ds->Gather(order.data(), 2999, x.data(), y.data());
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) bad += static_cast<float>(b.pixels[i]) / 255.0f != x[i];
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(std::vector<int32_t>(b.y, b.y + 2999), y);

  // 3 rows of 3 bytes: the labels after them start at the next multiple of 4.
  Dataset small_meta;
  small_meta.n = 5;
  small_meta.dim = 3;
  small_meta.num_classes = 5;
  const DatasetPtr small = MakeDataset(
      small_meta, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {}, {0, 1, 2, 3, 4});
  Batcher odd(small, 3, 1, kPrefetchDepth, 0, nullptr, 1, /*pixels=*/true);
  const std::vector<int32_t> rows = {4, 0, 2};
  odd.StartEpoch(rows.data(), 1);
  const Batcher::Batch o = odd.Next(0, &wait);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(o.y) % alignof(int32_t), 0u);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(o.y) - o.pixels, 12);
  EXPECT_EQ(std::vector<uint8_t>(o.pixels, o.pixels + 9),
            (std::vector<uint8_t>{13, 14, 15, 1, 2, 3, 7, 8, 9}));
  EXPECT_EQ(std::vector<int32_t>(o.y, o.y + 3), (std::vector<int32_t>{4, 0, 2}));

  std::vector<float> values(static_cast<size_t>(meta.n * meta.dim), 0.5f);
  const DatasetPtr floats = MakeDataset(meta, {}, std::move(values),
                                        std::vector<int32_t>(ds->labels.begin(), ds->labels.end()));
  Batcher float_batcher(floats, batch, 1, kPrefetchDepth, 0, nullptr, 1, /*pixels=*/true);
  EXPECT_FALSE(float_batcher.pixels());
  float_batcher.StartEpoch(order.data(), 1);
  const Batcher::Batch f = float_batcher.Next(0, &wait);
  ASSERT_NE(f.x, nullptr);
  EXPECT_EQ(f.pixels, nullptr);
  EXPECT_EQ(f.x[0], 0.5f);
}

}  // namespace
}  // namespace sweep::trainer
