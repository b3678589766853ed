#include "server/sample_processor.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace stoker::server {
namespace {

constexpr double kBoxTolerance = 1e-6;
constexpr int kMaxOutputSide = 1 << 16;
// Larger than any decodable image; keeps region arithmetic in int range.
constexpr double kMaxCoordinate = 1 << 30;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool LooksLikeJpeg(absl::string_view bytes) {
  return bytes.size() >= 3 && static_cast<uint8_t>(bytes[0]) == 0xFF &&
         static_cast<uint8_t>(bytes[1]) == 0xD8 &&
         static_cast<uint8_t>(bytes[2]) == 0xFF;
}

// PNG signature, then the IHDR chunk: length, "IHDR", width, height (BE).
bool ReadPngSize(absl::string_view bytes, ImageInfo* info) {
  static constexpr char kSignature[] = "\x89PNG\r\n\x1a\n";
  if (bytes.size() < 24 || std::memcmp(bytes.data(), kSignature, 8) != 0 ||
      std::memcmp(bytes.data() + 12, "IHDR", 4) != 0) {
    return false;
  }
  auto be32 = [&bytes](int at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(bytes[at + i]);
    return v;
  };
  const uint32_t w = be32(16), h = be32(20);
  if (w == 0 || h == 0 || w > INT_MAX || h > INT_MAX) return false;
  info->width = static_cast<int>(w);
  info->height = static_cast<int>(h);
  return true;
}

absl::Status CheckGeometryShape(const common::SampleGeometry& g) {
  const common::Box& b = g.source;
  if (g.out_width < 1 || g.out_height < 1 || g.out_width > kMaxOutputSide ||
      g.out_height > kMaxOutputSide) {
    return absl::InvalidArgumentError(
        absl::StrCat("output size ", g.out_width, "x", g.out_height,
                     " is outside [1, ", kMaxOutputSide, "]"));
  }
  if (!std::isfinite(b.x0) || !std::isfinite(b.y0) || !std::isfinite(b.x1) ||
      !std::isfinite(b.y1) || !(b.x0 < b.x1) || !(b.y0 < b.y1) ||
      b.x0 < -kBoxTolerance || b.y0 < -kBoxTolerance ||
      b.x1 > kMaxCoordinate || b.y1 > kMaxCoordinate) {
    return absl::InvalidArgumentError(absl::StrCat(
        "source box [", b.x0, ", ", b.x1, ") x [", b.y0, ", ", b.y1,
        ") is empty, negative, not finite or absurdly large"));
  }
  return absl::OkStatus();
}

absl::Status CheckBoxInside(const common::Box& b, int width, int height) {
  if (b.x1 > width + kBoxTolerance || b.y1 > height + kBoxTolerance ||
      b.x0 >= width || b.y0 >= height) {
    return absl::InvalidArgumentError(
        absl::StrCat("source box [", b.x0, ", ", b.x1, ") x [", b.y0, ", ",
                     b.y1, ") exceeds the ", width, "x", height, " image"));
  }
  return absl::OkStatus();
}

// Largest DCT downscale that keeps the scaled box >= the output.
int ChooseScaleDenom(const common::SampleGeometry& g) {
  for (int denom : {8, 4, 2}) {
    if (g.source.width() / denom >= g.out_width &&
        g.source.height() / denom >= g.out_height) {
      return denom;
    }
  }
  return 1;
}

// Source pixels [lo, hi) (a multiple of denom, unclipped) whose scaled
// pixels cover every pixel the resampler's windows can touch along one axis:
// windows reach at most `support` scaled pixels (plus Pillow's +0.5
// rounding) beyond the box; one more pixel of slack each side.
void AxisRegion(double b0, double b1, int out_size, int denom, int* lo,
                int* hi) {
  const double s0 = b0 / denom;
  const double s1 = b1 / denom;
  const double support = std::max((s1 - s0) / out_size, 1.0);
  const int scaled_lo = static_cast<int>(std::floor(s0 - support)) - 1;
  const int scaled_hi = static_cast<int>(std::ceil(s1 + support + 0.5)) + 1;
  *lo = std::max(scaled_lo, 0) * denom;
  *hi = scaled_hi * denom;
}

}  // namespace

SampleProcessor::SampleProcessor(const SampleProcessorOptions& options)
    : options_(options) {}

