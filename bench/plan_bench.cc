// plan_bench: what planning costs at web scale: the epoch's order, elastic
// resume and weighted mixtures, beside the Fisher-Yates order plans used
// before (8 bytes per sample).
//
//   bazel run -c opt //bench:plan_bench -- --samples=100000000
//
// For N samples it measures, each beside the process's resident memory
// (VmRSS) before and after:
//   * the peer: the epoch's global order as servers computed it before
//     (a Fisher-Yates permutation of N: 8 bytes per sample), built here;
//   * the server's plan now (common/epoch_order.h: a keyed Feistel
//     permutation, nothing per sample): its creation and the samples of
//     one batch; and the shuffle=blocks order over N / 10^4 shards (16
//     bytes per shard);
//   * the client's plan, which needs no order (EpochPlan::Positions): its
//     creation and the positions of one batch, for a whole epoch and for an
//     elastically resumed one;
//   * elastic resume itself: ContinueFrom over every rank's cursor of a job
//     of --world_size ranks that stopped at different steps (up to
//     --lag_batches apart), and the resumed plan's batch positions;
//   * a 3-source mixture of N samples in all (70 / 20 / 10 %, weights
//     0.5 / 0.3 / 0.2): creation, the picks of one batch (Mixture::At per
//     position), the picks so far of each source (PicksBefore) and a
//     first-exhausted epoch's length.
// Times are the median of --repeats runs (steady clock). Not a test.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "client/cursor.h"
#include "client/elastic.h"
#include "client/position.h"
#include "common/command_line.h"
#include "common/epoch_plan.h"
#include "common/mixture.h"
#include "common/random.h"

ABSL_FLAG(int64_t, samples, 100000000, "Samples in the dataset (N).");
ABSL_FLAG(int, batch_size, 256, "Samples per batch.");
ABSL_FLAG(int, world_size, 64, "Ranks of the job that stopped.");
ABSL_FLAG(int, lag_batches, 3,
          "How many batches the job's ranks are apart when it stops.");
ABSL_FLAG(int, repeats, 5, "Runs per figure (the median is printed).");
ABSL_FLAG(bool, fisher_yates, true,
          "Also time the Fisher-Yates order plans used before (8 bytes per "
          "sample).");

namespace {

using stoker::client::ContinueFrom;
using stoker::client::Cursor;
using stoker::client::EpochStart;
using stoker::client::Position;
using stoker::common::EpochOrder;
using stoker::common::EpochPlan;
using stoker::common::EpochPlanParams;
using stoker::common::Mixture;
using stoker::common::MixtureParams;

int64_t RssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stoll(line.substr(6)) * 1024;
    }
  }
  return 0;
}

// The order servers computed before the constant-memory one.
std::vector<int64_t> FisherYates(int64_t n, uint64_t key) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  stoker::common::CounterRng rng(key);
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap(order[i], order[rng.UniformInt(0, i + 1)]);
  }
  return order;
}

// Median seconds of `repeats` calls of `f`.
double Median(int repeats, const std::function<void()>& f) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    times.push_back(std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - t0)
                        .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void Print(const char* what, double seconds, int64_t rss_delta) {
  char time[32];
  if (seconds >= 1) {
    std::snprintf(time, sizeof(time), "%.2f s", seconds);
  } else if (seconds >= 1e-3) {
    std::snprintf(time, sizeof(time), "%.2f ms", seconds * 1e3);
  } else {
    std::snprintf(time, sizeof(time), "%.2f us", seconds * 1e6);
  }
  std::printf("%-58s %12s  %10.1f MB\n", what, time, rss_delta / 1048576.0);
}

}  // namespace

