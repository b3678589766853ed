#include "client/field_placement.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/device_kind.h"
#include "client/host_batch.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::client::internal {
namespace {

using ::testing::HasSubstr;
using Kind = FieldPlacement::Kind;

constexpr int kN = 2;
constexpr int kHeight = 3;
constexpr int kWidth = 5;
constexpr size_t kImageBytes = size_t{kN} * kHeight * kWidth * 3;
// 1-channel mask: 30 bytes, so the next fixed field starts 256 bytes on.
constexpr size_t kMaskBytes = size_t{kN} * kHeight * kWidth;
constexpr size_t kCaptionBytes = 7;

// "image=jpg:image, a=cls:class, mask=png:mask, caption=txt:bytes,
// b=x:class" as the network loader delivers it: image, mask, captions back
// to back in the payload.
HostBatch FieldsBatch() {
  HostBatch b;
  b.n = kN;
  b.height = kHeight;
  b.width = kWidth;
  b.channels = 3;
  b.pixels = PixelBuffer::Allocate(kImageBytes + kMaskBytes + kCaptionBytes);
  FieldBatch image{"image", v1::FIELD_ROLE_IMAGE, {kN, kHeight, kWidth, 3}};
  image.data_size = kImageBytes;
  FieldBatch a{"a", v1::FIELD_ROLE_CLASS, {kN}, {4, -1}};
  FieldBatch mask{"mask", v1::FIELD_ROLE_MASK, {kN, kHeight, kWidth, 1}};
  mask.data_offset = kImageBytes;
  mask.data_size = kMaskBytes;
  FieldBatch caption{"caption", v1::FIELD_ROLE_BYTES, {kN}};
  caption.data_offset = kImageBytes + kMaskBytes;
  caption.data_size = kCaptionBytes;
  caption.offsets = {0, 3, static_cast<int64_t>(kCaptionBytes)};
  FieldBatch b_field{"b", v1::FIELD_ROLE_CLASS, {kN}, {9, 8}};
  b.labels = a.labels;
  b.fields = {image, a, mask, caption, b_field};
  return b;
}

std::vector<Kind> Kinds(const FieldPlacement& p) {
  std::vector<Kind> out;
  for (const FieldPlacement::Field& f : p.fields) out.push_back(f.kind);
  return out;
}

TEST(AlignUpTest, RoundsUpToTheFieldAlignment) {
  EXPECT_EQ(kFieldAlignment, 256u);
  EXPECT_EQ(AlignUp(0), 0u);
  EXPECT_EQ(AlignUp(1), 256u);
  EXPECT_EQ(AlignUp(256), 256u);
  EXPECT_EQ(AlignUp(257), 512u);
}

TEST(PlaceFieldsTest, PutsEachRoleInItsHome) {
  const HostBatch host = FieldsBatch();
  absl::StatusOr<FieldPlacement> p = PlaceFields(host);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Kinds(*p), (std::vector<Kind>{Kind::kImage, Kind::kClass,
                                          Kind::kFixed, Kind::kBytes,
                                          Kind::kClass}));
  EXPECT_EQ(p->fields[1].offset, 0u);  // first class field: the labels
  EXPECT_EQ(p->fields[4].offset, 1u);
  EXPECT_EQ(p->class_fields, 2u);
  EXPECT_EQ(p->fields[2].offset, 0u);
  EXPECT_EQ(p->fixed_bytes, 256u);  // the mask, aligned up
  EXPECT_EQ(p->fields[3].offset, 0u);
  EXPECT_EQ(p->value_bytes, kCaptionBytes);
}

TEST(PlaceFieldsTest, FixedFieldsStartAligned) {
  HostBatch host = FieldsBatch();
  // A second mask after the first: starts at the next multiple of 256.
  FieldBatch second = host.fields[2];
  second.name = "mask2";
  host.fields.push_back(second);
  absl::StatusOr<FieldPlacement> p = PlaceFields(host);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->fields[2].offset, 0u);
  EXPECT_EQ(p->fields[5].offset, 256u);
  EXPECT_EQ(p->fixed_bytes, 512u);
}

TEST(PlaceFieldsTest, OnlyAnExactFirstImageFieldIsTheBatchImage) {
  // Two views per sample: (n, 2, h, w, 3), no field is the batch's image.
  HostBatch host;
  host.n = kN;
  host.height = kHeight;
  host.width = kWidth;
  host.channels = 3;
  host.pixels = PixelBuffer::Allocate(3 * kImageBytes);
  FieldBatch views{"views", v1::FIELD_ROLE_IMAGE, {kN, 2, kHeight, kWidth, 3}};
  views.data_size = 2 * kImageBytes;
  FieldBatch same{"same", v1::FIELD_ROLE_IMAGE, {kN, kHeight, kWidth, 3}};
  same.data_offset = 2 * kImageBytes;
  same.data_size = kImageBytes;
  host.fields = {views, same};
  absl::StatusOr<FieldPlacement> p = PlaceFields(host);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Kinds(*p), (std::vector<Kind>{Kind::kFixed, Kind::kFixed}));
  EXPECT_EQ(p->fields[1].offset, AlignUp(2 * kImageBytes));

  // The batch's image first: it is; a second identical one is a view.
  views.shape = {kN, kHeight, kWidth, 3};
  views.data_size = kImageBytes;
  host.fields = {views, same};
  p = PlaceFields(host);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Kinds(*p), (std::vector<Kind>{Kind::kImage, Kind::kFixed}));
  EXPECT_EQ(p->fields[1].offset, 0u);
}

