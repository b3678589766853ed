#include "image/mask.h"

#include <cmath>
#include <cstring>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/strings/str_cat.h"
#include "image/image_probe.h"

namespace stoker::image {
namespace {

// Added before flooring a mapped coordinate: a centre that lands exactly on
// a pixel edge in exact arithmetic (a 2x resize, a crop at an integer
// offset) must not fall to the pixel before because the folded affine map
// rounded a last bit down. Far below any real distance to an edge
// (1 / 2^16 for the largest outputs).
constexpr double kEdgeNudge = 1e-9;

// Index of the pixel holding coordinate `u` along an axis of `size` pixels,
// or -1 when it lies outside.
inline int PixelAt(double u, int size) {
  const double f = std::floor(u + kEdgeNudge);
  return f >= 0 && f < size ? static_cast<int>(f) : -1;
}

bool InsideClips(const WarpStep& warp, double x, double y) {
  for (const Clip& clip : warp.clips) {
    const Affine& m = clip.to_frame;
    const double u = m.a * x + m.b * y + m.c;
    const double v = m.d * x + m.e * y + m.f;
    if (PixelAt(u, clip.width) < 0 || PixelAt(v, clip.height) < 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::Status DecodeMask(absl::string_view bytes, int channels,
                        int64_t max_pixels, MaskImage* out) {
  absl::StatusOr<ImageHeader> header = ProbeImage(bytes);
  if (!header.ok()) {
    return absl::DataLossError(
        absl::StrCat("mask: ", header.status().message()));
  }
  if (header->pixels() > max_pixels) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "mask header claims ", header->width, "x", header->height,
        " pixels, over the limit of ", max_pixels, "; refused before decoding"));
  }
  cv::Mat decoded;
  try {
    const cv::Mat raw(1, static_cast<int>(bytes.size()), CV_8UC1,
                      const_cast<char*>(bytes.data()));
    decoded =
        cv::imdecode(raw, cv::IMREAD_UNCHANGED | cv::IMREAD_IGNORE_ORIENTATION);
  } catch (const cv::Exception& e) {
    return absl::DataLossError(absl::StrCat("mask: OpenCV: ", e.what()));
  }
  if (decoded.empty()) {
    return absl::DataLossError("mask: OpenCV could not decode it");
  }
  if (decoded.depth() != CV_8U) {
    return absl::DataLossError(
        "mask is not 8-bit (16-bit and float masks are not supported)");
  }
  if (decoded.channels() != channels) {
    return absl::DataLossError(absl::StrCat("mask has ", decoded.channels(),
                                            " channels, the request asks for ",
                                            channels));
  }
  if (decoded.cols != static_cast<int>(header->width) ||
      decoded.rows != static_cast<int>(header->height)) {
    return absl::DataLossError(absl::StrCat(
        "mask decodes to ", decoded.cols, "x", decoded.rows,
        " pixels but its header claims ", header->width, "x", header->height));
  }
  out->width = decoded.cols;
  out->height = decoded.rows;
  out->channels = channels;
  const size_t row_bytes = static_cast<size_t>(out->width) * channels;
  out->pixels.resize(row_bytes * out->height);
  cv::Mat packed(decoded.rows, decoded.cols, decoded.type(),
                 out->pixels.data(), row_bytes);
  if (channels == 3) {
    cv::cvtColor(decoded, packed, cv::COLOR_BGR2RGB);
  } else if (channels == 4) {
    cv::cvtColor(decoded, packed, cv::COLOR_BGRA2RGBA);
  } else {
    decoded.copyTo(packed);
  }
  return absl::OkStatus();
}

void WarpNearest(const WarpStep& warp, const uint8_t* src, int width,
                 int height, int channels, uint8_t fill, uint8_t* dst) {
  const Affine& m = warp.to_input;
  const size_t stride = static_cast<size_t>(width) * channels;
  for (int y = 0; y < warp.out_height; ++y) {
    const double cy = y + 0.5;
    for (int x = 0; x < warp.out_width; ++x) {
      const double cx = x + 0.5;
      const int sx = PixelAt(m.a * cx + m.b * cy + m.c, width);
      const int sy = PixelAt(m.d * cx + m.e * cy + m.f, height);
      if (sx < 0 || sy < 0 || !InsideClips(warp, cx, cy)) {
        std::memset(dst, fill, channels);
      } else {
        std::memcpy(dst, src + sy * stride + sx * channels, channels);
      }
      dst += channels;
    }
  }
}

}  // namespace stoker::image
