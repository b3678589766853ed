#include "client/staged_batch.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/batch_ops.h"
#include "client/batch_source.h"
#include "client/convert.h"
#include "client/device_loader.h"
#include "client/host_batch.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/fake_batch_source.h"

namespace stoker::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kHeight = 8;
constexpr int kWidth = 12;
constexpr int kBatch = 4;
constexpr size_t kImageBytes = size_t{kBatch} * kHeight * kWidth * 3;
constexpr size_t kMaskBytes = size_t{kBatch} * kHeight * kWidth;
// The "views" field: two views per sample, of the image's size.
constexpr size_t kViewsBytes = 2 * kImageBytes;

FakeBatchSpec Spec(int64_t index) {
  FakeBatchSpec s;
  s.epoch = 3;
  s.batch_index = index;
  s.n = kBatch;
  s.height = kHeight;
  s.width = kWidth;
  s.channels = 3;
  return s;
}

ConvertOptions Output(DType dtype, Layout layout) {
  ConvertOptions o;
  o.dtype = dtype;
  o.layout = layout;
  return o;
}

// A classic batch as the network loader delivers it, in heap memory.
HostBatch Classic(const FakeBatchSpec& spec) {
  HostBatch b = FakeBatchSource::Info(spec);
  const std::vector<uint8_t> pixels = FakeBatchSource::Pixels(spec);
  b.pixels = PixelBuffer::Allocate(pixels.size());
  std::copy(pixels.begin(), pixels.end(), b.pixels.data());
  return b;
}

uint8_t FieldByte(size_t i) { return static_cast<uint8_t>(i * 13 + 5); }

std::string Caption(int i) { return std::string(static_cast<size_t>(i), 'x'); }

// "image=jpg:image, a=cls:class, mask=png:mask, caption=txt:bytes,
// views=jpg:image:repeats=2": payload image | mask | views | captions
// (captions of 0, 1, 2 and 3 bytes).
HostBatch WithFields(const FakeBatchSpec& spec) {
  HostBatch b = Classic(spec);
  const size_t captions = 0 + 1 + 2 + 3;
  PixelBuffer payload =
      PixelBuffer::Allocate(kImageBytes + kMaskBytes + kViewsBytes + captions);
  std::memcpy(payload.data(), b.pixels.data(), kImageBytes);
  for (size_t i = kImageBytes; i < kImageBytes + kMaskBytes + kViewsBytes;
       ++i) {
    payload.data()[i] = FieldByte(i);
  }
  FieldBatch image{"image", v1::FIELD_ROLE_IMAGE,
                   {kBatch, kHeight, kWidth, 3}};
  image.data_size = kImageBytes;
  FieldBatch a{"a", v1::FIELD_ROLE_CLASS, {kBatch}, {5, -1, 7, 9}};
  FieldBatch mask{"mask", v1::FIELD_ROLE_MASK, {kBatch, kHeight, kWidth, 1}};
  mask.data_offset = kImageBytes;
  mask.data_size = kMaskBytes;
  FieldBatch views{"views", v1::FIELD_ROLE_IMAGE,
                   {kBatch, 2, kHeight, kWidth, 3}};
  views.data_offset = kImageBytes + kMaskBytes;
  views.data_size = kViewsBytes;
  FieldBatch caption{"caption", v1::FIELD_ROLE_BYTES, {kBatch}};
  caption.data_offset = kImageBytes + kMaskBytes + kViewsBytes;
  caption.data_size = captions;
  caption.offsets.push_back(0);
  for (int i = 0; i < kBatch; ++i) {
    const std::string c = Caption(i);
    std::memcpy(payload.data() + caption.data_offset + caption.offsets.back(),
                c.data(), c.size());
    caption.offsets.push_back(caption.offsets.back() +
                              static_cast<int64_t>(c.size()));
  }
  b.pixels = std::move(payload);
  b.labels = a.labels;
  b.fields = {image, a, mask, caption, views};
  return b;
}

// Hands out the batches given to it in order, then blocks until Cancel().
class QueueSource : public BatchSource {
 public:
  void Add(HostBatch batch) {
    absl::MutexLock lock(&mu_);
    batches_.push_back(std::move(batch));
  }

