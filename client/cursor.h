#ifndef STOKER_CLIENT_CURSOR_H_
#define STOKER_CLIENT_CURSOR_H_

// A loader's position, to save with a checkpoint and resume from exactly.
//
// Text form: "stoker-cursor-v1:<plan_id>:<epoch>:<next_batch>[:<i>,<j>...]"
// where the optional tail lists batches at or after next_batch that were
// already delivered (only in arrival-order mode).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::client {

struct Cursor {
  // Identifies the plan (dataset fingerprint, transform, batch size, seed,
  // rank, world size, shuffle, drop_last) so a cursor is never applied to a
  // different plan. 16 hex digits.
  std::string plan_id;
  int64_t epoch = 0;
  // Every batch below this index has been delivered.
  int64_t next_batch = 0;
  // Batches >= next_batch already delivered, ascending.
  std::vector<int64_t> delivered_after;

  std::string Serialize() const;
  // INVALID_ARGUMENT with what is wrong for malformed text.
  static absl::StatusOr<Cursor> Parse(absl::string_view text);
};

// A stable 64-bit FNV-1a hash of `text`, as 16 hex digits.
std::string PlanId(absl::string_view text);

}  // namespace stoker::client

#endif  // STOKER_CLIENT_CURSOR_H_
