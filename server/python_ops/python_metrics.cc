#include "server/python_ops/python_metrics.h"

#include <string>
#include <utility>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"
#include "server/metric_families.h"

namespace stoker::server {
namespace {

using prometheus::MetricFamily;
using prometheus::MetricType;

class Collector : public prometheus::Collectable {
 public:
  explicit Collector(std::shared_ptr<const PythonWorkers> workers)
      : workers_(std::move(workers)) {}

  std::vector<MetricFamily> Collect() const override {
    const PythonWorkers::Stats s = workers_->stats();
    std::vector<MetricFamily> out;
    out.push_back(Single("stoker_python_op_samples_total",
                         "Samples handed to Python ops (--python_ops).",
                         MetricType::Counter, static_cast<double>(s.calls)));
    MetricFamily failures = Family(
        "stoker_python_op_failures_total",
        "Samples a Python op failed: it raised, its worker crashed, timed "
        "out (--python_op_timeout) or ran out of memory (--python_op_memory).",
        MetricType::Counter);
    for (const auto& [cause, count] :
         {std::make_pair("raised", s.failed), std::make_pair("crashed", s.crashed),
          std::make_pair("timed_out", s.timed_out),
          std::make_pair("out_of_memory", s.out_of_memory)}) {
      AddValue(&failures, static_cast<double>(count), {{"cause", cause}});
    }
    out.push_back(std::move(failures));
    out.push_back(Single(
        "stoker_python_op_workers_started_total",
        "Python op worker processes started, replacements included.",
        MetricType::Counter, static_cast<double>(s.started)));
    out.push_back(Single("stoker_python_op_workers",
                         "Python op worker processes (--python_workers).",
                         MetricType::Gauge,
                         static_cast<double>(workers_->size())));
    return out;
  }

 private:
  const std::shared_ptr<const PythonWorkers> workers_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> PythonOpsCollector(
    std::shared_ptr<const PythonWorkers> workers) {
  return std::make_shared<Collector>(std::move(workers));
}

}  // namespace stoker::server
