// ReadFileList: CSV and JSON-lines parsing, column kinds, and every bad row
// reported (never fatal unless nothing is left).

#include "server/file_list.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class FileListTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/file_list_",
                        ::testing::UnitTest::GetInstance()
                            ->current_test_info()
                            ->name());
    ASSERT_EQ(std::system(absl::StrCat("rm -rf '", dir_, "' && mkdir -p '",
                                       dir_, "/img'")
                              .c_str()),
              0);
    for (const char* name : {"a.jpg", "b.png", "m.png"}) {
      std::ofstream(absl::StrCat(dir_, "/img/", name)) << "bytes of " << name;
    }
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = absl::StrCat(dir_, "/", name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // "ext=value-or-size" per member.
  static std::string Members(const FileSample& s) {
    std::vector<std::string> parts;
    for (const FileMember& m : s.members) {
      parts.push_back(m.is_file() ? absl::StrCat(m.extension, "#", m.size)
                                  : absl::StrCat(m.extension, "=", m.value));
    }
    return absl::StrJoin(parts, " ");
  }

  static std::string Notes(const FileListing& l) {
    std::vector<std::string> parts;
    for (const ListingNote& n : l.notes) {
      parts.push_back(absl::StrCat(n.path, ": ", n.reason));
    }
    return absl::StrJoin(parts, "\n");
  }

  std::string dir_;
};

TEST_F(FileListTest, CsvColumnsBecomeMembers) {
  const std::string path = Write(
      "l.csv",
      "image,mask,label,caption,score\r\n"
      "img/a.jpg,img/m.png,3,\"a, \"\"quoted\"\" caption\",7\r\n"
      "img/b.png,,0,\"two\nlines\",\n");
  absl::StatusOr<FileListing> l = ReadFileList(path);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->kind, "CSV list");
  ASSERT_EQ(l->samples.size(), 2u);
  EXPECT_EQ(l->samples[0].key, "img/a");
  EXPECT_EQ(Members(l->samples[0]),
            "jpg#14 mask.png#14 cls=3 caption.txt=a, \"quoted\" caption "
            "score.cls=7");
  EXPECT_EQ(Members(l->samples[1]), "png#14 cls=0 caption.txt=two\nlines");
  EXPECT_TRUE(l->samples[0].defect.empty());
  EXPECT_EQ(l->samples[0].members[0].path, dir_ + "/img/a.jpg");
  EXPECT_TRUE(l->notes.empty()) << Notes(*l);
}

TEST_F(FileListTest, HeaderKindsOverrideTheGuess) {
  const std::string path =
      Write("l.csv", "path,id:text,other:file\nimg/a.jpg,12,img/b.png\n");
  absl::StatusOr<FileListing> l = ReadFileList(path);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(Members(l->samples[0]), "jpg#14 id.txt=12 other.png#14");
}

TEST_F(FileListTest, JsonLines) {
  const std::string path = Write(
      "l.jsonl",
      "{\"file\": \"img/a.jpg\", \"target\": 2, \"text\": \"caf\\u00e9 "
      "\\ud83d\\ude00\", \"skip\": null}\n"
      "\n"
      "{\"text\": \"no image\", \"target\": 1}\n");
  absl::StatusOr<FileListing> l = ReadFileList(path);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->kind, "JSON lines list");
  ASSERT_EQ(l->samples.size(), 2u);
  EXPECT_EQ(Members(l->samples[0]),
            "jpg#14 cls=2 text.txt=caf\xc3\xa9 \xf0\x9f\x98\x80");
  // A row without an image keeps its index; classic requests refuse it.
  EXPECT_FALSE(l->samples[1].has_image);
  EXPECT_EQ(l->samples[1].key, "row_3");
}

