#include "server/grpc_service.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/batch_wire.h"
#include "common/grpc_status.h"
#include "spdlog/spdlog.h"

namespace stoker::server {
namespace {

grpc::ByteBuffer SerializedBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// Prefix slice plus a slice that owns and points into the pixel buffer,
// plus one that owns the bytes fields' values (if any); or, for a batch
// assembled in the client's shared memory, the header alone (the pixels'
// PixelBytes is dropped here: the region stays mapped while other batches
// of the stream use it).
grpc::ByteBuffer EncodeBatch(ReadyBatch batch) {
  if (batch.pixels->region_offset() >= 0 && batch.extra.empty()) {
    // Already in the client's shared memory: only the header travels.
    batch.header.set_shared_size(static_cast<int64_t>(batch.pixels->size()));
    return SerializedBuffer(common::EncodeBatchPrefix(batch.header, 0));
  }
  PixelBytes* pixels = batch.pixels.release();
  const size_t extra_size = batch.extra.size();
  grpc::Slice slices[3] = {
      grpc::Slice(common::EncodeBatchPrefix(batch.header,
                                            pixels->size() + extra_size)),
      grpc::Slice(
          pixels->data(), pixels->size(),
          [](void* p) { delete static_cast<PixelBytes*>(p); }, pixels),
      grpc::Slice()};
  if (extra_size == 0) return grpc::ByteBuffer(slices, 2);
  struct Extra {
    std::string bytes;
    MemoryBudget::Charge charge;
  };
  auto* extra = new Extra{std::move(batch.extra), std::move(batch.extra_charge)};
  slices[2] = grpc::Slice(
      extra->bytes.data(), extra->bytes.size(),
      [](void* p) { delete static_cast<Extra*>(p); }, extra);
  return grpc::ByteBuffer(slices, 3);
}

class StreamReactor;

// Lets threads that are not gRPC's (the stream's on_ready callback, the
// idle watchdog) call a reactor that gRPC may finish at any moment, with no
// lock held during the call: a reactor's calls start gRPC operations
// (StartWrite, Finish, TryCancel), and no lock may be held across those.
// A caller pins the reactor for the call (With); OnDone detaches it
// (Detach). The reactor is deleted by whoever comes last: OnDone when no
// pin is out, else the last pin's release. Thread-safe.
class Link {
 public:
  void Attach(StreamReactor* reactor) {
    absl::MutexLock lock(&mu_);
    reactor_ = reactor;
  }

  // Calls fn(reactor) if the reactor is not detached yet, with no lock
  // held; the reactor lives until fn returns.
  template <typename Fn>
  void With(Fn fn);

  // OnDone: no pin is taken from now on. Returns true if the caller must
  // delete the reactor now; false if a pin is out (its release deletes it).
  bool Detach(StreamReactor* reactor) {
    absl::MutexLock lock(&mu_);
    reactor_ = nullptr;
    if (pins_ == 0) return true;
    orphan_ = reactor;
    return false;
  }

 private:
  absl::Mutex mu_;
  StreamReactor* reactor_ ABSL_GUARDED_BY(mu_) = nullptr;
  int pins_ ABSL_GUARDED_BY(mu_) = 0;
  // Detached while pinned: the last pin deletes it.
  StreamReactor* orphan_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace

class GrpcService::Watchdog {
 public:
  explicit Watchdog(absl::Duration idle_timeout);
  ~Watchdog();

  void Add(const std::shared_ptr<Link>& link);
  void Remove(const Link* link);
  int64_t cancelled() const { return cancelled_.load(); }

 private:
  void Loop();