  absl::StatusOr<HostBatch> Next() override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](QueueSource* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
          return s->cancelled_ || !s->batches_.empty();
        },
        this));
    if (cancelled_) return absl::CancelledError("queue source cancelled");
    HostBatch b = std::move(batches_.front());
    batches_.pop_front();
    return b;
  }

  void Cancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

 private:
  absl::Mutex mu_;
  std::deque<HostBatch> batches_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

class StagedBatchTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (loader_ != nullptr) loader_->Stop();
  }

  // A loader staging uint8 NHWC batches with `ops` drawn, not applied, as
  // the Python pipeline builds it, over source_.
  void StartLoader(int output_slots = 2, const BatchOpsOptions& ops = {}) {
    DeviceLoaderOptions o;
    o.device = DeviceKind::kCpu;
    o.max_batch_bytes = kImageBytes;
    o.pinned_slots = 1;
    o.output_slots = output_slots;
    o.convert = Output(DType::kUint8, Layout::kNHWC);
    o.batch_ops = ops;
    o.apply_batch_ops = false;
    absl::StatusOr<std::unique_ptr<DeviceLoader>> loader =
        DeviceLoader::Create(o);
    ASSERT_TRUE(loader.ok()) << loader.status();
    loader_ = *std::move(loader);
    ASSERT_TRUE(loader_->Start(&source_).ok());
  }

  // The loader's next batch, staged for `output` (an empty one on error).
  StagedBatch Next(const ConvertOptions& output) {
    absl::StatusOr<DeviceBatch> b = loader_->Next();
    EXPECT_TRUE(b.ok()) << b.status();
    return StagedBatch(b.ok() ? *std::move(b) : DeviceBatch(), output);
  }

  // Declared first: the loader reads it until stopped.
  QueueSource source_;
  std::unique_ptr<DeviceLoader> loader_;
};

TEST(FieldRoleNameTest, NamesEveryRoleAsTheFieldsTextDoes) {
  EXPECT_STREQ(FieldRoleName(v1::FIELD_ROLE_IMAGE), "image");
  EXPECT_STREQ(FieldRoleName(v1::FIELD_ROLE_MASK), "mask");
  EXPECT_STREQ(FieldRoleName(v1::FIELD_ROLE_CLASS), "class");
  EXPECT_STREQ(FieldRoleName(v1::FIELD_ROLE_BYTES), "bytes");
  EXPECT_STREQ(FieldRoleName(v1::FIELD_ROLE_UNSPECIFIED), "unspecified");
}

TEST(BytesValuesTest, ViewsEachValueBetweenItsOffsets) {
  const char data[] = "abcdef";
  const std::vector<int64_t> offsets = {0, 2, 2, 6};
  const BytesValues values(data, offsets);
  ASSERT_EQ(values.size(), 3u);
  EXPECT_EQ(values[0], "ab");
  EXPECT_EQ(values[1], "");
  EXPECT_EQ(values[2], "cdef");
  EXPECT_EQ(BytesValues(data, {}).size(), 0u);
}

TEST_F(StagedBatchTest, ConvertsTheImagesAndCopiesTheLabels) {
  StartLoader();
  const std::vector<ConvertOptions> outputs = {
      Output(DType::kFloat32, Layout::kNCHW),
      Output(DType::kFloat16, Layout::kNHWC),
      Output(DType::kUint8, Layout::kNCHW)};
  for (size_t k = 0; k < outputs.size(); ++k) source_.Add(Classic(Spec(k)));
  for (size_t k = 0; k < outputs.size(); ++k) {
    const ConvertOptions& output = outputs[k];
    StagedBatch staged = Next(output);
    EXPECT_EQ(staged.shape(),
              (std::array<int64_t, 4>{kBatch, 3, kHeight, kWidth}));
    EXPECT_FALSE(staged.soft_labels());
    EXPECT_TRUE(staged.fields().empty());
    EXPECT_FALSE(staged.converted());
    const ImageShape shape{kBatch, kHeight, kWidth, 3};
    std::vector<uint8_t> images(ConvertedBytes(shape, output.dtype));
    std::vector<int64_t> labels(kBatch, -99);
    StagedTargets to;
    to.images = images.data();
    to.labels = labels.data();
    const absl::Status s = staged.ConvertInto(to, nullptr);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(staged.converted());
    EXPECT_EQ(images, ExpectedConversion(Spec(k), output)) << k;
    EXPECT_EQ(labels, ExpectedLabels(Spec(k)));
    // The shape stays readable.
    EXPECT_EQ(staged.shape()[0], kBatch);
  }
}

