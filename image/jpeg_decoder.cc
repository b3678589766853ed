#include "image/jpeg_decoder.h"

// jpeglib.h needs FILE and size_t declared first.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <jpeglib.h>
// After jpeglib.h, which it extends.
#include <jerror.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/strings/str_cat.h"

namespace stoker::image {
namespace {

constexpr int64_t kMaxDecodedPixels = int64_t{1} << 28;
constexpr int kRowsPerRead = 16;

struct ErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg only knows this part
  jmp_buf jump;
  bool saw_eof = false;
  // A warning that the entropy-coded data is damaged; `message` says which.
  bool corrupt = false;
  char message[JMSG_LENGTH_MAX];
};

// libjpeg's error_exit must not return; unwind to the setjmp in the caller.
// Only C frames lie between, so no destructors are skipped.
[[noreturn]] void ErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings that mean the pixel data is damaged: libjpeg goes on and fills
// what it could not decode with grey or stripes. Warnings about the
// container (stray bytes between segments, an odd JFIF version, a bad ICC
// chunk, an Adobe transform flag) are tolerated, as PIL tolerates them:
// real photo collections, ImageNet included, have such files.
bool MeansCorruptPixels(int code) {
  switch (code) {
    case JWRN_ARITH_BAD_CODE:
    case JWRN_BOGUS_PROGRESSION:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_TOO_MUCH_DATA:
      return true;
    default:
      return false;
  }
}

// Warnings are counted, never printed. JWRN_JPEG_EOF means the data ended
// early and libjpeg padded the rest of the image with grey.
void EmitMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  ++err->pub.num_warnings;
  const int code = err->pub.msg_code;
  if (code == JWRN_JPEG_EOF) err->saw_eof = true;
  if (MeansCorruptPixels(code) && !err->corrupt) {
    err->corrupt = true;
    (*cinfo->err->format_message)(cinfo, err->message);
  }
}

void OutputMessage(j_common_ptr) {}

// Whether an EOI marker follows in the unread data. Inside entropy-coded data
// 0xFF is always followed by 0x00 or a restart marker, so any FF D9 is the
// real end of image (or lies in trailing bytes after it). Searching from the
// end finds it at once for intact files.
bool HasEndOfImage(const uint8_t* data, size_t size) {
  for (size_t i = size; i >= 2; --i) {
    if (data[i - 2] == 0xFF && data[i - 1] == 0xD9) return true;
  }
  return false;
}

// OpenCV's conversion (as used by cv::imdecode) of libjpeg's CMYK output,
// which for Adobe files holds inverted values.
void CmykToRgb(const uint8_t* cmyk, int width, uint8_t* rgb) {
  for (int x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
    const int k = cmyk[3];
    rgb[0] = static_cast<uint8_t>(k - ((255 - cmyk[0]) * k >> 8));
    rgb[1] = static_cast<uint8_t>(k - ((255 - cmyk[1]) * k >> 8));
    rgb[2] = static_cast<uint8_t>(k - ((255 - cmyk[2]) * k >> 8));
  }
}

int CeilDiv(int64_t a, int b) { return static_cast<int>((a + b - 1) / b); }

enum class Outcome {
  kOk,
  kError,
  kTruncated,
  kCorrupt,
  kEmptyRegion,
  kTooLarge,
};

}  // namespace

struct JpegDecoder::State {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  // One CMYK row, converted to RGB as it is read.
  std::vector<uint8_t> cmyk_row;

  void Reset() {
    // Returns the decompressor to its idle state even if a previous call
    // left it mid-image (e.g. std::bad_alloc from growing `pixels`).
    jpeg_abort_decompress(&cinfo);
    err.saw_eof = false;
    err.corrupt = false;
    err.pub.num_warnings = 0;
    err.message[0] = '\0';
  }

  // Every libjpeg call that can fail must run below a live setjmp, so each
  // entry point below sets its own. Locals changed after setjmp are not read
  // after a longjmp.
  Outcome ReadHeader(const uint8_t* data, size_t size, ImageInfo* info) {
    Reset();
    if (setjmp(err.jump)) {
      jpeg_abort_decompress(&cinfo);
      return Outcome::kError;
    }
    jpeg_mem_src(&cinfo, data, size);
    jpeg_read_header(&cinfo, TRUE);
    info->width = static_cast<int>(cinfo.image_width);
    info->height = static_cast<int>(cinfo.image_height);
    jpeg_abort_decompress(&cinfo);
    return Outcome::kOk;
  }

