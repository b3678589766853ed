// Requests that name their fields (EpochPlanSpec.fields), end to end through
// real in-process servers and the client loader: segmentation masks warped
// with their image, captions and JSON passed through, missing-member
// policies, and bad field requests.

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "absl/strings/str_cat.h"
#include "client/field_spec.h"
#include "client/loader.h"
#include "common/random.h"
#include "gtest/gtest.h"
#include "image/ops/transform.h"
#include "image/sample_processor.h"
#include "server/sample_fields.h"
#include "tests/testing/cluster.h"
#include "tests/testing/temp_dir.h"
#include "tools/sample_shards.h"

namespace stoker {
namespace {

using testing::Cluster;
using testing::ReadEpoch;
using testing::TestLoaderOptions;

constexpr char kDataset[] = "fields";
constexpr int kSize = 40;

std::string Encode(const cv::Mat& image, const std::string& ext) {
  std::vector<uint8_t> bytes;
  EXPECT_TRUE(cv::imencode(ext, image, bytes));
  return std::string(bytes.begin(), bytes.end());
}

// Writes `members` as files and packs them with GNU tar (another tool than
// ours, as a user's shards would be), in name order.
void WriteWithGnuTar(const std::string& path,
                     const std::vector<tools::TarMember>& members) {
  const std::string staging = path + ".files";
  for (const tools::TarMember& m : members) {
    const std::string file = staging + "/" + m.name;
    std::filesystem::create_directories(
        std::filesystem::path(file).parent_path());
    std::ofstream(file, std::ios::binary) << m.data;
  }
  ASSERT_EQ(std::system(absl::StrCat("tar --sort=name -cf '", path, "' -C '",
                                     staging, "' .")
                            .c_str()),
            0);
}

struct Source {
  std::string key;
  int width = 0;
  int height = 0;
  cv::Mat mask;  // CV_8UC1 labels
  std::string caption;
  std::string json;
  std::string jpeg;
  bool has_mask = true;
};

// Samples with a JPEG image, a PNG label mask (random labels, so any
// misplaced pixel shows), a caption and JSON, packed by GNU tar; sample 3
// lacks its mask.
std::vector<Source> WriteShard(const std::string& path) {
  common::CounterRng rng(7);
  std::vector<Source> sources;
  std::vector<tools::TarMember> members;
  for (int i = 0; i < 12; ++i) {
    Source s;
    s.key = absl::StrCat("dir/sample", i);
    s.width = 50 + 7 * i;
    s.height = 90 - 3 * i;
    cv::Mat image(s.height, s.width, CV_8UC3);
    s.mask = cv::Mat(s.height, s.width, CV_8UC1);
    for (int y = 0; y < s.height; ++y) {
      for (int x = 0; x < s.width; ++x) {
        image.at<cv::Vec3b>(y, x) = cv::Vec3b(x * 4, y * 3, (x + y) * 2);
        s.mask.at<uint8_t>(y, x) = static_cast<uint8_t>(rng.NextU64() % 21);
      }
    }
    s.caption = absl::StrCat("a caption for sample ", i, " \xc3\xa9t\xc3\xa9");
    s.json = absl::StrCat("{\"id\": ", i, ", \"tags\": [\"x\"]}");
    s.has_mask = i != 3;
    // Upper-case extensions must match too.
    s.jpeg = Encode(image, ".jpg");
    members.push_back({s.key + (i % 2 ? ".JPG" : ".jpg"), s.jpeg});
    if (s.has_mask) members.push_back({s.key + ".seg.png", Encode(s.mask, ".png")});
    members.push_back({s.key + ".txt", s.caption});
    members.push_back({s.key + ".json", s.json});
    members.push_back({s.key + ".cls", absl::StrCat(i % 5, "\n")});
    sources.push_back(std::move(s));
  }
  WriteWithGnuTar(path, members);
  return sources;
}

class FieldsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::TempDir("fields");
    sources_ = WriteShard(dir + "/fields-0.tar");
    for (size_t i = 0; i < sources_.size(); ++i) index_[sources_[i].key] = i;
    server::DataServiceOptions service = Cluster::DefaultServiceOptions();
    // Exact decodes, so views can be checked against single-view decodes.
    service.processor.dct_scaling = false;
    auto cluster = Cluster::Start(2, kDataset, dir + "/*.tar", service);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  client::LoaderOptions Options(const std::string& fields) {
    client::LoaderOptions options =
        TestLoaderOptions(cluster_->specs(), kDataset, /*batch_size=*/5, kSize);
    auto parsed = client::ParseFields(fields);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    if (parsed.ok()) options.fields = client::FieldSpecs(*parsed);
    return options;
  }

