#ifndef STOKER_SERVER_IMAGE_FOLDER_H_
#define STOKER_SERVER_IMAGE_FOLDER_H_

// Listing an ImageFolder tree (root/<class>/**/<image>) exactly as
// torchvision.datasets.ImageFolder does, so that a dataset served from the
// tree has the same samples, in the same order, with the same class
// indices:
//   - the classes are the root's sub-folders (symbolic links to folders
//     included), sorted by name; a class's index is its position;
//   - the samples of each class, classes in that order, are the files under
//     its folder at any depth (following links to folders), folders sorted
//     by their path and files by name within each folder, whose name ends
//     (ignoring case) in one of torchvision's IMG_EXTENSIONS.
// Names compare byte-wise, which for UTF-8 is Python's code-point order.
//
// What torchvision would not survive is reported, not fatal:
//   - a file that is not a regular file (a dangling link, a special file)
//     stays a sample, so every later index still matches, with a defect:
//     reading it fails (as does reading a file without read permission,
//     with open's error);
//   - names that are not UTF-8 are left out (torchvision orders them by
//     surrogate code points, which no byte order reproduces);
//   - a link back to a folder above it (a loop, which torchvision follows
//     until the path is too long) is not followed;
//   - a class folder without any image is kept (its index is torchvision's)
//     and reported.
//
// Pure listing: reads directories and stats files, never opens them.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/file_samples.h"
#include "server/storage/object_store.h"

namespace stoker::server {

// torchvision's IMG_EXTENSIONS: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff
// .webp, compared ignoring ASCII case.
bool HasImageFolderExtension(absl::string_view name);

struct FolderSample {
  // root + "/" + class + "/" + ... + file, as torchvision joins them.
  std::string path;
  int32_t label = 0;
  int64_t size = 0;
  int64_t mtime_ns = 0;
  // Empty when the file looked readable; else why reading it will fail.
  std::string defect;
};

struct FolderListing {
  std::vector<std::string> classes;
  std::vector<FolderSample> samples;
  // What was left out or not followed, and empty classes, with why.
  using Note = ListingNote;
  std::vector<Note> notes;
  // Samples with a defect.
  int64_t defective = 0;
  // Every folder read (the root included), stamped before it was read.
  std::vector<FolderStamp> folders;
};

// The listing as file samples: the image member (its extension lowercased)
// and the label as a "cls" value.
FileListing ToFileListing(const std::string& root, FolderListing listing);

// An ImageFolder in object storage (s3://bucket/train/, listed whole with
// ObjectStore::ListTree): the same classes, order and labels as the same
// tree on disk, as file samples whose images are objects. Object stores
// have no empty folders or links: a class "folder" exists when an object
// lies under it. Objects directly under the root are not samples (as
// files beside the class folders are not). Errors: the listing's;
// NotFound without class folders; FailedPrecondition without images.
absl::StatusOr<FileListing> ListObjectFolder(const storage::ObjectStore& store,
                                             const std::string& root);

// Lists the tree at `root` (a trailing '/' is ignored), walking up to
// `threads` class folders at once. NOT_FOUND if `root` does not exist or
// holds no class folder, INVALID_ARGUMENT if it is not a folder,
// FAILED_PRECONDITION naming the notes' first entries if no class holds an
// image.
absl::StatusOr<FolderListing> ListImageFolder(const std::string& root,
                                              int threads = 8);

}  // namespace stoker::server

#endif  // STOKER_SERVER_IMAGE_FOLDER_H_
