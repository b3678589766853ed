#ifndef STOKER_SERVER_FILE_SAMPLES_H_
#define STOKER_SERVER_FILE_SAMPLES_H_

// Samples whose members are files (and short values held in memory): what
// an ImageFolder tree (server/image_folder.h) or a file list
// (server/file_list.h) gives, served through the same reader as a tar
// shard.
//
// The samples become one virtual shard: every file gets a range of a
// virtual byte space, back to back in sample order, and the values (a
// label's decimal text, a caption) follow in one block held in memory,
// after a gap wider than ShardReader coalesces (so reading a sample's
// image and label never touches another sample's file). The
// shard's SampleRecords point into that space like a tar's point into its
// file, so ShardReader, the fields, the prefetcher and the raw cache serve
// them unchanged. A read opens the file it falls in, checks its size and
// mtime against the listing (DataLoss naming the file if either changed)
// and preads it. An object in storage is read with a range request at the
// version listed (If-Match: a replaced object fails with DataLoss); one
// request per member, made by the worker that needs it (no read-ahead:
// Dataset::remote() is false for files).
//
// Keys. A sample's key names it in reports, batch headers and the shards
// stoker_pack writes: its image path relative to the root (an object's:
// its URL's path after the host or bucket), without the extension, with '.' in the last part replaced by '_' (so the WebDataset
// rule reads the same key back) and "_<index>" appended to a key already
// taken.

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/shard_reader.h"
#include "server/storage/object_store.h"

namespace stoker::server {

// One member of a file sample: a file, or a value held in memory.
struct FileMember {
  // WebDataset extension ("jpg", "cls", "mask.png", "caption.txt").
  std::string extension;
  // A file: its path (or URL) and what it was when listed.
  std::string path;
  int64_t size = 0;
  int64_t mtime_ns = 0;
  // Set for an object in storage (path is its URL): read at this version.
  std::shared_ptr<const storage::ObjectInfo> object;
  // A value (path empty): its bytes.
  std::string value;

  bool is_file() const { return !path.empty(); }
};

struct FileSample {
  // KeyOfPath of the image's path relative to the root (see Keys);
  // MakeFileShard makes it unique.
  std::string key;
  // The first member is the image when `has_image`.
  std::vector<FileMember> members;
  bool has_image = true;
  // Empty unless the sample cannot be read (a missing or unreadable file).
  std::string defect;
};

// A listing's problems that are not samples: left-out names, loops, empty
// class folders, bad rows.
struct ListingNote {
  std::string path;
  std::string reason;
};

// "path: reason; path: reason" for the first `n` notes (for errors).
std::string FirstNotes(const std::vector<ListingNote>& notes, size_t n);

// Folders whose modification time vouches for a cached listing (a file
// added, removed or renamed in one changes it).
struct FolderStamp {
  std::string path;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;
};

// st_mtim in nanoseconds.
int64_t MtimeNs(const struct stat& st);
// The stamp of the folder `path` that `st` describes.
FolderStamp StampOf(std::string path, const struct stat& st);
// The extension of `path`'s last part, lowercased ("a/b.v2.JPEG" ->
// "jpeg"); "" if it has none.
std::string PathExtension(absl::string_view path);

struct FileListing {
  // "ImageFolder", "CSV list" or "JSON lines list".
  std::string kind;
  // Class names by index (ImageFolder); empty for lists.
  std::vector<std::string> classes;
  std::vector<FileSample> samples;
  std::vector<ListingNote> notes;
  std::vector<FolderStamp> folders;
};

// The extension-derived format of an image file (".JPEG" -> kJpeg, ".bmp"
// -> kOther).
ImageFormat FormatOfExtension(absl::string_view extension);

// The key rule above for `relative` (a path without a leading '/').
std::string KeyOfPath(absl::string_view relative);

struct FileShard {
  ShardIndex index;
  std::unique_ptr<ShardReader> reader;
  // 16 hex digits: FNV-1a 64 over the classes and, per sample, its key and
  // each member's extension and size (a value's bytes too). Stable across
  // hosts and folder moves.
  std::string fingerprint;
  int64_t total_bytes = 0;
};

// The listing as shard `shard_id` named `name` (the root or list path, for
// messages). Keys are made unique (see Keys). `on_change` (may be empty)
// is called once, the first time a read finds a file changed (the index
// cache drops its entry there). `store` reads the members that are
// objects; it must outlive the shard (null if there are none).
FileShard MakeFileShard(const std::string& name, int32_t shard_id,
                        FileListing listing,
                        std::function<void()> on_change = {},
                        const storage::ObjectStore* store = nullptr);

}  // namespace stoker::server

#endif  // STOKER_SERVER_FILE_SAMPLES_H_
