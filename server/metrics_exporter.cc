#include "server/metrics_exporter.h"

#include <exception>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "server/metric_families.h"

namespace stoker::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// The latency histogram of requests to object storage.
MetricFamily LatencyHistogram(const v1::StorageStats& storage) {
  MetricFamily family =
      Family("stoker_storage_request_seconds",
             "Time successful requests to object storage held their slot.",
             MetricType::Histogram);
  ClientMetric metric;
  uint64_t cumulative = 0;
  for (int i = 0; i < storage.latency_bucket_counts_size(); ++i) {
    cumulative += static_cast<uint64_t>(storage.latency_bucket_counts(i));
    ClientMetric::Bucket bucket;
    bucket.cumulative_count = cumulative;
    bucket.upper_bound = i < storage.latency_bucket_bounds_size()
                             ? storage.latency_bucket_bounds(i)
                             : std::numeric_limits<double>::infinity();
    metric.histogram.bucket.push_back(bucket);
  }
  metric.histogram.sample_count = cumulative;
  metric.histogram.sample_sum = storage.latency_sum_seconds();
  family.metric.push_back(std::move(metric));
  return family;
}

// The figures the DataService keeps, read at scrape time.
class ServiceCollector : public prometheus::Collectable {
 public:
  explicit ServiceCollector(const DataService* service) : service_(service) {}

  std::vector<MetricFamily> Collect() const override {
    std::vector<MetricFamily> out;
    const DataServiceStats stats = service_->stats();
    out.push_back(Single("stoker_streams_active",
                         "StreamBatches calls being served.", MetricType::Gauge,
                         static_cast<double>(stats.active_streams)));
    out.push_back(Single("stoker_streams_opened_total",
                         "StreamBatches calls admitted.", MetricType::Counter,
                         static_cast<double>(stats.streams_opened)));
    out.push_back(Single(
        "stoker_streams_refused_total",
        "StreamBatches calls refused for capacity (--max_streams) or drain.",
        MetricType::Counter, static_cast<double>(stats.streams_refused)));
    MetricFamily memory =
        Family("stoker_memory_budget_bytes",
               "The memory budget (--max_memory_bytes): bytes charged now, "
               "the limit, and the most ever charged.",
               MetricType::Gauge);
    AddValue(&memory, static_cast<double>(stats.memory.used), {{"kind", "used"}});
    AddValue(&memory, static_cast<double>(service_->memory_limit()),
             {{"kind", "limit"}});
    AddValue(&memory, static_cast<double>(stats.memory.peak), {{"kind", "peak"}});
    out.push_back(std::move(memory));
    out.push_back(Single("stoker_worker_threads",
                         "Decode and transform threads (--threads).",
                         MetricType::Gauge,
                         static_cast<double>(service_->worker_threads())));

    MetricFamily starvation = Family(
        "stoker_job_starvation_ratio",
        "Share of the step time a job's clients last reported waiting for "
        "data (0..1); reports older than 60 s are dropped.",
        MetricType::Gauge);
    MetricFamily demand = Family(
        "stoker_job_demand_images_per_second",
        "Images per second a job's clients last reported taking.",
        MetricType::Gauge);
    for (const JobReport& report :
         service_->job_reports(absl::Now(), kJobReportMaxAge)) {
      AddValue(&starvation, report.starvation, {{"training_job", report.job}});
      AddValue(&demand, report.images_per_second, {{"training_job", report.job}});
    }
    out.push_back(std::move(starvation));
    out.push_back(std::move(demand));

    const v1::StorageStats storage = service_->storage_stats();
    const struct {
      const char* name;
      const char* help;
      int64_t value;
    } counters[] = {
        {"stoker_storage_requests_total",
         "HTTP requests to object storage, retries included.",
         storage.requests()},
        {"stoker_storage_retries_total",
         "Requests to object storage retried after a failure.",
         storage.retries()},
        {"stoker_storage_failed_requests_total",
         "Requests to object storage that failed for good.",
         storage.failed_requests()},
        {"stoker_storage_bytes_total", "Bytes received from object storage.",
         storage.bytes()},
        {"stoker_prefetch_ranges_total",
         "Ranges fetched ahead of the batches needing them.",
         storage.prefetch_ranges()},
        {"stoker_cache_hits_total",
         "Sample spans found in the local disk cache.", storage.cache_hits()},
        {"stoker_cache_misses_total",
         "Sample spans not found in the local disk cache.",
         storage.cache_misses()},
        {"stoker_storage_connections_total",
         "Connections opened to object storage (other requests reused one).",
         storage.connections()},
        {"stoker_storage_throttled_total",
         "Answers 429/503 (SlowDown) from object storage.",
         storage.throttled_requests()},
        {"stoker_storage_throttle_events_total",
         "Times the request concurrency was lowered because the store "
         "throttled.",
         storage.throttle_events()},
    };
    for (const auto& c : counters) {
      out.push_back(Single(c.name, c.help, MetricType::Counter,
                           static_cast<double>(c.value)));
    }
    const struct {
      const char* name;
      const char* help;
      double value;
    } gauges[] = {
        {"stoker_storage_requests_in_flight",
         "Requests to object storage on the wire now.",
         static_cast<double>(storage.requests_in_flight())},
        {"stoker_storage_requests_queued",
         "Requests to object storage waiting for a slot or a retry.",
         static_cast<double>(storage.requests_queued())},
        {"stoker_storage_concurrency_limit",
         "Most requests to object storage allowed in flight now: grows while "
         "requests wait, halves while the store throttles.",
         static_cast<double>(storage.concurrency_limit())},
    };
    for (const auto& g : gauges) {
      out.push_back(Single(g.name, g.help, MetricType::Gauge, g.value));
    }
    if (storage.latency_bucket_counts_size() > 0) {
      out.push_back(LatencyHistogram(storage));
    }
    return out;
  }

 private:
  const DataService* const service_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(
    const std::string& address, const DataService* service) {
  std::unique_ptr<MetricsExporter> exporter(new MetricsExporter());
  try {
    exporter->exposer_ = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  exporter->exposer_->RegisterCollectable(service->metrics()->registry());
  exporter->collector_ = std::make_shared<ServiceCollector>(service);
  exporter->exposer_->RegisterCollectable(exporter->collector_);
  const std::vector<int> ports = exporter->exposer_->GetListeningPorts();
  exporter->port_ = ports.empty() ? 0 : ports.front();
  return exporter;
}

void MetricsExporter::Add(std::shared_ptr<prometheus::Collectable> collectable) {
  exposer_->RegisterCollectable(collectable);
  added_.push_back(std::move(collectable));
}

MetricsExporter::~MetricsExporter() = default;

}  // namespace stoker::server