  const client::FieldBatch* Field(const client::HostBatch& batch,
                                  const std::string& name) {
    for (const client::FieldBatch& f : batch.fields) {
      if (f.name == name) return &f;
    }
    return nullptr;
  }

  // The mask the sample must get, computed from the crop and flip the
  // transform drew for it, with exact integer arithmetic: output pixel x
  // of a crop of width w at `left` reads source column
  // left + floor((x + 0.5) * w / kSize).
  std::vector<uint8_t> ExpectedMask(const client::LoaderOptions& options,
                                    int64_t epoch, int64_t sample,
                                    const Source& s) {
    auto transform = image::Transform::Create(options.transform);
    EXPECT_TRUE(transform.ok());
    const image::SamplePlan plan = transform->Plan(
        s.width, s.height, common::SampleKey(options.seed, epoch, sample),
        /*trace=*/true);
    std::map<std::string, double> p;
    for (const image::OpTrace& t : plan.trace) {
      for (const auto& [name, value] : t.params) p[t.op + "." + name] = value;
    }
    const int top = static_cast<int>(p.at("resized_crop.top"));
    const int left = static_cast<int>(p.at("resized_crop.left"));
    const int h = static_cast<int>(p.at("resized_crop.height"));
    const int w = static_cast<int>(p.at("resized_crop.width"));
    const bool flip = p.at("hflip.applied") != 0;
    std::vector<uint8_t> out(kSize * kSize);
    for (int y = 0; y < kSize; ++y) {
      for (int x = 0; x < kSize; ++x) {
        const int xs = flip ? kSize - 1 - x : x;
        const int sy = top + (2 * y + 1) * h / (2 * kSize);
        const int sx = left + (2 * xs + 1) * w / (2 * kSize);
        out[y * kSize + x] = s.mask.at<uint8_t>(sy, sx);
      }
    }
    return out;
  }

