// transport_bench: throughput of the gRPC transport alone, as Stoker uses it.
//
// An in-process server (127.0.0.1, port 0) answers StreamBatches by sending
// one cached batch (--batch x --size x --size x 3 uint8, 38.5 MB by default)
// --batches_per_stream times, encoded exactly like the real server does it
// (common::EncodeBatchPrefix + a slice pointing at the pixels, no copy; one
// write in flight per stream). An in-process client reads each stream with
// client::StreamReader, which copies the pixels once into a buffer handed out
// by a PixelAllocator; here that buffer is one preallocated block reused for
// every batch, so no allocation or page faulting is measured.
//
// Streams are opened back to back (--streams at a time) until --min_seconds
// have passed. Prints "grpc_gbytes_per_s=<R>" (pixel bytes delivered per
// second, 1 GB = 1e9 bytes) as the last line.
//
// Decoding nothing and transforming nothing, this is the upper bound the
// wire puts on a Stoker client: compare it with raw TCP (iperf3).
//
// Split mode measures the training host's cost, the client's CPU per image,
// apart from the server's: `--serve_port=P` only serves (until SIGTERM or
// SIGINT), `--connect=HOST:P` only receives and also prints
// "client_cpu_ms_per_image=<C> user=<U> sys=<S>" (its own process CPU time,
// getrusage, over the timed streams, per image received). A --serve_port
// process also answers GetDatasetInfo, so stoker_fetch --batch_size=<--batch>
// can stream from it: the whole client's CPU per image on cached batches.

#include <sys/resource.h>

#include <atomic>
#include <csignal>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/channel.h"
#include "client/host_batch.h"
#include "client/stream_reader.h"
#include "common/batch_wire.h"
#include "common/command_line.h"
#include "common/malloc_tuning.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "common/atomic_file.h"
#include "proto/stoker.grpc.pb.h"
#include "proto/stoker.pb.h"

ABSL_FLAG(int, batch, 256, "Images per batch.");
ABSL_FLAG(int, size, 224, "Image height and width in pixels.");
ABSL_FLAG(int, batches_per_stream, 16, "Batches sent per StreamBatches call.");
ABSL_FLAG(int, streams, 1, "Concurrent streams (one client thread each).");
ABSL_FLAG(double, min_seconds, 3.0, "Measure for at least this long.");
ABSL_FLAG(int, serve_port, -1,
          "Split mode: only serve, on 127.0.0.1:<port> (0 picks one; the "
          "port is printed as 'listening on port <P>'), until SIGTERM or SIGINT.");
ABSL_FLAG(std::string, port_file, "",
          "Split mode: written atomically with the line port=<P> once "
          "serving (as stoker_server's --port_file).");
ABSL_FLAG(int64_t, batches_per_epoch, 64,
          "Split mode's dataset for stoker_fetch: GetDatasetInfo reports "
          "this many batches of --batch samples (stoker_fetch's --batch_size "
          "must equal --batch).");
ABSL_FLAG(std::string, connect, "",
          "Split mode: only receive, from this host:port (a --serve_port "
          "process), and print the client's CPU per image.");
ABSL_FLAG(std::vector<std::string>, grpc_args, {},
          "Extra integer gRPC channel arguments NAME=VALUE, comma-separated, "
          "set on both the server and the client (for tuning experiments, "
          "e.g. grpc.experimental.tcp_min_read_chunk_size=1048576).");

