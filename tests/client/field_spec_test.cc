// client/field_spec.h: payload sizes of fields whose pipelines name ops
// the client does not know (a server's plugin or Python ops), which the
// client passes through as size-preserving.

#include "client/field_spec.h"

#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "image/ops/transform.h"

namespace stoker::client {
namespace {

TEST(FieldSpecTest, PayloadOfPipelinesWithServerSideOps) {
  absl::StatusOr<std::vector<ParsedField>> fields = ParseFields(
      "image=jpg:image, mask=seg.png:mask:channels=2, "
      "view=jpg:image:transform=RandomResizedCrop(8)|ServerOp(p=1)");
  ASSERT_TRUE(fields.ok()) << fields.status();
  absl::StatusOr<v1::TransformPipeline> transform = image::ParseTransform(
      "RandomResizedCrop(16)|CoarseDropout(p=1, fill=0)",
      image::kClientTransformChecks);
  ASSERT_TRUE(transform.ok()) << transform.status();
  absl::StatusOr<size_t> bytes =
      FieldPayloadBytes(FieldSpecs(*fields), *transform, 4, 0);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  // 4 samples: image 16x16x3, mask 16x16x2, view 8x8x3.
  EXPECT_EQ(*bytes, 4u * (16 * 16 * 3 + 16 * 16 * 2 + 8 * 8 * 3));
}

TEST(FieldSpecTest, PayloadOfAVideoIsClipsTimesFrames) {
  absl::StatusOr<std::vector<ParsedField>> fields = ParseFields(
      "v=mp4:video:frames=8:stride=2:clips=3, c=cls:class, t=txt:text");
  ASSERT_TRUE(fields.ok()) << fields.status();
  absl::StatusOr<v1::TransformPipeline> transform = image::ParseTransform(
      "RandomResizedCrop(16)", image::kClientTransformChecks);
  ASSERT_TRUE(transform.ok()) << transform.status();
  absl::StatusOr<size_t> bytes =
      FieldPayloadBytes(FieldSpecs(*fields), *transform, 4, 10);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  // 4 samples of 3 clips of 8 frames of 16x16x3, and 10 bytes of text.
  EXPECT_EQ(*bytes, 4u * (3 * 8 * 16 * 16 * 3 + 10));
}

}  // namespace
}  // namespace stoker::client
