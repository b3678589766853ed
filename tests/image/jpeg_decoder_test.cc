#include "image/jpeg_decoder.h"

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <jpeglib.h>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tests/image/hostile_image.h"
#include "tests/image/synthetic_image.h"

namespace stoker::image {
namespace {

using Region = JpegDecoder::Region;

// OpenCV's decode of the same bytes, as RGB: the same libjpeg-turbo with the
// same settings, so the expected pixels.
cv::Mat OpenCvRgb(const std::string& bytes) {
  const cv::Mat raw(1, static_cast<int>(bytes.size()), CV_8UC1,
                    const_cast<char*>(bytes.data()));
  cv::Mat image =
      cv::imdecode(raw, cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION);
  cv::cvtColor(image, image, cv::COLOR_BGR2RGB);
  return image;
}

// Largest difference between `part` and the same pixels of `full` (both
// decoded at the same scale), over decoded pixels whose source footprint
// lies inside `want`. Sets *checked to the number of pixels compared.
int MaxDiffInside(const DecodedImage& part, const DecodedImage& full,
                  Region want, int* checked) {
  const int d = part.scale_denom;
  const int ox = static_cast<int>(part.src_x0) / d;
  const int oy = static_cast<int>(part.src_y0) / d;
  const int x0 = want.x / d, x1 = (want.x + want.width + d - 1) / d;
  const int y0 = want.y / d, y1 = (want.y + want.height + d - 1) / d;
  int diff = 0;
  *checked = 0;
  for (int fy = y0; fy < y1; ++fy) {
    for (int fx = x0; fx < x1; ++fx) {
      const int x = fx - ox, y = fy - oy;
      if (x < 0 || y < 0 || x >= part.width || y >= part.height) {
        ADD_FAILURE() << "pixel " << fx << "," << fy << " not decoded";
        return 255;
      }
      ++*checked;
      for (int c = 0; c < 3; ++c) {
        diff = std::max(diff, std::abs(part.pixels[y * part.stride + 3 * x + c] -
                                       full.pixels[fy * full.stride + 3 * fx + c]));
      }
    }
  }
  return diff;
}

class JpegDecoderTest : public ::testing::Test {
 protected:
  JpegDecoder decoder_;
};

TEST_F(JpegDecoderTest, ReadInfoReportsSize) {
  const std::string jpeg = testing::EncodeJpeg(testing::PhotoLikeImage(317, 221, 1));
  absl::StatusOr<ImageInfo> info = decoder_.ReadInfo(jpeg);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->width, 317);
  EXPECT_EQ(info->height, 221);
}

TEST_F(JpegDecoderTest, FullDecodeEqualsOpenCv) {
  const int sizes[][2] = {{500, 375}, {333, 500}, {640, 480}, {317, 221}};
  for (const auto& size : sizes) {
    for (bool progressive : {false, true}) {
      const std::string jpeg = testing::EncodeJpeg(
          testing::PhotoLikeImage(size[0], size[1], size[0]), 90, progressive);
      DecodedImage out;
      ASSERT_TRUE(
          decoder_.Decode(jpeg, Region{0, 0, size[0], size[1]}, 1, &out).ok());
      ASSERT_EQ(out.width, size[0]);
      ASSERT_EQ(out.height, size[1]);
      EXPECT_EQ(out.src_x0, 0);
      EXPECT_EQ(out.src_y0, 0);
      const cv::Mat want = OpenCvRgb(jpeg);
      int diff = 0;
      for (int y = 0; y < out.height; ++y) {
        for (int x = 0; x < 3 * out.width; ++x) {
          diff = std::max(
              diff, std::abs(out.pixels[y * out.stride + x] - want.ptr(y)[x]));
        }
      }
      // Same libjpeg-turbo, same IDCT and upsampling: identical.
      EXPECT_EQ(diff, 0) << size[0] << "x" << size[1]
                         << " progressive=" << progressive;
    }
  }
}

TEST_F(JpegDecoderTest, PartialDecodeEqualsFullDecodeInsideRegion) {
  std::mt19937 engine(17);
  const int sizes[][2] = {{500, 375}, {333, 500}, {317, 221}};
  for (const auto& size : sizes) {
    const int w = size[0], h = size[1];
    for (bool progressive : {false, true}) {
      const std::string jpeg = testing::EncodeJpeg(
          testing::PhotoLikeImage(w, h, w + 1), 90, progressive);
      for (int denom : {1, 2, 4, 8}) {
        DecodedImage full;
        ASSERT_TRUE(decoder_.Decode(jpeg, Region{0, 0, w, h}, denom, &full).ok());
        for (int i = 0; i < 25; ++i) {
          Region want;
          want.x = static_cast<int>(engine() % w);
          want.y = static_cast<int>(engine() % h);
          want.width = 1 + static_cast<int>(engine() % (w - want.x));
          want.height = 1 + static_cast<int>(engine() % (h - want.y));
          DecodedImage part;
          ASSERT_TRUE(decoder_.Decode(jpeg, want, denom, &part).ok());
          EXPECT_EQ(part.scale_denom, denom);
          EXPECT_EQ(part.scale_x, denom);
          EXPECT_LE(part.src_x0, want.x);
          EXPECT_LE(part.src_y0, want.y);
          int checked = 0;
          // Exact: libjpeg-turbo only changes the cropped region's edge
          // columns, and the decoder keeps a column of margin around `want`.
          EXPECT_EQ(MaxDiffInside(part, full, want, &checked), 0)
              << w << "x" << h << " progressive=" << progressive
              << " denom=" << denom << " region " << want.x << "," << want.y
              << " " << want.width << "x" << want.height;
          EXPECT_GT(checked, 0);
        }
      }
    }
  }
}

TEST_F(JpegDecoderTest, PartialDecodeSkipsMostOfTheImage) {
  const std::string jpeg = testing::EncodeJpeg(testing::PhotoLikeImage(640, 480, 2));
  DecodedImage part;
  ASSERT_TRUE(decoder_.Decode(jpeg, Region{300, 200, 40, 30}, 1, &part).ok());
  EXPECT_LE(part.width, 40 + 2 + 16);
  EXPECT_EQ(part.height, 30);
  EXPECT_EQ(part.src_y0, 200);
}

TEST_F(JpegDecoderTest, ScaledDecodeHasCeilingSizes) {
  const std::string jpeg = testing::EncodeJpeg(testing::PhotoLikeImage(317, 221, 3));
  const int want_w[] = {317, 159, 80, 40};
  const int want_h[] = {221, 111, 56, 28};
  int i = 0;
  for (int denom : {1, 2, 4, 8}) {
    DecodedImage out;
    ASSERT_TRUE(decoder_.Decode(jpeg, Region{0, 0, 317, 221}, denom, &out).ok());
    EXPECT_EQ(out.width, want_w[i]) << denom;
    EXPECT_EQ(out.height, want_h[i]) << denom;
    EXPECT_EQ(out.full_width, 317);
    EXPECT_EQ(out.full_height, 221);
    ++i;
  }
}

TEST_F(JpegDecoderTest, ScaledPixelsAverageTheirSourceBlocks) {
  // Decoded pixel x at 1/d covers source [d*x, d*x + d): check the last
  // columns of a width that is not a multiple of 8, where d*x and
  // x * width / scaled_width disagree by several pixels.
  const cv::Mat image = testing::PhotoLikeImage(317, 221, 4);
  const std::string jpeg = testing::EncodeJpeg(image, 95);
  const cv::Mat full = OpenCvRgb(jpeg);
  DecodedImage out;
  ASSERT_TRUE(decoder_.Decode(jpeg, Region{0, 0, 317, 221}, 8, &out).ok());
  double error = 0;
  int n = 0;
  for (int y = 0; y + 1 < out.height; ++y) {
    for (int x = out.width - 8; x + 1 < out.width; ++x) {
      for (int c = 0; c < 3; ++c) {
        double mean = 0;
        for (int sy = 8 * y; sy < 8 * y + 8; ++sy) {
          for (int sx = 8 * x; sx < 8 * x + 8; ++sx) {
            mean += full.ptr(sy)[3 * sx + c];
          }
        }
        mean /= 64;
        error += std::abs(out.pixels[y * out.stride + 3 * x + c] - mean);
        ++n;
      }
    }
  }
  EXPECT_LT(error / n, 2.0);
}

TEST_F(JpegDecoderTest, TruncatedJpegIsDataLoss) {
  const std::string jpeg = testing::EncodeJpeg(testing::PhotoLikeImage(500, 375, 5));
  const std::string progressive =
      testing::EncodeJpeg(testing::PhotoLikeImage(500, 375, 5), 90, true);
  for (const std::string* bytes : {&jpeg, &progressive}) {
    for (double keep : {0.3, 0.6, 0.95}) {
      const std::string cut = bytes->substr(0, bytes->size() * keep);
      DecodedImage out;
      // Whole image, and a region entirely above the truncation point.
      for (Region want : {Region{0, 0, 500, 375}, Region{10, 0, 50, 20}}) {
        const absl::Status status = decoder_.Decode(cut, want, 1, &out);
        EXPECT_TRUE(absl::IsDataLoss(status))
            << "kept " << keep << " region h=" << want.height << ": " << status;
      }
    }
    // Everything but the end-of-image marker.
    DecodedImage out;
    EXPECT_TRUE(absl::IsDataLoss(decoder_.Decode(
        bytes->substr(0, bytes->size() - 2), Region{0, 0, 500, 375}, 2, &out)));
  }
}

TEST_F(JpegDecoderTest, TrailingBytesAfterEndOfImageAreAccepted) {
  std::string jpeg = testing::EncodeJpeg(testing::PhotoLikeImage(500, 375, 6));
  DecodedImage clean, padded;
  ASSERT_TRUE(decoder_.Decode(jpeg, Region{0, 0, 100, 100}, 1, &clean).ok());
  jpeg += std::string(1000, '\0') + "trailer";
  ASSERT_TRUE(decoder_.Decode(jpeg, Region{0, 0, 100, 100}, 1, &padded).ok());
  EXPECT_EQ(clean.pixels, padded.pixels);
}

TEST_F(JpegDecoderTest, GarbageIsDataLoss) {
  std::string garbage(5000, '\0');
  std::mt19937 engine(1);
  for (char& c : garbage) c = static_cast<char>(engine());
  DecodedImage out;
  EXPECT_TRUE(absl::IsDataLoss(decoder_.ReadInfo(garbage).status()));
  EXPECT_TRUE(
      absl::IsDataLoss(decoder_.Decode(garbage, Region{0, 0, 10, 10}, 1, &out)));
  EXPECT_TRUE(absl::IsDataLoss(decoder_.ReadInfo("").status()));
  EXPECT_TRUE(absl::IsDataLoss(decoder_.Decode("", Region{0, 0, 10, 10}, 1, &out)));
  // A JPEG header followed by garbage.
  std::string corrupt = testing::EncodeJpeg(testing::PhotoLikeImage(64, 64, 1));
  corrupt.resize(200);
  corrupt += garbage;
  EXPECT_TRUE(
      absl::IsDataLoss(decoder_.Decode(corrupt, Region{0, 0, 64, 64}, 1, &out)));
  EXPECT_TRUE(absl::IsDataLoss(DecodeWithOpenCV(garbage, {10, 10}, &out)));
  EXPECT_TRUE(absl::IsDataLoss(DecodeWithOpenCV("", {10, 10}, &out)));
}

TEST_F(JpegDecoderTest, DecoderIsReusableAfterErrors) {
  const std::string jpeg = testing::EncodeJpeg(testing::PhotoLikeImage(333, 500, 7));
  DecodedImage before, after;
  ASSERT_TRUE(decoder_.Decode(jpeg, Region{0, 0, 333, 500}, 1, &before).ok());
  ASSERT_FALSE(decoder_.Decode("not a jpeg", Region{0, 0, 1, 1}, 1, &after).ok());
  ASSERT_FALSE(
      decoder_.Decode(jpeg.substr(0, 4000), Region{0, 0, 333, 500}, 1, &after)
          .ok());
  ASSERT_TRUE(decoder_.Decode(jpeg, Region{0, 0, 333, 500}, 1, &after).ok());
  EXPECT_EQ(before.pixels, after.pixels);
}

TEST_F(JpegDecoderTest, RejectsBadArguments) {
  const std::string jpeg = testing::EncodeJpeg(testing::PhotoLikeImage(64, 48, 8));
  DecodedImage out;
  EXPECT_TRUE(absl::IsInvalidArgument(
      decoder_.Decode(jpeg, Region{0, 0, 64, 48}, 3, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      decoder_.Decode(jpeg, Region{64, 0, 10, 10}, 1, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      decoder_.Decode(jpeg, Region{0, 0, 0, 10}, 1, &out)));
  // Clipped to the image rather than rejected.
  EXPECT_TRUE(decoder_.Decode(jpeg, Region{-5, -5, 500, 500}, 1, &out).ok());
  EXPECT_EQ(out.width, 64);
  EXPECT_EQ(out.height, 48);
}

TEST_F(JpegDecoderTest, GrayscaleJpegDecodesToRgb) {
  cv::Mat gray;
  cv::cvtColor(testing::PhotoLikeImage(317, 221, 9), gray, cv::COLOR_RGB2GRAY);
  const std::string jpeg = testing::EncodeJpeg(gray);
  const cv::Mat raw(1, static_cast<int>(jpeg.size()), CV_8UC1,
                    const_cast<char*>(jpeg.data()));
  const cv::Mat want = cv::imdecode(raw, cv::IMREAD_GRAYSCALE);
  DecodedImage out;
  ASSERT_TRUE(decoder_.Decode(jpeg, Region{0, 0, 317, 221}, 1, &out).ok());
  ASSERT_EQ(out.width, 317);
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      const uint8_t* p = &out.pixels[y * out.stride + 3 * x];
      ASSERT_EQ(p[0], want.ptr(y)[x]) << x << "," << y;
      ASSERT_EQ(p[1], p[0]);
      ASSERT_EQ(p[2], p[0]);
    }
  }
}

// CMYK JPEGs take the libjpeg path too (region, DCT scaling, corruption
// checks), converted to RGB exactly as OpenCV converts them. They used to be
// left to OpenCV, whose output for corrupt CMYK data had rows it never wrote
// (the image fuzzer saw two decodes of one file differ).
TEST_F(JpegDecoderTest, CmykJpegDecodesLikeOpenCv) {
  const std::string jpeg = testing::EncodeCmykJpeg(testing::PhotoLikeImage(120, 90, 10));
  absl::StatusOr<ImageInfo> info = decoder_.ReadInfo(jpeg);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->width, 120);
  DecodedImage out;
  ASSERT_TRUE(decoder_.Decode(jpeg, Region{0, 0, 120, 90}, 1, &out).ok());
  ASSERT_EQ(out.width, 120);
  ASSERT_EQ(out.height, 90);
  const cv::Mat want = OpenCvRgb(jpeg);
  for (int y = 0; y < 90; ++y) {
    ASSERT_EQ(0, std::memcmp(&out.pixels[y * out.stride], want.ptr(y), 360));
  }
  DecodedImage part;
  ASSERT_TRUE(decoder_.Decode(jpeg, Region{10, 10, 20, 20}, 2, &part).ok());
  EXPECT_EQ(part.scale_denom, 2);
  EXPECT_LT(part.width, 60);
  EXPECT_TRUE(absl::IsDataLoss(decoder_.Decode(
      testing::CorruptJpegScan(jpeg, 0.2, 3), Region{0, 0, 120, 90}, 1, &out)));
}

