#include "image/video_clip.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/random.h"

namespace stoker::image {

std::vector<int64_t> ClipOffsets(const v1::VideoClip& clip, double video_fps) {
  std::vector<int64_t> offsets(std::max(clip.frames(), 1));
  const int64_t stride = std::max(clip.stride(), 1);
  for (size_t k = 0; k < offsets.size(); ++k) {
    offsets[k] = clip.fps() > 0
                     ? std::llround(static_cast<double>(k) * video_fps /
                                    clip.fps())
                     : static_cast<int64_t>(k) * stride;
  }
  return offsets;
}

absl::StatusOr<std::vector<int64_t>> ClipFrames(const v1::VideoClip& clip,
                                                int64_t video_frames,
                                                double video_fps, int index,
                                                int clips, uint64_t key) {
  if (video_frames <= 0 || !(video_fps > 0)) {
    return absl::OutOfRangeError("video without frames");
  }
  std::vector<int64_t> frames = ClipOffsets(clip, video_fps);
  const int64_t span = frames.back() + 1;
  if (video_frames >= span) {
    int64_t start = 0;
    const int64_t room = video_frames - span;
    if (clip.sampler() == v1::CLIP_SAMPLER_UNIFORM) {
      start = clips > 1 ? room * index / (clips - 1) : room / 2;
    } else {
      common::CounterRng rng(key);
      start = rng.UniformInt(0, room + 1);
    }
    for (int64_t& f : frames) f += start;
    return frames;
  }
  switch (clip.short_video()) {
    case v1::SHORT_VIDEO_SKIP:
      return absl::OutOfRangeError(absl::StrCat(
          "video of ", video_frames, " frames is shorter than a clip of ",
          span, " frames (short video policy: skip)"));
    case v1::SHORT_VIDEO_LOOP:
      for (int64_t& f : frames) f %= video_frames;
      return frames;
    default:
      for (int64_t& f : frames) f = std::min(f, video_frames - 1);
      return frames;
  }
}

}  // namespace stoker::image
