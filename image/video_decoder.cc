#include "image/video_decoder.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/dict.h>
#include <libavutil/error.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libavutil/mem.h>
#include <libswscale/swscale.h>
}

namespace stoker::image {
namespace {

// The demuxers and decoders untrusted bytes may reach.
constexpr char kDemuxers[] = "mov,mp4,matroska,webm,avi";
constexpr AVCodecID kCodecs[] = {AV_CODEC_ID_H264, AV_CODEC_ID_HEVC,
                                 AV_CODEC_ID_VP8,  AV_CODEC_ID_VP9,
                                 AV_CODEC_ID_AV1,  AV_CODEC_ID_MPEG4};
constexpr int kIoBufferBytes = 32 << 10;

std::string AvError(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof(text));
  return text;
}

absl::Status Corrupt(absl::string_view what, int code) {
  return absl::DataLossError(
      absl::StrCat("video: ", what, " (", AvError(code), ")"));
}

double Seconds(int64_t ts, AVRational base) {
  return static_cast<double>(ts) * av_q2d(base);
}

// Matroska has no per-stream duration; its muxers (FFmpeg's, mkvmerge)
// write a DURATION tag per track, "HH:MM:SS.nnnnnnnnn". 0 if absent.
double DurationTag(const AVStream* stream) {
  const AVDictionaryEntry* tag =
      av_dict_get(stream->metadata, "DURATION", nullptr, 0);
  if (tag == nullptr) return 0;
  int hours = 0, minutes = 0;
  double seconds = 0;
  if (std::sscanf(tag->value, "%d:%d:%lf", &hours, &minutes, &seconds) != 3 ||
      hours < 0 || minutes < 0 || !(seconds >= 0)) {
    return 0;
  }
  return hours * 3600.0 + minutes * 60.0 + seconds;
}

// Packets read at open to find frame 0's time when the container does
// not say it (Matroska, AVI).
constexpr int kStartProbePackets = 32;

}  // namespace

struct VideoDecoder::State {
  absl::string_view bytes;
  int64_t pos = 0;
  AVIOContext* io = nullptr;
  AVFormatContext* format = nullptr;
  AVCodecContext* codec = nullptr;
  AVPacket* packet = nullptr;
  AVFrame* frame = nullptr;
  SwsContext* sws = nullptr;
  AVStream* stream = nullptr;
  AVRational rate = {0, 1};  // frames per second
  int64_t start_ts = 0;      // frame 0's timestamp
  // The decoder holds a frame not yet consumed (frame, frame_index).
  bool have_frame = false;
  int64_t frame_index = -1;
  double frame_time_s = 0;  // its presentation time
  // Index of the frame received before the current one (-1: none since
  // open or seek), for the message about a missing frame.
  int64_t previous_index = -1;
  // The frames DecodeFrames is after (ascending): a packet shown at none
  // of them may skip decoding when no other frame refers to it.
  absl::Span<const int64_t> wanted;
  // Decode timestamp of the last packet sent to the decoder (INT64_MIN:
  // none since open or seek), in the stream's time base.
  int64_t fed_dts = INT64_MIN;
  // Sent the end of stream to the decoder / got its last frame.
  bool draining = false;
  bool ended = false;
  bool decoded_any = false;
  // Packets were read to find the start time (rewound before decoding).
  bool read_at_open = false;
  // Frames received plus video packets read in this DecodeFrames call, and
  // the most that may take; whether it fell back to decoding from frame 0.
  int64_t work = 0;
  int64_t max_work = 0;
  bool fell_back = false;

  ~State() {
    sws_freeContext(sws);
    av_frame_free(&frame);
    av_packet_free(&packet);
    avcodec_free_context(&codec);
    avformat_close_input(&format);
    if (io != nullptr) {
      av_freep(&io->buffer);
      avio_context_free(&io);
    }
  }

  static int Read(void* opaque, uint8_t* buf, int size) {
    auto* s = static_cast<State*>(opaque);
    const int64_t left = static_cast<int64_t>(s->bytes.size()) - s->pos;
    if (left <= 0) return AVERROR_EOF;
    const int n = static_cast<int>(std::min<int64_t>(left, size));
    std::memcpy(buf, s->bytes.data() + s->pos, n);
    s->pos += n;
    return n;
  }

