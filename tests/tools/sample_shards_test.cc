#include "tools/sample_shards.h"
#include "tests/testing/temp_dir.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard_reader.h"

namespace stoker::tools {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string GnuTar() {
  for (const char* p : {"/bin/tar", "/usr/bin/tar"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

class SampleShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = stoker::testing::TempDirForCurrentTest();
  }

  std::string Path(const std::string& name) const {
    return absl::StrCat(dir_, "/", name);
  }

  SampleShardsOptions SmallOptions(const std::string& sub) const {
    SampleShardsOptions options;
    options.dir = Path(sub);
    options.num_shards = 2;
    options.samples_per_shard = 4;
    options.min_side = 24;
    options.max_side = 64;
    options.seed = 11;
    return options;
  }

  std::string dir_;
};

TEST_F(SampleShardsTest, SameSeedGivesIdenticalShardsAndOtherSeedDiffers) {
  SampleShardsOptions a = SmallOptions("a"), b = SmallOptions("b"),
                      c = SmallOptions("c");
  c.seed = 12;
  absl::StatusOr<std::vector<std::string>> pa = WriteSampleShards(a);
  absl::StatusOr<std::vector<std::string>> pb = WriteSampleShards(b);
  absl::StatusOr<std::vector<std::string>> pc = WriteSampleShards(c);
  ASSERT_TRUE(pa.ok()) << pa.status();
  ASSERT_TRUE(pb.ok() && pc.ok());
  EXPECT_THAT(*pa, ElementsAre(Path("a/sample-000000.tar"),
                               Path("a/sample-000001.tar")));
  for (size_t i = 0; i < pa->size(); ++i) {
    const std::string bytes = ReadFile((*pa)[i]);
    EXPECT_GT(bytes.size(), 1024u);
    EXPECT_EQ(bytes, ReadFile((*pb)[i]));
    EXPECT_NE(bytes, ReadFile((*pc)[i]));
  }
  // Written via a temporary file that is renamed away.
  EXPECT_NE(::access(Path("a/sample-000000.tar.tmp").c_str(), F_OK), 0);
}

TEST_F(SampleShardsTest, ShardsHoldTheDescribedSamples) {
  SampleShardsOptions options = SmallOptions("gen");
  options.prefix = "demo";
  options.png_fraction = 0.5;
  absl::StatusOr<std::vector<std::string>> paths = WriteSampleShards(options);
  ASSERT_TRUE(paths.ok()) << paths.status();
  ASSERT_EQ(paths->size(), 2u);
  EXPECT_EQ((*paths)[1], Path("gen/demo-000001.tar"));
  absl::StatusOr<server::ShardIndex> index =
      server::ShardIndex::Build((*paths)[1], 1);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_TRUE(index->truncation().empty());
  ASSERT_EQ(index->samples().size(), 4u);
  absl::StatusOr<std::unique_ptr<server::ShardReader>> reader =
      server::ShardReader::Open((*paths)[1]);
  ASSERT_TRUE(reader.ok());
  for (int i = 0; i < 4; ++i) {
    const SampleSpec spec = DescribeSample(options, 1, i);
    const server::SampleRecord record = index->samples()[i];
    EXPECT_EQ(record.key, absl::StrCat("demo0001_0000", i));
    EXPECT_EQ(record.key, spec.key);
    EXPECT_EQ(record.format, spec.png ? server::ImageFormat::kPng
                                      : server::ImageFormat::kJpeg);
    std::string image;
    int32_t label = -1;
    ASSERT_TRUE((*reader)->ReadSample(record, &image, &label).ok());
    EXPECT_EQ(label, spec.label);
    EXPECT_EQ(image, *RenderSampleImage(options, 1, i));
  }
}

TEST_F(SampleShardsTest, ImagesDecodeToDescribedSizesAndAreNotFlat) {
  SampleShardsOptions options;
  options.dir = Path("unused");
  options.png_fraction = 0.25;
  int png = 0, portrait = 0, landscape = 0, classic = 0;
  for (int i = 0; i < 24; ++i) {
    const SampleSpec spec = DescribeSample(options, 0, i);
    absl::StatusOr<std::string> bytes = RenderSampleImage(options, 0, i);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    // Container matches the spec.
    if (spec.png) {
      ++png;
      EXPECT_EQ(bytes->substr(0, 4), "\x89PNG");
    } else {
      EXPECT_EQ(bytes->substr(0, 2), "\xff\xd8");
    }
    const cv::Mat image = cv::imdecode(
        cv::Mat(1, static_cast<int>(bytes->size()), CV_8UC1, bytes->data()),
        cv::IMREAD_COLOR);
    ASSERT_FALSE(image.empty()) << spec.key;
    EXPECT_EQ(image.cols, spec.width) << spec.key;
    EXPECT_EQ(image.rows, spec.height) << spec.key;
    cv::Scalar mean, stddev;
    cv::meanStdDev(image, mean, stddev);
    EXPECT_GT((stddev[0] + stddev[1] + stddev[2]) / 3, 15.0) << spec.key;
    if (image.cols == 500 && image.rows == 375) ++classic;
    if (image.rows > image.cols) ++portrait;
    if (image.cols > image.rows) ++landscape;
  }
  EXPECT_GT(png, 0);
  EXPECT_LT(png, 24);
  EXPECT_GT(classic, 0);
  EXPECT_GT(portrait, 0);
  EXPECT_GT(landscape, 0);
}

TEST_F(SampleShardsTest, SpecsStayInRangeAndCoverLabels) {
  SampleShardsOptions options;
  options.dir = Path("unused");
  options.min_side = 100;
  options.max_side = 300;
  options.num_classes = 5;
  std::set<int32_t> labels;
  for (int i = 0; i < 500; ++i) {
    const SampleSpec spec = DescribeSample(options, 3, i);
    EXPECT_GE(spec.width, 100);
    EXPECT_LE(spec.width, 300);
    EXPECT_GE(spec.height, 100);
    EXPECT_LE(spec.height, 300);
    EXPECT_GE(spec.label, 0);
    EXPECT_LT(spec.label, 5);
    EXPECT_FALSE(spec.png);
    labels.insert(spec.label);
  }
  EXPECT_EQ(labels.size(), 5u);
  // Specs are a pure function of the options and position.
  EXPECT_EQ(DescribeSample(options, 3, 17).key, "sample0003_00017");
  EXPECT_EQ(DescribeSample(options, 3, 17).width,
            DescribeSample(options, 3, 17).width);
}

TEST_F(SampleShardsTest, RejectsBadOptions) {
  const SampleShardsOptions good = SmallOptions("x");
  EXPECT_TRUE(ValidateSampleShardsOptions(good).ok());
  std::vector<SampleShardsOptions> bad(9, good);
  bad[0].dir = "";
  bad[1].prefix = "a/b";
  bad[2].num_shards = 0;
  bad[3].samples_per_shard = 0;
  bad[4].min_side = 100, bad[4].max_side = 50;
  bad[5].num_classes = 0;
  bad[6].jpeg_quality = 101;
  bad[7].png_fraction = 1.5;
  bad[8].max_side = 9000;
  for (size_t i = 0; i < bad.size(); ++i) {
    EXPECT_EQ(ValidateSampleShardsOptions(bad[i]).code(),
              absl::StatusCode::kInvalidArgument)
        << i;
    EXPECT_EQ(WriteSampleShards(bad[i]).status().code(),
              absl::StatusCode::kInvalidArgument)
        << i;
  }
  EXPECT_THAT(ValidateSampleShardsOptions(bad[6]).message(),
              HasSubstr("jpeg_quality"));
}

TEST_F(SampleShardsTest, TarWriterOutputExtractsWithGnuTar) {
  const std::string tar = GnuTar();
  if (tar.empty()) GTEST_SKIP() << "GNU tar is not installed";
  const std::string split_name =
      std::string(120, 'p') + "/" + std::string(60, 'q') + ".bin";
  const std::string pax_name = std::string(140, 'r') + ".bin";
  std::string binary(1500, '\0');
  for (size_t i = 0; i < binary.size(); ++i)
    binary[i] = static_cast<char>(i * 7);
  const std::vector<TarMember> members = {
      {"plain.txt", "hello\n"}, {"dir/exact512.bin", std::string(512, 'x')},
      {"empty.bin", ""},        {"binary.bin", binary},
      {split_name, "split"},    {pax_name, "pax"}};
  const std::string path = Path("w.tar");
  ASSERT_TRUE(WriteTarFile(path, members).ok());
  EXPECT_EQ(ReadFile(path).size() % 512, 0u);

  const std::string out = Path("out");
  // GNU tar fails on a bad checksum and warns (exit 0 is not enough) on a
  // missing end marker, so check stderr too.
  const std::string log = Path("tar.log");
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p '", out, "' && ", tar, " -xf '",
                                     path, "' -C '", out, "' 2>'", log, "'")
                            .c_str()),
            0);
  EXPECT_EQ(ReadFile(log), "");
  for (const TarMember& member : members) {
    EXPECT_EQ(ReadFile(absl::StrCat(out, "/", member.name)), member.data)
        << member.name;
  }
}

TEST_F(SampleShardsTest, TarWriterRejectsMisuse) {
  absl::StatusOr<TarWriter> writer = TarWriter::Create(Path("m.tar"));
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ(writer->Add("", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer->Add(std::string("a\0b", 3), "x").code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(writer->Add("a.txt", "x").ok());
  EXPECT_EQ(writer->bytes_written(), 1024);
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(writer->Add("b.txt", "y").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(writer->Finish().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadFile(Path("m.tar")).size(), 4u * 512);
  EXPECT_EQ(TarWriter::Create(Path("no/such/dir/m.tar")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SampleShardsTest, TruncateFileShrinksFile) {
  ASSERT_TRUE(
      WriteTarFile(Path("t.tar"), {{"a.txt", std::string(2000, 'a')}}).ok());
  ASSERT_TRUE(TruncateFile(Path("t.tar"), 700).ok());
  EXPECT_EQ(ReadFile(Path("t.tar")).size(), 700u);
  EXPECT_EQ(TruncateFile(Path("absent.tar"), 1).code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace stoker::tools
