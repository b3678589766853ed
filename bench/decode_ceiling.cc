// decode_ceiling: how many JPEGs one core can decode, full frame, with
// libjpeg-turbo's defaults (JCS_RGB, default IDCT and upsampling). This is
// the per-core ceiling of a server that must decode every image in full;
// Stoker may beat it where DCT scaling decodes at a reduced size.
//
//   bazel-bin/bench/decode_ceiling --shards='/data/sample/sample-*.tar'
//
// Reads every readable JPEG sample into memory first, then decodes all of
// them on this one thread, round after round, until --min_seconds have
// passed. Prints "decode_ceiling_images_per_s=<R>" as the last line.

#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/command_line.h"
#include "server/dataset.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, shards, "", "Glob of the WebDataset .tar shards.");
ABSL_FLAG(double, min_seconds, 3.0, "Decode for at least this long.");
ABSL_FLAG(int64_t, max_images, 0,
          "If > 0, loads at most this many images (0 = all).");

namespace {

struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnError(j_common_ptr cinfo) {
  ErrorManager* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Reusable decoder: the output buffer keeps its capacity between images so
// the loop measures decoding, not allocation.
class Decoder {
 public:
  Decoder() {
    cinfo_.err = jpeg_std_error(&err_.pub);
    err_.pub.error_exit = OnError;
    jpeg_create_decompress(&cinfo_);
  }
  ~Decoder() { jpeg_destroy_decompress(&cinfo_); }
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Decodes `bytes` to packed RGB in an internal buffer.
  absl::Status Decode(const std::string& bytes) {
    if (setjmp(err_.jump)) {
      jpeg_abort_decompress(&cinfo_);
      return absl::DataLossError(err_.message);
    }
    jpeg_mem_src(&cinfo_, reinterpret_cast<const unsigned char*>(bytes.data()),
                 bytes.size());
    jpeg_read_header(&cinfo_, TRUE);
    cinfo_.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo_);
    const size_t stride = static_cast<size_t>(cinfo_.output_width) * 3;
    const size_t size = stride * cinfo_.output_height;
    if (pixels_.size() < size) pixels_.resize(size);
    while (cinfo_.output_scanline < cinfo_.output_height) {
      JSAMPROW row = pixels_.data() + stride * cinfo_.output_scanline;
      jpeg_read_scanlines(&cinfo_, &row, 1);
    }
    jpeg_finish_decompress(&cinfo_);
    return absl::OkStatus();
  }

 private:
  jpeg_decompress_struct cinfo_;
  ErrorManager err_;
  std::vector<unsigned char> pixels_;
};

}  // namespace

int main(int argc, char** argv) {
  stoker::common::SetUsage(
      "One-thread full-frame libjpeg-turbo decode rate over WebDataset "
      "shards.\nExample: decode_ceiling --shards='/data/sample-*.tar'");
  absl::ParseCommandLine(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  const std::string glob = absl::GetFlag(FLAGS_shards);
  const double min_seconds = absl::GetFlag(FLAGS_min_seconds);
  if (glob.empty() || !(min_seconds > 0)) {
    std::fprintf(stderr,
                 "decode_ceiling: give --shards=GLOB and --min_seconds > 0\n");
    return 2;
  }

  absl::StatusOr<std::unique_ptr<stoker::server::Dataset>> dataset =
      stoker::server::Dataset::Open("bench", glob);
  if (!dataset.ok()) {
    std::fprintf(stderr, "decode_ceiling: %s\n",
                 dataset.status().ToString().c_str());
    return 1;
  }
  std::vector<std::string> images;
  const int64_t max_images = absl::GetFlag(FLAGS_max_images);
  for (int64_t i = 0; i < (*dataset)->sample_count(); ++i) {
    if (max_images > 0 && static_cast<int64_t>(images.size()) >= max_images) {
      break;
    }
    const stoker::server::SampleRecord& record = (*dataset)->record(i);
    if (!record.defect.empty() ||
        record.format != stoker::server::ImageFormat::kJpeg) {
      continue;
    }
    std::string bytes;
    int32_t label = 0;
    if ((*dataset)->Read(i, &bytes, &label).ok()) {
      images.push_back(std::move(bytes));
    }
  }
  if (images.empty()) {
    std::fprintf(stderr, "decode_ceiling: no readable JPEG in %s\n",
                 glob.c_str());
    return 1;
  }

  Decoder decoder;
  // One untimed round warms caches and checks every image decodes.
  for (const std::string& image : images) {
    if (absl::Status s = decoder.Decode(image); !s.ok()) {
      std::fprintf(stderr, "decode_ceiling: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  int64_t decoded = 0;
  const absl::Time start = absl::Now();
  double seconds = 0;
  do {
    for (const std::string& image : images) {
      // Already checked above; a failure here would be a libjpeg bug.
      (void)decoder.Decode(image);
    }
    decoded += images.size();
    seconds = absl::ToDoubleSeconds(absl::Now() - start);
  } while (seconds < min_seconds);

  std::printf("images=%zu decoded=%lld seconds=%.3f\n", images.size(),
              static_cast<long long>(decoded), seconds);
  std::printf("decode_ceiling_images_per_s=%.1f\n", decoded / seconds);
  return 0;
}