  static int64_t Seek(void* opaque, int64_t offset, int whence) {
    auto* s = static_cast<State*>(opaque);
    const int64_t size = static_cast<int64_t>(s->bytes.size());
    switch (whence & ~AVSEEK_FORCE) {
      case AVSEEK_SIZE:
        return size;
      case SEEK_SET:
        break;
      case SEEK_CUR:
        offset += s->pos;
        break;
      case SEEK_END:
        offset += size;
        break;
      default:
        return AVERROR(EINVAL);
    }
    if (offset < 0 || offset > size) return AVERROR(EINVAL);
    s->pos = offset;
    return offset;
  }
};

void ConfigureFfmpeg() {
  av_log_set_level(AV_LOG_QUIET);
  av_max_alloc(kMaxFfmpegAllocation);
}

VideoDecoder::VideoDecoder(const VideoLimits& limits) : limits_(limits) {}

VideoDecoder::~VideoDecoder() = default;

void VideoDecoder::Close() { state_.reset(); }

int64_t VideoDecoder::kept_bytes() const {
  int64_t bytes = static_cast<int64_t>(rgb_.pixels.capacity());
  if (state_ != nullptr && state_->codec != nullptr) {
    const AVCodecContext* codec = state_->codec;
    int64_t frame = int64_t{3} * info_.width * info_.height / 2;  // 4:2:0
    if (codec->pix_fmt != AV_PIX_FMT_NONE) {
      const int size = av_image_get_buffer_size(codec->pix_fmt, info_.width,
                                                info_.height, 1);
      if (size > 0) frame = size;
    }
    // The references each codec may keep (H.264 says how many), the
    // reordered frames, the one in flight and the one handed out.
    int refs = std::max(codec->refs, 1);
    switch (codec->codec_id) {
      case AV_CODEC_ID_HEVC:
        refs = std::max(refs, 16);
        break;
      case AV_CODEC_ID_VP8:
      case AV_CODEC_ID_VP9:
      case AV_CODEC_ID_AV1:
        refs = std::max(refs, 8);
        break;
      default:
        break;
    }
    bytes += frame * (refs + codec->has_b_frames + 2);
    bytes += static_cast<int64_t>(
                 avformat_index_get_entries_count(state_->stream)) *
             static_cast<int64_t>(sizeof(AVIndexEntry));
  }
  return bytes;
}

