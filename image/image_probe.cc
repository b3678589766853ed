#include "image/image_probe.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace stoker::image {
namespace {

// Bounds-checked little helpers over the untrusted bytes.
class Bytes {
 public:
  explicit Bytes(absl::string_view b) : b_(b) {}
  size_t size() const { return b_.size(); }
  bool Has(size_t at, size_t n) const { return at <= b_.size() && n <= b_.size() - at; }
  uint8_t U8(size_t at) const { return static_cast<uint8_t>(b_[at]); }
  uint32_t Be16(size_t at) const { return (U8(at) << 8) | U8(at + 1); }
  uint32_t Be32(size_t at) const { return (Be16(at) << 16) | Be16(at + 2); }
  uint32_t Le16(size_t at) const { return U8(at) | (U8(at + 1) << 8); }
  uint32_t Le24(size_t at) const { return Le16(at) | (U8(at + 2) << 16); }
  uint32_t Le32(size_t at) const { return Le16(at) | (Le16(at + 2) << 16); }
  bool Equals(size_t at, absl::string_view s) const {
    return Has(at, s.size()) && std::memcmp(b_.data() + at, s.data(), s.size()) == 0;
  }

 private:
  absl::string_view b_;
};

// No format this server reads allows more (PNG's own limit); it also keeps
// width * height far from overflowing.
constexpr int64_t kMaxSide = 0x7FFFFFFF;

absl::Status Malformed(ImageCodec codec, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(ImageCodecName(codec), ": ", what));
}

absl::StatusOr<ImageHeader> Sized(ImageCodec codec, int64_t width,
                                  int64_t height) {
  if (width < 1 || height < 1 || width > kMaxSide || height > kMaxSide) {
    return Malformed(codec, absl::StrCat("header claims ", width, "x", height,
                                         " pixels"));
  }
  return ImageHeader{codec, width, height};
}

bool IsStartOfFrame(uint8_t marker) {
  // SOF0-SOF15 but DHT (C4), JPG (C8) and DAC (CC).
  return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 &&
         marker != 0xC8 && marker != 0xCC;
}

// Walks the marker segments after SOI to the first frame header, skipping
// stray bytes between segments the way libjpeg's next_marker does.
absl::StatusOr<ImageHeader> ProbeJpeg(const Bytes& b) {
  constexpr ImageCodec kCodec = ImageCodec::kJpeg;
  size_t pos = 2;
  while (true) {
    while (pos < b.size() && b.U8(pos) != 0xFF) ++pos;  // stray bytes
    while (pos < b.size() && b.U8(pos) == 0xFF) ++pos;  // fill bytes
    if (pos >= b.size()) return Malformed(kCodec, "cut off before the frame header");
    const uint8_t marker = b.U8(pos++);
    if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
      continue;  // stuffed zero, TEM, RSTn: no segment
    }
    if (marker == 0xD8) return Malformed(kCodec, "second start-of-image marker");
    if (marker == 0xD9 || marker == 0xDA) {
      return Malformed(kCodec, "no frame header before the scan");
    }
    if (!b.Has(pos, 2)) return Malformed(kCodec, "cut off in a segment length");
    const uint32_t length = b.Be16(pos);
    if (length < 2) return Malformed(kCodec, "segment length below 2");
    if (IsStartOfFrame(marker)) {
      if (length < 8 || !b.Has(pos, 8)) {
        return Malformed(kCodec, "frame header cut off");
      }
      const int64_t height = b.Be16(pos + 3);
      const int64_t width = b.Be16(pos + 5);
      if (height == 0) {
        return Malformed(kCodec,
                         "frame header gives no height (DNL is not supported)");
      }
      return Sized(kCodec, width, height);
    }
    pos += length;
  }
}

