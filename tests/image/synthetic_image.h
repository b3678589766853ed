#ifndef STOKER_TESTS_IMAGE_SYNTHETIC_IMAGE_H_
#define STOKER_TESTS_IMAGE_SYNTHETIC_IMAGE_H_

// Deterministic photo-like test images (testonly): smooth gradients, soft
// and hard edged shapes, a mid-frequency texture and mild noise, so codecs
// and resamplers see realistic content rather than flat colours.

#include <cstdint>
#include <string>

#include <opencv2/core.hpp>

namespace stoker::image::testing {

// A width x height CV_8UC3 image in RGB channel order; the same (size, seed)
// always gives the same pixels.
cv::Mat PhotoLikeImage(int width, int height, uint32_t seed);

// Encodes an RGB (CV_8UC3) or grayscale (CV_8UC1) image as JPEG (4:2:0 for
// colour) or PNG with OpenCV. Crashes the test on failure.
std::string EncodeJpeg(const cv::Mat& image, int quality = 90,
                       bool progressive = false);
std::string EncodePng(const cv::Mat& image);

}  // namespace stoker::image::testing

#endif  // STOKER_TESTS_IMAGE_SYNTHETIC_IMAGE_H_
