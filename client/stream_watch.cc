#include "client/stream_watch.h"

#include <utility>

namespace stoker::client {

StreamWatch::Id StreamWatch::Add(int64_t generation, absl::Time now,
                                 std::function<void()> cancel) {
  absl::MutexLock lock(&mu_);
  const Id id = next_id_++;
  Stream& stream = streams_[id];
  stream.generation = generation;
  stream.last_progress = now;
  stream.cancel = std::move(cancel);
  return id;
}

void StreamWatch::Progress(Id id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  streams_.at(id).last_progress = now;
}

void StreamWatch::SetBlockedOnAllocator(Id id, bool blocked, absl::Time now) {
  absl::MutexLock lock(&mu_);
  Stream& stream = streams_.at(id);
  stream.blocked_on_allocator = blocked;
  stream.last_progress = now;
}

bool StreamWatch::Remove(Id id) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(id);
  if (it == streams_.end()) return false;
  Stream* stream = &it->second;
  mu_.Await(absl::Condition(
      +[](Stream* s) { return s->cancelling == 0; }, stream));
  const bool stalled = stream->stalled;
  streams_.erase(it);
  return stalled;
}

int StreamWatch::CancelWhere(const std::function<bool(Stream&)>& pick) {
  // The callbacks (gRPC's TryCancel) run without mu_: Remove() keeps each
  // stream, and so what its callback refers to, until they have returned.
  std::vector<Stream*> picked;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, stream] : streams_) {
      if (!pick(stream)) continue;
      ++stream.cancelling;
      picked.push_back(&stream);
    }
  }
  for (Stream* stream : picked) stream->cancel();
  absl::MutexLock lock(&mu_);
  for (Stream* stream : picked) --stream->cancelling;
  return static_cast<int>(picked.size());
}

int StreamWatch::CancelStalled(absl::Time now, absl::Duration stall_timeout) {
  return CancelWhere([&](Stream& stream) {
    if (stream.blocked_on_allocator || stream.stalled ||
        now - stream.last_progress <= stall_timeout) {
      return false;
    }
    stream.stalled = true;
    return true;
  });
}

int StreamWatch::CancelBefore(int64_t generation) {
  return CancelWhere(
      [&](Stream& stream) { return stream.generation < generation; });
}

int StreamWatch::CancelAll() {
  return CancelWhere([](Stream&) { return true; });
}

int StreamWatch::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(streams_.size());
}

}  // namespace stoker::client
