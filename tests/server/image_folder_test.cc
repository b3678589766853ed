// ListImageFolder against torchvision.datasets.ImageFolder itself (Debian's
// python3-torchvision, run as a subprocess on the same tree), and the
// cases torchvision does not survive.

#include "server/image_folder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class ImageFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/image_folder_",
                         ::testing::UnitTest::GetInstance()
                             ->current_test_info()
                             ->name());
    ASSERT_EQ(std::system(absl::StrCat("rm -rf '", root_, "' && mkdir -p '",
                                       root_, "'")
                              .c_str()),
              0);
  }

  void Touch(const std::string& relative) {
    const std::string path = absl::StrCat(root_, "/", relative);
    ASSERT_EQ(std::system(absl::StrCat("mkdir -p \"$(dirname '", path,
                                       "')\"")
                              .c_str()),
              0);
    std::ofstream(path) << "x";
  }

  void Link(const std::string& target, const std::string& relative) {
    ASSERT_EQ(symlink(target.c_str(), absl::StrCat(root_, "/", relative).c_str()),
              0);
  }

  // torchvision's (path, class index) list, and its classes.
  std::vector<std::string> Torchvision() {
    const std::string script = absl::StrCat(
        "import sys\n"
        "from torchvision.datasets import ImageFolder\n"
        "d = ImageFolder(sys.argv[1], loader=lambda p: p)\n"
        "print('classes', '|'.join(d.classes))\n"
        "for path, label in d.samples:\n"
        "    print(label, path)\n");
    FILE* out = popen(absl::StrCat("/usr/bin/python3 -c \"", script,
                                   "\" '", root_, "' 2>&1")
                          .c_str(),
                      "r");
    std::string text;
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof(buffer), out)) > 0) {
      text.append(buffer, n);
    }
    EXPECT_EQ(pclose(out), 0) << text;
    return absl::StrSplit(text, '\n', absl::SkipEmpty());
  }

  static std::vector<std::string> Lines(const FolderListing& listing) {
    std::vector<std::string> lines = {
        absl::StrCat("classes ", absl::StrJoin(listing.classes, "|"))};
    for (const FolderSample& s : listing.samples) {
      lines.push_back(absl::StrCat(s.label, " ", s.path));
    }
    return lines;
  }

  std::string root_;
};

TEST_F(ImageFolderTest, SamplesAndClassesEqualTorchvisions) {
  // Nested folders whose paths sort differently from a depth-first walk
  // ("a b" < "a/..." because ' ' < '/'), names with spaces and UTF-8,
  // upper-case and every torchvision extension, files it ignores, a linked
  // folder, a hidden image.
  for (const char* f :
       {"cat/b.jpg", "cat/a.JPEG", "cat/a b/x.png", "cat/a/y.bmp",
        "cat/a/z/w.tiff", "cat/a.txt", "cat/.hidden.jpg", "dog/n\xc3\xa9.webp",
        "dog/m.ppm", "dog/k.pgm", "dog/j.tif", "dog/notes", "Zebra/1.jpg",
        "elsewhere/linked.png"}) {
    Touch(f);
  }
  Link(absl::StrCat(root_, "/elsewhere"), "dog/link");
  absl::StatusOr<FolderListing> listing = ListImageFolder(root_);
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_THAT(listing->classes, ElementsAre("Zebra", "cat", "dog", "elsewhere"));
  EXPECT_EQ(Lines(*listing), Torchvision());
  EXPECT_EQ(listing->defective, 0);
  for (const FolderSample& s : listing->samples) {
    EXPECT_EQ(s.size, 1) << s.path;
    EXPECT_GT(s.mtime_ns, 0) << s.path;
  }
}

