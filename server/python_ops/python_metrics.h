#ifndef STOKER_SERVER_PYTHON_OPS_PYTHON_METRICS_H_
#define STOKER_SERVER_PYTHON_OPS_PYTHON_METRICS_H_

// The Python op workers' figures for Prometheus' /metrics, read at every
// scrape (server/metrics_exporter.h adds it when --python_ops is given):
//
//   stoker_python_op_samples_total            counter: samples handed to
//       Python ops
//   stoker_python_op_failures_total{cause}    counter: raised, crashed,
//       timed_out, out_of_memory
//   stoker_python_op_workers_started_total    counter: replacements included
//   stoker_python_op_workers                  gauge: --python_workers

#include <memory>

#include "server/python_ops/python_workers.h"

namespace prometheus {
class Collectable;
}  // namespace prometheus

namespace stoker::server {

// A collectable over `workers`, which it keeps alive.
std::shared_ptr<prometheus::Collectable> PythonOpsCollector(
    std::shared_ptr<const PythonWorkers> workers);

}  // namespace stoker::server

#endif  // STOKER_SERVER_PYTHON_OPS_PYTHON_METRICS_H_
