#include "server/stream_admission.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace stoker::server {

struct StreamAdmission::State {
  absl::Mutex mu;
  bool draining ABSL_GUARDED_BY(mu) = false;
  // Slots granted and not yet released.
  int64_t open ABSL_GUARDED_BY(mu) = 0;
  int64_t opened ABSL_GUARDED_BY(mu) = 0;
  int64_t refused ABSL_GUARDED_BY(mu) = 0;
  // The tracked streams among them, for StartDraining.
  std::map<const BatchStream*, std::weak_ptr<BatchStream>> live
      ABSL_GUARDED_BY(mu);
  bool NoneOpen() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return open == 0; }

  void Release() {
    absl::MutexLock lock(&mu);
    --open;
  }
};

StreamAdmission::StreamAdmission(int max_streams)
    : max_streams_(max_streams), state_(std::make_shared<State>()) {}

StreamAdmission::Slot::~Slot() {
  if (state_ != nullptr) state_->Release();
}

absl::StatusOr<StreamAdmission::Slot> StreamAdmission::Admit() {
  absl::MutexLock lock(&state_->mu);
  if (state_->draining) {
    ++state_->refused;
    return absl::UnavailableError(
        "server is draining (shutting down); ask another server");
  }
  if (state_->open >= max_streams_) {
    ++state_->refused;
    return absl::ResourceExhaustedError(absl::StrCat(
        "server is at its limit of ", max_streams_,
        " concurrent streams (--max_streams); retry later or elsewhere"));
  }
  ++state_->open;
  ++state_->opened;
  return Slot(state_);
}

std::shared_ptr<BatchStream> StreamAdmission::Track(
    Slot slot, std::shared_ptr<BatchStream> stream) {
  std::shared_ptr<State> state = std::move(slot.state_);
  bool drain_now;
  {
    absl::MutexLock lock(&state->mu);
    state->live[stream.get()] = stream;
    drain_now = state->draining;  // draining began since admission
  }
  if (drain_now) stream->Drain();
  BatchStream* raw = stream.get();
  return std::shared_ptr<BatchStream>(
      raw, [stream = std::move(stream), state](BatchStream* p) mutable {
        stream.reset();
        absl::MutexLock lock(&state->mu);
        state->live.erase(p);
        --state->open;
      });
}

std::optional<int64_t> StreamAdmission::StartDraining() {
  std::vector<std::shared_ptr<BatchStream>> streams;
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->draining) return std::nullopt;
    state_->draining = true;
    for (const auto& [raw, weak] : state_->live) {
      if (std::shared_ptr<BatchStream> s = weak.lock()) streams.push_back(s);
    }
  }
  // Outside the lock: Drain wakes the transport.
  for (const std::shared_ptr<BatchStream>& s : streams) s->Drain();
  return static_cast<int64_t>(streams.size());
}

bool StreamAdmission::WaitForNoneOpen(absl::Duration timeout) {
  absl::MutexLock lock(&state_->mu);
  return state_->mu.AwaitWithTimeout(
      absl::Condition(state_.get(), &State::NoneOpen), timeout);
}

StreamAdmission::Stats StreamAdmission::stats() const {
  absl::MutexLock lock(&state_->mu);
  return Stats{state_->opened, state_->refused, state_->open};
}

}  // namespace stoker::server
