#ifndef STOKER_SERVER_STORAGE_WAIT_H_
#define STOKER_SERVER_STORAGE_WAIT_H_

// The read stage's time for a stream whose samples wait for object storage
// without holding a worker (server/prefetcher.h: a sample's task is queued
// once its bytes have arrived). A worker that waited would have counted
// that wait as reading; here the stream counts it: while some of its
// samples wait for bytes and none is queued or being processed, the stream
// is starved by storage, and each of min(waiting, workers) workers it
// could have used is counted as reading. So the read stage still says
// when storage, not decode, is the bottleneck (stoker.diagnose), and
// costs nothing while prefetching keeps up.
//
// Pure arithmetic over the times the caller passes. Not thread-safe.

#include <algorithm>
#include <cstdint>

namespace stoker::server {

class StorageWait {
 public:
  explicit StorageWait(int workers) : workers_(std::max(1, workers)) {}

  // A sample now waits for its bytes.
  void Waiting(int64_t now_ns) { Advance(now_ns); ++waiting_; }
  // A waiting sample's bytes arrived: its task is queued.
  void Arrived(int64_t now_ns) {
    Advance(now_ns);
    --waiting_;
    ++runnable_;
  }
  // A queued sample was processed.
  void Done(int64_t now_ns) { Advance(now_ns); --runnable_; }

  // Reading time accrued since the last call (worker-nanoseconds).
  int64_t Take(int64_t now_ns) {
    Advance(now_ns);
    const int64_t taken = accrued_ns_;
    accrued_ns_ = 0;
    return taken;
  }

  int waiting() const { return waiting_; }
  int runnable() const { return runnable_; }

 private:
  void Advance(int64_t now_ns) {
    if (waiting_ > 0 && runnable_ == 0 && now_ns > last_ns_) {
      accrued_ns_ += (now_ns - last_ns_) * std::min(waiting_, workers_);
    }
    last_ns_ = std::max(last_ns_, now_ns);
  }

  const int workers_;
  int waiting_ = 0;
  int runnable_ = 0;
  int64_t last_ns_ = 0;
  int64_t accrued_ns_ = 0;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_STORAGE_WAIT_H_
