#ifndef STOKER_CLIENT_PLAN_ID_H_
#define STOKER_CLIENT_PLAN_ID_H_

// A loader's plan identity: the 16-hex-digit id that names which batches an
// epoch holds (the dataset's content, the transform, the batching and the
// order), so that a cursor or a saved state is never applied to another
// plan. Cursors (client/cursor.h) and the Python side's saved states carry
// it and compare it, so its bytes for a given plan never change: a field
// added to the plan joins the identity only when it differs from its
// default. Options that change how batches are fetched, not which ones
// (prefetch, streams, in_order, timeouts), are not part of it.
//
// Pure; thread-compatible.

#include <cstdint>
#include <string>
#include <vector>

#include "client/cursor.h"
#include "proto/stoker.pb.h"

namespace stoker::client {

// What a plan consists of. Meanings and defaults as in LoaderOptions
// (client/loader.h); `fingerprint` is the dataset fingerprint the servers
// report (GetDatasetInfoResponse::fingerprint).
struct PlanIdentity {
  std::string fingerprint;
  std::string dataset;
  v1::TransformPipeline transform;
  // Empty: the classic image + class pair.
  std::vector<v1::FieldSpec> fields;
  int batch_size = 256;
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  bool shuffle = true;
  // Only counts with shuffle (0: the whole dataset is shuffled).
  int64_t shuffle_window = 0;
  bool drop_last = false;
  // A mixture's canonical text (sources, weights, mode, epoch length);
  // empty for one dataset.
  std::string mixture;
};

// The data plan's parts: what an epoch holds and how it is augmented,
// without the shape (rank, world size, batch size, drop_last) it is cut
// into. Cursors carry them.
PlanFacts FactsOf(const PlanIdentity& plan);

// The data plan's id: PlanId of its parts, joined (with the order's
// version: ids changed with the constant-memory orders). Equal for every
// rank and for jobs of any shape over the same data plan.
std::string DataPlanId(const PlanFacts& facts);

}  // namespace stoker::client

#endif  // STOKER_CLIENT_PLAN_ID_H_
