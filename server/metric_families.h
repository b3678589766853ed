#ifndef STOKER_SERVER_METRIC_FAMILIES_H_
#define STOKER_SERVER_METRIC_FAMILIES_H_

// Building prometheus-cpp metric families by hand, for collectables that
// read their figures at scrape time (server/metrics_exporter.cc,
// server/python_ops/python_metrics.cc).

#include <utility>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace stoker::server {

inline prometheus::MetricFamily Family(const char* name, const char* help,
                                       prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  return family;
}

// Adds one value (a counter's or a gauge's, after the family's type).
inline void AddValue(prometheus::MetricFamily* family, double value,
                     std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  if (family->type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family->metric.push_back(std::move(metric));
}

// A family of one unlabelled value.
inline prometheus::MetricFamily Single(const char* name, const char* help,
                                       prometheus::MetricType type,
                                       double value) {
  prometheus::MetricFamily family = Family(name, help, type);
  AddValue(&family, value);
  return family;
}

}  // namespace stoker::server

#endif  // STOKER_SERVER_METRIC_FAMILIES_H_
