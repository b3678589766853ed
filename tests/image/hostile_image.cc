#include "tests/image/hostile_image.h"

// jpeglib.h needs FILE and size_t declared first.
#include <cstddef>
#include <cstdio>
#include <cstdlib>

#include <jpeglib.h>

#include <random>
#include <stdexcept>
#include <vector>

namespace stoker::image::testing {
namespace {

// Position of the first byte after marker `code`'s segment header
// (FF code, then the 2-byte length), or npos.
size_t FindMarker(const std::string& jpeg, uint8_t code) {
  for (size_t i = 2; i + 3 < jpeg.size(); ++i) {
    if (static_cast<uint8_t>(jpeg[i]) == 0xFF &&
        static_cast<uint8_t>(jpeg[i + 1]) == code) {
      return i + 2;
    }
  }
  return std::string::npos;
}

void PutBe16(std::string* s, size_t at, int v) {
  (*s)[at] = static_cast<char>((v >> 8) & 0xFF);
  (*s)[at + 1] = static_cast<char>(v & 0xFF);
}

}  // namespace

std::string ForgeJpegSize(std::string jpeg, int width, int height) {
  for (uint8_t sof : {0xC0, 0xC1, 0xC2}) {
    const size_t at = FindMarker(jpeg, sof);
    if (at == std::string::npos) continue;
    PutBe16(&jpeg, at + 3, height);  // length(2), precision(1), height, width
    PutBe16(&jpeg, at + 5, width);
    return jpeg;
  }
  throw std::invalid_argument("no SOF0/1/2 frame header");
}

std::string ForgePngSize(std::string png, uint32_t width, uint32_t height) {
  for (int i = 0; i < 4; ++i) {
    png[16 + i] = static_cast<char>((width >> (24 - 8 * i)) & 0xFF);
    png[20 + i] = static_cast<char>((height >> (24 - 8 * i)) & 0xFF);
  }
  return png;
}

std::string CorruptJpegScan(std::string jpeg, double from_fraction,
                            uint32_t seed) {
  const size_t sos = FindMarker(jpeg, 0xDA);
  if (sos == std::string::npos) throw std::invalid_argument("no SOS");
  const size_t begin = sos + ((static_cast<uint8_t>(jpeg[sos]) << 8) |
                              static_cast<uint8_t>(jpeg[sos + 1]));
  const size_t end = jpeg.size() - 2;  // the EOI marker stays
  std::mt19937 engine(seed);
  for (size_t i = begin + static_cast<size_t>((end - begin) * from_fraction);
       i < end; ++i) {
    jpeg[i] = static_cast<char>(engine() & 0xFF);
  }
  return jpeg;
}

std::string AddBytesBeforeEndOfImage(std::string jpeg, int count) {
  jpeg.insert(jpeg.size() - 2, std::string(count, '\x5A'));
  return jpeg;
}

std::string EncodeCmykJpeg(const cv::Mat& rgb) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = rgb.cols;
  cinfo.image_height = rgb.rows;
  cinfo.input_components = 4;
  cinfo.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 90, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(4 * rgb.cols);
  for (int y = 0; y < rgb.rows; ++y) {
    for (int x = 0; x < rgb.cols; ++x) {
      const uint8_t* p = rgb.ptr(y) + 3 * x;
      row[4 * x + 0] = 255 - p[0];
      row[4 * x + 1] = 255 - p[1];
      row[4 * x + 2] = 255 - p[2];
      row[4 * x + 3] = 0;
    }
    JSAMPROW pointer = row.data();
    jpeg_write_scanlines(&cinfo, &pointer, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buffer), size);
  std::free(buffer);
  jpeg_destroy_compress(&cinfo);
  return out;
}

}  // namespace stoker::image::testing
