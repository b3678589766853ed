#include "server/image_folder.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/parallel.h"
#include "common/utf8.h"

namespace stoker::server {
namespace {

using common::IsUtf8;

constexpr const char* kExtensions[] = {".jpg", ".jpeg", ".png",
                                       ".ppm", ".bmp",  ".pgm",
                                       ".tif", ".tiff", ".webp"};

struct Entry {
  std::string name;
  bool is_dir = false;  // following links, like os.DirEntry.is_dir()
};

// The entries of `dir` but "." and ".."; an error for an unreadable folder.
absl::StatusOr<std::vector<Entry>> ReadFolder(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read '", dir, "'"));
  }
  std::vector<Entry> entries;
  while (dirent* e = readdir(d)) {
    const absl::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    Entry entry{std::string(name)};
    if (e->d_type == DT_DIR || e->d_type == DT_REG) {
      entry.is_dir = e->d_type == DT_DIR;
    } else {  // a link, or a file system that does not say
      struct stat st;
      entry.is_dir = stat(absl::StrCat(dir, "/", name).c_str(), &st) == 0 &&
                     S_ISDIR(st.st_mode);
    }
    entries.push_back(std::move(entry));
  }
  closedir(d);
  return entries;
}

// One class folder's walk (os.walk(top, followlinks=True), then sorted).
struct ClassWalk {
  std::vector<FolderSample> samples;
  std::vector<FolderListing::Note> notes;
  std::vector<FolderStamp> folders;
  // Files without an image extension, and the first one.
  int64_t other_files = 0;
  std::string first_other;
};

// One note for all the files left out for their extension.
void NoteOtherFiles(int64_t count, const std::string& first,
                    std::vector<FolderListing::Note>* notes) {
  if (count == 0) return;
  notes->push_back(
      {first, absl::StrCat(count, count == 1 ? " file" : " files",
                           " without an image extension left out (this is "
                           "the first)")});
}

// `root` is the dataset root's (device, inode): a link back to it is a loop
// too.
void WalkClass(const std::string& top, int32_t label,
               std::pair<dev_t, ino_t> root, ClassWalk* out) {
  // (folder path, its files) for every folder reached, then sorted by path
  // as `sorted(os.walk(...))` does.
  std::vector<std::pair<std::string, std::vector<std::string>>> folders;
  struct Pending {
    std::string path;
    std::vector<std::pair<dev_t, ino_t>> ancestors;
  };
  std::vector<Pending> stack = {{top, {root}}};
  while (!stack.empty()) {
    Pending at = std::move(stack.back());
    stack.pop_back();
    struct stat st;
    if (stat(at.path.c_str(), &st) != 0) continue;
    const std::pair<dev_t, ino_t> id = {st.st_dev, st.st_ino};
    if (std::find(at.ancestors.begin(), at.ancestors.end(), id) !=
        at.ancestors.end()) {
      out->notes.push_back({at.path, "a link back to a folder above it: "
                                     "not followed"});
      continue;
    }
    absl::StatusOr<std::vector<Entry>> entries = ReadFolder(at.path);
    if (!entries.ok()) {
      // os.walk ignores folders it cannot list.
      out->notes.push_back({at.path, std::string(entries.status().message())});
      continue;
    }
    out->folders.push_back(StampOf(at.path, st));
    at.ancestors.push_back(id);
    std::vector<std::string> files;
    for (Entry& e : *entries) {
      const std::string path = absl::StrCat(at.path, "/", e.name);
      if (!IsUtf8(e.name)) {
        out->notes.push_back(
            {absl::CHexEscape(path), "name is not UTF-8: left out"});
        continue;
      }
      if (e.is_dir) {
        stack.push_back({path, at.ancestors});
      } else {
        files.push_back(std::move(e.name));
      }
    }
    std::sort(files.begin(), files.end());
    folders.emplace_back(std::move(at.path), std::move(files));
  }
  std::sort(folders.begin(), folders.end());
  for (const auto& [folder, files] : folders) {
    for (const std::string& file : files) {
      if (!HasImageFolderExtension(file)) {
        if (out->other_files++ == 0) {
          out->first_other = absl::StrCat(folder, "/", file);
        }
        continue;
      }
      FolderSample sample;
      sample.path = absl::StrCat(folder, "/", file);
      sample.label = label;
      struct stat st;
      if (stat(sample.path.c_str(), &st) != 0) {
        sample.defect = absl::StrCat("cannot stat: ", std::strerror(errno));
      } else if (!S_ISREG(st.st_mode)) {
        sample.defect = "not a regular file";
      } else {
        sample.size = st.st_size;
        sample.mtime_ns = MtimeNs(st);
      }
      out->samples.push_back(std::move(sample));
    }
  }
}

}  // namespace

bool HasImageFolderExtension(absl::string_view name) {
  for (const char* ext : kExtensions) {
    if (absl::EndsWithIgnoreCase(name, ext)) return true;
  }
  return false;
}

