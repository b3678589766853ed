#ifndef STOKER_SERVER_STORAGE_URL_H_
#define STOKER_SERVER_STORAGE_URL_H_

// Naming shards in object storage: URL schemes, brace ranges and globs.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::storage {

enum class Scheme { kLocal, kHttp, kS3 };

// kHttp for "http://" and "https://", kS3 for "s3://", kLocal otherwise.
Scheme SchemeOf(absl::string_view url);

// Expands brace groups the way WebDataset names shards (and as bash does):
// "{a,b}" gives each alternative; "{007..010}" gives each number, zero-
// padded to the width of the first bound when it has a leading zero (007,
// 008, 009, 010). Groups may repeat and nest; text without braces is
// returned as is. InvalidArgument for an unmatched brace, a descending or
// non-numeric range, or more than `max_results` results.
absl::StatusOr<std::vector<std::string>> ExpandBraces(
    absl::string_view pattern, size_t max_results = 1000000);

// True if `text` holds a glob(3) wildcard: '*', '?' or '['.
bool HasWildcard(absl::string_view text);

// `text` up to its first wildcard or '{'.
absl::string_view LiteralPrefix(absl::string_view text);

// Percent-encodes every byte except the unreserved A-Z a-z 0-9 - _ . ~
// (and '/' when `keep_slash`), as S3's Signature V4 wants.
std::string UriEncode(absl::string_view text, bool keep_slash);

// "s3://bucket/key" split into bucket and key. InvalidArgument without a
// bucket.
struct S3Location {
  std::string bucket;
  std::string key;
};
absl::StatusOr<S3Location> ParseS3Url(absl::string_view url);

// The last path component of a URL or path, without query or fragment.
std::string BaseNameOf(absl::string_view url_or_path);

}  // namespace stoker::storage

#endif  // STOKER_SERVER_STORAGE_URL_H_