  std::vector<Source> sources_;
  std::map<std::string, size_t> index_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(FieldsTest, MasksAreTheNearestWarpOfTheSourceUnderTheImagesGeometry) {
  client::LoaderOptions options = Options(
      "image=jpg:image, mask=seg.png:mask:skip, label=cls:class");
  auto loader = client::Loader::Create(options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  // The same epoch without fields: the image bytes must be identical.
  auto classic = client::Loader::Create(
      TestLoaderOptions(cluster_->specs(), kDataset, 5, kSize));
  ASSERT_TRUE(classic.ok());
  for (int64_t epoch : {0, 1}) {
    auto batches = ReadEpoch(**loader, epoch);
    ASSERT_TRUE(batches.ok()) << batches.status();
    auto classic_batches = ReadEpoch(**classic, epoch);
    ASSERT_TRUE(classic_batches.ok());
    std::map<int64_t, std::string> classic_images;
    for (const client::HostBatch& b : *classic_batches) {
      const size_t bytes = size_t{kSize} * kSize * 3;
      for (int i = 0; i < b.n; ++i) {
        classic_images[b.sample_indices[i]] = std::string(
            reinterpret_cast<const char*>(b.pixels.data()) + i * bytes, bytes);
      }
    }
    std::set<std::string> seen;
    for (const client::HostBatch& batch : *batches) {
      ASSERT_EQ(batch.fields.size(), 3u);
      const client::FieldBatch* image = Field(batch, "image");
      const client::FieldBatch* mask = Field(batch, "mask");
      const client::FieldBatch* label = Field(batch, "label");
      ASSERT_TRUE(image && mask && label);
      EXPECT_EQ(image->shape, (std::vector<int>{batch.n, kSize, kSize, 3}));
      EXPECT_EQ(mask->shape, (std::vector<int>{batch.n, kSize, kSize, 1}));
      EXPECT_EQ(image->data_offset, 0u);
      for (int i = 0; i < batch.n; ++i) {
        const Source& s = sources_[index_.at(batch.keys[i])];
        EXPECT_TRUE(s.has_mask) << s.key << " has no mask but was delivered";
        seen.insert(s.key);
        const int64_t sample = batch.sample_indices[i];
        const std::vector<uint8_t> expected =
            ExpectedMask(options, epoch, sample, s);
        const uint8_t* got =
            batch.pixels.data() + mask->data_offset + i * kSize * kSize;
        int wrong = 0;
        for (int p = 0; p < kSize * kSize; ++p) wrong += got[p] != expected[p];
        EXPECT_EQ(wrong, 0) << s.key << " epoch " << epoch;
        EXPECT_EQ(label->labels[i], static_cast<int>(index_.at(s.key) % 5));
        EXPECT_EQ(batch.labels[i], label->labels[i]);
        const size_t bytes = size_t{kSize} * kSize * 3;
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(
                                  batch.pixels.data()) + i * bytes, bytes),
                  classic_images.at(sample))
            << s.key;
      }
      // The sample without a mask is left out quietly (skip policy).
      for (const client::SkippedSample& s : batch.skipped) {
        EXPECT_EQ(s.key, "dir/sample3");
        EXPECT_NE(s.reason.find("no member for field 'mask'"),
                  std::string::npos) << s.reason;
      }
    }
    EXPECT_EQ(seen.size(), sources_.size() - 1);
  }
}

TEST_F(FieldsTest, CaptionsAndJsonArriveExactlyOncePerEpoch) {
  client::LoaderOptions options =
      Options("image=jpg;png:image, caption=txt:text, meta=json:bytes");
  options.fail_on_bad_sample = true;
  auto loader = client::Loader::Create(options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  for (int64_t epoch : {0, 1}) {
    auto batches = ReadEpoch(**loader, epoch);
    ASSERT_TRUE(batches.ok()) << batches.status();
    std::multiset<std::string> seen;
    for (const client::HostBatch& batch : *batches) {
      EXPECT_TRUE(batch.labels.empty());  // no class field
      const client::FieldBatch* caption = Field(batch, "caption");
      const client::FieldBatch* meta = Field(batch, "meta");
      ASSERT_TRUE(caption && meta);
      ASSERT_EQ(caption->offsets.size(), static_cast<size_t>(batch.n) + 1);
      const char* base = reinterpret_cast<const char*>(batch.pixels.data());
      for (int i = 0; i < batch.n; ++i) {
        const Source& s = sources_[index_.at(batch.keys[i])];
        seen.insert(s.key);
        EXPECT_EQ(std::string(base + caption->data_offset + caption->offsets[i],
                              caption->offsets[i + 1] - caption->offsets[i]),
                  s.caption);
        EXPECT_EQ(std::string(base + meta->data_offset + meta->offsets[i],
                              meta->offsets[i + 1] - meta->offsets[i]),
                  s.json);
      }
    }
    EXPECT_EQ(seen.size(), sources_.size());
    for (const Source& s : sources_) EXPECT_EQ(seen.count(s.key), 1u) << s.key;
  }
}

TEST_F(FieldsTest, MissingMembersFollowTheirPolicy) {
  // Empty: the sample stays, its mask is the fill value.
  {
    auto loader = client::Loader::Create(Options(
        "image=jpg:image, mask=seg.png:mask:empty:fill=255, n=cls:class"));
    ASSERT_TRUE(loader.ok());
    auto batches = ReadEpoch(**loader, 0);
    ASSERT_TRUE(batches.ok()) << batches.status();
    int delivered = 0;
    for (const client::HostBatch& batch : *batches) {
      const client::FieldBatch* mask = Field(batch, "mask");
      for (int i = 0; i < batch.n; ++i, ++delivered) {
        if (batch.keys[i] != "dir/sample3") continue;
        const uint8_t* m =
            batch.pixels.data() + mask->data_offset + i * kSize * kSize;
        for (int p = 0; p < kSize * kSize; ++p) ASSERT_EQ(m[p], 255);
      }
    }
    EXPECT_EQ(delivered, 12);
  }
  // Error (the default) under the fail policy ends the stream naming it.
  {
    client::LoaderOptions options =
        Options("image=jpg:image, mask=seg.png:mask");
    options.fail_on_bad_sample = true;
    options.unavailable_deadline = absl::Seconds(1);
    auto loader = client::Loader::Create(options);
    ASSERT_TRUE(loader.ok());
    auto batches = ReadEpoch(**loader, 0);
    ASSERT_FALSE(batches.ok());
    EXPECT_NE(batches.status().message().find("dir/sample3"),
              std::string::npos)
        << batches.status();
  }
  // Skip under the fail policy is not an error.
  {
    client::LoaderOptions options =
        Options("image=jpg:image, mask=seg.png:mask:skip");
    options.fail_on_bad_sample = true;
    auto loader = client::Loader::Create(options);
    ASSERT_TRUE(loader.ok());
    auto batches = ReadEpoch(**loader, 0);
    ASSERT_TRUE(batches.ok()) << batches.status();
  }
}

TEST_F(FieldsTest, ViewsShareOneDecodeAndDrawTheirOwnParameters) {
  const std::string local = "RandomResizedCrop(16, scale=(0.05, 0.4))";
  client::LoaderOptions options = Options(absl::StrCat(
      "global=jpg:image:repeats=2, local=jpg:image:transform=", local,
      "|RandomHorizontalFlip():repeats=3, label=cls:class"));
  auto loader = client::Loader::Create(options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  auto batches = ReadEpoch(**loader, 2);
  ASSERT_TRUE(batches.ok()) << batches.status();
  auto global = image::Transform::Create(options.transform);
  auto small = image::Transform::Create(*image::ParseTransform(
      absl::StrCat(local, "|RandomHorizontalFlip()")));
  ASSERT_TRUE(global.ok() && small.ok());
  image::SampleProcessorOptions exact;
  exact.dct_scaling = false;
  image::SampleProcessor processor(exact);
  int samples = 0;
  for (const client::HostBatch& batch : *batches) {
    const client::FieldBatch* g = Field(batch, "global");
    const client::FieldBatch* l = Field(batch, "local");
    ASSERT_TRUE(g && l);
    EXPECT_EQ(g->shape, (std::vector<int>{batch.n, 2, kSize, kSize, 3}));
    EXPECT_EQ(l->shape, (std::vector<int>{batch.n, 3, 16, 16, 3}));
    EXPECT_EQ(batch.height, kSize);
    for (int i = 0; i < batch.n; ++i, ++samples) {
      const Source& s = sources_[index_.at(batch.keys[i])];
      const uint64_t key =
          common::SampleKey(options.seed, 2, batch.sample_indices[i]);
      // Every view equals a decode of its own, with its own parameters.
      std::set<std::string> distinct;
      for (int v = 0; v < 5; ++v) {
        const bool is_global = v < 2;
        const int side = is_global ? kSize : 16;
        const size_t bytes = size_t{3} * side * side;
        const image::SamplePlan plan =
            (is_global ? *global : *small)
                .Plan(s.width, s.height, server::ViewKey(key, v));
        std::vector<uint8_t> expected(bytes);
        ASSERT_TRUE(processor.Process(s.jpeg, true, plan, expected.data(),
                                      nullptr).ok());
        const client::FieldBatch& f = is_global ? *g : *l;
        const int r = is_global ? v : v - 2;
        const uint8_t* got = batch.pixels.data() + f.data_offset +
                             bytes * (static_cast<size_t>(f.shape[1]) * i + r);
        EXPECT_EQ(std::memcmp(got, expected.data(), bytes), 0)
            << s.key << " view " << v;
        distinct.insert(std::string(reinterpret_cast<const char*>(got), bytes));
      }
      EXPECT_EQ(distinct.size(), 5u) << s.key;
    }
  }
  EXPECT_EQ(samples, 12);
}

// WebP members are images like JPEG and PNG ones: a lossless WebP sample
// gives the pixels its PNG twin gives under the same plan.
TEST(WebpTest, WebpMembersAreImages) {
  const std::string dir = testing::TempDir("webp");
  cv::Mat image(37, 53, CV_8UC3);
  for (int y = 0; y < image.rows; ++y) {
    for (int x = 0; x < image.cols; ++x) {
      image.at<cv::Vec3b>(y, x) = cv::Vec3b(x * 5, y * 7, (x * y) % 256);
    }
  }
  std::vector<uint8_t> webp;
  ASSERT_TRUE(cv::imencode(".webp", image, webp, {cv::IMWRITE_WEBP_QUALITY, 101}));
  const std::string png = Encode(image, ".png");
  ASSERT_TRUE(tools::WriteTarFile(
                  dir + "/webp-0.tar",
                  {{"a.webp", std::string(webp.begin(), webp.end())},
                   {"a.cls", "1"},
                   {"b.png", png},
                   {"b.cls", "2"}})
                  .ok());
  auto cluster = Cluster::Start(1, "webp", dir + "/*.tar");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  client::LoaderOptions options =
      TestLoaderOptions((*cluster)->specs(), "webp", 2, 24);
  options.shuffle = false;
  auto loader = client::Loader::Create(options);
  ASSERT_TRUE(loader.ok());
  auto batches = ReadEpoch(**loader, 0);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 1u);
  const client::HostBatch& batch = (*batches)[0];
  ASSERT_EQ(batch.n, 2) << (batch.skipped.empty() ? "" : batch.skipped[0].reason);
  auto transform = image::Transform::Create(options.transform);
  image::SampleProcessor processor;
  const size_t bytes = 24 * 24 * 3;
  for (int i = 0; i < 2; ++i) {
    const image::SamplePlan plan = transform->Plan(
        53, 37, common::SampleKey(options.seed, 0, batch.sample_indices[i]));
    std::vector<uint8_t> expected(bytes);
    ASSERT_TRUE(
        processor.Process(png, false, plan, expected.data(), nullptr).ok());
    EXPECT_EQ(std::memcmp(batch.pixels.data() + bytes * i, expected.data(),
                          bytes),
              0)
        << batch.keys[i];
  }
}

TEST_F(FieldsTest, BadFieldRequestsAreRefusedWithTheReason) {
  for (const auto& [fields, why] : std::vector<std::pair<std::string, std::string>>{
           {"a=jpg:image, b=png:image", "must name the same extensions"},
           {"a=jpg:image:repeats=40, b=jpg:image:repeats=30", "views per sample"},
           {"m=seg.png:mask", "no image"},
           {"image=jpg:image:empty", "cannot be empty"},
           {"image=jpg:image, image=txt:bytes", "appears twice"},
           {"9x=jpg:image", "a name is"},
           {"v=mp4:video:frames=4, i=jpg:image", "no image field"},
           {"i=jpg:image, v=mp4:video:frames=4", "no image field beside it"},
           {"v=mp4:video:frames=4, m=seg.png:mask", "masks do not go with"},
           {"v=mp4:video:frames=200:clips=8", "frames per sample"},
           {"v=mp4:video:frames=4:empty", "cannot be empty"}}) {
    client::LoaderOptions options = Options(fields);
    options.unavailable_deadline = absl::Seconds(1);
    auto loader = client::Loader::Create(options);
    absl::Status status = loader.ok() ? ReadEpoch(**loader, 0).status()
                                      : loader.status();
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << fields << ": " << status;
    EXPECT_NE(status.message().find(why), std::string::npos)
        << fields << ": " << status;
  }
  // The canonical form (part of the plan id) reads back to the same specs.
  for (const char* text :
       {"image=jpg;png:image, mask=seg.png:mask:skip:channels=3:fill=7, "
        "c=cls:class:empty, t=txt:text",
        "g=jpg:image:repeats=2, l=JPG:image:transform=RandomResizedCrop(96, "
        "scale=(0.05, 0.4))|RandomHorizontalFlip():repeats=6",
        "v=mp4;webm:video:frames=8:fps=12.5:clips=3:sampler=uniform:"
        "short=loop:transform=RandomResizedCrop(64)|RandomHorizontalFlip():"
        "skip, c=cls:class",
        "v=mkv:video:frames=16:stride=4:short=skip"}) {
    auto parsed = client::ParseFields(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    const std::vector<v1::FieldSpec> specs = client::FieldSpecs(*parsed);
    const std::string canonical = client::FormatFields(specs);
    auto again = client::ParseFields(canonical);
    ASSERT_TRUE(again.ok()) << canonical << ": " << again.status();
    const std::vector<v1::FieldSpec> specs_again = client::FieldSpecs(*again);
    ASSERT_EQ(specs.size(), specs_again.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(specs[i].SerializeAsString(),
                specs_again[i].SerializeAsString())
          << canonical;
    }
  }
  EXPECT_FALSE(client::ParseFields("image=jpg").ok());
  EXPECT_FALSE(client::ParseFields("image=jpg:picture").ok());
  EXPECT_FALSE(client::ParseFields("m=png:mask:channels=5").ok());
  for (const char* bad :
       {"v=mp4:video", "v=mp4:video:frames=0", "v=mp4:video:frames=4:fps=0",
        "v=mp4:video:frames=4:sampler=bogus", "v=mp4:video:frames=4:short=x",
        "v=mp4:video:frames=4:clips=65", "v=mp4:video:frames=4:color=1"}) {
    EXPECT_EQ(client::ParseFields(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace stoker