TEST_F(StagedBatchTest, IsSingleUse) {
  StartLoader();
  source_.Add(WithFields(Spec(0)));
  StagedBatch staged = Next(Output(DType::kFloat32, Layout::kNCHW));
  std::vector<float> images(kImageBytes);
  StagedTargets to;
  to.images = images.data();
  ASSERT_TRUE(staged.ConvertInto(to, nullptr).ok());
  EXPECT_EQ(staged.ConvertInto(to, nullptr).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(staged.Values(3).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The fields stay listed, none as the batch's image any more.
  ASSERT_EQ(staged.fields().size(), 5u);
  EXPECT_FALSE(staged.field_is_image(0));
}

TEST_F(StagedBatchTest, ReleasesItsSlotWhenConverted) {
  StartLoader(/*output_slots=*/1);
  source_.Add(Classic(Spec(0)));
  source_.Add(Classic(Spec(1)));
  StagedBatch staged = Next(Output(DType::kFloat32, Layout::kNCHW));
  // It holds the only slot.
  EXPECT_EQ(loader_->Next().status().code(),
            absl::StatusCode::kResourceExhausted);
  std::vector<float> images(kImageBytes);
  StagedTargets to;
  to.images = images.data();
  ASSERT_TRUE(staged.ConvertInto(to, nullptr).ok());
  absl::StatusOr<DeviceBatch> next = loader_->Next();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->batch_index(), 1);
}

TEST_F(StagedBatchTest, ReleasesItsSlotEvenWhenTheConversionFails) {
  StartLoader(/*output_slots=*/1);
  source_.Add(Classic(Spec(0)));
  source_.Add(Classic(Spec(1)));
  StagedBatch staged = Next(Output(DType::kFloat32, Layout::kNCHW));
  std::vector<float> images(kImageBytes + 1);
  StagedTargets to;
  // Not aligned to float32 elements.
  to.images = reinterpret_cast<uint8_t*>(images.data()) + 1;
  const absl::Status s = staged.ConvertInto(to, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not aligned"));
  EXPECT_TRUE(staged.converted());
  EXPECT_TRUE(loader_->Next().ok());
}

TEST_F(StagedBatchTest, RejectsTargetsThatDoNotFitTheBatchBeforeDoingAnything) {
  StartLoader(/*output_slots=*/3);
  source_.Add(Classic(Spec(0)));
  HostBatch no_class = WithFields(Spec(1));
  no_class.fields.erase(no_class.fields.begin() + 1);
  no_class.labels.clear();
  source_.Add(std::move(no_class));
  const ConvertOptions output = Output(DType::kFloat32, Layout::kNCHW);
  std::vector<float> images(kImageBytes * 2);
  std::vector<int64_t> labels(kBatch);

  StagedBatch classic = Next(output);
  const std::vector<uintptr_t> two = {0, 0};
  StagedTargets to;
  to.images = images.data();
  to.fields = two;
  absl::Status s = classic.ConvertInto(to, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("2 field addresses for 0 fields"));
  EXPECT_FALSE(classic.converted());

  StagedBatch fields = Next(output);
  to = StagedTargets();
  to.images = images.data();
  to.labels = labels.data();
  s = fields.ConvertInto(to, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no class field"));
  EXPECT_FALSE(fields.converted());
  // Without the labels it converts.
  to.labels = nullptr;
  EXPECT_TRUE(fields.ConvertInto(to, nullptr).ok());
}

TEST_F(StagedBatchTest, ListsTheFieldsAndViewsTheBytesValues) {
  StartLoader();
  source_.Add(WithFields(Spec(0)));
  StagedBatch staged = Next(Output(DType::kFloat32, Layout::kNCHW));
  std::vector<std::string> names;
  std::vector<std::string> roles;
  for (const FieldBatch& f : staged.fields()) {
    names.push_back(f.name);
    roles.push_back(FieldRoleName(f.role));
  }
  EXPECT_THAT(names, ElementsAre("image", "a", "mask", "caption", "views"));
  EXPECT_THAT(roles, ElementsAre("image", "class", "mask", "bytes", "image"));
  EXPECT_EQ(staged.fields()[4].shape,
            (std::vector<int>{kBatch, 2, kHeight, kWidth, 3}));
  EXPECT_TRUE(staged.field_is_image(0));
  for (size_t i = 1; i < 5; ++i) EXPECT_FALSE(staged.field_is_image(i)) << i;

  absl::StatusOr<BytesValues> captions = staged.Values(3);
  ASSERT_TRUE(captions.ok()) << captions.status();
  ASSERT_EQ(captions->size(), size_t{kBatch});
  for (int i = 0; i < kBatch; ++i) EXPECT_EQ((*captions)[i], Caption(i));
  for (size_t i : {size_t{0}, size_t{1}, size_t{9}}) {
    absl::StatusOr<BytesValues> not_bytes = staged.Values(i);
    EXPECT_EQ(not_bytes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(not_bytes.status().message(),
                HasSubstr(absl::StrCat("field ", i, " is not a bytes field")));
  }
}

TEST_F(StagedBatchTest, FillsEveryFieldTarget) {
  StartLoader();
  source_.Add(WithFields(Spec(0)));
  const ConvertOptions output = Output(DType::kFloat32, Layout::kNHWC);
  StagedBatch staged = Next(output);
  std::vector<float> images(kImageBytes);
  std::vector<int64_t> a(kBatch, -99);
  std::vector<uint8_t> mask(kMaskBytes);
  std::vector<float> views(kViewsBytes);
  const std::vector<uintptr_t> fields = {
      0, reinterpret_cast<uintptr_t>(a.data()),
      reinterpret_cast<uintptr_t>(mask.data()), 0,
      reinterpret_cast<uintptr_t>(views.data())};
  StagedTargets to;
  to.images = images.data();
  to.fields = fields;
  const absl::Status s = staged.ConvertInto(to, nullptr);
  ASSERT_TRUE(s.ok()) << s;

  const std::vector<uint8_t> want_images = ExpectedConversion(Spec(0), output);
  EXPECT_EQ(std::memcmp(images.data(), want_images.data(), want_images.size()),
            0);
  EXPECT_THAT(a, ElementsAre(5, -1, 7, 9));
  int wrong = 0;
  for (size_t i = 0; i < kMaskBytes; ++i) {
    wrong += mask[i] != FieldByte(kImageBytes + i);
  }
  EXPECT_EQ(wrong, 0);
  // The views are converted like the images: n * 2 images.
  std::vector<uint8_t> view_pixels(kViewsBytes);
  for (size_t i = 0; i < kViewsBytes; ++i) {
    view_pixels[i] = FieldByte(kImageBytes + kMaskBytes + i);
  }
  std::vector<float> want_views(kViewsBytes);
  ASSERT_TRUE(ConvertOnHost(view_pixels.data(),
                            ImageShape{2 * kBatch, kHeight, kWidth, 3}, output,
                            want_views.data())
                  .ok());
  EXPECT_EQ(views, want_views);
}

TEST_F(StagedBatchTest, LeavesOutFieldsWithoutAnAddress) {
  StartLoader();
  source_.Add(WithFields(Spec(0)));
  StagedBatch staged = Next(Output(DType::kFloat32, Layout::kNCHW));
  std::vector<uint8_t> mask(kMaskBytes, 0);
  const std::vector<uintptr_t> fields = {
      0, 0, reinterpret_cast<uintptr_t>(mask.data()), 0, 0};
  StagedTargets to;  // no images, no labels, no views
  to.fields = fields;
  const absl::Status s = staged.ConvertInto(to, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(mask[7], FieldByte(kImageBytes + 7));
}

TEST_F(StagedBatchTest, NamesTheFieldAConversionFailsOn) {
  StartLoader();
  source_.Add(WithFields(Spec(0)));
  StagedBatch staged = Next(Output(DType::kFloat32, Layout::kNCHW));
  std::vector<float> views(kViewsBytes + 1);
  const std::vector<uintptr_t> fields = {
      0, 0, 0, 0, reinterpret_cast<uintptr_t>(views.data()) + 2};
  StagedTargets to;
  to.fields = fields;
  const absl::Status s = staged.ConvertInto(to, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("field 'views': "));
  EXPECT_TRUE(staged.converted());
}

TEST_F(StagedBatchTest, AppliesTheDrawnErasingAfterTheConversion) {
  BatchOpsOptions ops;
  ops.seed = 11;
  ops.erasing.probability = 1;
  ops.erasing.value = {0.5f, -1.0f, 2.0f};
  StartLoader(2, ops);
  source_.Add(Classic(Spec(0)));
  source_.Add(Classic(Spec(1)));
  const ConvertOptions output = Output(DType::kFloat32, Layout::kNCHW);
  const ImageShape shape{kBatch, kHeight, kWidth, 3};

  StagedBatch first = Next(output);
  EXPECT_FALSE(first.soft_labels());
  // Erasing needs the images.
  StagedTargets none;
  EXPECT_EQ(first.ConvertInto(none, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(first.converted());

  std::vector<uint8_t> images(ConvertedBytes(shape, output.dtype));
  StagedTargets to;
  to.images = images.data();
  ASSERT_TRUE(first.ConvertInto(to, nullptr).ok());
  const std::vector<uint8_t> plain = ExpectedConversion(Spec(0), output);
  std::vector<uint8_t> want = plain;
  absl::StatusOr<BatchOpsParams> drawn =
      DrawBatchOps(ops, FakeBatchSource::Info(Spec(0)));
  ASSERT_TRUE(drawn.ok()) << drawn.status();
  ASSERT_TRUE(ApplyBatchOpsOnHost(*drawn, shape, output.dtype, output.layout,
                                  want.data(), nullptr, nullptr)
                  .ok());
  EXPECT_NE(want, plain);
  EXPECT_EQ(images, want);
}

TEST_F(StagedBatchTest, WritesSoftLabelsWithMixing) {
  BatchOpsOptions ops;
  ops.seed = 5;
  ops.mix.mixup_alpha = 1;
  ops.mix.num_classes = 2000;  // the fake labels of batch 1 are 997..1018
  StartLoader(2, ops);
  source_.Add(Classic(Spec(1)));
  const ConvertOptions output = Output(DType::kFloat32, Layout::kNCHW);
  const ImageShape shape{kBatch, kHeight, kWidth, 3};

  StagedBatch staged = Next(output);
  EXPECT_TRUE(staged.soft_labels());
  std::vector<uint8_t> images(ConvertedBytes(shape, output.dtype));
  StagedTargets to;
  to.images = images.data();
  // The soft labels need a target.
  EXPECT_EQ(staged.ConvertInto(to, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> soft(kBatch * 2000, -1);
  to.labels = soft.data();
  ASSERT_TRUE(staged.ConvertInto(to, nullptr).ok());

  std::vector<uint8_t> want = ExpectedConversion(Spec(1), output);
  std::vector<float> want_soft(soft.size());
  const std::vector<int64_t> labels = ExpectedLabels(Spec(1));
  absl::StatusOr<BatchOpsParams> drawn =
      DrawBatchOps(ops, FakeBatchSource::Info(Spec(1)));
  ASSERT_TRUE(drawn.ok()) << drawn.status();
  ASSERT_TRUE(ApplyBatchOpsOnHost(*drawn, shape, output.dtype, output.layout,
                                  want.data(), labels.data(),
                                  want_soft.data())
                  .ok());
  EXPECT_EQ(images, want);
  EXPECT_EQ(soft, want_soft);
  EXPECT_EQ(soft[997], want_soft[997]);
  EXPECT_GT(soft[997], 0);  // sample 0's own class
}

}  // namespace
}  // namespace stoker::client