  const absl::Duration idle_timeout_;
  std::atomic<int64_t> cancelled_{0};
  absl::Mutex mu_;
  std::map<const Link*, std::shared_ptr<Link>> links_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is built
};

namespace {

// The job of the call's token if it may read `dataset`; "" when `auth` is
// null (no tokens).
absl::StatusOr<std::string> CheckToken(
    const TokenAuthorizer* auth, const grpc::CallbackServerContext* context,
    const std::string& dataset) {
  if (auth == nullptr) return std::string();
  const auto& metadata = context->client_metadata();
  const auto it = metadata.find("authorization");
  const absl::string_view value =
      it == metadata.end()
          ? absl::string_view()
          : absl::string_view(it->second.data(), it->second.size());
  return auth->Check(value, dataset);
}

// With tokens on, a NOT_FOUND names only the dataset asked for: the
// service's own message lists every dataset, which a job limited to some
// of them must not learn.
absl::Status Redact(const TokenAuthorizer* auth, const absl::Status& status,
                    const std::string& dataset) {
  if (auth == nullptr || !absl::IsNotFound(status)) return status;
  return absl::NotFoundError(
      absl::StrCat("unknown dataset '", dataset, "'"));
}

class StreamReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  StreamReactor(DataService* service, const TokenAuthorizer* auth,
                JobStreamLimits* job_limits, GrpcService::Watchdog* watchdog,
                grpc::CallbackServerContext* context,
                const grpc::ByteBuffer* request_bytes)
      : peer_(context->peer()),
        context_(context),
        watchdog_(watchdog),
        metrics_(service->metrics()) {
    v1::StreamBatchesRequest request;
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (request_bytes->Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    if (!request.ParseFromString(bytes)) {
      FinishOnce(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "StreamBatchesRequest does not parse"));
      return;
    }
    absl::StatusOr<std::string> job =
        CheckToken(auth, context, request.plan().dataset());
    if (job.ok() && job_limits != nullptr) {
      absl::StatusOr<std::unique_ptr<JobStreamLimits::Slot>> slot =
          job_limits->Acquire(*job);
      if (slot.ok()) {
        job_slot_ = *std::move(slot);
      } else {
        job = slot.status();
      }
    }
    if (!job.ok()) {
      spdlog::info("refused stream from {}: {}", peer_,
                   job.status().ToString());
      FinishOnce(common::ToGrpcStatus(job.status()));
      return;
    }
    link_ = std::make_shared<Link>();
    link_->Attach(this);
    watchdog_->Add(link_);
    std::shared_ptr<Link> link = link_;
    absl::StatusOr<std::shared_ptr<BatchStream>> stream =
        service->OpenStream(
            request,
            [link] { link->With([](StreamReactor* r) { r->Pump(); }); },
            *job);
    if (!stream.ok()) {
      spdlog::info("refused stream from {}: {}", peer_,
                   stream.status().ToString());
      FinishOnce(common::ToGrpcStatus(
          Redact(auth, stream.status(), request.plan().dataset())));
      return;
    }
    spdlog::debug("stream from {}: dataset {} epoch {} batches [{}, {})",
                  peer_, request.plan().dataset(), request.plan().epoch(),
                  request.start_batch(), request.end_batch());
    {
      absl::MutexLock lock(&mu_);
      stream_ = *std::move(stream);
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
    grpc::ByteBuffer sent;
    int64_t send_ns = 0;
    int64_t samples = -1;
    {
      absl::MutexLock lock(&mu_);
      write_in_flight_ = false;
      sent.Swap(&buffer_);
      send_ns = absl::ToInt64Nanoseconds(absl::Now() - write_started_);
      std::swap(samples, writing_samples_);
    }
    if (ok && samples >= 0 && metrics_ != nullptr) {
      metrics_->ObserveSend(send_ns, static_cast<int64_t>(sent.Length()),
                            samples);
    }
    // Freeing the batch gives its memory back to the budget, which may
    // grant it to another stream at once: never under mu_.
    sent.Clear();
    if (!ok) {
      FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "write failed; the client went away"));
      return;
    }
    Pump();
  }

  void OnCancel() override {
    CancelStream();
    FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    CancelStream();
    if (link_ == nullptr) {
      delete this;
      return;
    }
    watchdog_->Remove(link_.get());
    // A pin still out (a Pump or CancelIfIdle running on another thread)
    // deletes the reactor when it ends. The Link outlives that: the pin's
    // holder keeps a shared_ptr to it.
    std::shared_ptr<Link> link = link_;
    if (link->Detach(this)) delete this;
  }

  // Cancels the call if a write has waited for the client longer than
  // `timeout`: the client stopped reading, and the batch it does not take
  // holds memory. Called pinned (Link::With), with no lock held.
  bool CancelIfIdle(absl::Time now, absl::Duration timeout) {
    {
      absl::MutexLock lock(&mu_);
      if (!write_in_flight_ || idle_cancelled_ ||
          now - write_started_ < timeout) {
        return false;
      }
      idle_cancelled_ = true;
    }
    spdlog::warn("stream from {}: the client took nothing for {}; cancelled "
                 "to free its memory (--stream_idle_timeout)",
                 peer_, absl::FormatDuration(timeout));
    // gRPC runs OnCancel on its executor, not inside this call.
    TryCancelUnlocked();
    return true;
  }