absl::StatusOr<VideoInfo> VideoDecoder::Open(absl::string_view bytes) {
  // The previous video is closed; a failed open leaves none.
  state_.reset();
  auto fresh = std::make_unique<State>();
  State& s = *fresh;
  s.bytes = bytes;
  auto* buffer = static_cast<uint8_t*>(av_malloc(kIoBufferBytes));
  if (buffer == nullptr) return absl::ResourceExhaustedError("video: no memory");
  s.io = avio_alloc_context(buffer, kIoBufferBytes, 0, &s, &State::Read,
                            nullptr, &State::Seek);
  if (s.io == nullptr) {
    av_free(buffer);
    return absl::ResourceExhaustedError("video: no memory");
  }
  s.format = avformat_alloc_context();
  if (s.format == nullptr) return absl::ResourceExhaustedError("video: no memory");
  s.format->pb = s.io;
  s.format->flags |= AVFMT_FLAG_CUSTOM_IO;
  s.format->format_whitelist = av_strdup(kDemuxers);
  s.format->codec_whitelist = av_strdup("h264,hevc,vp8,vp9,av1,libdav1d,mpeg4");
  if (int r = avformat_open_input(&s.format, nullptr, nullptr, nullptr);
      r < 0) {
    // avformat_open_input frees the context on failure.
    s.format = nullptr;
    return Corrupt("not a video the MP4, Matroska/WebM or AVI demuxers read",
                   r);
  }
  if (static_cast<int>(s.format->nb_streams) > limits_.max_streams) {
    return absl::ResourceExhaustedError(
        absl::StrCat("video: ", s.format->nb_streams, " streams, over the "
                     "limit of ", limits_.max_streams));
  }
  const int index =
      av_find_best_stream(s.format, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (index < 0) return Corrupt("no video stream", index);
  s.stream = s.format->streams[index];
  AVCodecParameters* par = s.stream->codecpar;
  s.packet = av_packet_alloc();
  s.frame = av_frame_alloc();
  if (s.packet == nullptr || s.frame == nullptr) {
    return absl::ResourceExhaustedError("video: no memory");
  }
  if (std::find(std::begin(kCodecs), std::end(kCodecs), par->codec_id) ==
      std::end(kCodecs)) {
    return absl::DataLossError(absl::StrCat(
        "video: codec '", avcodec_get_name(par->codec_id),
        "' is not one of H.264, H.265, VP8, VP9, AV1, MPEG-4"));
  }
  const auto check_size = [&](int64_t w, int64_t h) -> absl::Status {
    if (w > 0 && h > 0 && w * h > limits_.max_frame_pixels) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "video: frames of ", w, "x", h, " = ", w * h,
          " pixels, over the limit of ", limits_.max_frame_pixels));
    }
    return absl::OkStatus();
  };
  if (absl::Status st = check_size(par->width, par->height); !st.ok()) {
    return st;
  }
  AVRational rate = s.stream->avg_frame_rate;
  if (rate.num <= 0 || rate.den <= 0) rate = s.stream->r_frame_rate;
  const bool need_info = par->width <= 0 || par->height <= 0 ||
                         rate.num <= 0 || rate.den <= 0;
  if (need_info) {
    // Reads (and decodes) the first packets; the decoders obey the pixel
    // limit and one thread.
    std::vector<AVDictionary*> options(s.format->nb_streams, nullptr);
    for (AVDictionary*& d : options) {
      av_dict_set_int(&d, "max_pixels", limits_.max_frame_pixels, 0);
      av_dict_set(&d, "threads", "1", 0);
    }
    const int r = avformat_find_stream_info(s.format, options.data());
    for (AVDictionary*& d : options) av_dict_free(&d);
    if (r < 0) return Corrupt("unreadable stream header", r);
    rate = s.stream->avg_frame_rate;
    if (rate.num <= 0 || rate.den <= 0) rate = s.stream->r_frame_rate;
    if (absl::Status st = check_size(par->width, par->height); !st.ok()) {
      return st;
    }
  }
  if (par->width <= 0 || par->height <= 0) {
    return absl::DataLossError("video: no frame size in the header");
  }
  if (rate.num <= 0 || rate.den <= 0 || av_q2d(rate) > 1000) {
    return absl::DataLossError("video: no usable frame rate in the header");
  }
  VideoInfo info;
  info.width = par->width;
  info.height = par->height;
  info.fps = av_q2d(rate);
  // Frame 0's time: the stream's start, else (Matroska, AVI: known only
  // once packets are read) the smallest timestamp of its first packets,
  // read without decoding.
  s.start_ts = s.stream->start_time;
  if (s.start_ts == AV_NOPTS_VALUE) {
    s.read_at_open = true;
    for (int i = 0; i < kStartProbePackets; ++i) {
      if (av_read_frame(s.format, s.packet) < 0) break;
      const int64_t pts = s.packet->pts;
      if (s.packet->stream_index == s.stream->index && pts != AV_NOPTS_VALUE) {
        s.start_ts = s.start_ts == AV_NOPTS_VALUE ? pts
                                                  : std::min(s.start_ts, pts);
      }
      av_packet_unref(s.packet);
    }
    if (s.start_ts == AV_NOPTS_VALUE) s.start_ts = 0;
  }
  info.start_s = Seconds(s.start_ts, s.stream->time_base);
  // The video's length: the stream's duration (MP4), else its end time
  // from the track's DURATION tag (Matroska) or the file's end, less its
  // start.
  if (s.stream->duration != AV_NOPTS_VALUE && s.stream->duration > 0) {
    info.duration_s = Seconds(s.stream->duration, s.stream->time_base);
  } else if (const double end = DurationTag(s.stream); end > 0) {
    info.duration_s = end - info.start_s;
  } else if (s.format->duration != AV_NOPTS_VALUE && s.format->duration > 0) {
    // The longest stream's: another stream may outlast the video.
    double end = static_cast<double>(s.format->duration) / AV_TIME_BASE;
    if (s.format->start_time != AV_NOPTS_VALUE) {
      end += static_cast<double>(s.format->start_time) / AV_TIME_BASE;
    }
    info.duration_s = end - info.start_s;
  }
  if (!(info.duration_s <= limits_.max_duration_s)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("video: ", info.duration_s, " s long, over the limit of ",
                     limits_.max_duration_s, " s"));
  }
  // The container's count may include samples an MP4 edit list drops; an
  // edit list may also end in part of a frame, which is not shown.
  const int64_t by_length =
      info.duration_s > 0
          ? static_cast<int64_t>(std::floor(info.duration_s * info.fps + 1e-3))
          : 0;
  info.frames = s.stream->nb_frames > 0
                    ? (by_length > 0 ? std::min(s.stream->nb_frames, by_length)
                                     : s.stream->nb_frames)
                    : by_length;
  if (info.frames > limits_.max_frames) {
    return absl::ResourceExhaustedError(
        absl::StrCat("video: ", info.frames, " frames, over the limit of ",
                     limits_.max_frames));
  }
  if (info.frames <= 0) {
    return absl::DataLossError("video: no frame count or duration");
  }

  const AVCodec* decoder = avcodec_find_decoder(par->codec_id);
  if (decoder == nullptr) {
    return absl::DataLossError(absl::StrCat(
        "video: no decoder for '", avcodec_get_name(par->codec_id), "'"));
  }
  info.codec = decoder->name;
  s.codec = avcodec_alloc_context3(decoder);
  if (s.codec == nullptr) return absl::ResourceExhaustedError("video: no memory");
  if (int r = avcodec_parameters_to_context(s.codec, par); r < 0) {
    return Corrupt("bad codec parameters", r);
  }
  s.codec->thread_count = 1;
  s.codec->max_pixels = limits_.max_frame_pixels;
  // A damaged bitstream is an error rather than concealed.
  s.codec->err_recognition |= AV_EF_EXPLODE;
  s.codec->pkt_timebase = s.stream->time_base;
  if (int r = avcodec_open2(s.codec, decoder, nullptr); r < 0) {
    return Corrupt("the decoder refused the stream", r);
  }
  if (s.read_at_open || avformat_index_get_entries_count(s.stream) == 0) {
    // Back to frame 0 after the packets read above; Matroska also reads
    // its index (cues) at its first seek, so later clips can skip ahead.
    if (int r = av_seek_frame(s.format, s.stream->index, s.start_ts,
                              AVSEEK_FLAG_BACKWARD);
        r < 0 && s.read_at_open) {
      return Corrupt("seek to the first frame failed", r);
    }
  }
  s.rate = rate;
  state_ = std::move(fresh);
  info_ = info;
  return info;
}