TEST_F(FileListTest, BadRowsAreNotedAndLeftOut) {
  const std::string path = Write(
      "l.csv",
      "image,label\n"
      "img/a.jpg,1\n"
      "img/a.jpg,1,2\n"                 // too many fields
      "\"img/b.png\"x,1\n"              // text after a closing quote
      "img/missing.jpg,1\n"             // a defect, not a note
      "img/\xff.jpg,1\n"                // not UTF-8
      "https://host/x.jpg,1\n"          // a URL
      "img/b.png,1\n");
  absl::StatusOr<FileListing> l = ReadFileList(path);
  ASSERT_TRUE(l.ok()) << l.status();
  const std::string notes = Notes(*l);
  EXPECT_THAT(notes, HasSubstr("l.csv:3: 3 fields, the header has 2"));
  EXPECT_THAT(notes, HasSubstr("l.csv:4: text after a closing quote"));
  EXPECT_THAT(notes, HasSubstr("l.csv:6: 'image' is not UTF-8"));
  EXPECT_THAT(notes, HasSubstr("l.csv:7: 'image' is a URL"));
  ASSERT_EQ(l->samples.size(), 3u);
  EXPECT_TRUE(l->samples[0].defect.empty());
  EXPECT_THAT(l->samples[1].defect, HasSubstr("No such file"));
  EXPECT_TRUE(l->samples[2].defect.empty());
}

TEST_F(FileListTest, JsonBadLines) {
  const std::string path = Write(
      "l.jsonl",
      "{\"image\": \"img/a.jpg\"}\n"
      "{\"image\": [\"img/a.jpg\"]}\n"
      "{\"image\": \"img/a.jpg\", \"image\": \"img/b.png\"}\n"
      "{\"image\": \"img/a.jpg\"\n"
      "[1, 2]\n"
      "{\"image\": \"\\ud800\"}\n");
  absl::StatusOr<FileListing> l = ReadFileList(path);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->samples.size(), 1u);
  const std::string notes = Notes(*l);
  EXPECT_THAT(notes, HasSubstr(":2: the value of 'image' is an object or "
                               "array"));
  EXPECT_THAT(notes, HasSubstr(":3: a key appears twice"));
  EXPECT_THAT(notes, HasSubstr(":4: ',' or '}' expected"));
  EXPECT_THAT(notes, HasSubstr(":5: not a JSON object"));
  EXPECT_THAT(notes, HasSubstr(":6: an unpaired surrogate escape"));
}

TEST_F(FileListTest, WholeListErrors) {
  EXPECT_TRUE(absl::IsNotFound(ReadFileList(dir_ + "/none.csv").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      ReadFileList(Write("e.csv", "image,label\n")).status()));
  absl::Status dup =
      ReadFileList(Write("d.csv", "image,image\nimg/a.jpg,x\n")).status();
  EXPECT_THAT(dup.message(), HasSubstr("column 'image' appears twice"));
  absl::Status kind =
      ReadFileList(Write("k.csv", "image,x:float\nimg/a.jpg,1\n")).status();
  EXPECT_THAT(kind.message(), HasSubstr("class, file or text"));
  absl::Status image =
      ReadFileList(Write("i.jsonl", "{\"label\": 1}\n")).status();
  EXPECT_THAT(image.message(), HasSubstr("no image column"));
  absl::Status none =
      ReadFileList(Write("n.csv", "image\nimg/a.jpg,1\n\"x\n")).status();
  EXPECT_TRUE(absl::IsInvalidArgument(none)) << none;
  absl::Status urls = ReadFileList(Write("u.csv", "image\ns3://b/x.jpg\n"))
                          .status();
  EXPECT_TRUE(absl::IsFailedPrecondition(urls)) << urls;
  EXPECT_THAT(urls.message(), HasSubstr("no row can be served"));
}

TEST_F(FileListTest, ListPathsByExtension) {
  EXPECT_TRUE(IsFileListPath("/x/train.csv"));
  EXPECT_TRUE(IsFileListPath("/x/train.JSONL"));
  EXPECT_TRUE(IsFileListPath("train.ndjson"));
  EXPECT_FALSE(IsFileListPath("/x/train-*.tar"));
  EXPECT_FALSE(IsFileListPath("/x/csv"));
}

}  // namespace
}  // namespace stoker::server
