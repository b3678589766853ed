// image/video_decoder.h on the fuzz target's seed videos (tests/fuzz/
// corpus/video: 4 parameter bytes, then a 32x24 clip of 12 frames at 10 fps
// with a keyframe every 4, made by Debian's ffmpeg in every demuxer and
// codec the decoder allows). Frames are compared with PyAV's in
// tests/python/video_test.py.

#include "image/video_decoder.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace stoker::image {
namespace {

using ::testing::HasSubstr;

std::string Seed(const std::string& name) {
  std::ifstream in(stoker::testing::Runfile("tests/fuzz/corpus/video/" + name),
                   std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str().substr(4);  // the fuzz target's parameter bytes
}

struct Decoded {
  std::vector<int64_t> indices;
  std::vector<double> times;
  std::vector<std::vector<uint8_t>> frames;
};

absl::Status Decode(VideoDecoder& decoder, const std::vector<int64_t>& wanted,
                    Decoded* out) {
  return decoder.DecodeFrames(
      wanted, [out](int64_t index, double time_s, DecodedImage& frame) {
        out->indices.push_back(index);
        out->times.push_back(time_s);
        out->frames.emplace_back(
            frame.pixels.begin(),
            frame.pixels.begin() + size_t{3} * frame.width * frame.height);
        return absl::OkStatus();
      });
}

class VideoDecoderSeedTest : public ::testing::TestWithParam<const char*> {};

TEST_P(VideoDecoderSeedTest, DecodesEveryFrameAndSeeksToTheSameOnes) {
  const std::string bytes = Seed(GetParam());
  VideoDecoder decoder;
  absl::StatusOr<VideoInfo> info = decoder.Open(bytes);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->width, 32);
  EXPECT_EQ(info->height, 24);
  EXPECT_DOUBLE_EQ(info->fps, 10);
  EXPECT_EQ(info->frames, 12);
  std::vector<int64_t> all;
  for (int64_t i = 0; i < info->frames; ++i) all.push_back(i);
  Decoded whole;
  ASSERT_TRUE(Decode(decoder, all, &whole).ok());
  ASSERT_EQ(whole.indices, all);
  EXPECT_EQ(decoder.frames_decoded(), 12);
  for (int64_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(whole.times[i], info->start_s + i / 10.0, 1e-9);
  }
  EXPECT_TRUE(whole.frames[0] != whole.frames[11]);  // the picture moves
  // Frames 9 and 10 alone, after a fresh open: the same pixels.
  ASSERT_TRUE(decoder.Open(bytes).ok());
  Decoded some;
  ASSERT_TRUE(Decode(decoder, {9, 10}, &some).ok());
  ASSERT_EQ(some.indices, (std::vector<int64_t>{9, 10}));
  EXPECT_TRUE(some.frames[0] == whole.frames[9]);
  EXPECT_TRUE(some.frames[1] == whole.frames[10]);
  // Frames 1 and 10 in one pass.
  ASSERT_TRUE(decoder.Open(bytes).ok());
  Decoded apart;
  ASSERT_TRUE(Decode(decoder, {1, 10}, &apart).ok());
  EXPECT_TRUE(apart.frames[0] == whole.frames[1]);
  EXPECT_TRUE(apart.frames[1] == whole.frames[10]);
  EXPECT_GT(decoder.kept_bytes(), 0);
}

INSTANTIATE_TEST_SUITE_P(Seeds, VideoDecoderSeedTest,
                         ::testing::Values("h264_mp4", "h264_faststart_mp4",
                                           "hevc_mkv", "vp9_webm", "vp8_webm",
                                           "av1_mkv", "mpeg4_avi"));

TEST(VideoDecoderTest, SeeksPastFramesItDoesNotNeed) {
  // MP4's index: frame 9 is decoded from the keyframe at 8, not from 0.
  VideoDecoder decoder;
  ASSERT_TRUE(decoder.Open(Seed("h264_mp4")).ok());
  Decoded d;
  ASSERT_TRUE(Decode(decoder, {9}, &d).ok());
  EXPECT_LE(decoder.frames_decoded(), 4);
}

TEST(VideoDecoderTest, LimitsAreCheckedBeforeDecoding) {
  const std::string bytes = Seed("h264_mp4");
  struct Case {
    VideoLimits limits;
    const char* why;
  };
  std::vector<Case> cases(4);
  cases[0].limits.max_frame_pixels = 32 * 24 - 1;
  cases[0].why = "frames of 32x24 = 768 pixels, over the limit of 767";
  cases[1].limits.max_frames = 11;
  cases[1].why = "12 frames, over the limit of 11";
  cases[2].limits.max_duration_s = 1;
  cases[2].why = "s long, over the limit of 1 s";
  cases[3].limits.max_streams = 0;
  cases[3].why = "1 streams, over the limit of 0";
  for (const Case& c : cases) {
    VideoDecoder decoder(c.limits);
    absl::StatusOr<VideoInfo> info = decoder.Open(bytes);
    EXPECT_EQ(info.status().code(), absl::StatusCode::kResourceExhausted)
        << c.why;
    EXPECT_THAT(info.status().message(), HasSubstr(c.why));
    EXPECT_EQ(decoder.frames_decoded(), 0);
  }
}

TEST(VideoDecoderTest, BadInputIsDataLoss) {
  VideoDecoder decoder;
  for (const std::string& bytes :
       {std::string(), std::string("not a video at all"),
        std::string(4096, '\x17'), Seed("h264_mp4").substr(0, 200)}) {
    EXPECT_EQ(decoder.Open(bytes).status().code(),
              absl::StatusCode::kDataLoss);
  }
  // The index at the front, the frames cut away: frames past the cut are
  // missing, never made up.
  const std::string whole = Seed("h264_faststart_mp4");
  const std::string cut = whole.substr(0, whole.size() * 6 / 10);
  ASSERT_TRUE(decoder.Open(cut).ok());
  std::vector<int64_t> all;
  for (int64_t i = 0; i < 12; ++i) all.push_back(i);
  Decoded d;
  const absl::Status s = Decode(decoder, all, &d);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_LT(d.indices.size(), 12u);
}

TEST(VideoDecoderTest, MisuseIsRefused) {
  VideoDecoder decoder;
  Decoded d;
  EXPECT_EQ(Decode(decoder, {0}, &d).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(decoder.Open(Seed("vp9_webm")).ok());
  EXPECT_EQ(Decode(decoder, {3, 3}, &d).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(decoder.Open(Seed("vp9_webm")).ok());
  EXPECT_EQ(Decode(decoder, {12}, &d).code(),
            absl::StatusCode::kInvalidArgument);
  // The sink's error stops decoding and comes back.
  ASSERT_TRUE(decoder.Open(Seed("vp9_webm")).ok());
  const absl::Status s = decoder.DecodeFrames(
      {0, 1, 2}, [](int64_t index, double, DecodedImage&) {
        return index == 1 ? absl::CancelledError("enough")
                          : absl::OkStatus();
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace stoker::image