absl::StatusOr<ImageInfo> SampleProcessor::ReadInfo(absl::string_view bytes,
                                                    bool is_jpeg) {
  if (LooksLikeJpeg(bytes)) return jpeg_.ReadInfo(bytes);
  ImageInfo info;
  if (ReadPngSize(bytes, &info)) return info;
  const absl::Status status = DecodeWithOpenCV(bytes, &decoded_);
  if (!status.ok()) {
    if (is_jpeg && absl::IsDataLoss(status)) {
      return absl::DataLossError(
          absl::StrCat("not a JPEG image (", status.message(), ")"));
    }
    return status;
  }
  return ImageInfo{decoded_.width, decoded_.height};
}

absl::Status SampleProcessor::Decode(absl::string_view bytes, bool is_jpeg,
                                     const common::SampleGeometry& geometry) {
  if (!LooksLikeJpeg(bytes)) {
    absl::Status status = DecodeWithOpenCV(bytes, &decoded_);
    if (!status.ok() && is_jpeg && absl::IsDataLoss(status)) {
      return absl::DataLossError(
          absl::StrCat("not a JPEG image (", status.message(), ")"));
    }
    return status;
  }
  const int denom = options_.dct_scaling ? ChooseScaleDenom(geometry) : 1;
  JpegDecoder::Region region{0, 0, INT_MAX, INT_MAX};  // clipped by Decode
  if (options_.partial_decode) {
    const common::Box& b = geometry.source;
    int x0, x1, y0, y1;
    AxisRegion(b.x0, b.x1, geometry.out_width, denom, &x0, &x1);
    AxisRegion(b.y0, b.y1, geometry.out_height, denom, &y0, &y1);
    region = {x0, y0, x1 - x0, y1 - y0};
  }
  return jpeg_.Decode(bytes, region, denom, &decoded_);
}

absl::Status SampleProcessor::Process(absl::string_view bytes, bool is_jpeg,
                                      const common::SampleGeometry& geometry,
                                      uint8_t* dst, SampleTimings* timings) {
  if (dst == nullptr) return absl::InvalidArgumentError("null destination");
  if (absl::Status s = CheckGeometryShape(geometry); !s.ok()) return s;
  const int64_t t0 = timings != nullptr ? NowNs() : 0;
  // The decoder clips the region itself, so the image size is only checked
  // once it is known from the decode (saves a second header parse).
  if (absl::Status s = Decode(bytes, is_jpeg, geometry); !s.ok()) {
    if (absl::IsInvalidArgument(s)) {
      // The decode region missed the image entirely.
      return absl::InvalidArgumentError(
          absl::StrCat("source box lies outside the image: ", s.message()));
    }
    return s;
  }
  if (absl::Status s = CheckBoxInside(geometry.source, decoded_.full_width,
                                      decoded_.full_height);
      !s.ok()) {
    return s;
  }
  const int64_t t1 = timings != nullptr ? NowNs() : 0;

  // The box in decoded-pixel coordinates, clamped against rounding.
  const common::Box& b = geometry.source;
  const double w = decoded_.width, h = decoded_.height;
  const double x0 = std::clamp((b.x0 - decoded_.src_x0) / decoded_.scale_x, 0.0, w);
  const double x1 = std::clamp((b.x1 - decoded_.src_x0) / decoded_.scale_x, 0.0, w);
  const double y0 = std::clamp((b.y0 - decoded_.src_y0) / decoded_.scale_y, 0.0, h);
  const double y1 = std::clamp((b.y1 - decoded_.src_y0) / decoded_.scale_y, 0.0, h);
  absl::Status status = resampler_.Resample(
      decoded_.pixels.data(), decoded_.width, decoded_.height, decoded_.stride,
      3, x0, y0, x1, y1, geometry.out_width, geometry.out_height,
      geometry.flip_horizontal, dst, 3 * geometry.out_width);
  if (!status.ok()) {
    // Only limits the shape checks above do not cover (e.g. downscaling by
    // more than 4096) get here.
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported geometry: ", status.message()));
  }
  if (timings != nullptr) {
    const int64_t t2 = NowNs();
    timings->decode_ns = t1 - t0;
    timings->transform_ns = t2 - t1;
  }
  return absl::OkStatus();
}

}  // namespace stoker::server
