#include "client/elastic.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/position.h"
#include "common/epoch_plan.h"

namespace stoker::client {
namespace {

absl::Status CheckAlike(const std::vector<Cursor>& cursors) {
  if (cursors.empty()) {
    return absl::InvalidArgumentError("no cursor to continue from");
  }
  const Cursor& first = cursors.front();
  for (const Cursor& c : cursors) {
    if (c.plan_id != first.plan_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the cursors belong to different plans (", first.plan_id, " and ",
          c.plan_id, ")"));
    }
    if (c.epoch != first.epoch) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the cursors are of different epochs (", first.epoch, " and ",
          c.epoch, "); save every rank's state at the same step"));
    }
    if (!c.cut.SameCut(first.cut)) {
      return absl::InvalidArgumentError(
          "the cursors come from jobs of different shapes (world size, batch "
          "size, drop_last or resumed start differ)");
    }
  }
  return absl::OkStatus();
}

// Every rank's cursor: the one given for all (a synchronous job), or one
// per rank.
absl::StatusOr<std::vector<const Cursor*>> ByRank(
    const std::vector<Cursor>& cursors) {
  const int world = cursors.front().cut.world_size;
  std::vector<const Cursor*> by_rank(world, nullptr);
  if (cursors.size() == 1) {
    std::fill(by_rank.begin(), by_rank.end(), &cursors.front());
    return by_rank;
  }
  if (static_cast<int>(cursors.size()) != world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "give one cursor (a synchronous job) or one per rank: the job had ",
        world, " ranks, got ", cursors.size(), " cursors"));
  }
  for (const Cursor& c : cursors) {
    if (by_rank[c.cut.rank] != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("two cursors of rank ", c.cut.rank));
    }
    by_rank[c.cut.rank] = &c;
  }
  return by_rank;
}

}  // namespace

absl::StatusOr<EpochStart> ContinueFrom(const std::vector<Cursor>& cursors,
                                        int64_t num_samples) {
  if (absl::Status s = CheckAlike(cursors); !s.ok()) return s;
  absl::StatusOr<std::vector<const Cursor*>> by_rank = ByRank(cursors);
  if (!by_rank.ok()) return by_rank.status();
  const Cursor& first = cursors.front();
  common::EpochPlanParams params;
  params.num_samples = num_samples;
  params.world_size = first.cut.world_size;
  params.batch_size = first.cut.batch_size;
  params.drop_last = first.cut.drop_last;
  params.shuffle = false;
  params.consumed_prefix = first.cut.consumed_prefix;
  params.consumed_after = first.cut.consumed_after;
  absl::StatusOr<common::EpochPlan> plan = common::EpochPlan::Positions(params);
  if (!plan.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the cursor does not fit this epoch of ", num_samples,
        " samples: ", plan.status().message()));
  }
  const int64_t world = params.world_size;
  const int64_t batch = params.batch_size;
  const int64_t m = common::RemainingSamples(params);
  std::vector<Position> positions;
  bool all_done = true;
  for (const Cursor* c : *by_rank) {
    absl::StatusOr<Position> p = Position::FromCursor(*c, plan->num_batches());
    if (!p.ok()) return p.status();
    all_done = all_done && p->done();
    positions.push_back(*std::move(p));
  }
  EpochStart next_epoch;
  next_epoch.epoch = first.epoch + 1;
  if (all_done || m == 0) return next_epoch;

  // The first remaining index no rank has delivered. A rank's first
  // undelivered batch starts at its lowest index; an index past the
  // remainder is padding, which nobody needs.
  int64_t first_open = m;
  for (int64_t r = 0; r < world; ++r) {
    if (positions[r].done()) continue;
    const int64_t index = r + world * batch * positions[r].next_batch();
    if (index < m) first_open = std::min(first_open, index);
  }
  // What ranks delivered at or past it: their batches from the one that
  // reaches first_open on, and those delivered out of order.
  std::set<int64_t> ahead;
  for (int64_t r = 0; r < world; ++r) {
    const Position& p = positions[r];
    std::vector<int64_t> batches;
    const int64_t from = std::max<int64_t>(
        0, (first_open - r) / (world * batch) - 1);
    for (int64_t b = from; b < p.next_batch(); ++b) batches.push_back(b);
    batches.insert(batches.end(), p.delivered_after().begin(),
                   p.delivered_after().end());
    for (const int64_t b : batches) {
      for (int64_t i = 0; i < plan->BatchSize(b); ++i) {
        const int64_t index = (r + world * (b * batch + i)) % m;
        if (index >= first_open) ahead.insert(index);
      }
    }
  }
  while (!ahead.empty() && *ahead.begin() == first_open) {
    ahead.erase(ahead.begin());
    ++first_open;
  }
  if (first_open >= m) return next_epoch;

  if (static_cast<int64_t>(ahead.size() + params.consumed_after.size()) >
      common::kMaxConsumedPositions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the job's ranks stopped too far apart to continue exactly: ",
        ahead.size(), " samples were delivered past the first one some rank "
        "had not reached (at most ", common::kMaxConsumedPositions,
        "); resume each rank on its own shape, or give one rank's state to "
        "treat the job as synchronous"));
  }
  EpochStart start;
  start.epoch = first.epoch;
  start.consumed_prefix = plan->RemainingPosition(first_open);
  for (const int64_t position : params.consumed_after) {
    if (position > start.consumed_prefix) {
      start.consumed_after.push_back(position);
    }
  }
  for (const int64_t index : ahead) {
    start.consumed_after.push_back(plan->RemainingPosition(index));
  }
  std::sort(start.consumed_after.begin(), start.consumed_after.end());
  return start;
}

}  // namespace stoker::client