TEST_F(ImageFolderTest, UnreadableFilesKeepTheirPlaceWithADefect) {
  Touch("a/1.jpg");
  Touch("a/4.jpg");
  Link(absl::StrCat(root_, "/nowhere.jpg"), "a/2.jpg");  // dangling
  ASSERT_EQ(mkfifo(absl::StrCat(root_, "/a/3.jpg").c_str(), 0644), 0);
  // A folder named like an image is walked into, as os.walk does.
  Touch("a/0.jpg/inside.jpg");
  absl::StatusOr<FolderListing> listing = ListImageFolder(root_ + "/");
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_EQ(Lines(*listing), Torchvision());
  ASSERT_EQ(listing->samples.size(), 5u);
  EXPECT_THAT(listing->samples[1].path, HasSubstr("a/2.jpg"));
  EXPECT_THAT(listing->samples[1].defect, HasSubstr("cannot stat"));
  EXPECT_THAT(listing->samples[2].path, HasSubstr("a/3.jpg"));
  EXPECT_EQ(listing->samples[2].defect, "not a regular file");
  EXPECT_THAT(listing->samples[4].path, HasSubstr("a/0.jpg/inside.jpg"));
  EXPECT_EQ(listing->defective, 2);
}

TEST_F(ImageFolderTest, ReportsWhatTorchvisionCannotList) {
  Touch("a/1.jpg");
  Touch("empty/readme.txt");
  Touch("b/\xff\xfe.jpg");      // not UTF-8
  Touch("b/ok.jpg");
  Link("..", "b/up");         // a loop
  absl::StatusOr<FolderListing> listing = ListImageFolder(root_);
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_THAT(listing->classes, ElementsAre("a", "b", "empty"));
  ASSERT_EQ(listing->samples.size(), 2u);
  EXPECT_EQ(listing->samples[1].label, 1);
  std::string notes;
  for (const FolderListing::Note& n : listing->notes) {
    absl::StrAppend(&notes, n.path, ": ", n.reason, "\n");
  }
  EXPECT_THAT(notes, HasSubstr("not UTF-8"));
  EXPECT_THAT(notes, HasSubstr("b/up: a link back to a folder above it"));
  EXPECT_THAT(notes, HasSubstr("empty: class folder without images"));
  EXPECT_THAT(notes, HasSubstr("empty/readme.txt: 1 file without an image "
                               "extension left out"));
}

TEST_F(ImageFolderTest, ErrorsNameTheProblem) {
  EXPECT_EQ(ListImageFolder(root_ + "/missing").status().code(),
            absl::StatusCode::kNotFound);
  Touch("file.jpg");
  EXPECT_EQ(ListImageFolder(root_ + "/file.jpg").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status no_classes = ListImageFolder(root_).status();
  EXPECT_EQ(no_classes.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(no_classes.message(), HasSubstr("no class folder"));
  EXPECT_THAT(no_classes.message(), Not(HasSubstr("give a glob")));
  Touch("shard-000000.tar");  // a folder of shards, named as a folder
  EXPECT_THAT(ListImageFolder(root_).status().message(),
              HasSubstr(absl::StrCat("give a glob: '", root_, "/*.tar'")));
  ASSERT_EQ(::unlink(absl::StrCat(root_, "/shard-000000.tar").c_str()), 0);
  Touch("a/readme.txt");
  absl::Status no_images = ListImageFolder(root_).status();
  EXPECT_EQ(no_images.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_images.message(), HasSubstr("class folder without images"));
}

TEST(ImageFolderExtensionTest, TorchvisionsListIgnoringCase) {
  for (const char* name : {"a.jpg", "a.JPG", "b.jpeg", "c.png", "d.ppm",
                           "e.bmp", "f.pgm", "g.tif", "h.TIFF", "i.webp"}) {
    EXPECT_TRUE(HasImageFolderExtension(name)) << name;
  }
  for (const char* name : {"a.gif", "jpg", "a.jpg.txt", "a.jp", ""}) {
    EXPECT_FALSE(HasImageFolderExtension(name)) << name;
  }
}

}  // namespace
}  // namespace stoker::server