absl::StatusOr<ImageHeader> ProbePng(const Bytes& b) {
  constexpr ImageCodec kCodec = ImageCodec::kPng;
  if (!b.Has(8, 16) || !b.Equals(12, "IHDR")) {
    return Malformed(kCodec, "no IHDR chunk after the signature");
  }
  if (b.Be32(8) != 13) return Malformed(kCodec, "IHDR chunk is not 13 bytes");
  const int64_t width = b.Be32(16), height = b.Be32(20);
  if (width > 0x7FFFFFFF || height > 0x7FFFFFFF) {
    return Malformed(kCodec, "IHDR size exceeds 2^31 - 1");
  }
  return Sized(kCodec, width, height);
}

absl::StatusOr<ImageHeader> ProbeWebp(const Bytes& b) {
  constexpr ImageCodec kCodec = ImageCodec::kWebp;
  if (!b.Has(0, 30)) return Malformed(kCodec, "header cut off");
  if (b.Equals(12, "VP8 ")) {  // lossy: frame tag, start code, 14-bit sizes
    if (b.U8(23) != 0x9D || b.U8(24) != 0x01 || b.U8(25) != 0x2A) {
      return Malformed(kCodec, "VP8 start code missing");
    }
    return Sized(kCodec, b.Le16(26) & 0x3FFF, b.Le16(28) & 0x3FFF);
  }
  if (b.Equals(12, "VP8L")) {  // lossless: signature, 14-bit sizes minus one
    if (b.U8(20) != 0x2F) return Malformed(kCodec, "VP8L signature missing");
    const uint32_t bits = b.Le32(21);
    return Sized(kCodec, (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1);
  }
  if (b.Equals(12, "VP8X")) {  // extended: 24-bit canvas sizes minus one
    return Sized(kCodec, int64_t{b.Le24(24)} + 1, int64_t{b.Le24(27)} + 1);
  }
  return Malformed(kCodec, "unknown first chunk");
}

absl::StatusOr<ImageHeader> ProbeBmp(const Bytes& b) {
  constexpr ImageCodec kCodec = ImageCodec::kBmp;
  if (!b.Has(14, 4)) return Malformed(kCodec, "header cut off");
  const uint32_t dib = b.Le32(14);
  if (dib == 12) {  // OS/2 BITMAPCOREHEADER: 16-bit sizes
    if (!b.Has(18, 4)) return Malformed(kCodec, "header cut off");
    return Sized(kCodec, b.Le16(18), b.Le16(20));
  }
  if (dib < 40 || !b.Has(18, 8)) {
    return Malformed(kCodec, "unknown or cut-off info header");
  }
  const int64_t width = static_cast<int32_t>(b.Le32(18));
  const int64_t height = static_cast<int32_t>(b.Le32(22));  // < 0: top-down
  return Sized(kCodec, width, height < 0 ? -height : height);
}

}  // namespace

const char* ImageCodecName(ImageCodec codec) {
  switch (codec) {
    case ImageCodec::kJpeg:
      return "JPEG";
    case ImageCodec::kPng:
      return "PNG";
    case ImageCodec::kWebp:
      return "WebP";
    case ImageCodec::kBmp:
      return "BMP";
  }
  return "?";
}

absl::StatusOr<ImageHeader> ProbeImage(absl::string_view bytes) {
  const Bytes b(bytes);
  if (b.size() >= 3 && b.U8(0) == 0xFF && b.U8(1) == 0xD8 && b.U8(2) == 0xFF) {
    return ProbeJpeg(b);
  }
  if (b.Equals(0, "\x89PNG\r\n\x1a\n")) return ProbePng(b);
  if (b.Equals(0, "RIFF") && b.Equals(8, "WEBP")) return ProbeWebp(b);
  if (b.Equals(0, "BM")) return ProbeBmp(b);
  std::string start;
  for (size_t i = 0; i < std::min<size_t>(b.size(), 4); ++i) {
    absl::StrAppend(&start, i == 0 ? "" : " ",
                    absl::Hex(b.U8(i), absl::kZeroPad2));
  }
  return absl::DataLossError(absl::StrCat(
      "not an image format this server decodes (JPEG, PNG, WebP, BMP); ",
      b.size() == 0 ? "the member is empty"
                    : absl::StrCat("it starts with ", start)));
}

}  // namespace stoker::image
