#ifndef STOKER_SERVER_FILE_LIST_H_
#define STOKER_SERVER_FILE_LIST_H_

// File lists as datasets: a CSV file with a header row (RFC 4180: quoted
// fields, "" inside quotes, CRLF or LF) or JSON lines (one flat object per
// line; "*.jsonl", "*.ndjson"), one sample per row.
//
// Columns:
//   - the image column: the first of "image", "path", "file", "filename",
//     "img" (a CSV list without them: its first column). A path relative
//     to the list's folder, or absolute, or an object's URL (http://,
//     https://, s3://; see server/storage/object_store.h), which is looked
//     up (HEAD, or an S3 listing) at start-up. Member extension: the
//     file's own, lowercased ("jpg").
//   - the label column: the first of "label", "class", "cls", "target":
//     a decimal integer in [0, 2^31); member "cls".
//   - every other column C, by its values: all decimal integers -> "C.cls";
//     all names of files (a last path part with an extension and no
//     whitespace) -> a file, "C.<its extension>" (a mask "mask.png");
//     otherwise text, "C.txt". A header "C:class", "C:file" or "C:text"
//     says which instead.
// An empty value (or JSON null) leaves the member out of that sample.
//
// Problems are per row, never fatal unless no row is left: a row that does
// not parse or has the wrong number of fields is left out with a note
// (line number and why); a file that is missing or unreadable makes its
// sample defective (reading it fails with the reason), so the others keep
// their indices. Names that are not UTF-8 are rows that do not parse.
//
// Keys (server/file_samples.h): an object's key leaves out the scheme and
// host (or bucket), so the same layout over HTTP, S3 and local disk gives
// the same keys and fingerprint.
//
// Files are stat'ed and objects looked up in parallel (`threads`); a URL
// that cannot be looked up makes its sample defective. Without a `store`
// a URL is a bad row.

#include <string>

#include "absl/status/statusor.h"
#include "server/file_samples.h"
#include "server/storage/object_store.h"

namespace stoker::server {

// True if `path` names a list by its extension (".csv", ".jsonl",
// ".ndjson", any case).
bool IsFileListPath(const std::string& path);

// Reads and indexes the list at `path` (a local path, or an object's URL
// read through `store`: relative paths in it are then relative to the
// list's URL). NotFound if it does not exist;
// InvalidArgument for a list without rows, without an image column or
// whose header is bad (an empty or repeated column name, an unknown
// ":kind"); FailedPrecondition naming the first notes if no row is left.
absl::StatusOr<FileListing> ReadFileList(
    const std::string& path, int threads = 16,
    const storage::ObjectStore* store = nullptr);

}  // namespace stoker::server

#endif  // STOKER_SERVER_FILE_LIST_H_
