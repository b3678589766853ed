#ifndef STOKER_SERVER_METRICS_EXPORTER_H_
#define STOKER_SERVER_METRICS_EXPORTER_H_

// Serves Prometheus' /metrics (stoker_server --metrics_port) with
// prometheus-cpp's HTTP exposer: the live histograms and counters of
// server/metrics.h, and, read from the DataService at every scrape:
//
//   stoker_streams_active                      gauge
//   stoker_streams_opened_total, stoker_streams_refused_total
//   stoker_memory_budget_bytes{kind="used"|"limit"|"peak"}   gauge
//   stoker_worker_threads                      gauge
//   stoker_job_starvation_ratio{training_job} gauge: the share of its step
//       time the job's clients last reported waiting for data (dropped 60 s
//       after the last report): the autoscaler's signal
//   stoker_job_demand_images_per_second{training_job} gauge: the rate they took
//   stoker_storage_requests_total, stoker_storage_retries_total,
//   stoker_storage_failed_requests_total, stoker_storage_bytes_total,
//   stoker_prefetch_ranges_total, stoker_cache_hits_total,
//   stoker_cache_misses_total                  (object storage)
//
// and the figures of collectables added with Add (the Python op workers':
// server/python_ops/python_metrics.h).

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/data_service.h"

namespace prometheus {
class Collectable;
class Exposer;
}  // namespace prometheus

namespace stoker::server {

// Reports of jobs silent for longer than this are dropped from the gauges.
inline constexpr absl::Duration kJobReportMaxAge = absl::Seconds(60);

class MetricsExporter {
 public:
  // Listens on `address` ("host:port", port 0 picks one). `service` is not
  // owned and outlives the exporter. Unavailable if the port cannot be
  // bound.
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Start(
      const std::string& address, const DataService* service);
  ~MetricsExporter();

  int port() const { return port_; }

  // Serves `collectable`'s figures too (e.g. the Python op workers',
  // server/python_ops/python_metrics.h); kept alive here.
  void Add(std::shared_ptr<prometheus::Collectable> collectable);

 private:
  MetricsExporter() = default;
  // The exposer holds collectables weakly: the service's collector lives
  // here.
  std::shared_ptr<prometheus::Collectable> collector_;
  std::vector<std::shared_ptr<prometheus::Collectable>> added_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_METRICS_EXPORTER_H_