absl::Status VideoDecoder::Seek(int64_t ts) {
  State& s = *state_;
  if (int r = av_seek_frame(s.format, s.stream->index, ts,
                            AVSEEK_FLAG_BACKWARD);
      r < 0) {
    return Corrupt("seek failed", r);
  }
  avcodec_flush_buffers(s.codec);
  s.have_frame = false;
  s.draining = false;
  s.ended = false;
  s.frame_index = -1;
  s.previous_index = -1;
  s.fed_dts = INT64_MIN;
  return absl::OkStatus();
}

absl::Status VideoDecoder::Advance(int64_t target) {
  State& s = *state_;
  const AVRational base = s.stream->time_base;
  // Seek when the index has a keyframe shown at or before the target that
  // the decoder has not been fed yet. Index times are decode times (MP4)
  // or presentation times (Matroska, AVI); a frame is shown at most the
  // reorder delay (has_b_frames frames) after it is decoded, so a keyframe
  // indexed that much before the target is shown at or before it. The
  // seek itself takes the target's presentation time (what the demuxers'
  // seeks take) and lands on the last keyframe shown at or before it.
  bool sought = false;
  if (avformat_index_get_entries_count(s.stream) > 0) {
    const int delay =
        std::max(s.codec->has_b_frames, s.stream->codecpar->video_delay);
    const int64_t target_ts =
        s.start_ts + av_rescale_q(target, av_inv_q(s.rate), base);
    const int64_t early_ts =
        s.start_ts + av_rescale_q(target - delay, av_inv_q(s.rate), base);
    const AVIndexEntry* key = avformat_index_get_entry_from_timestamp(
        s.stream, early_ts, AVSEEK_FLAG_BACKWARD);
    const AVIndexEntry* first = avformat_index_get_entry(s.stream, 0);
    const bool at_start = s.fed_dts == INT64_MIN && !s.decoded_any;
    if (key != nullptr && key->timestamp > s.fed_dts &&
        !(at_start && key == first)) {
      if (absl::Status st = Seek(target_ts); !st.ok()) return st;
      sought = true;
    }
  }
  for (int attempt = 0;; ++attempt) {
    if (absl::Status st = ReceiveUntil(target); !st.ok()) return st;
    // A seek that went past the target (an index that lied): decode from
    // the start instead.
    if (!sought || !s.have_frame || s.frame_index <= target || attempt > 0 ||
        s.fell_back) {
      return absl::OkStatus();
    }
    s.fell_back = true;
    if (absl::Status st = Seek(s.start_ts); !st.ok()) return st;
  }
}

