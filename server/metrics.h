#ifndef STOKER_SERVER_METRICS_H_
#define STOKER_SERVER_METRICS_H_

// The server's live measurements for Prometheus (prometheus-cpp): latency
// histograms fed as work happens, and counters of what was sent. Figures
// the server already keeps (streams, memory, storage, client reports) are
// read at scrape time by server/metrics_exporter.h instead.
//
//   stoker_stage_seconds{stage="read"|"decode"|"transform"}  per sample
//   stoker_batch_seconds{stage="assemble"|"queue_wait"|"send"}  per batch:
//       scheduled until its samples are done; done until the transport
//       takes it; taken until written to the client
//   stoker_batches_total, stoker_samples_total, stoker_sent_bytes_total
//   stoker_bad_samples_total{code}  skipped or failing samples, by status
//       code (DATA_LOSS, INVALID_ARGUMENT, ...)
//   stoker_mixture_samples_total{dataset}  samples of mixture batches, by
//       the source dataset they came from
//
// Thread-safe.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace stoker::server {

class ServerMetrics {
 public:
  ServerMetrics();
  ~ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  void ObserveSample(int64_t read_ns, int64_t decode_ns, int64_t transform_ns);
  void ObserveAssemble(int64_t ns);
  void ObserveQueueWait(int64_t ns);
  // A batch written to its client: how long the write took, its bytes and
  // samples.
  void ObserveSend(int64_t ns, int64_t bytes, int64_t samples);
  void CountBadSample(absl::StatusCode code);
  // `samples` samples of a mixture's batch came from `dataset`.
  void CountMixtureSamples(const std::string& dataset, int64_t samples);

  const std::shared_ptr<prometheus::Registry>& registry() const;

 private:
  struct Instruments;
  std::unique_ptr<Instruments> instruments_;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_METRICS_H_