  Outcome Decode(const uint8_t* data, size_t size, Region want, int denom,
                 DecodedImage* out) {
    Reset();
    if (setjmp(err.jump)) {
      jpeg_abort_decompress(&cinfo);
      return Outcome::kError;
    }
    jpeg_mem_src(&cinfo, data, size);
    jpeg_read_header(&cinfo, TRUE);
    const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK ||
                      cinfo.jpeg_color_space == JCS_YCCK;
    const int full_w = static_cast<int>(cinfo.image_width);
    const int full_h = static_cast<int>(cinfo.image_height);
    const int x0 = std::max(want.x, 0);
    const int y0 = std::max(want.y, 0);
    const int x1 = static_cast<int>(
        std::min<int64_t>(int64_t{want.x} + want.width, full_w));
    const int y1 = static_cast<int>(
        std::min<int64_t>(int64_t{want.y} + want.height, full_h));
    if (x0 >= x1 || y0 >= y1) {
      jpeg_abort_decompress(&cinfo);
      return Outcome::kEmptyRegion;
    }

    // RGB also expands grayscale; CMYK is converted below, per row.
    cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = denom;
    jpeg_start_decompress(&cinfo);
    const int scaled_w = static_cast<int>(cinfo.output_width);
    const int scaled_h = static_cast<int>(cinfo.output_height);
    // One extra column each side: the cropped region's edge columns get
    // edge-style chroma upsampling, which must not reach `want`.
    const int sx0 = std::max(x0 / denom - 1, 0);
    const int sx1 = std::min(CeilDiv(x1, denom) + 1, scaled_w);
    const int sy0 = y0 / denom;
    const int sy1 = std::min(CeilDiv(y1, denom), scaled_h);
    JDIMENSION crop_x = 0;
    JDIMENSION crop_w = scaled_w;
    // Not for progressive files: libjpeg's block smoothing (used when their
    // AC scans are incomplete) treats the crop's edge as the image's, which
    // would change pixels deep inside the region.
    if (!cinfo.progressive_mode && sx1 - sx0 < scaled_w) {
      crop_x = sx0;
      crop_w = sx1 - sx0;
      jpeg_crop_scanline(&cinfo, &crop_x, &crop_w);
    }
    const int width = static_cast<int>(cinfo.output_width);
    const int height = sy1 - sy0;
    if (int64_t{width} * height > kMaxDecodedPixels) {
      jpeg_abort_decompress(&cinfo);
      return Outcome::kTooLarge;
    }
    const size_t stride = 3 * static_cast<size_t>(width);
    if (out->pixels.size() < stride * height) {
      out->pixels.resize(stride * height);
    }
    if (sy0 > 0) jpeg_skip_scanlines(&cinfo, sy0);
    uint8_t* base = out->pixels.data();
    JSAMPROW rows[kRowsPerRead];
    while (static_cast<int>(cinfo.output_scanline) < sy1) {
      const int next = static_cast<int>(cinfo.output_scanline);
      const int n = std::min(kRowsPerRead, sy1 - next);
      if (cmyk) {
        cmyk_row.resize(4 * static_cast<size_t>(width));
        rows[0] = cmyk_row.data();
        if (jpeg_read_scanlines(&cinfo, rows, 1) == 0) {
          std::snprintf(err.message, sizeof(err.message), "decoder stalled");
          jpeg_abort_decompress(&cinfo);
          return Outcome::kError;
        }
        CmykToRgb(cmyk_row.data(), width, base + (next - sy0) * stride);
        continue;
      }
      for (int i = 0; i < n; ++i) rows[i] = base + (next - sy0 + i) * stride;
      if (jpeg_read_scanlines(&cinfo, rows, n) == 0) {
        // Cannot happen with a memory source (it never suspends).
        std::snprintf(err.message, sizeof(err.message), "decoder stalled");
        jpeg_abort_decompress(&cinfo);
        return Outcome::kError;
      }
    }
    // Multi-scan (progressive) files were read to the end by
    // jpeg_start_decompress; single-scan ones only up to the last row read
    // (the entropy decoder may already have consumed the EOI marker).
    const bool eoi_follows =
        jpeg_input_complete(&cinfo) || cinfo.unread_marker == JPEG_EOI ||
        HasEndOfImage(cinfo.src->next_input_byte, cinfo.src->bytes_in_buffer);
    jpeg_abort_decompress(&cinfo);
    if (err.saw_eof || !eoi_follows) return Outcome::kTruncated;
    if (err.corrupt) return Outcome::kCorrupt;

    out->width = width;
    out->height = height;
    out->stride = static_cast<int>(stride);
    out->scale_denom = denom;
    out->src_x0 = static_cast<double>(crop_x) * denom;
    out->src_y0 = static_cast<double>(sy0) * denom;
    out->scale_x = denom;
    out->scale_y = denom;
    out->full_width = full_w;
    out->full_height = full_h;
    return Outcome::kOk;
  }
};

