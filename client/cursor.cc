#include "client/cursor.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace stoker::client {
namespace {
constexpr char kPrefix[] = "stoker-cursor-v1";
}  // namespace

std::string PlanId(absl::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return absl::StrCat(absl::Hex(h, absl::kZeroPad16));
}

std::string Cursor::Serialize() const {
  std::string out = absl::StrCat(kPrefix, ":", plan_id, ":", epoch, ":",
                                 next_batch);
  if (!delivered_after.empty()) {
    absl::StrAppend(&out, ":", absl::StrJoin(delivered_after, ","));
  }
  return out;
}

absl::StatusOr<Cursor> Cursor::Parse(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad cursor '", text, "': ", why,
                     " (expected stoker-cursor-v1:<plan>:<epoch>:<batch>)"));
  };
  if (parts.size() < 4 || parts.size() > 5 || parts[0] != kPrefix) {
    return bad("wrong format");
  }
  Cursor cursor;
  cursor.plan_id = std::string(parts[1]);
  if (cursor.plan_id.size() != 16 ||
      cursor.plan_id.find_first_not_of("0123456789abcdefABCDEF") !=
          std::string::npos) {
    return bad("plan id is not 16 hex digits");
  }
  if (!absl::SimpleAtoi(parts[2], &cursor.epoch) || cursor.epoch < 0) {
    return bad("epoch is not a non-negative integer");
  }
  if (!absl::SimpleAtoi(parts[3], &cursor.next_batch) ||
      cursor.next_batch < 0) {
    return bad("next batch is not a non-negative integer");
  }
  if (parts.size() == 5) {
    for (absl::string_view item : absl::StrSplit(parts[4], ',')) {
      int64_t index;
      if (!absl::SimpleAtoi(item, &index) || index < cursor.next_batch) {
        return bad("delivered batch list is malformed");
      }
      cursor.delivered_after.push_back(index);
    }
    if (!std::is_sorted(cursor.delivered_after.begin(),
                        cursor.delivered_after.end())) {
      return bad("delivered batch list is not ascending");
    }
  }
  return cursor;
}

}  // namespace stoker::client
