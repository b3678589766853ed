#include "image/sample_processor.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace stoker::image {
namespace {

constexpr double kBoxTolerance = 1e-6;
// Decode buffers larger than this are freed after the sample instead of
// being kept for the next one.
constexpr size_t kMaxKeptScratchBytes = size_t{64} << 20;
constexpr int kMaxOutputSide = 1 << 16;
// Larger than any decodable image; keeps region arithmetic in int range.
constexpr double kMaxCoordinate = 1 << 30;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
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

absl::StatusOr<ImageHeader> SampleProcessor::Probe(absl::string_view bytes,
                                                   bool is_jpeg) const {
  absl::StatusOr<ImageHeader> header = ProbeImage(bytes);
  if (!header.ok()) {
    if (!is_jpeg) return header.status();
    return absl::DataLossError(
        absl::StrCat("not a JPEG image (", header.status().message(), ")"));
  }
  if (header->pixels() > options_.max_image_pixels) {
    return absl::ResourceExhaustedError(absl::StrCat(
        ImageCodecName(header->codec), " header claims ", header->width, "x",
        header->height, " = ", header->pixels(),
        " pixels, over the limit of ", options_.max_image_pixels,
        " (--max_image_pixels); refused before decoding"));
  }
  return header;
}

absl::StatusOr<ImageInfo> SampleProcessor::ReadInfo(absl::string_view bytes,
                                                    bool is_jpeg) {
  absl::StatusOr<ImageHeader> header = Probe(bytes, is_jpeg);
  if (!header.ok()) return header.status();
  return ImageInfo{static_cast<int>(header->width),
                   static_cast<int>(header->height)};
}

absl::Status SampleProcessor::Decode(absl::string_view bytes,
                                     const ImageHeader& header,
                                     const common::SampleGeometry& geometry) {
  const ImageInfo size{static_cast<int>(header.width),
                       static_cast<int>(header.height)};
  if (header.codec != ImageCodec::kJpeg) {
    return DecodeWithOpenCV(bytes, size, &decoded_);
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
  if (absl::Status s = jpeg_.Decode(bytes, region, denom, &decoded_); !s.ok()) {
    return s;
  }
  if (decoded_.full_width != size.width || decoded_.full_height != size.height) {
    // libjpeg read another frame header than the probe (e.g. a second SOF).
    return absl::DataLossError(absl::StrCat(
        "JPEG decodes as ", decoded_.full_width, "x", decoded_.full_height,
        " but its first frame header claims ", size.width, "x", size.height));
  }
  return absl::OkStatus();
}

absl::Status SampleProcessor::Process(absl::string_view bytes, bool is_jpeg,
                                      const common::SampleGeometry& geometry,
                                      uint8_t* dst, SampleTimings* timings) {
  if (dst == nullptr) return absl::InvalidArgumentError("null destination");
  if (absl::Status s = CheckGeometryShape(geometry); !s.ok()) return s;
  const int64_t t0 = timings != nullptr ? NowNs() : 0;
  absl::StatusOr<ImageHeader> header = Probe(bytes, is_jpeg);
  if (!header.ok()) return header.status();
  // A rare large image's buffer is given back rather than kept per worker
  // for the server's life.
  absl::Cleanup release_large = [this] {
    if (decoded_.pixels.capacity() > kMaxKeptScratchBytes) {
      std::vector<uint8_t>().swap(decoded_.pixels);
    }
  };
  if (absl::Status s = Decode(bytes, *header, geometry); !s.ok()) {
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

}  // namespace stoker::image