absl::StatusOr<FolderListing> ListImageFolder(const std::string& root,
                                              int threads) {
  std::string base = root;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  struct stat st;
  if (stat(base.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("'", root, "' does not exist"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", root, "' is not a folder"));
  }
  absl::StatusOr<std::vector<Entry>> entries = ReadFolder(base);
  if (!entries.ok()) return entries.status();
  FolderListing listing;
  listing.folders.push_back(StampOf(base, st));
  for (const Entry& e : *entries) {
    if (!e.is_dir) continue;
    if (!IsUtf8(e.name)) {
      listing.notes.push_back({absl::CHexEscape(absl::StrCat(base, "/", e.name)),
                               "class folder name is not UTF-8: left out"});
      continue;
    }
    listing.classes.push_back(e.name);
  }
  if (listing.classes.empty()) {
    const bool shards = std::any_of(
        entries->begin(), entries->end(),
        [](const Entry& e) { return absl::EndsWith(e.name, ".tar"); });
    return absl::NotFoundError(absl::StrCat(
        "'", root, "' holds no class folder (ImageFolder: root/<class>/"
        "<image>)",
        shards ? absl::StrCat("; for the .tar shards in it, give a glob: '",
                              base, "/*.tar'")
               : ""));
  }
  std::sort(listing.classes.begin(), listing.classes.end());
  std::vector<ClassWalk> walks(listing.classes.size());
  common::ParallelFor(walks.size(), std::max(1, threads), [&](size_t c) {
    WalkClass(absl::StrCat(base, "/", listing.classes[c]),
              static_cast<int32_t>(c), {st.st_dev, st.st_ino}, &walks[c]);
  });
  int64_t other_files = 0;
  std::string first_other;
  for (const ClassWalk& walk : walks) {
    if (other_files == 0) first_other = walk.first_other;
    other_files += walk.other_files;
  }
  NoteOtherFiles(other_files, first_other, &listing.notes);
  for (size_t c = 0; c < walks.size(); ++c) {
    if (walks[c].samples.empty()) {
      listing.notes.push_back({absl::StrCat(base, "/", listing.classes[c]),
                               "class folder without images"});
    }
    for (FolderSample& s : walks[c].samples) {
      if (!s.defect.empty()) ++listing.defective;
      listing.samples.push_back(std::move(s));
    }
    for (FolderListing::Note& n : walks[c].notes) {
      listing.notes.push_back(std::move(n));
    }
    for (FolderStamp& f : walks[c].folders) {
      listing.folders.push_back(std::move(f));
    }
  }
  if (listing.samples.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", root, "' holds no image (", FirstNotes(listing.notes, 3), ")"));
  }
  return listing;
}

FileListing ToFileListing(const std::string& root, FolderListing listing) {
  std::string base = root;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  FileListing out;
  out.kind = "ImageFolder";
  out.classes = std::move(listing.classes);
  out.folders = std::move(listing.folders);
  out.notes = std::move(listing.notes);
  out.samples.reserve(listing.samples.size());
  for (FolderSample& s : listing.samples) {
    FileSample sample;
    const absl::string_view relative =
        absl::string_view(s.path).substr(base.size() + 1);
    sample.key = KeyOfPath(relative);
    FileMember image;
    image.extension = PathExtension(s.path);
    image.path = std::move(s.path);
    image.size = s.size;
    image.mtime_ns = s.mtime_ns;
    FileMember label;
    label.extension = "cls";
    label.value = absl::StrCat(s.label);
    sample.members = {std::move(image), std::move(label)};
    sample.defect = std::move(s.defect);
    out.samples.push_back(std::move(sample));
  }
  return out;
}

absl::StatusOr<FileListing> ListObjectFolder(const storage::ObjectStore& store,
                                             const std::string& root) {
  std::string base = root;
  while (!base.empty() && base.back() == '/') base.pop_back();
  absl::StatusOr<storage::Listing> listed = store.ListTree(base + "/");
  if (!listed.ok()) return listed.status();
  // class -> folder within it ("" for the class folder) -> objects, each
  // sorted as sorted(os.walk(...)) and sorted(filenames) sort them.
  std::map<std::string,
           std::map<std::string,
                    std::vector<std::pair<std::string,
                                          const storage::ObjectInfo*>>>>
      tree;
  FileListing out;
  out.kind = "ImageFolder";
  for (const storage::ListedFailure& f : listed->failures) {
    out.notes.push_back({f.url, std::string(f.status.message())});
  }
  for (const storage::ObjectInfo& object : listed->objects) {
    const absl::string_view relative =
        absl::string_view(object.url).substr(base.size() + 1);
    const size_t first = relative.find('/');
    if (first == absl::string_view::npos) continue;  // beside the classes
    const size_t last = relative.rfind('/');
    const std::string folder(
        relative.substr(first + 1, last > first ? last - first - 1 : 0));
    tree[std::string(relative.substr(0, first))][folder].emplace_back(
        std::string(relative.substr(last + 1)), &object);
  }
  if (tree.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "'", root, "' holds no class folder (ImageFolder: root/<class>/"
        "<image>)"));
  }
  int64_t other_files = 0;
  std::string first_other;
  for (auto& [name, folders] : tree) {
    const int32_t label = static_cast<int32_t>(out.classes.size());
    out.classes.push_back(name);
    const size_t before = out.samples.size();
    for (auto& [folder, files] : folders) {
      std::sort(files.begin(), files.end());
      for (const auto& [file, object] : files) {
        if (!HasImageFolderExtension(file)) {
          if (other_files++ == 0) first_other = object->url;
          continue;
        }
        FileSample sample;
        sample.key = KeyOfPath(
            absl::string_view(object->url).substr(base.size() + 1));
        FileMember image;
        image.extension = PathExtension(file);
        image.path = object->url;
        image.size = object->size;
        image.object = std::make_shared<const storage::ObjectInfo>(*object);
        FileMember value;
        value.extension = "cls";
        value.value = absl::StrCat(label);
        sample.members = {std::move(image), std::move(value)};
        out.samples.push_back(std::move(sample));
      }
    }
    if (out.samples.size() == before) {
      out.notes.push_back({absl::StrCat(base, "/", name),
                           "class folder without images"});
    }
  }
  NoteOtherFiles(other_files, first_other, &out.notes);
  if (out.samples.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", root, "' holds no image"));
  }
  return out;
}

}  // namespace stoker::server
