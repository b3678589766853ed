#ifndef STOKER_CLIENT_HOST_BATCH_H_
#define STOKER_CLIENT_HOST_BATCH_H_

// A batch as the client receives it: uint8 NHWC pixels in host memory plus
// per-sample labels, indices and keys.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/stoker.pb.h"

namespace stoker::client {

// Move-only owner of a byte range. The releaser (if any) runs exactly once,
// when the buffer is destroyed or reassigned; it is how pooled memory (e.g.
// pinned slots, see client/pinned_pool.h) goes back to its pool.
class PixelBuffer {
 public:
  using Releaser = std::function<void(uint8_t* data)>;

  PixelBuffer() = default;
  PixelBuffer(uint8_t* data, size_t size, Releaser release)
      : data_(data), size_(size), release_(std::move(release)) {}
  PixelBuffer(PixelBuffer&& other) noexcept { *this = std::move(other); }
  PixelBuffer& operator=(PixelBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      release_ = std::move(other.release_);
      other.release_ = nullptr;
    }
    return *this;
  }
  PixelBuffer(const PixelBuffer&) = delete;
  PixelBuffer& operator=(const PixelBuffer&) = delete;
  ~PixelBuffer() { Reset(); }

  // Plain heap memory, freed on destruction.
  static PixelBuffer Allocate(size_t size) {
    uint8_t* data = new uint8_t[size > 0 ? size : 1];
    return PixelBuffer(data, size, [](uint8_t* p) { delete[] p; });
  }

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Reset() {
    if (data_ != nullptr && release_) release_(data_);
    data_ = nullptr;
    size_ = 0;
    release_ = nullptr;
  }

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  Releaser release_;
};

// Where the loader puts received pixels. Implementations must be thread-safe;
// Allocate may block until memory is free (a bounded pool) and returns
// CANCELLED if the allocator is shut down while waiting.
class PixelAllocator {
 public:
  virtual ~PixelAllocator() = default;
  virtual absl::StatusOr<PixelBuffer> Allocate(size_t size) = 0;
};

// The default allocator: heap memory, never blocks. Released buffers are
// kept, up to `max_cached_bytes`, and handed out again for requests of
// between half their size and their size: fresh memory costs a page fault
// per 4 KiB on first touch, which on the receiving path is as much CPU as
// the copy into it. Thread-safe; buffers may outlive the allocator.
class HeapPixelAllocator : public PixelAllocator {
 public:
  explicit HeapPixelAllocator(size_t max_cached_bytes = size_t{1} << 30);
  absl::StatusOr<PixelBuffer> Allocate(size_t size) override;

  // Bytes held for reuse now (for tests).
  size_t cached_bytes() const;

 private:
  struct Cache;
  const std::shared_ptr<Cache> cache_;
};

// A sample the server skipped (corrupt, truncated, unlabeled), with why.
struct SkippedSample {
  int64_t sample_index = 0;
  std::string key;
  std::string shard;
  std::string reason;
};

// Server-side time spent on a batch, summed over its samples, in ns.
struct ServerTimings {
  int64_t read_ns = 0;
  int64_t decode_ns = 0;
  int64_t transform_ns = 0;
  int64_t assemble_wall_ns = 0;
};

// One requested field of a batch (LoaderOptions::fields). Image and mask
// pixels and bytes values lie in the batch's pixel buffer at
// [data_offset, data_offset + data_size).
struct FieldBatch {
  std::string name;
  v1::FieldRole role = v1::FIELD_ROLE_UNSPECIFIED;
  // Image and mask: (n, height, width, channels); image views (n, repeats,
  // height, width, 3); video (n, [clips,] frames, height, width, 3). Class
  // and bytes: (n).
  std::vector<int> shape;
  std::vector<int32_t> labels;   // class: n values (-1 = missing, kept)
  std::vector<int64_t> offsets;  // bytes: n + 1 offsets, relative
  size_t data_offset = 0;
  size_t data_size = 0;
  // Video: each frame's time in seconds (n x clips x frames), each video's
  // frame rate (n), and the frames the server decoded for the batch.
  std::vector<double> frame_times;
  std::vector<double> video_fps;
  int64_t frames_decoded = 0;
};

struct HostBatch {
  int64_t epoch = 0;
  int64_t batch_index = 0;
  // Shape (n, height, width, channels), layout NHWC, dtype uint8.
  int n = 0;
  int height = 0;
  int width = 0;
  int channels = 0;
  // n*height*width*channels image bytes, then (with fields) the masks and
  // the bytes fields' values.
  PixelBuffer pixels;
  // n entries; with fields, the first class field's (empty if none).
  std::vector<int32_t> labels;
  std::vector<int64_t> sample_indices;  // n entries, global dataset indices
  std::vector<std::string> keys;        // n entries
  // A mixture's: each sample's source (index into LoaderOptions::mixture;
  // sample_indices and keys are then that source's). Empty otherwise.
  std::vector<int32_t> sources;
  std::vector<SkippedSample> skipped;   // samples of this batch left out
  ServerTimings server_timings;
  // Every requested field, in request order; empty for a classic request.
  std::vector<FieldBatch> fields;
  // Which server sent it ("host:port").
  std::string server;
  // The pixels are a view of a shared-memory slot the server wrote into
  // (client/batch_region.h), not a received copy.
  bool shared_memory = false;

  size_t pixel_bytes() const {
    return static_cast<size_t>(n) * height * width * channels;
  }
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_HOST_BATCH_H_
