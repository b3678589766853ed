#include "image/video_clip.h"

#include <cstdint>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::image {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::VideoClip Clip(int frames, int stride, double fps = 0) {
  v1::VideoClip clip;
  clip.set_frames(frames);
  clip.set_stride(stride);
  clip.set_fps(fps);
  return clip;
}

TEST(ClipOffsetsTest, StrideOrFrameRate) {
  EXPECT_THAT(ClipOffsets(Clip(4, 3), 25), ElementsAre(0, 3, 6, 9));
  EXPECT_THAT(ClipOffsets(Clip(3, 0), 25), ElementsAre(0, 1, 2));
  // 30 fps sampled at 12 fps: every 2.5 frames, rounded half away from 0.
  EXPECT_THAT(ClipOffsets(Clip(5, 1, 12), 30), ElementsAre(0, 3, 5, 8, 10));
  // Upsampling repeats frames (0.5 and 1.5 round up).
  EXPECT_THAT(ClipOffsets(Clip(4, 1, 50), 25), ElementsAre(0, 1, 1, 2));
}

TEST(ClipFramesTest, RandomStartsCoverTheRoomAndFollowTheKey) {
  const v1::VideoClip clip = Clip(4, 2);  // span 7
  std::set<int64_t> starts;
  for (uint64_t key = 0; key < 400; ++key) {
    absl::StatusOr<std::vector<int64_t>> f = ClipFrames(clip, 10, 25, 0, 1, key);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_EQ(f->size(), 4u);
    EXPECT_EQ((*f)[3] - (*f)[0], 6);
    starts.insert((*f)[0]);
    EXPECT_EQ(*f, *ClipFrames(clip, 10, 25, 0, 1, key));
  }
  EXPECT_EQ(starts, (std::set<int64_t>{0, 1, 2, 3}));
}

TEST(ClipFramesTest, UniformSpreadsClipsAndCentresOne) {
  v1::VideoClip clip = Clip(2, 5);  // span 6
  clip.set_sampler(v1::CLIP_SAMPLER_UNIFORM);
  EXPECT_THAT(*ClipFrames(clip, 30, 25, 0, 1, 7), ElementsAre(12, 17));
  EXPECT_THAT(*ClipFrames(clip, 30, 25, 0, 3, 7), ElementsAre(0, 5));
  EXPECT_THAT(*ClipFrames(clip, 30, 25, 1, 3, 7), ElementsAre(12, 17));
  EXPECT_THAT(*ClipFrames(clip, 30, 25, 2, 3, 7), ElementsAre(24, 29));
  // Exactly one span: every sampler starts at 0.
  EXPECT_THAT(*ClipFrames(clip, 6, 25, 1, 3, 7), ElementsAre(0, 5));
}

TEST(ClipFramesTest, ShortVideosPadLoopOrSkip) {
  v1::VideoClip clip = Clip(5, 2);  // span 9, video of 4 frames
  EXPECT_THAT(*ClipFrames(clip, 4, 25, 0, 1, 1), ElementsAre(0, 2, 3, 3, 3));
  clip.set_short_video(v1::SHORT_VIDEO_LOOP);
  EXPECT_THAT(*ClipFrames(clip, 4, 25, 0, 1, 1), ElementsAre(0, 2, 0, 2, 0));
  clip.set_short_video(v1::SHORT_VIDEO_SKIP);
  absl::StatusOr<std::vector<int64_t>> skipped = ClipFrames(clip, 4, 25, 0, 1, 1);
  EXPECT_EQ(skipped.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(skipped.status().message(),
              HasSubstr("video of 4 frames is shorter than a clip of 9"));
}

}  // namespace
}  // namespace stoker::image