absl::Status VideoDecoder::CountWork() {
  State& s = *state_;
  if (++s.work > s.max_work) {
    return absl::DataLossError(absl::StrCat(
        "video: the stream holds more than the ", info_.frames,
        " frames its header says"));
  }
  return absl::OkStatus();
}

absl::Status VideoDecoder::ReceiveUntil(int64_t target) {
  State& s = *state_;
  while (!s.ended && (!s.have_frame || s.frame_index < target)) {
    s.have_frame = false;
    const int r = avcodec_receive_frame(s.codec, s.frame);
    if (r == 0) {
      if (absl::Status st = CountWork(); !st.ok()) return st;
      ++frames_decoded_;
      s.decoded_any = true;
      if (s.frame->decode_error_flags != 0 ||
          (s.frame->flags & AV_FRAME_FLAG_CORRUPT) != 0) {
        return absl::DataLossError("video: a corrupt frame");
      }
      if (s.frame->width != info_.width || s.frame->height != info_.height) {
        return absl::DataLossError(absl::StrCat(
            "video: a frame of ", s.frame->width, "x", s.frame->height,
            " in a ", info_.width, "x", info_.height, " stream"));
      }
      int64_t ts = s.frame->best_effort_timestamp;
      if (ts == AV_NOPTS_VALUE) ts = s.frame->pts;
      if (ts == AV_NOPTS_VALUE) {
        return absl::DataLossError("video: a frame without a timestamp");
      }
      s.previous_index = s.frame_index;
      s.frame_time_s = Seconds(ts, s.stream->time_base);
      s.frame_index =
          std::llround((s.frame_time_s - info_.start_s) * info_.fps);
      s.have_frame = true;
      continue;
    }
    if (r == AVERROR_EOF) {
      s.ended = true;
      break;
    }
    if (r != AVERROR(EAGAIN)) return Corrupt("the stream does not decode", r);
    if (s.draining) return Corrupt("the decoder stalled", r);
    const int read = av_read_frame(s.format, s.packet);
    if (read == AVERROR_EOF) {
      s.draining = true;
      if (int e = avcodec_send_packet(s.codec, nullptr); e < 0) {
        return Corrupt("the stream does not decode", e);
      }
      continue;
    }
    if (read < 0) return Corrupt("the container does not read", read);
    if (s.packet->stream_index == s.stream->index) {
      if (absl::Status st = CountWork(); !st.ok()) {
        av_packet_unref(s.packet);
        return st;
      }
      const int64_t dts = s.packet->dts != AV_NOPTS_VALUE ? s.packet->dts
                                                          : s.packet->pts;
      if (dts != AV_NOPTS_VALUE) s.fed_dts = std::max(s.fed_dts, dts);
      // A frame nobody wants and no frame refers to (a non-reference B
      // frame) is not decoded: the decoder reads the flag per packet (one
      // thread), and the frames it does decode are unchanged.
      bool shown_wanted = true;
      if (s.packet->pts != AV_NOPTS_VALUE) {
        const int64_t index = std::llround(
            (Seconds(s.packet->pts, s.stream->time_base) - info_.start_s) *
            info_.fps);
        shown_wanted = std::binary_search(s.wanted.begin(), s.wanted.end(),
                                          index);
      }
      s.codec->skip_frame = shown_wanted ? AVDISCARD_DEFAULT : AVDISCARD_NONREF;
      const int e = avcodec_send_packet(s.codec, s.packet);
      av_packet_unref(s.packet);
      // EAGAIN too: the decoder had asked for input.
      if (e < 0) return Corrupt("the stream does not decode", e);
    } else {
      av_packet_unref(s.packet);
    }
  }
  return absl::OkStatus();
}