 private:
  // The gRPC operations, each declared ABSL_LOCKS_EXCLUDED(mu_) so that
  // clang's thread-safety analysis refuses a call with mu_ held: gRPC may
  // run a reaction inline, and reactions take mu_.
  void StartWriteUnlocked(const grpc::ByteBuffer* message)
      ABSL_LOCKS_EXCLUDED(mu_) {
    StartWrite(message);
  }
  void StartWriteLastUnlocked(const grpc::ByteBuffer* message)
      ABSL_LOCKS_EXCLUDED(mu_) {
    StartWriteAndFinish(message, grpc::WriteOptions(), grpc::Status::OK);
  }
  void FinishUnlocked(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_) {
    Finish(status);
  }
  void TryCancelUnlocked() ABSL_LOCKS_EXCLUDED(mu_) { context_->TryCancel(); }

  enum class Action { kNothing, kWrite, kWriteLast, kFinish };

  void CancelStream() {
    std::shared_ptr<BatchStream> stream;
    {
      absl::MutexLock lock(&mu_);
      stream = std::move(stream_);
    }
    if (stream != nullptr) stream->Cancel();
  }

  // gRPC forbids starting an operation after Finish(), and a reactor may
  // be deleted as soon as Finish() is done, so StartWrite and Finish are
  // serialized by `op_busy_` (a token held while calling gRPC, without mu_
  // so that inline reactions cannot deadlock). A Finish requested while the
  // token is out is carried out by the token holder.
  void FinishOnce(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || pending_finish_.has_value()) return;
      if (op_busy_) {
        pending_finish_ = status;
        return;
      }
      finished_ = true;
      op_busy_ = true;
    }
    FinishUnlocked(status);
    // The reactor may already be gone: do not touch members after Finish.
  }

  // Starts the next write if none is in flight and something is ready.
  void Pump() {
    while (true) {
      Action action = Action::kNothing;
      grpc::Status final_status;
      {
        absl::MutexLock lock(&mu_);
        if (op_busy_ || finished_) return;
        if (pending_finish_.has_value()) {
          final_status = *pending_finish_;
          finished_ = true;
          action = Action::kFinish;
        } else if (stream_ != nullptr && !write_in_flight_) {
          action = Decide(&final_status);
        }
        if (action == Action::kNothing) return;
        op_busy_ = true;
      }
      switch (action) {
        case Action::kWrite:
          StartWriteUnlocked(&buffer_);
          break;
        case Action::kWriteLast:
          StartWriteLastUnlocked(&buffer_);
          return;  // the reactor may be gone
        case Action::kFinish:
          FinishUnlocked(final_status);
          return;  // the reactor may be gone
        case Action::kNothing:
          break;
      }
      absl::MutexLock lock(&mu_);
      op_busy_ = false;
      // Loop: a Finish may have been requested, or the write may already
      // be done (reactions can run inline).
    }
  }

  // Polls the stream; prepares buffer_ and returns what to start.
  Action Decide(grpc::Status* final_status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    BatchStream::Polled polled = stream_->Poll();
    switch (polled.kind) {
      case BatchStream::Polled::Kind::kBatch:
        writing_samples_ = polled.batch.header.sample_indices_size();
        buffer_ = EncodeBatch(std::move(polled.batch));
        write_in_flight_ = true;
        write_started_ = absl::Now();
        return Action::kWrite;
      case BatchStream::Polled::Kind::kSummary: {
        v1::StreamBatchesResponse response;
        *response.mutable_summary() = polled.summary;
        buffer_ = SerializedBuffer(response.SerializeAsString());
        write_in_flight_ = true;
        write_started_ = absl::Now();
        finished_ = true;
        spdlog::debug("stream from {} done: {} batches, {} samples, {} skipped",
                      peer_, polled.summary.batches(), polled.summary.samples(),
                      polled.summary.skipped_samples());
        return Action::kWriteLast;
      }
      case BatchStream::Polled::Kind::kError:
        finished_ = true;
        *final_status = common::ToGrpcStatus(polled.error);
        spdlog::warn("stream from {} failed: {}", peer_,
                     polled.error.ToString());
        return Action::kFinish;
      case BatchStream::Polled::Kind::kNotReady:
      case BatchStream::Polled::Kind::kEnd:
        break;
    }
    return Action::kNothing;
  }

