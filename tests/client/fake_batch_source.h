#ifndef STOKER_TESTS_CLIENT_FAKE_BATCH_SOURCE_H_
#define STOKER_TESTS_CLIENT_FAKE_BATCH_SOURCE_H_

// A scripted BatchSource for device loader tests. Next() returns the scripted
// batches and statuses in order; after the script it blocks until Cancel()
// and then returns CANCELLED (like a network loader waiting for data), or
// returns the status set by ReturnWhenExhausted (like a network loader asked
// for a batch before its next epoch was started).
// Batch pixels are a deterministic function of (epoch, batch_index, byte
// offset), written into memory from the given PixelAllocator (e.g. the
// device loader's pinned pool), so tests can recompute what they expect.
//
// Thread-safe: the script is built before use; Next() and Cancel() may run
// on different threads.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/batch_source.h"
#include "client/convert.h"
#include "client/host_batch.h"

namespace stoker::client {

struct FakeBatchSpec {
  int64_t epoch = 0;
  int64_t batch_index = 0;
  int n = 0;
  int height = 0;
  int width = 0;
  int channels = 3;
};

class FakeBatchSource : public BatchSource {
 public:
  // `allocator` (not owned) provides the pixel memory; null: the heap.
  explicit FakeBatchSource(PixelAllocator* allocator)
      : allocator_(allocator != nullptr ? allocator : &heap_) {}

  void AddBatch(const FakeBatchSpec& spec) {
    absl::MutexLock lock(&mu_);
    script_.push_back(Step{spec, absl::OkStatus()});
  }
  void AddStatus(absl::Status status) {
    absl::MutexLock lock(&mu_);
    script_.push_back(Step{FakeBatchSpec{}, std::move(status)});
  }
  // A batch whose labels do not match n.
  void AddMalformedBatch(const FakeBatchSpec& spec) {
    absl::MutexLock lock(&mu_);
    script_.push_back(Step{spec, absl::OkStatus(), /*malformed=*/true});
  }

  void ReturnWhenExhausted(absl::Status status) {
    absl::MutexLock lock(&mu_);
    exhausted_ = std::move(status);
  }

  absl::StatusOr<HostBatch> Next() override {
    Step step;
    {
      absl::MutexLock lock(&mu_);
      ++next_calls_;
      if (script_.empty() && !exhausted_.ok()) return exhausted_;
      mu_.Await(absl::Condition(
          +[](FakeBatchSource* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return s->cancelled_ || !s->script_.empty();
          },
          this));
      if (cancelled_) return absl::CancelledError("fake source cancelled");
      step = std::move(script_.front());
      script_.pop_front();
    }
    if (!step.status.ok()) return step.status;
    return MakeBatch(step.spec, step.malformed);
  }

  void Cancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

  int next_calls() const {
    absl::MutexLock lock(&mu_);
    return next_calls_;
  }

  static uint8_t Pixel(int64_t epoch, int64_t batch_index, size_t i) {
    uint64_t h = (static_cast<uint64_t>(epoch) * 0x9E3779B97F4A7C15ull) ^
                 (static_cast<uint64_t>(batch_index) * 0xC2B2AE3D27D4EB4Full) ^
                 (static_cast<uint64_t>(i) * 0x165667B19E3779F9ull);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return static_cast<uint8_t>(h);
  }

  static int32_t Label(int64_t batch_index, int i) {
    return static_cast<int32_t>(batch_index * 1000 + i * 7 - 3);
  }

  static int64_t SampleIndex(int64_t epoch, int64_t batch_index, int i) {
    return epoch * 1000000 + batch_index * 1000 + i;
  }

  // Everything but the pixels of the batch the source delivers for `spec`
  // (shape, labels, sample indices, keys, server).
  static HostBatch Info(const FakeBatchSpec& spec) {
    HostBatch b;
    b.epoch = spec.epoch;
    b.batch_index = spec.batch_index;
    b.n = spec.n;
    b.height = spec.height;
    b.width = spec.width;
    b.channels = spec.channels;
    for (int i = 0; i < spec.n; ++i) {
      b.labels.push_back(Label(spec.batch_index, i));
      b.sample_indices.push_back(
          SampleIndex(spec.epoch, spec.batch_index, i));
      b.keys.push_back(absl::StrCat("sample_", spec.batch_index, "_", i));
    }
    b.server = "fake:0";
    return b;
  }

  // The pixels MakeBatch writes for `spec`.
  static std::vector<uint8_t> Pixels(const FakeBatchSpec& spec) {
    std::vector<uint8_t> out(static_cast<size_t>(spec.n) * spec.height *
                             spec.width * spec.channels);
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = Pixel(spec.epoch, spec.batch_index, i);
    }
    return out;
  }

 private:
  struct Step {
    FakeBatchSpec spec;
    absl::Status status;
    bool malformed = false;
  };

  absl::StatusOr<HostBatch> MakeBatch(const FakeBatchSpec& spec,
                                      bool malformed) {
    HostBatch b = Info(spec);
    absl::StatusOr<PixelBuffer> pixels = allocator_->Allocate(b.pixel_bytes());
    if (!pixels.ok()) return pixels.status();
    b.pixels = *std::move(pixels);
    for (size_t i = 0; i < b.pixel_bytes(); ++i) {
      b.pixels.data()[i] = Pixel(spec.epoch, spec.batch_index, i);
    }
    if (malformed) b.labels.push_back(0);
    return b;
  }

  HeapPixelAllocator heap_;
  PixelAllocator* const allocator_;

  mutable absl::Mutex mu_;
  std::deque<Step> script_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status exhausted_ ABSL_GUARDED_BY(mu_);
  int next_calls_ ABSL_GUARDED_BY(mu_) = 0;
};


// What a device loader must deliver for `spec`: the host conversion of the
// fake pixels (ConvertOnHost is checked against an independent reference in
// convert_test), and the labels widened to int64.
inline std::vector<uint8_t> ExpectedConversion(const FakeBatchSpec& spec,
                                               const ConvertOptions& options) {
  const std::vector<uint8_t> pixels = FakeBatchSource::Pixels(spec);
  const ImageShape shape{spec.n, spec.height, spec.width, spec.channels};
  std::vector<uint8_t> out(ConvertedBytes(shape, options.dtype));
  absl::Status s = ConvertOnHost(pixels.data(), shape, options, out.data());
  if (!s.ok()) out.clear();  // never equal to a real conversion
  return out;
}

inline std::vector<int64_t> ExpectedLabels(const FakeBatchSpec& spec) {
  std::vector<int64_t> out;
  for (int i = 0; i < spec.n; ++i) {
    out.push_back(FakeBatchSource::Label(spec.batch_index, i));
  }
  return out;
}

}  // namespace stoker::client

#endif  // STOKER_TESTS_CLIENT_FAKE_BATCH_SOURCE_H_
