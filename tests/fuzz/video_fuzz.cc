// Fuzz target for the video path: demux + decode of image/video_decoder.h
// (FFmpeg's MP4/MOV, Matroska/WebM and AVI demuxers and its H.264, H.265,
// VP8, VP9, AV1 and MPEG-4 decoders on untrusted bytes), the clip's frames
// through SampleProcessor::ProcessFrame.
//
// Input layout: kParamBytes bytes of parameters, then the video.
//   p[0]  frames wanted, 1 + p % 8
//   p[1]  stride between them, 1 + p % 16
//   p[2]  first frame, p * frames / 256 of the video
//   p[3]  output side, 1 + p % 32 (a Resize of the whole frame)
//
// Checked, beyond "no crash, no sanitizer report": Open fails only with
// DataLoss or ResourceExhausted and never returns a video over the limits;
// DecodeFrames fails only with DataLoss; every frame handed to the sink is
// the one asked for, of the header's size, with the buffer to match.
//
// The decoder and processor are kept across inputs, like a server worker's.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "image/ops/transform.h"
#include "image/sample_processor.h"
#include "image/video_decoder.h"
#include "tests/fuzz/fuzz_check.h"

namespace stoker::image {
namespace {

using fuzz::FuzzCheck;

constexpr size_t kParamBytes = 4;

// Small limits keep every input fast (a header can claim anything).
VideoLimits Limits() {
  VideoLimits limits;
  limits.max_frame_pixels = int64_t{1} << 16;
  limits.max_frames = 2000;
  limits.max_duration_s = 120;
  limits.max_streams = 4;
  return limits;
}

}  // namespace
}  // namespace stoker::image

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::image;  // NOLINT: one entry point
  if (size < kParamBytes) return 0;
  static VideoDecoder* decoder = [] {
    ConfigureFfmpeg();
    return new VideoDecoder(Limits());
  }();
  static SampleProcessor* processor = new SampleProcessor();
  const uint8_t* p = data;
  const absl::string_view bytes(reinterpret_cast<const char*>(data) +
                                    kParamBytes,
                                size - kParamBytes);
  const VideoLimits limits = Limits();
  absl::StatusOr<VideoInfo> info = decoder->Open(bytes);
  if (!info.ok()) {
    FuzzCheck(absl::IsDataLoss(info.status()) ||
                  absl::IsResourceExhausted(info.status()),
              absl::StrCat("Open failed with ", info.status().ToString()));
    return 0;
  }
  FuzzCheck(info->width > 0 && info->height > 0 &&
                int64_t{info->width} * info->height <=
                    limits.max_frame_pixels,
            "Open returned a frame size over the limit");
  FuzzCheck(info->frames > 0 && info->frames <= limits.max_frames,
            "Open returned a frame count over the limit");
  FuzzCheck(info->fps > 0 && info->fps <= 1000, "Open returned a bad rate");

  const int frames = 1 + p[0] % 8;
  const int64_t stride = 1 + p[1] % 16;
  const int64_t first = p[2] * info->frames / 256;
  std::vector<int64_t> wanted;
  for (int k = 0; k < frames && first + k * stride < info->frames; ++k) {
    wanted.push_back(first + k * stride);
  }
  const int side = 1 + p[3] % 32;
  static absl::StatusOr<Transform>* resize = nullptr;
  static int resize_side = 0;
  if (resize == nullptr || resize_side != side) {
    delete resize;
    absl::StatusOr<stoker::v1::TransformPipeline> pipeline = ParseTransform(
        absl::StrCat("Resize((", side, ",", side, "))"), kClientTransformChecks);
    FuzzCheck(pipeline.ok(), "the fuzzer's own transform does not parse");
    resize = new absl::StatusOr<Transform>(Transform::Create(*pipeline));
    FuzzCheck(resize->ok(), "the fuzzer's own transform is refused");
    resize_side = side;
  }
  const SamplePlan plan = (*resize)->Plan(info->width, info->height, 1);
  std::vector<uint8_t> out(size_t{3} * side * side);
  size_t next = 0;
  const absl::Status status = decoder->DecodeFrames(
      wanted, [&](int64_t index, double, DecodedImage& frame) -> absl::Status {
        FuzzCheck(next < wanted.size() && index == wanted[next],
                  "DecodeFrames handed over a frame not asked for");
        ++next;
        FuzzCheck(frame.width == info->width && frame.height == info->height &&
                      frame.stride >= 3 * frame.width &&
                      frame.pixels.size() >=
                          static_cast<size_t>(frame.stride) * frame.height,
                  "a frame of another size than the header's");
        return processor->ProcessFrame(frame, plan, out.data());
      });
  if (!status.ok()) {
    FuzzCheck(absl::IsDataLoss(status),
              absl::StrCat("DecodeFrames failed with ", status.ToString()));
  } else {
    FuzzCheck(next == wanted.size(), "DecodeFrames skipped a wanted frame");
  }
  decoder->Close();
  return 0;
}
