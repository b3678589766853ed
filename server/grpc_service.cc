#include "server/grpc_service.h"

#include <memory>
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
  std::string* pixels = batch.pixels.release();
  grpc::Slice slices[2] = {
      grpc::Slice(common::EncodeBatchPrefix(batch.header, pixels->size())),
      grpc::Slice(
          pixels->data(), pixels->size(),
          [](void* p) { delete static_cast<std::string*>(p); }, pixels)};
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

  void FinishOnce(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(status);
  }

  // Starts the next write if none is in flight and something is ready.
  void Pump() {
    enum { kNothing, kWrite, kWriteLast, kFinish } action = kNothing;
    grpc::Status final_status;
    {
      absl::MutexLock lock(&mu_);
      if (write_in_flight_ || finished_ || stream_ == nullptr) return;
      BatchStream::Polled polled = stream_->Poll();
      switch (polled.kind) {
        case BatchStream::Polled::Kind::kBatch:
          buffer_ = EncodeBatch(std::move(polled.batch));
          write_in_flight_ = true;
          action = kWrite;
          break;
        case BatchStream::Polled::Kind::kSummary: {
          v1::StreamBatchesResponse response;
          *response.mutable_summary() = polled.summary;
          buffer_ = SerializedBuffer(response.SerializeAsString());
          write_in_flight_ = true;
          finished_ = true;
          action = kWriteLast;
          spdlog::debug("stream from {} done: {} batches, {} samples, {} "
                        "skipped",
                        peer_, polled.summary.batches(),
                        polled.summary.samples(),
                        polled.summary.skipped_samples());
          break;
        }
        case BatchStream::Polled::Kind::kError:
          finished_ = true;
          final_status = common::ToGrpcStatus(polled.error);
          action = kFinish;
          spdlog::warn("stream from {} failed: {}", peer_,
                       polled.error.ToString());
          break;
        case BatchStream::Polled::Kind::kNotReady:
        case BatchStream::Polled::Kind::kEnd:
          break;
      }
    }
    switch (action) {
      case kWrite:
        StartWrite(&buffer_);
        break;
      case kWriteLast:
        StartWriteAndFinish(&buffer_, grpc::WriteOptions(), grpc::Status::OK);
        break;
      case kFinish:
        Finish(final_status);
        break;
      case kNothing:
        break;
    }
  }

  const std::string peer_;
  std::shared_ptr<Link> link_;

  absl::Mutex mu_;
  std::shared_ptr<BatchStream> stream_ ABSL_GUARDED_BY(mu_);
  // The message being written; untouched while write_in_flight_.
  grpc::ByteBuffer buffer_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
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