TEST_F(JpegDecoderTest, PngDecodesThroughOpenCv) {
  const cv::Mat image = testing::PhotoLikeImage(317, 221, 11);
  const std::string png = testing::EncodePng(image);
  DecodedImage out;
  // A size other than the header's is refused, not decoded into a
  // buffer of the wrong size.
  EXPECT_TRUE(absl::IsDataLoss(DecodeWithOpenCV(png, {316, 221}, &out)));
  ASSERT_TRUE(DecodeWithOpenCV(png, {317, 221}, &out).ok());
  ASSERT_EQ(out.width, 317);
  ASSERT_EQ(out.height, 221);
  for (int y = 0; y < 221; ++y) {
    ASSERT_EQ(0, std::memcmp(&out.pixels[y * out.stride], image.ptr(y), 317 * 3))
        << "row " << y;  // lossless, and RGB order preserved
  }
  // The JPEG decoder itself refuses PNG bytes.
  EXPECT_TRUE(absl::IsDataLoss(decoder_.Decode(png, Region{0, 0, 1, 1}, 1, &out)));
}

// Random bytes in the scan, end marker kept: libjpeg only warns (bad Huffman
// code, marker inside the scan) and fills the rest with grey stripes; that
// must not be delivered as an image. Before the fix it decoded "fine".
TEST_F(JpegDecoderTest, CorruptScanIsDataLoss) {
  const std::string jpeg =
      testing::EncodeJpeg(testing::PhotoLikeImage(320, 240, 21));
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    const std::string corrupt = testing::CorruptJpegScan(jpeg, 0.3, seed);
    DecodedImage out;
    for (int denom : {1, 2, 8}) {
      const absl::Status status =
          decoder_.Decode(corrupt, Region{0, 0, 320, 240}, denom, &out);
      EXPECT_TRUE(absl::IsDataLoss(status)) << "seed " << seed << " 1/" << denom
                                            << ": " << status;
      EXPECT_NE(status.message().find("corrupt"), absl::string_view::npos)
          << status;
    }
    // A region in the damaged lower part, decoded partially.
    EXPECT_TRUE(absl::IsDataLoss(
        decoder_.Decode(corrupt, Region{100, 160, 120, 80}, 2, &out)));
  }
  // The same decoder still decodes an intact image afterwards.
  DecodedImage out;
  EXPECT_TRUE(decoder_.Decode(jpeg, Region{0, 0, 320, 240}, 1, &out).ok());
}

// Stray bytes before the end marker (some cameras write them; ImageNet has
// such files) leave the pixels intact and stay accepted, as in PIL.
TEST_F(JpegDecoderTest, ExtraneousBytesBeforeEndMarkerAreTolerated) {
  const std::string jpeg =
      testing::EncodeJpeg(testing::PhotoLikeImage(160, 120, 22));
  const std::string padded = testing::AddBytesBeforeEndOfImage(jpeg, 7);
  DecodedImage want, got;
  ASSERT_TRUE(decoder_.Decode(jpeg, Region{0, 0, 160, 120}, 1, &want).ok());
  ASSERT_TRUE(decoder_.Decode(padded, Region{0, 0, 160, 120}, 1, &got).ok());
  EXPECT_EQ(0, std::memcmp(want.pixels.data(), got.pixels.data(),
                           want.stride * want.height));
}

}  // namespace
}  // namespace stoker::image