  const std::string peer_;
  grpc::CallbackServerContext* const context_;
  // The job's stream slot (per-job limit), held until OnDone.
  std::unique_ptr<JobStreamLimits::Slot> job_slot_;
  GrpcService::Watchdog* const watchdog_;
  std::shared_ptr<Link> link_;

  absl::Mutex mu_;
  std::shared_ptr<BatchStream> stream_ ABSL_GUARDED_BY(mu_);
  // The message being written; untouched while write_in_flight_.
  grpc::ByteBuffer buffer_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time write_started_ ABSL_GUARDED_BY(mu_);
  // Samples of the batch being written; -1 when the write is not a batch.
  int64_t writing_samples_ ABSL_GUARDED_BY(mu_) = -1;
  ServerMetrics* const metrics_;
  bool idle_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Someone is calling StartWrite/Finish (see FinishOnce).
  bool op_busy_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> pending_finish_ ABSL_GUARDED_BY(mu_);
};

template <typename Fn>
void Link::With(Fn fn) {
  StreamReactor* reactor = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (reactor_ == nullptr) return;
    reactor = reactor_;
    ++pins_;
  }
  fn(reactor);
  StreamReactor* orphan = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (--pins_ == 0) orphan = std::exchange(orphan_, nullptr);
  }
  delete orphan;
}

}  // namespace

GrpcService::Watchdog::Watchdog(absl::Duration idle_timeout)
    : idle_timeout_(idle_timeout), thread_([this] { Loop(); }) {}

GrpcService::Watchdog::~Watchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void GrpcService::Watchdog::Add(const std::shared_ptr<Link>& link) {
  absl::MutexLock lock(&mu_);
  links_[link.get()] = link;
}

void GrpcService::Watchdog::Remove(const Link* link) {
  absl::MutexLock lock(&mu_);
  links_.erase(link);
}

void GrpcService::Watchdog::Loop() {
  const absl::Duration tick = std::clamp(idle_timeout_ / 4,
                                         absl::Milliseconds(10), absl::Seconds(1));
  while (true) {
    std::vector<std::shared_ptr<Link>> links;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), tick);
      if (stop_) return;
      for (const auto& [key, link] : links_) links.push_back(link);
    }
    const absl::Time now = absl::Now();
    for (const std::shared_ptr<Link>& link : links) {
      link->With([&](StreamReactor* reactor) {
        if (reactor->CancelIfIdle(now, idle_timeout_)) {
          cancelled_.fetch_add(1);
        }
      });
    }
  }
}

GrpcService::GrpcService(DataService* service, const GrpcServiceOptions& options)
    : service_(service),
      auth_(options.auth),
      job_limits_(options.auth != nullptr && options.max_streams_per_job > 0
                      ? std::make_unique<JobStreamLimits>(
                            options.max_streams_per_job)
                      : nullptr),
      watchdog_(std::make_unique<Watchdog>(options.stream_idle_timeout)) {}

GrpcService::~GrpcService() = default;

int64_t GrpcService::idle_streams_cancelled() const {
  return watchdog_->cancelled();
}

grpc::ServerUnaryReactor* GrpcService::GetDatasetInfo(
    grpc::CallbackServerContext* context,
    const v1::GetDatasetInfoRequest* request,
    v1::GetDatasetInfoResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::StatusOr<std::string> job =
          CheckToken(auth_.get(), context, request->dataset());
      !job.ok()) {
    reactor->Finish(common::ToGrpcStatus(job.status()));
    return reactor;
  }
  absl::StatusOr<v1::GetDatasetInfoResponse> info =
      service_->GetDatasetInfo(*request);
  if (info.ok()) *response = *std::move(info);
  reactor->Finish(common::ToGrpcStatus(
      Redact(auth_.get(), info.status(), request->dataset())));
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GrpcService::StreamBatches(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return new StreamReactor(service_, auth_.get(), job_limits_.get(),
                           watchdog_.get(), context, request);
}

}  // namespace stoker::server
