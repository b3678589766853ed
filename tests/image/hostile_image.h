#ifndef STOKER_TESTS_IMAGE_HOSTILE_IMAGE_H_
#define STOKER_TESTS_IMAGE_HOSTILE_IMAGE_H_

// Hostile image bytes for tests (testonly): decompression bombs (small files
// whose header claims a huge size), damaged entropy-coded data and a CMYK
// JPEG, all made from valid encodings of synthetic images.

#include <cstdint>
#include <string>

#include <opencv2/core.hpp>

namespace stoker::image::testing {

// `jpeg` with its first frame header (SOFn) rewritten to claim
// width x height (each <= 65535). The scan data is left as it is, so a
// decoder that trusts the header decodes mostly grey.
std::string ForgeJpegSize(std::string jpeg, int width, int height);

// `png` with its IHDR rewritten to claim width x height (the chunk's CRC is
// left stale, as a forger who only wants the header read would).
std::string ForgePngSize(std::string png, uint32_t width, uint32_t height);

// `jpeg` (single scan) with the entropy-coded data from `from_fraction` of
// the scan to its end replaced by pseudo-random bytes (from `seed`); the
// end-of-image marker is kept, so the file does not look truncated.
std::string CorruptJpegScan(std::string jpeg, double from_fraction,
                            uint32_t seed);

// `jpeg` with `count` stray bytes inserted before its end-of-image marker:
// libjpeg warns "extraneous bytes before marker 0xd9", as it does for some
// real camera files, and the image is intact.
std::string AddBytesBeforeEndOfImage(std::string jpeg, int count);

// An RGB image (CV_8UC3) encoded as an Adobe-style CMYK JPEG (inverted
// values, K = 0), via the libjpeg compressor (OpenCV cannot write one).
std::string EncodeCmykJpeg(const cv::Mat& rgb);

}  // namespace stoker::image::testing

#endif  // STOKER_TESTS_IMAGE_HOSTILE_IMAGE_H_