absl::Status VideoDecoder::DecodeFrames(absl::Span<const int64_t> wanted,
                                        const FrameSink& sink) {
  if (state_ == nullptr || state_->codec == nullptr) {
    return absl::FailedPreconditionError("video: DecodeFrames before Open");
  }
  State& s = *state_;
  s.wanted = wanted;
  absl::Cleanup forget = [&s] { s.wanted = {}; };
  // Each frame at most twice (one fall-back decode from frame 0) plus the
  // reorder delay: a stream with more frames than its header says, or
  // timestamps that never reach the target, cannot take unbounded work.
  s.work = 0;
  s.max_work = 6 * (info_.frames + 64);
  s.fell_back = false;
  for (size_t k = 0; k < wanted.size(); ++k) {
    const int64_t target = wanted[k];
    if (target < 0 || target >= info_.frames ||
        (k > 0 && target <= wanted[k - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "video: wanted frame ", target, " is out of order or outside [0, ",
          info_.frames, ")"));
    }
    if (absl::Status st = Advance(target); !st.ok()) return st;
    if (!s.have_frame) {
      return absl::DataLossError(absl::StrCat(
          "video: the stream ends before frame ", target, " (the header says ",
          info_.frames, " frames; ", frames_decoded_, " decoded)"));
    }
    if (s.frame_index != target) {
      return absl::DataLossError(absl::StrCat(
          "video: frame ", target, " is missing (the stream ",
          s.previous_index < 0
              ? absl::StrCat("starts at frame ", s.frame_index)
              : absl::StrCat("goes from frame ", s.previous_index, " to ",
                             s.frame_index),
          ")"));
    }
    // RGB, tightly packed.
    rgb_.width = rgb_.full_width = info_.width;
    rgb_.height = rgb_.full_height = info_.height;
    rgb_.stride = 3 * info_.width;
    rgb_.scale_denom = 1;
    rgb_.src_x0 = rgb_.src_y0 = 0;
    rgb_.scale_x = rgb_.scale_y = 1;
    rgb_.pixels.resize(static_cast<size_t>(rgb_.stride) * info_.height);
    s.sws = sws_getCachedContext(
        s.sws, info_.width, info_.height,
        static_cast<AVPixelFormat>(s.frame->format), info_.width,
        info_.height, AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr,
        nullptr);
    if (s.sws == nullptr) {
      return absl::DataLossError(absl::StrCat(
          "video: no conversion from pixel format ",
          av_get_pix_fmt_name(static_cast<AVPixelFormat>(s.frame->format))));
    }
    uint8_t* dst[4] = {rgb_.pixels.data(), nullptr, nullptr, nullptr};
    int dst_stride[4] = {rgb_.stride, 0, 0, 0};
    sws_scale(s.sws, s.frame->data, s.frame->linesize, 0, info_.height, dst,
              dst_stride);
    if (absl::Status st = sink(target, s.frame_time_s, rgb_); !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

}  // namespace stoker::image
