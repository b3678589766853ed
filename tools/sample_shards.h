#ifndef STOKER_TOOLS_SAMPLE_SHARDS_H_
#define STOKER_TOOLS_SAMPLE_SHARDS_H_

// Writing WebDataset shards: a minimal tar writer, a generator of synthetic
// photo-like image datasets (used by the demo, benchmarks and tests), and
// helpers that tests use to build damaged shards.
//
// Nothing here is thread-safe unless stated; distinct objects may be used
// from distinct threads.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::tools {

// Writes a POSIX ustar archive: 512-byte blocks, regular-file members with
// mode 0644, uid/gid 0 and a fixed mtime (so equal inputs give byte-identical
// files), terminated by two zero blocks. Names longer than 100 bytes use the
// ustar prefix field when they split at a '/', and a pax 'x' header
// otherwise. The output is readable by GNU tar and by
// stoker::server::ShardIndex.
//
// Move-only; owns the file descriptor. Destroying a writer without Finish()
// closes the file without an end-of-archive marker (a truncated archive).
class TarWriter {
 public:
  // Creates or truncates `path`. Errors are errno-mapped and name the path.
  static absl::StatusOr<TarWriter> Create(const std::string& path);

  TarWriter(TarWriter&& other) noexcept;
  TarWriter& operator=(TarWriter&& other) noexcept;
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;
  ~TarWriter();

  // Appends a regular file member `name` holding `data`.
  // InvalidArgument for an empty name, a name containing NUL, or data of
  // 8 GiB or more; FailedPrecondition after Finish(); errno-mapped write
  // errors.
  absl::Status Add(absl::string_view name, absl::string_view data);

  // Writes the end-of-archive marker and closes the file. FailedPrecondition
  // if called twice.
  absl::Status Finish();

  const std::string& path() const { return path_; }
  // Bytes written so far.
  int64_t bytes_written() const { return bytes_written_; }

 private:
  TarWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  absl::Status AddMember(absl::string_view name, char type,
                         absl::string_view data);
  absl::Status Write(const char* data, size_t size);

  std::string path_;
  int fd_ = -1;
  int64_t bytes_written_ = 0;
};

// One member for WriteTarFile.
struct TarMember {
  std::string name;
  std::string data;
};

// Writes `members` in order to a complete tar file at `path` (TarWriter).
// Tests use it to build shards with corrupt images, missing labels, odd
// names or bad label text.
absl::Status WriteTarFile(const std::string& path,
                          const std::vector<TarMember>& members);

// Shrinks (or zero-extends) `path` to `new_size` bytes, e.g. to cut a shard
// in the middle of a member. Errno-mapped errors naming the path.
absl::Status TruncateFile(const std::string& path, int64_t new_size);

// Settings for WriteSampleShards. Every sample is a pure function of
// (seed, shard number, sample number) and the image/label fields below, so
// equal options produce byte-identical shards.
struct SampleShardsOptions {
  // Output directory; created (with parents) if missing. Required.
  std::string dir;
  // Shard file names are "{prefix}-{shard:06}.tar"; sample keys are
  // "{prefix}{shard:04}_{sample:05}". Non-empty, no '/'.
  std::string prefix = "sample";
  // Number of shards, in [1, 999999].
  int num_shards = 4;
  // Samples in each shard, in [1, 99999].
  int samples_per_shard = 64;
  // Image width and height are each in [min_side, max_side] pixels;
  // 8 <= min_side <= max_side <= 8192. About 40% of images are 500x375 or
  // 375x500 (clamped into the range); the rest mix common aspect ratios.
  int min_side = 200;
  int max_side = 640;
  // Labels are in [0, num_classes). At least 1.
  int num_classes = 10;
  // Seed of the whole dataset.
  uint64_t seed = 1;
  // JPEG quality, 1..100.
  int jpeg_quality = 90;
  // Fraction of samples written as .png instead of .jpg, in [0, 1].
  double png_fraction = 0;
};

// InvalidArgument, with a message saying which field and its allowed range,
// if `options` is unusable.
absl::Status ValidateSampleShardsOptions(const SampleShardsOptions& options);

// What WriteSampleShards writes for one sample, without rendering it.
struct SampleSpec {
  std::string key;
  int width = 0;
  int height = 0;
  int32_t label = 0;
  // True for a .png member, false for .jpg.
  bool png = false;
};

// The spec of sample `sample` of shard `shard` (0-based). Requires valid
// options (ValidateSampleShardsOptions).
SampleSpec DescribeSample(const SampleShardsOptions& options, int shard,
                          int sample);

// The encoded image bytes of that sample: a photo-like picture (smooth colour
// gradient whose base hue follows the label, random ellipses, rectangles and
// lines, slight blur, mild per-pixel noise) of the spec's size, encoded as
// JPEG (options.jpeg_quality) or PNG. Internal error if OpenCV fails.
absl::StatusOr<std::string> RenderSampleImage(
    const SampleShardsOptions& options, int shard, int sample);

// Path of shard `shard`: "{dir}/{prefix}-{shard:06}.tar".
std::string SampleShardPath(const SampleShardsOptions& options, int shard);

// Writes options.num_shards shards, each with options.samples_per_shard
// samples ("{key}.cls" holding "<label>\n", then "{key}.jpg" or
// "{key}.png"). Each shard is written to "<path>.tmp" and renamed into place,
// so a crash never leaves a complete-looking partial shard. Returns the shard
// paths in order. InvalidArgument for bad options; errno-mapped I/O errors.
absl::StatusOr<std::vector<std::string>> WriteSampleShards(
    const SampleShardsOptions& options);

}  // namespace stoker::tools

#endif  // STOKER_TOOLS_SAMPLE_SHARDS_H_
