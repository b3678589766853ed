#ifndef STOKER_IMAGE_VIDEO_CLIP_H_
#define STOKER_IMAGE_VIDEO_CLIP_H_

// Which source frames form a clip (pure; proto VideoClip says the rules):
// `frames` frames `stride` apart, or 1/fps seconds apart, starting where
// the sampler puts the clip; a video shorter than the clip's span follows
// the short-video policy.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/stoker.pb.h"

namespace stoker::image {

// Offsets of a clip's frames from its first frame (ascending, starting at
// 0); the span is the last plus one.
std::vector<int64_t> ClipOffsets(const v1::VideoClip& clip, double video_fps);

// The source frame of each of the clip's frames, for clip `index` of
// `clips` of a video of `video_frames` frames at `video_fps`. `key` draws
// the random sampler's start (CounterRng). OutOfRange when the video is
// shorter than the span under SHORT_VIDEO_SKIP, or has no frames. Callers
// keep fps >= 0.01 and video_fps <= 1000 (offsets stay far from overflow).
absl::StatusOr<std::vector<int64_t>> ClipFrames(const v1::VideoClip& clip,
                                                int64_t video_frames,
                                                double video_fps, int index,
                                                int clips, uint64_t key);

}  // namespace stoker::image

#endif  // STOKER_IMAGE_VIDEO_CLIP_H_
