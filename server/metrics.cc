#include "server/metrics.h"

#include <string>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace stoker::server {
namespace {

// Per-sample stages: 10 us to 2.5 s.
const prometheus::Histogram::BucketBoundaries& SampleBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
      1e-2, 2.5e-2, 5e-2, 0.1,  0.25,   0.5,  1.0,  2.5};
  return *buckets;
}

// Per-batch stages: 100 us to 60 s.
const prometheus::Histogram::BucketBoundaries& BatchBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1,
      0.25, 0.5,    1.0,  2.5,  5.0,    10.0, 30.0, 60.0};
  return *buckets;
}

constexpr double kNs = 1e-9;

}  // namespace

struct ServerMetrics::Instruments {
  std::shared_ptr<prometheus::Registry> registry =
      std::make_shared<prometheus::Registry>();
  prometheus::Family<prometheus::Histogram>& stages =
      prometheus::BuildHistogram()
          .Name("stoker_stage_seconds")
          .Help("Server time per sample in each stage (read from storage, "
                "decode, transform).")
          .Register(*registry);
  prometheus::Histogram& read = stages.Add({{"stage", "read"}}, SampleBuckets());
  prometheus::Histogram& decode =
      stages.Add({{"stage", "decode"}}, SampleBuckets());
  prometheus::Histogram& transform =
      stages.Add({{"stage", "transform"}}, SampleBuckets());
  prometheus::Family<prometheus::Histogram>& batch_stages =
      prometheus::BuildHistogram()
          .Name("stoker_batch_seconds")
          .Help("Time per batch: assemble (scheduled until its samples are "
                "done), queue_wait (until the transport takes it), send "
                "(until written to the client).")
          .Register(*registry);
  prometheus::Histogram& assemble =
      batch_stages.Add({{"stage", "assemble"}}, BatchBuckets());
  prometheus::Histogram& queue_wait =
      batch_stages.Add({{"stage", "queue_wait"}}, BatchBuckets());
  prometheus::Histogram& send =
      batch_stages.Add({{"stage", "send"}}, BatchBuckets());
  prometheus::Counter& batches = prometheus::BuildCounter()
                                     .Name("stoker_batches_total")
                                     .Help("Batches written to clients.")
                                     .Register(*registry)
                                     .Add({});
  prometheus::Counter& samples = prometheus::BuildCounter()
                                     .Name("stoker_samples_total")
                                     .Help("Samples written to clients.")
                                     .Register(*registry)
                                     .Add({});
  prometheus::Counter& bytes = prometheus::BuildCounter()
                                   .Name("stoker_sent_bytes_total")
                                   .Help("Batch bytes written to clients.")
                                   .Register(*registry)
                                   .Add({});
  prometheus::Family<prometheus::Counter>& bad =
      prometheus::BuildCounter()
          .Name("stoker_bad_samples_total")
          .Help("Samples that could not be delivered (skipped, or failing "
                "their stream), by status code.")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& mixture =
      prometheus::BuildCounter()
          .Name("stoker_mixture_samples_total")
          .Help("Samples of mixture batches, by the source dataset they "
                "came from.")
          .Register(*registry);
};

ServerMetrics::ServerMetrics() : instruments_(std::make_unique<Instruments>()) {}
ServerMetrics::~ServerMetrics() = default;

void ServerMetrics::ObserveSample(int64_t read_ns, int64_t decode_ns,
                                  int64_t transform_ns) {
  instruments_->read.Observe(read_ns * kNs);
  instruments_->decode.Observe(decode_ns * kNs);
  instruments_->transform.Observe(transform_ns * kNs);
}

void ServerMetrics::ObserveAssemble(int64_t ns) {
  instruments_->assemble.Observe(ns * kNs);
}

void ServerMetrics::ObserveQueueWait(int64_t ns) {
  instruments_->queue_wait.Observe(ns * kNs);
}

void ServerMetrics::ObserveSend(int64_t ns, int64_t bytes, int64_t samples) {
  instruments_->send.Observe(ns * kNs);
  instruments_->batches.Increment();
  instruments_->samples.Increment(static_cast<double>(samples));
  instruments_->bytes.Increment(static_cast<double>(bytes));
}

void ServerMetrics::CountBadSample(absl::StatusCode code) {
  // Family::Add returns the existing child for known labels.
  instruments_->bad.Add({{"code", absl::StatusCodeToString(code)}})
      .Increment();
}

void ServerMetrics::CountMixtureSamples(const std::string& dataset,
                                        int64_t samples) {
  instruments_->mixture.Add({{"dataset", dataset}})
      .Increment(static_cast<double>(samples));
}

const std::shared_ptr<prometheus::Registry>& ServerMetrics::registry() const {
  return instruments_->registry;
}

}  // namespace stoker::server