int main(int argc, char** argv) {
  stoker::common::SetUsage(
      "Prints planning costs for elastic resume and mixtures at N samples.");
  absl::ParseCommandLine(argc, argv);
  const int64_t n = absl::GetFlag(FLAGS_samples);
  const int batch = absl::GetFlag(FLAGS_batch_size);
  const int world = absl::GetFlag(FLAGS_world_size);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  std::printf("plan_bench: N=%lld batch_size=%d world_size=%d\n",
              static_cast<long long>(n), batch, world);
  std::printf("%-58s %14s  %13s\n", "what", "median time", "resident");

  EpochPlanParams params;
  params.num_samples = n;
  params.world_size = world;
  params.batch_size = batch;
  params.rank = world / 2;
  if (absl::GetFlag(FLAGS_fisher_yates)) {
    const int64_t before = RssBytes();
    std::vector<int64_t> order;
    const double t = Median(1, [&] { order = FisherYates(n, 1); });
    Print("peer: global order (Fisher-Yates), servers before", t,
          RssBytes() - before);
    std::vector<int64_t> positions;
    const EpochPlan plan = *EpochPlan::Positions(params);
    const int64_t b = plan.num_batches() / 2;
    Print("peer: one batch's samples (order lookups)", Median(repeats, [&] {
            plan.BatchPositions(b, &positions);
            for (int64_t& p : positions) p = order[p];
          }), 0);
  }
  {
    const int64_t before = RssBytes();
    const double create = Median(repeats, [&] {
      (void)EpochPlan::Create(params);
    });
    const EpochPlan plan = *EpochPlan::Create(params);
    Print("server plan (Feistel order): create", create, RssBytes() - before);
    std::vector<int64_t> samples;
    const int64_t b = plan.num_batches() / 2;
    Print("server plan: one batch's samples", Median(repeats, [&] {
            plan.BatchSamples(b, &samples);
          }), 0);
    const int64_t shards = std::max<int64_t>(1, n / 10000);
    std::vector<int64_t> sizes(shards, n / shards);
    sizes.back() += n - (n / shards) * shards;
    const int64_t blocks_before = RssBytes();
    EpochOrder blocks;
    const double made = Median(repeats, [&] {
      blocks = EpochOrder::Blocks(sizes, 1, 0, 4096);
    });
    const EpochPlan blocked = *EpochPlan::Create(params, blocks);
    char what[96];
    std::snprintf(what, sizeof(what), "blocks order (%lld shards): create",
                  static_cast<long long>(shards));
    Print(what, made, RssBytes() - blocks_before);
    Print("blocks plan: one batch's samples", Median(repeats, [&] {
            blocked.BatchSamples(b, &samples);
          }), 0);
  }
  {
    const int64_t before = RssBytes();
    std::vector<int64_t> positions;
    const double create = Median(repeats, [&] {
      (void)EpochPlan::Positions(params);
    });
    EpochPlan plan = *EpochPlan::Positions(params);
    Print("client plan (positions only): create", create,
          RssBytes() - before);
    const int64_t b = plan.num_batches() / 2;
    Print("client plan: one batch's positions", Median(repeats, [&] {
            plan.BatchPositions(b, &positions);
          }), 0);
  }

  // A job of `world` ranks stopped at steps s - lag .. s.
  const int lag = absl::GetFlag(FLAGS_lag_batches);
  const EpochPlan whole = *EpochPlan::Positions(params);
  const int64_t step = whole.num_batches() / 3;
  std::vector<Cursor> cursors;
  for (int r = 0; r < world; ++r) {
    Position p(0, whole.num_batches());
    const int64_t delivered = step - (r * 7) % (lag + 1);
    for (int64_t b = 0; b < delivered; ++b) (void)p.MarkDelivered(b);
    Cursor c = p.ToCursor("0123456789abcdef");
    c.cut.rank = r;
    c.cut.world_size = world;
    c.cut.batch_size = batch;
    cursors.push_back(c);
  }
  EpochStart start;
  {
    const int64_t before = RssBytes();
    const double t = Median(repeats, [&] {
      start = *ContinueFrom(cursors, n);
    });
    Print("elastic: ContinueFrom (every rank's cursor)", t,
          RssBytes() - before);
    std::printf("  (consumed prefix %lld, %zu positions past it)\n",
                static_cast<long long>(start.consumed_prefix),
                start.consumed_after.size());
    EpochPlanParams resumed = params;
    resumed.world_size = world * 3 / 4;
    resumed.rank = 0;
    resumed.consumed_prefix = start.consumed_prefix;
    resumed.consumed_after = start.consumed_after;
    const EpochPlan plan = *EpochPlan::Positions(resumed);
    std::vector<int64_t> positions;
    Print("elastic: resumed plan, one batch's positions (first batch)",
          Median(repeats, [&] { plan.BatchPositions(0, &positions); }), 0);
  }

  MixtureParams mix;
  mix.source_samples = {n * 7 / 10, n * 2 / 10, n - n * 7 / 10 - n * 2 / 10};
  mix.weights = {0.5, 0.3, 0.2};
  mix.seed = 3;
  {
    const int64_t before = RssBytes();
    const double t = Median(repeats, [&] { (void)Mixture::Create(mix); });
    const Mixture m = *Mixture::Create(mix);
    Print("mixture (3 sources): create", t, RssBytes() - before);
    const int64_t middle = m.EpochSamples(0) / 2;
    int64_t sink = 0;
    Print("mixture: one batch's picks (At per position)", Median(repeats, [&] {
            for (int i = 0; i < batch; ++i) {
              sink += m.At(5, middle + i * world).position;
            }
          }), 0);
    Print("mixture: picks so far per source (PicksBefore)",
          Median(repeats, [&] { sink += m.PicksBefore(5, middle)[0]; }), 0);
    MixtureParams first = mix;
    first.mode = stoker::common::MixtureMode::kFirstExhausted;
    const Mixture f = *Mixture::Create(first);
    Print("mixture: first-exhausted epoch length",
          Median(repeats, [&] { sink += f.EpochSamples(2); }), 0);
    std::printf("  (first-exhausted epoch: %lld samples; checksum %lld)\n",
                static_cast<long long>(f.EpochSamples(2)),
                static_cast<long long>(sink % 1000));
  }
  return 0;
}