namespace {

using stoker::client::HostBatch;
using stoker::client::PixelAllocator;
using stoker::client::PixelBuffer;
using stoker::client::StreamReader;
namespace v1 = stoker::v1;

// The batch every stream sends: pixels plus the metadata the real server
// puts in the header (labels, indices, keys), so prefixes are realistic.
struct CachedBatch {
  std::string pixels;
  v1::Batch header;  // everything but pixels; batch_index set per write
};

CachedBatch MakeCachedBatch(int n, int size) {
  CachedBatch batch;
  batch.pixels.resize(static_cast<size_t>(n) * size * size * 3);
  for (size_t i = 0; i < batch.pixels.size(); ++i) {
    batch.pixels[i] = static_cast<char>((i * 131) >> 7);
  }
  v1::Batch& h = batch.header;
  for (int d : {n, size, size, 3}) h.add_shape(d);
  h.set_dtype(v1::DTYPE_UINT8);
  h.set_layout(v1::LAYOUT_NHWC);
  for (int i = 0; i < n; ++i) {
    h.add_labels(i % 1000);
    h.add_sample_indices(i);
    h.add_keys(absl::StrCat("sample-000000/", 1000000 + i));
  }
  return batch;
}

// One stream: batches [begin, end) (the cached pixels under each index),
// one write in flight, then a summary.
class Reactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  Reactor(const CachedBatch* batch, int64_t begin, int64_t end)
      : batch_(batch), count_(end - begin), first_(begin) {
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    if (sent_ == count_) {
      v1::StreamBatchesResponse response;
      response.mutable_summary()->set_batches(count_);
      response.mutable_summary()->set_samples(count_ *
                                              batch_->header.shape(0));
      grpc::Slice slice(response.SerializeAsString());
      buffer_ = grpc::ByteBuffer(&slice, 1);
      StartWriteAndFinish(&buffer_, grpc::WriteOptions(), grpc::Status::OK);
      return;
    }
    v1::Batch header = batch_->header;
    header.set_batch_index(first_ + sent_++);
    // The pixel slice borrows the cached buffer, which outlives the server,
    // so its destroy function has nothing to free.
    grpc::Slice slices[2] = {
        grpc::Slice(stoker::common::EncodeBatchPrefix(header,
                                                      batch_->pixels.size())),
        grpc::Slice(const_cast<char*>(batch_->pixels.data()),
                    batch_->pixels.size(), [](void*) {}, nullptr)};
    buffer_ = grpc::ByteBuffer(slices, 2);
    StartWrite(&buffer_);
  }

  const CachedBatch* const batch_;
  const int64_t count_;
  const int64_t first_;
  int64_t sent_ = 0;
  grpc::ByteBuffer buffer_;
};