TEST(PlaceFieldsTest, RegionsDependOnTheDevice) {
  const HostBatch host = FieldsBatch();
  absl::StatusOr<FieldPlacement> p = PlaceFields(host);
  ASSERT_TRUE(p.ok()) << p.status();
  // kCpu: the fixed region, then the bytes values, all in host memory.
  EXPECT_EQ(p->host_bytes(DeviceKind::kCpu), 256u + kCaptionBytes);
  EXPECT_EQ(p->device_bytes(DeviceKind::kCpu), 0u);
  EXPECT_EQ(p->values_offset(DeviceKind::kCpu), 256u);
  // kCuda: the fixed region on the device, the bytes values on the host.
  EXPECT_EQ(p->host_bytes(DeviceKind::kCuda), kCaptionBytes);
  EXPECT_EQ(p->device_bytes(DeviceKind::kCuda), 256u);
  EXPECT_EQ(p->values_offset(DeviceKind::kCuda), 0u);
}

TEST(PlaceFieldsTest, AClassicBatchPlacesNothing) {
  HostBatch host;
  host.n = kN;
  host.height = kHeight;
  host.width = kWidth;
  host.channels = 3;
  absl::StatusOr<FieldPlacement> p = PlaceFields(host);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->fields.empty());
  EXPECT_EQ(p->host_bytes(DeviceKind::kCpu), 0u);
}

// Each edit of FieldsBatch() and the message it must give.
struct Malformed {
  const char* why;
  void (*edit)(HostBatch&);
};

class PlaceFieldsRejectsTest : public ::testing::TestWithParam<Malformed> {};

TEST_P(PlaceFieldsRejectsTest, NamesTheField) {
  HostBatch host = FieldsBatch();
  GetParam().edit(host);
  absl::StatusOr<FieldPlacement> p = PlaceFields(host);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr(GetParam().why));
}

INSTANTIATE_TEST_SUITE_P(
    Malformed, PlaceFieldsRejectsTest,
    ::testing::Values(
        Malformed{"field 'mask' lies outside the received buffer",
                  [](HostBatch& b) {
                    b.fields[2].data_offset = b.pixels.size() + 1;
                  }},
        Malformed{"field 'caption' lies outside the received buffer",
                  [](HostBatch& b) { b.fields[3].data_size += 1; }},
        Malformed{"field 'b' does not have n values",
                  [](HostBatch& b) { b.fields[4].labels.pop_back(); }},
        Malformed{"field 'caption' has bad offsets",
                  [](HostBatch& b) { b.fields[3].offsets = {0, 9, 7}; }},
        Malformed{"field 'caption' has bad offsets",
                  [](HostBatch& b) { b.fields[3].offsets = {1, 3, 7}; }},
        Malformed{"field 'caption' has bad offsets",
                  [](HostBatch& b) { b.fields[3].offsets = {0, 3, 6}; }},
        Malformed{"field 'caption' has bad offsets",
                  [](HostBatch& b) { b.fields[3].offsets = {0, 7}; }},
        Malformed{"field 'mask' is not (n, h, w, c) over its bytes",
                  [](HostBatch& b) { b.fields[2].shape = {kN, kHeight}; }},
        Malformed{"field 'mask' is not (n, h, w, c) over its bytes",
                  [](HostBatch& b) { b.fields[2].shape[0] = kN + 1; }},
        Malformed{"field 'image' is not (n, repeats, h, w, c) over its bytes",
                  [](HostBatch& b) {
                    b.fields[0].shape = {kN, 2, kHeight, kWidth, 3};
                  }},
        Malformed{"field 'image' is not (n, h, w, c) over its bytes",
                  [](HostBatch& b) { b.fields[0].data_size -= 1; }},
        Malformed{"field 'a' has unknown role 0",
                  [](HostBatch& b) {
                    b.fields[1].role = v1::FIELD_ROLE_UNSPECIFIED;
                  }},
        Malformed{"labels are not the first class field's values",
                  [](HostBatch& b) { b.labels[0] += 1; }},
        Malformed{"labels are not the first class field's values",
                  [](HostBatch& b) {
                    b.fields.erase(b.fields.begin() + 4);
                    b.fields.erase(b.fields.begin() + 1);
                  }}));

}  // namespace
}  // namespace stoker::client::internal
