#include "server/grpc_service.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
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

// Prefix slice plus a slice that owns and points into the pixel buffer.
grpc::ByteBuffer EncodeBatch(ReadyBatch batch) {
  PixelBytes* pixels = batch.pixels.release();
  grpc::Slice slices[2] = {
      grpc::Slice(common::EncodeBatchPrefix(batch.header, pixels->size)),
      grpc::Slice(
          pixels->data.get(), pixels->size,
          [](void* p) { delete static_cast<PixelBytes*>(p); }, pixels)};
  return grpc::ByteBuffer(slices, 2);
}

class StreamReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  StreamReactor(DataService* service, grpc::CallbackServerContext* context,
                const grpc::ByteBuffer* request_bytes)
      : peer_(context->peer()) {
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
    link_ = std::make_shared<Link>();
    link_->reactor = this;
    std::shared_ptr<Link> link = link_;
    absl::StatusOr<std::shared_ptr<BatchStream>> stream =
        service->OpenStream(request, [link] {
          absl::MutexLock lock(&link->mu);
          if (link->reactor != nullptr) link->reactor->Pump();
        });
    if (!stream.ok()) {
      spdlog::info("refused stream from {}: {}", peer_,
                   stream.status().ToString());
      FinishOnce(common::ToGrpcStatus(stream.status()));
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
    {
      absl::MutexLock lock(&mu_);
      write_in_flight_ = false;
      buffer_.Clear();
    }
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
    if (link_ != nullptr) {
      absl::MutexLock lock(&link_->mu);
      link_->reactor = nullptr;
    }
    CancelStream();
    delete this;
  }

 private:
  enum class Action { kNothing, kWrite, kWriteLast, kFinish };

  // Lets the stream's on_ready callback reach the reactor only while it is
  // alive: OnDone clears `reactor` under `mu`, which the callback holds.
  struct Link {
    absl::Mutex mu;
    StreamReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };

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
    Finish(status);
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
          StartWrite(&buffer_);
          break;
        case Action::kWriteLast:
          StartWriteAndFinish(&buffer_, grpc::WriteOptions(),
                              grpc::Status::OK);
          return;  // the reactor may be gone
        case Action::kFinish:
          Finish(final_status);
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
        buffer_ = EncodeBatch(std::move(polled.batch));
        write_in_flight_ = true;
        return Action::kWrite;
      case BatchStream::Polled::Kind::kSummary: {
        v1::StreamBatchesResponse response;
        *response.mutable_summary() = polled.summary;
        buffer_ = SerializedBuffer(response.SerializeAsString());
        write_in_flight_ = true;
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
  std::shared_ptr<Link> link_;

  absl::Mutex mu_;
  std::shared_ptr<BatchStream> stream_ ABSL_GUARDED_BY(mu_);
  // The message being written; untouched while write_in_flight_.
  grpc::ByteBuffer buffer_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Someone is calling StartWrite/Finish (see FinishOnce).
  bool op_busy_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> pending_finish_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerUnaryReactor* GrpcService::GetDatasetInfo(
    grpc::CallbackServerContext* context,
    const v1::GetDatasetInfoRequest* request,
    v1::GetDatasetInfoResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<v1::GetDatasetInfoResponse> info =
      service_->GetDatasetInfo(*request);
  if (info.ok()) *response = *std::move(info);
  reactor->Finish(common::ToGrpcStatus(info.status()));
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GrpcService::StreamBatches(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return new StreamReactor(service_, context, request);
}

}  // namespace stoker::server