// StreamBatches as above, and GetDatasetInfo describing a dataset of
// `batches_per_epoch` cached batches, so stoker_fetch (the whole client) can
// stream from it too.
class BenchService final
    : public v1::Stoker::WithCallbackMethod_GetDatasetInfo<
          v1::Stoker::WithRawCallbackMethod_StreamBatches<
              v1::Stoker::Service>> {
 public:
  BenchService(const CachedBatch* batch, int64_t batches_per_epoch)
      : batch_(batch), batches_per_epoch_(batches_per_epoch) {}

  grpc::ServerUnaryReactor* GetDatasetInfo(
      grpc::CallbackServerContext* context,
      const v1::GetDatasetInfoRequest* request,
      v1::GetDatasetInfoResponse* response) override {
    response->set_dataset(request->dataset());
    response->set_sample_count(batches_per_epoch_ * batch_->header.shape(0));
    response->set_shard_count(1);
    response->set_fingerprint("cached-batch");
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* StreamBatches(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request_bytes) override {
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (request_bytes->Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    v1::StreamBatchesRequest request;
    request.ParseFromString(bytes);
    return new Reactor(batch_, request.start_batch(),
                       std::max(request.start_batch() + 1,
                                request.end_batch()));
  }

 private:
  const CachedBatch* const batch_;
  const int64_t batches_per_epoch_;
};

// Hands out the same preallocated block for every batch.
class ReusedAllocator final : public PixelAllocator {
 public:
  explicit ReusedAllocator(size_t capacity) : block_(capacity) {}
  absl::StatusOr<PixelBuffer> Allocate(size_t size) override {
    if (size > block_.size()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("batch of ", size, " bytes exceeds the ",
                       block_.size(), "-byte buffer"));
    }
    return PixelBuffer(block_.data(), size, nullptr);
  }

 private:
  std::vector<uint8_t> block_;
};

// Runs streams, at least one, until `deadline`; adds delivered pixel bytes to `*bytes`.
absl::Status ClientLoop(grpc::Channel* channel, int64_t batches_per_stream,
                        size_t batch_bytes, absl::Time deadline,
                        std::atomic<int64_t>* bytes) {
  ReusedAllocator allocator(batch_bytes);
  v1::StreamBatchesRequest request;
  request.set_end_batch(batches_per_stream);
  do {
    grpc::ClientContext context;
    StreamReader reader(channel, &context, request);
    while (reader.Read()) {
      absl::StatusOr<std::optional<HostBatch>> batch =
          reader.Decode(&allocator);
      if (!batch.ok()) return batch.status();
      if (batch->has_value()) *bytes += (*batch)->pixels.size();
    }
    if (absl::Status s = reader.Finish(); !s.ok()) return s;
  } while (absl::Now() < deadline);
  return absl::OkStatus();
}

// Parses --grpc_args into (name, value) pairs.
absl::StatusOr<std::vector<std::pair<std::string, int>>> ParseGrpcArgs(
    const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, int>> parsed;
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    int value = 0;
    if (eq == std::string::npos || eq == 0 ||
        !absl::SimpleAtoi(arg.substr(eq + 1), &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--grpc_args: want NAME=INT, got '", arg, "'"));
    }
    parsed.emplace_back(arg.substr(0, eq), value);
  }
  return parsed;
}

// The process's user and system CPU seconds so far.
std::pair<double, double> CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return {seconds(usage.ru_utime), seconds(usage.ru_stime)};
}

std::unique_ptr<grpc::Server> StartServer(
    BenchService* service, const std::string& address,
    const std::vector<std::pair<std::string, int>>& grpc_args, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
  builder.RegisterService(service);
  builder.SetMaxReceiveMessageSize(4 << 20);
  builder.SetMaxSendMessageSize(INT_MAX);
  for (const auto& [name, value] : grpc_args) {
    builder.AddChannelArgument(name, value);
  }
  return builder.BuildAndStart();
}