JpegDecoder::JpegDecoder() : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.cinfo.err = jpeg_std_error(&s.err.pub);
  s.err.pub.error_exit = ErrorExit;
  s.err.pub.emit_message = EmitMessage;
  s.err.pub.output_message = OutputMessage;
  // jpeg_create_decompress fails only when out of memory.
  if (setjmp(s.err.jump)) std::abort();
  jpeg_create_decompress(&s.cinfo);
}

JpegDecoder::~JpegDecoder() { jpeg_destroy_decompress(&state_->cinfo); }

absl::StatusOr<ImageInfo> JpegDecoder::ReadInfo(absl::string_view jpeg) {
  ImageInfo info;
  if (state_->ReadHeader(reinterpret_cast<const uint8_t*>(jpeg.data()),
                         jpeg.size(), &info) != Outcome::kOk) {
    return absl::DataLossError(
        absl::StrCat("JPEG header: ", state_->err.message));
  }
  return info;
}

absl::Status JpegDecoder::Decode(absl::string_view jpeg, Region want,
                                 int scale_denom, DecodedImage* out) {
  if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 &&
      scale_denom != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG scale denominator must be 1, 2, 4 or 8, got ",
                     scale_denom));
  }
  switch (state_->Decode(reinterpret_cast<const uint8_t*>(jpeg.data()),
                         jpeg.size(), want, scale_denom, out)) {
    case Outcome::kOk:
      return absl::OkStatus();
    case Outcome::kEmptyRegion:
      return absl::InvalidArgumentError(absl::StrCat(
          "JPEG decode region ", want.x, ",", want.y, " ", want.width, "x",
          want.height, " does not intersect the image"));
    case Outcome::kTooLarge:
      return absl::ResourceExhaustedError(
          "JPEG decode region exceeds 2^28 pixels");
    case Outcome::kTruncated:
      return absl::DataLossError(
          "JPEG data is truncated (no end-of-image marker)");
    case Outcome::kCorrupt:
      return absl::DataLossError(
          absl::StrCat("JPEG pixel data is corrupt (", state_->err.message,
                       ")"));
    case Outcome::kError:
      break;
  }
  return absl::DataLossError(absl::StrCat("JPEG: ", state_->err.message));
}

absl::Status DecodeWithOpenCV(absl::string_view bytes, ImageInfo expected,
                              DecodedImage* out) {
  if (bytes.empty() || bytes.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::DataLossError(
        absl::StrCat("cannot decode an image of ", bytes.size(), " bytes"));
  }
  if (expected.width < 1 || expected.height < 1 ||
      int64_t{expected.width} * expected.height > kMaxDecodedPixels) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot decode a ", expected.width, "x", expected.height,
        " image (more than 2^28 pixels)"));
  }
  const size_t stride = 3 * static_cast<size_t>(expected.width);
  try {
    const cv::Mat raw(1, static_cast<int>(bytes.size()), CV_8UC1,
                      const_cast<char*>(bytes.data()));
    // (imdecode's variant that decodes into a given Mat leaves it untouched
    // when the header does not parse, which is indistinguishable from
    // success; so OpenCV allocates and the pixels are converted over.)
    const cv::Mat bgr =
        cv::imdecode(raw, cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION);
    if (bgr.empty() || bgr.type() != CV_8UC3) {
      return absl::DataLossError("OpenCV could not decode the image");
    }
    if (bgr.cols != expected.width || bgr.rows != expected.height) {
      return absl::DataLossError(absl::StrCat(
          "the image decodes to ", bgr.cols, "x", bgr.rows,
          " pixels but its header claims ", expected.width, "x",
          expected.height));
    }
    if (out->pixels.size() < stride * bgr.rows) {
      out->pixels.resize(stride * bgr.rows);
    }
    cv::Mat rgb(bgr.rows, bgr.cols, CV_8UC3, out->pixels.data(), stride);
    cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  } catch (const cv::Exception& e) {
    return absl::DataLossError(absl::StrCat("OpenCV: ", e.what()));
  }
  out->width = expected.width;
  out->height = expected.height;
  out->stride = static_cast<int>(stride);
  out->scale_denom = 1;
  out->src_x0 = 0;
  out->src_y0 = 0;
  out->scale_x = 1;
  out->scale_y = 1;
  out->full_width = expected.width;
  out->full_height = expected.height;
  return absl::OkStatus();
}

}  // namespace stoker::image
