#ifndef STOKER_IMAGE_VIDEO_DECODER_H_
#define STOKER_IMAGE_VIDEO_DECODER_H_

// Decodes the frames a clip needs from one video held in memory, with
// FFmpeg's libraries (libavformat demuxes, libavcodec decodes, libswscale
// converts to RGB). The input is untrusted: the demuxers are limited to
// MP4/MOV, Matroska/WebM and AVI and the decoders to H.264, H.265, VP8,
// VP9, AV1 and MPEG-4 part 2; the header's frame size, frame count,
// duration and stream count are checked against VideoLimits before any
// frame is decoded; every decoder runs on one thread, with FFmpeg's pixel
// limit set; a decode error, a frame FFmpeg marks corrupt or a frame of
// another size than the header's is an error (DataLoss), never a frame of
// concealed garbage.
//
// Frame i is the video's i-th frame in presentation order, found from its
// timestamp: i = round((pts - start) * fps). DecodeFrames seeks to the
// keyframe at or before each wanted frame when that skips decoding (with
// the container's index: MP4 and WebM/Matroska with cues), then decodes
// forward, dropping the frames between, and does not decode at all the
// frames between that no other frame refers to (non-reference B frames:
// FFmpeg's skip_frame, set per packet from its timestamp, so wanted frames
// are unchanged); frames_decoded() counts every frame the decoder produced.
//
// RGB conversion is swscale's (bilinear flags, BT.601 defaults), the same
// call PyAV's frame.to_ndarray(format="rgb24") makes, so frames equal
// PyAV's byte for byte.
//
// One per worker thread; not thread-safe. Programs that decode untrusted
// videos call ConfigureFfmpeg() first (the server does).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "image/jpeg_decoder.h"

namespace stoker::image {

// Checked against the container's header before decoding.
struct VideoLimits {
  // Pixels per frame (default 4096 x 2160).
  int64_t max_frame_pixels = int64_t{4096} * 2160;
  // Frames in the video (default two hours at 30 fps).
  int64_t max_frames = 216000;
  // Seconds (default two hours).
  double max_duration_s = 7200;
  // Streams of any kind in the container.
  int max_streams = 16;
};

// FFmpeg's process-wide settings for untrusted input, from main: its log
// is silenced (hostile videos could flood stderr; every failure reaches
// the caller as a status anyway), and no single allocation of FFmpeg's may
// exceed kMaxFfmpegAllocation (a tiny MP4 header can ask its demuxer for
// gigabytes of sample tables before any limit here is checked; the
// demuxer then fails, a bad sample).
inline constexpr size_t kMaxFfmpegAllocation = size_t{256} << 20;
void ConfigureFfmpeg();

struct VideoInfo {
  int width = 0;
  int height = 0;
  // Frames per second (the stream's average rate).
  double fps = 0;
  // Frames in the video: the container's count, else duration * fps.
  int64_t frames = 0;
  double duration_s = 0;
  // Presentation time of frame 0, seconds.
  double start_s = 0;
  std::string codec;  // FFmpeg's decoder name, e.g. "h264"
};

class VideoDecoder {
 public:
  explicit VideoDecoder(const VideoLimits& limits = VideoLimits());
  ~VideoDecoder();
  VideoDecoder(const VideoDecoder&) = delete;
  VideoDecoder& operator=(const VideoDecoder&) = delete;

  // Opens `bytes` (borrowed: they must not change while DecodeFrames may
  // still be called) and reads its header; closes the previous video. DataLoss: not a video the allowed demuxers read, no video
  // stream, an unsupported codec, no frame rate or length; ResourceExhausted:
  // a frame size, frame count, duration or stream count over the limits.
  absl::StatusOr<VideoInfo> Open(absl::string_view bytes);

  // Called for each wanted frame with its index, its presentation time in
  // seconds (from its timestamp) and its RGB pixels (whole frame, scale 1; the callee may borrow
  // it for the call, e.g. SampleProcessor::ProcessFrame).
  using FrameSink =
      std::function<absl::Status(int64_t index, double time_s, DecodedImage&)>;

  // Decodes the frames `wanted` (ascending, distinct, each in
  // [0, info.frames)) and calls `sink` for each, in order. DataLoss if the
  // stream is corrupt or ends before a wanted frame; the sink's error
  // stops decoding and is returned. FailedPrecondition before Open.
  absl::Status DecodeFrames(absl::Span<const int64_t> wanted,
                            const FrameSink& sink);

  // Frees the demuxer and decoder (Open does it too).
  void Close();

  // Frames the decoder produced since construction.
  int64_t frames_decoded() const { return frames_decoded_; }
  // The RGB frame buffer plus an estimate of the decoder's own frames
  // (references and the frame in flight), for the memory budget.
  int64_t kept_bytes() const;

 private:
  struct State;

  // Decodes until the frame with index >= `target` arrives or the stream
  // ends; seeks first when the index has a keyframe shown at or before
  // `target` that the decoder has not been fed yet.
  absl::Status Advance(int64_t target);
  // The decode loop of Advance, without seeking.
  absl::Status ReceiveUntil(int64_t target);
  // Seeks to the keyframe at or before `ts` (stream time base) and resets
  // the decoder.
  absl::Status Seek(int64_t ts);
  // Counts a frame received or a video packet read against the call's
  // bound; DataLoss past it.
  absl::Status CountWork();

  VideoLimits limits_;
  std::unique_ptr<State> state_;
  VideoInfo info_;
  DecodedImage rgb_;
  int64_t frames_decoded_ = 0;
};

}  // namespace stoker::image

#endif  // STOKER_IMAGE_VIDEO_DECODER_H_