// Receives for `min_seconds` over `streams` concurrent streams from
// `address` and prints the figures. Returns the exit code.
int RunClient(const std::string& address,
              const std::vector<std::pair<std::string, int>>& grpc_args,
              size_t batch_bytes, int images_per_batch, int per_stream,
              int streams, double min_seconds, bool report_cpu) {
  // The real client's settings, plus any --grpc_args on top.
  grpc::ChannelArguments args = stoker::client::StokerChannelArguments(1 << 30);
  for (const auto& [name, value] : grpc_args) args.SetInt(name, value);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args);

  // One short untimed stream sets up the connection and warms the buffers.
  std::atomic<int64_t> bytes{0};
  if (absl::Status s = ClientLoop(channel.get(), 2, batch_bytes, absl::Now(),
                                  &bytes);
      !s.ok()) {
    std::fprintf(stderr, "transport_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  bytes = 0;

  const auto [user_before, sys_before] = CpuSeconds();
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + absl::Seconds(min_seconds);
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(streams);
  for (int i = 0; i < streams; ++i) {
    threads.emplace_back([&, i] {
      results[i] = ClientLoop(channel.get(), per_stream, batch_bytes,
                              deadline, &bytes);
    });
  }
  for (std::thread& t : threads) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const auto [user_after, sys_after] = CpuSeconds();
  for (const absl::Status& s : results) {
    if (!s.ok()) {
      std::fprintf(stderr, "transport_bench: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::printf("batch_bytes=%zu bytes=%lld seconds=%.3f streams=%d\n",
              batch_bytes, static_cast<long long>(bytes.load()), seconds,
              streams);
  if (report_cpu) {
    const double images = static_cast<double>(bytes.load()) / batch_bytes *
                          images_per_batch;
    const double user = user_after - user_before;
    const double sys = sys_after - sys_before;
    std::printf("client_cpu_ms_per_image=%.4f user=%.4f sys=%.4f "
                "images=%.0f\n",
                (user + sys) * 1e3 / images, user * 1e3 / images,
                sys * 1e3 / images, images);
  }
  std::printf("grpc_gbytes_per_s=%.3f\n", bytes.load() / seconds / 1e9);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Same process settings as stoker_server and stoker_fetch.
  stoker::common::TuneMallocForLargeBuffers();
  stoker::common::SetUsage(
      "gRPC transport throughput with Stoker's zero-copy batch encoding, "
      "in one process over 127.0.0.1, or split into a serving and a "
      "receiving process (--serve_port, --connect) to measure the client's "
      "CPU per image.");
  absl::ParseCommandLine(argc, argv);
  const int n = absl::GetFlag(FLAGS_batch);
  const int size = absl::GetFlag(FLAGS_size);
  const int per_stream = absl::GetFlag(FLAGS_batches_per_stream);
  const int streams = absl::GetFlag(FLAGS_streams);
  const double min_seconds = absl::GetFlag(FLAGS_min_seconds);
  const int serve_port = absl::GetFlag(FLAGS_serve_port);
  const std::string connect = absl::GetFlag(FLAGS_connect);
  if (n < 1 || size < 1 || per_stream < 1 || streams < 1 ||
      !(min_seconds > 0)) {
    std::fprintf(stderr, "transport_bench: every flag must be positive\n");
    return 2;
  }
  if (serve_port >= 0 && !connect.empty()) {
    std::fprintf(stderr,
                 "transport_bench: --serve_port and --connect exclude each "
                 "other (run two processes)\n");
    return 2;
  }

  absl::StatusOr<std::vector<std::pair<std::string, int>>> grpc_args =
      ParseGrpcArgs(absl::GetFlag(FLAGS_grpc_args));
  if (!grpc_args.ok()) {
    std::fprintf(stderr, "transport_bench: %s\n",
                 std::string(grpc_args.status().message()).c_str());
    return 2;
  }
  const size_t batch_bytes = static_cast<size_t>(n) * size * size * 3;

  if (!connect.empty()) {
    return RunClient(connect, *grpc_args, batch_bytes, n, per_stream, streams,
                     min_seconds, /*report_cpu=*/true);
  }

  const CachedBatch batch = MakeCachedBatch(n, size);
  BenchService service(&batch, absl::GetFlag(FLAGS_batches_per_epoch));
  int port = 0;
  const bool serve_only = serve_port >= 0;
  std::unique_ptr<grpc::Server> server = StartServer(
      &service,
      absl::StrCat("127.0.0.1:", serve_only ? serve_port : 0), *grpc_args,
      &port);
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "transport_bench: cannot listen on 127.0.0.1\n");
    return 1;
  }
  if (serve_only) {
    std::printf("listening on port %d\n", port);
    std::fflush(stdout);
    if (const std::string port_file = absl::GetFlag(FLAGS_port_file);
        !port_file.empty()) {
      const absl::Status written = stoker::common::WriteFileAtomically(
          port_file, absl::StrCat("port=", port, "\n"));
      if (!written.ok()) {
        std::fprintf(stderr, "transport_bench: --port_file: %s\n",
                     written.ToString().c_str());
        return 2;
      }
    }
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    int signal = 0;
    sigwait(&signals, &signal);
    server->Shutdown();
    return 0;
  }
  const int code =
      RunClient(absl::StrCat("127.0.0.1:", port), *grpc_args, batch_bytes, n,
                per_stream, streams, min_seconds, /*report_cpu=*/false);
  server->Shutdown();
  return code;
}
