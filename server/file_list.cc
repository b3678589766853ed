#include "server/file_list.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/atomic_file.h"
#include "common/parallel.h"
#include "common/utf8.h"
#include "server/storage/url.h"

namespace stoker::server {
namespace {

using Value = std::optional<std::string>;  // nullopt: empty or null

struct Table {
  std::vector<std::string> columns;
  struct Row {
    int64_t line = 0;
    std::vector<Value> values;  // by column; may be shorter (JSON)
  };
  std::vector<Row> rows;
  std::vector<ListingNote> notes;
};

// ---- CSV (RFC 4180) ----

// Splits one record starting at `*pos`; advances past its line end.
// Returns false, with `*error`, for a quote that is never closed or text
// after a closing quote.
bool ReadCsvRecord(absl::string_view text, size_t* pos,
                   std::vector<std::string>* fields, int64_t* lines,
                   std::string* error) {
  fields->assign(1, "");
  size_t i = *pos;
  bool quoted = false;
  bool was_quoted = false;
  while (i < text.size()) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          fields->back() += '"';
          i += 2;
          continue;
        }
        quoted = false;
        ++i;
        continue;
      }
      if (c == '\n') ++*lines;
      fields->back() += c;
      ++i;
      continue;
    }
    if (c == '\n' || (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
      i += c == '\r' ? 2 : 1;
      *pos = i;
      return true;
    }
    if (c == ',') {
      fields->emplace_back();
      was_quoted = false;
    } else if (c == '"' && fields->back().empty() && !was_quoted) {
      quoted = true;
      was_quoted = true;
    } else if (was_quoted) {
      *error = "text after a closing quote";
      return false;
    } else {
      fields->back() += c;
    }
    ++i;
  }
  *pos = i;
  if (quoted) {
    *error = "a quoted field is never closed";
    return false;
  }
  return true;
}

absl::StatusOr<Table> ParseCsv(absl::string_view text,
                               const std::string& path) {
  Table table;
  size_t pos = 0;
  int64_t line = 1;
  std::string error;
  std::vector<std::string> fields;
  // The header.
  {
    int64_t extra = 0;
    if (!ReadCsvRecord(text, &pos, &fields, &extra, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", path, "': header: ", error));
    }
    line += 1 + extra;
    table.columns = fields;
  }
  while (pos < text.size()) {
    const int64_t at = line;
    int64_t extra = 0;
    const size_t start = pos;
    const bool ok = ReadCsvRecord(text, &pos, &fields, &extra, &error);
    line += 1 + extra;
    if (!ok) {
      table.notes.push_back({absl::StrCat(path, ":", at), error});
      // Resume on the next line.
      const size_t nl = text.find('\n', start);
      if (nl == absl::string_view::npos) break;
      pos = nl + 1;
      line = at + 1;
      continue;
    }
    if (fields.size() == 1 && fields[0].empty()) continue;  // blank line
    if (fields.size() != table.columns.size()) {
      table.notes.push_back(
          {absl::StrCat(path, ":", at),
           absl::StrCat(fields.size(), " fields, the header has ",
                        table.columns.size())});
      continue;
    }
    Table::Row row{at, {}};
    for (std::string& f : fields) {
      if (f.empty()) {
        row.values.emplace_back();
      } else {
        row.values.emplace_back(std::move(f));
      }
    }
    table.rows.push_back(std::move(row));
  }
  return table;
}

// ---- JSON lines: flat objects only ----

class JsonLine {
 public:
  explicit JsonLine(absl::string_view text) : s_(text) {}

  // Parses `{"k": v, ...}` into (key, value) pairs; false with error().
  bool Object(std::vector<std::pair<std::string, Value>>* out) {
    Space();
    if (!Take('{')) return Fail("not a JSON object");
    Space();
    if (Take('}')) return End();
    while (true) {
      Space();
      std::string key;
      if (!String(&key)) return false;
      Space();
      if (!Take(':')) return Fail("':' expected after a key");
      Space();
      Value value;
      if (!Scalar(key, &value)) return false;
      out->emplace_back(std::move(key), std::move(value));
      Space();
      if (Take(',')) continue;
      if (Take('}')) return End();
      return Fail("',' or '}' expected");
    }
  }

  const std::string& error() const { return error_; }

 private:
  bool End() {
    Space();
    return i_ == s_.size() ? true : Fail("text after the object");
  }
  bool Fail(std::string why) {
    error_ = std::move(why);
    return false;
  }
  void Space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' ||
                              s_[i_] == '\r' || s_[i_] == '\n')) {
      ++i_;
    }
  }
  bool Take(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xc0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xe0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      *out += static_cast<char>(0xf0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  bool Hex4(uint32_t* cp) {
    if (i_ + 4 > s_.size()) return Fail("a \\u escape is cut short");
    *cp = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      *cp <<= 4;
      if (c >= '0' && c <= '9') {
        *cp |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        *cp |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        *cp |= c - 'A' + 10;
      } else {
        return Fail("a bad \\u escape");
      }
    }
    return true;
  }
  bool String(std::string* out) {
    if (!Take('"')) return Fail("a string expected");
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) {
        return Fail("a control character in a string");
      }
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (i_ >= s_.size()) break;
      const char e = s_[i_++];
      switch (e) {
        case '"': *out += '"'; break;
        case '\\': *out += '\\'; break;
        case '/': *out += '/'; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        case 'n': *out += '\n'; break;
        case 'r': *out += '\r'; break;
        case 't': *out += '\t'; break;
        case 'u': {
          uint32_t cp;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xd800 && cp < 0xdc00) {
            uint32_t low;
            if (!Take('\\') || !Take('u') || !Hex4(&low) || low < 0xdc00 ||
                low > 0xdfff) {
              return Fail("an unpaired surrogate escape");
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            return Fail("an unpaired surrogate escape");
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Fail("a bad escape");
      }
    }
    return Fail("a string is never closed");
  }
  bool Scalar(const std::string& key, Value* value) {
    if (i_ >= s_.size()) return Fail("a value expected");
    const char c = s_[i_];
    if (c == '"') {
      std::string text;
      if (!String(&text)) return false;
      if (!text.empty()) *value = std::move(text);
      return true;
    }
    if (c == '{' || c == '[') {
      return Fail(absl::StrCat("the value of '", key,
                               "' is an object or array (only strings, "
                               "numbers, true, false and null)"));
    }
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' &&
           s_[i_] != ' ' && s_[i_] != '\t' && s_[i_] != '\r') {
      ++i_;
    }
    const absl::string_view word = s_.substr(start, i_ - start);
    if (word == "null") return true;
    if (word == "true" || word == "false") {
      *value = std::string(word);
      return true;
    }
    double number;
    if (word.empty() || !absl::SimpleAtod(word, &number) ||
        !(absl::ascii_isdigit(word[0]) || word[0] == '-')) {
      return Fail(absl::StrCat("the value of '", key, "' is not JSON"));
    }
    *value = std::string(word);
    return true;
  }

  absl::string_view s_;
  size_t i_ = 0;
  std::string error_;
};

Table ParseJsonLines(absl::string_view text, const std::string& path) {
  Table table;
  absl::flat_hash_map<std::string, size_t> column_of;
  int64_t line = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == absl::string_view::npos) nl = text.size();
    const absl::string_view one = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line;
    if (absl::StripAsciiWhitespace(one).empty()) continue;
    JsonLine parser(one);
    std::vector<std::pair<std::string, Value>> pairs;
    if (!parser.Object(&pairs)) {
      table.notes.push_back({absl::StrCat(path, ":", line), parser.error()});
      continue;
    }
    Table::Row row{line, {}};
    bool repeated = false;
    std::vector<bool> seen(table.columns.size() + pairs.size(), false);
    for (auto& [key, value] : pairs) {
      auto [it, added] = column_of.try_emplace(key, table.columns.size());
      if (added) table.columns.push_back(key);
      if (it->second >= seen.size()) seen.resize(it->second + 1, false);
      if (seen[it->second]) repeated = true;
      seen[it->second] = true;
      if (row.values.size() <= it->second) row.values.resize(it->second + 1);
      row.values[it->second] = std::move(value);
    }
    if (repeated) {
      table.notes.push_back(
          {absl::StrCat(path, ":", line), "a key appears twice"});
      continue;
    }
    table.rows.push_back(std::move(row));
  }
  return table;
}

// ---- columns ----

enum class Kind { kImage, kLabel, kClass, kFile, kText };

// Lists in object storage larger than this are refused.
constexpr int64_t kMaxListBytes = int64_t{1} << 30;

struct Column {
  std::string name;
  Kind kind = Kind::kText;
};

bool IsDecimal(absl::string_view v) {
  if (v.empty() || v.size() > 10) return false;
  for (char c : v) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  int64_t n;
  return absl::SimpleAtoi(v, &n) && n <= 0x7fffffff;
}

// A last path part with an extension, no whitespace.
bool LooksLikeFile(absl::string_view v) {
  for (char c : v) {
    if (absl::ascii_isspace(c)) return false;
  }
  const size_t slash = v.rfind('/');
  const absl::string_view base =
      slash == absl::string_view::npos ? v : v.substr(slash + 1);
  const size_t dot = base.rfind('.');
  if (dot == absl::string_view::npos || dot == 0 || dot + 1 == base.size()) {
    return false;
  }
  for (char c : base.substr(dot + 1)) {
    if (!absl::ascii_isalnum(c)) return false;
  }
  return base.size() - dot - 1 <= 8;
}

absl::StatusOr<std::vector<Column>> ReadColumns(const Table& table,
                                                const std::string& path,
                                                bool csv) {
  std::vector<Column> columns;
  std::vector<bool> forced;
  for (const std::string& header : table.columns) {
    Column column;
    column.name = header;
    bool force = false;
    if (const size_t colon = header.rfind(':'); colon != std::string::npos) {
      const std::string kind = header.substr(colon + 1);
      column.name = header.substr(0, colon);
      force = true;
      if (kind == "class") {
        column.kind = Kind::kClass;
      } else if (kind == "file") {
        column.kind = Kind::kFile;
      } else if (kind == "text") {
        column.kind = Kind::kText;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", path, "': column '", header,
            "': the kind after ':' must be class, file or text"));
      }
    }
    column.name = std::string(absl::StripAsciiWhitespace(column.name));
    if (column.name.empty() || !common::IsUtf8(column.name) ||
        column.name.find_first_of("./") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", path, "': column name '", column.name,
          "' must be non-empty UTF-8 without '.' or '/'"));
    }
    for (const Column& other : columns) {
      if (other.name == column.name) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", path, "': column '", column.name, "' appears twice"));
      }
    }
    columns.push_back(std::move(column));
    forced.push_back(force);
  }
  auto find_named = [&](std::initializer_list<const char*> names) -> int {
    for (const char* n : names) {
      for (size_t c = 0; c < columns.size(); ++c) {
        if (absl::AsciiStrToLower(columns[c].name) == n) return c;
      }
    }
    return -1;
  };
  int image = find_named({"image", "path", "file", "filename", "img"});
  if (image < 0 && csv && !columns.empty()) image = 0;
  if (image < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "': no image column (name one image, path, file, "
        "filename or img)"));
  }
  columns[image].kind = Kind::kImage;
  const int label = find_named({"label", "class", "cls", "target"});
  if (label >= 0 && label != image) columns[label].kind = Kind::kLabel;
  for (size_t c = 0; c < columns.size(); ++c) {
    if (static_cast<int>(c) == image || static_cast<int>(c) == label ||
        forced[c]) {
      continue;
    }
    bool decimal = true, file = true, any = false;
    for (const Table::Row& row : table.rows) {
      if (c >= row.values.size() || !row.values[c]) continue;
      any = true;
      decimal = decimal && IsDecimal(*row.values[c]);
      file = file && LooksLikeFile(*row.values[c]);
    }
    columns[c].kind = !any       ? Kind::kText
                      : decimal  ? Kind::kClass
                      : file     ? Kind::kFile
                                 : Kind::kText;
  }
  return columns;
}

std::string Resolve(const std::string& folder, const std::string& value) {
  return value[0] == '/' ? value : absl::StrCat(folder, "/", value);
}

// Stats `member.path`; the defect if it is not a readable regular file.
std::string StatFile(FileMember* member) {
  struct stat st;
  if (::stat(member->path.c_str(), &st) != 0) {
    return absl::StrCat("'", member->path, "': ", std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::StrCat("'", member->path, "' is not a regular file");
  }
  if (::access(member->path.c_str(), R_OK) != 0) {
    return absl::StrCat("'", member->path, "' is not readable: ",
                        std::strerror(errno));
  }
  member->size = st.st_size;
  member->mtime_ns = MtimeNs(st);
  return "";
}

// Looks up the object `member.path` names; the defect if it cannot be.
std::string LookUp(const storage::ObjectStore& store, FileMember* member) {
  absl::StatusOr<storage::Listing> listed = store.List(member->path);
  if (!listed.ok()) {
    return absl::StrCat("'", member->path, "': ", listed.status().message());
  }
  for (const storage::ObjectInfo& object : listed->objects) {
    if (object.url != member->path) continue;
    member->size = object.size;
    member->object = std::make_shared<const storage::ObjectInfo>(object);
    return "";
  }
  for (const storage::ListedFailure& failure : listed->failures) {
    return absl::StrCat("'", member->path, "': ", failure.status.message());
  }
  return absl::StrCat("'", member->path, "': no such object");
}

// The list's bytes, from disk or object storage.
absl::StatusOr<std::string> ReadListText(const std::string& path,
                                         const storage::ObjectStore* store) {
  if (storage::SchemeOf(path) == storage::Scheme::kLocal) {
    return common::ReadWholeFile(path);
  }
  if (store == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' is in object storage, which this server was not set "
        "up to read"));
  }
  return store->ReadSmall(path, kMaxListBytes);
}

// What every row of one list shares.
struct RowContext {
  const std::string& path;     // the list, for notes
  std::string folder;          // what relative paths are relative to
  const storage::ObjectStore* store;
};

// `v` is an object's URL: its path after the host (or bucket), so the same
// layout gives the same keys wherever it lies.
absl::string_view PathAfterHost(absl::string_view v) {
  const size_t host = v.find("://") + 3;
  const size_t slash = v.find('/', host);
  return slash == absl::string_view::npos ? absl::string_view()
                                          : v.substr(slash + 1);
}

// The member a file column's value `v` names, or the note why it cannot.
std::optional<FileMember> FileOf(const RowContext& context,
                                 const Column& column, const std::string& v,
                                 std::string* why) {
  FileMember m;
  m.path = absl::StrContains(v, "://") ? v : Resolve(context.folder, v);
  if (absl::StrContains(m.path, "://")) {
    if (context.store == nullptr ||
        storage::SchemeOf(m.path) == storage::Scheme::kLocal) {
      *why = absl::StrCat("'", column.name, "' is a URL ('", m.path, "') ",
                          context.store == nullptr
                              ? "and this server reads no object storage"
                              : "of an unknown scheme");
      return std::nullopt;
    }
    // Looked up later; a placeholder until then.
    m.object = std::make_shared<const storage::ObjectInfo>();
  }
  m.extension = column.kind == Kind::kImage
                    ? PathExtension(v)
                    : absl::StrCat(column.name, ".", PathExtension(v));
  return m;
}

// One row as a sample (the image member first), or nullopt after noting
// why the row is left out.
std::optional<FileSample> RowToSample(const RowContext& context,
                                      const std::vector<Column>& columns,
                                      Table::Row* row,
                                      std::vector<ListingNote>* notes) {
  const std::string where = absl::StrCat(context.path, ":", row->line);
  FileSample sample;
  for (size_t c = 0; c < columns.size(); ++c) {
    if (c >= row->values.size() || !row->values[c]) continue;
    std::string& v = *row->values[c];
    const Column& column = columns[c];
    if (!common::IsUtf8(v)) {
      notes->push_back({where, absl::StrCat("'", column.name,
                                            "' is not UTF-8")});
      return std::nullopt;
    }
    FileMember m;
    if (column.kind == Kind::kImage || column.kind == Kind::kFile) {
      std::string why;
      std::optional<FileMember> file = FileOf(context, column, v, &why);
      if (!file) {
        notes->push_back({where, std::move(why)});
        return std::nullopt;
      }
      if (column.kind == Kind::kImage) {
        sample.key = KeyOfPath(absl::StrContains(v, "://") ? PathAfterHost(v)
                                                           : v);
        sample.members.insert(sample.members.begin(), *std::move(file));
        continue;
      }
      m = *std::move(file);
    } else {
      m.extension = column.kind == Kind::kLabel ? std::string("cls")
                    : column.kind == Kind::kClass
                        ? absl::StrCat(column.name, ".cls")
                        : absl::StrCat(column.name, ".txt");
      m.value = std::move(v);
    }
    sample.members.push_back(std::move(m));
  }
  if (sample.key.empty()) {
    // No image in this row: a sample all the same (its index is kept),
    // which classic requests refuse.
    sample.has_image = false;
    sample.key = absl::StrCat("row_", row->line);
  }
  return sample;
}

// The list's folder and the folders of its local files vouch for a cached
// listing: their stamps, taken now.
void StampFolders(const std::string& list_folder, FileListing* listing) {
  std::vector<std::string> folders = {list_folder};
  for (const FileSample& s : listing->samples) {
    for (const FileMember& m : s.members) {
      if (!m.is_file() || m.object != nullptr) continue;
      const size_t cut = m.path.rfind('/');
      folders.push_back(cut == std::string::npos ? "." : m.path.substr(0, cut));
    }
  }
  std::sort(folders.begin(), folders.end());
  folders.erase(std::unique(folders.begin(), folders.end()), folders.end());
  for (std::string& f : folders) {
    struct stat st;
    if (::stat(f.c_str(), &st) != 0) continue;
    listing->folders.push_back(StampOf(std::move(f), st));
  }
}

}  // namespace

bool IsFileListPath(const std::string& path) {
  return absl::EndsWithIgnoreCase(path, ".csv") ||
         absl::EndsWithIgnoreCase(path, ".jsonl") ||
         absl::EndsWithIgnoreCase(path, ".ndjson");
}

absl::StatusOr<FileListing> ReadFileList(const std::string& path,
                                         int threads,
                                         const storage::ObjectStore* store) {
  absl::StatusOr<std::string> text = ReadListText(path, store);
  if (!text.ok()) return text.status();
  const bool csv = absl::EndsWithIgnoreCase(path, ".csv");
  Table table;
  if (csv) {
    absl::StatusOr<Table> parsed = ParseCsv(*text, path);
    if (!parsed.ok()) return parsed.status();
    table = *std::move(parsed);
  } else {
    table = ParseJsonLines(*text, path);
  }
  FileListing listing;
  listing.kind = csv ? "CSV list" : "JSON lines list";
  listing.notes = std::move(table.notes);
  if (table.rows.empty()) {
    std::string why = listing.notes.empty()
                          ? std::string("no rows")
                          : absl::StrCat("no usable row; ",
                                         FirstNotes(listing.notes, 1));
    return absl::InvalidArgumentError(absl::StrCat("'", path, "': ", why));
  }
  absl::StatusOr<std::vector<Column>> columns =
      ReadColumns(table, path, csv);
  if (!columns.ok()) return columns.status();

  const size_t slash = path.rfind('/');
  const RowContext context{
      path, slash == std::string::npos ? "." : path.substr(0, slash), store};
  for (Table::Row& row : table.rows) {
    std::optional<FileSample> sample =
        RowToSample(context, *columns, &row, &listing.notes);
    if (sample) listing.samples.push_back(*std::move(sample));
  }
  if (listing.samples.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "': no row can be served (",
                     FirstNotes(listing.notes, 3), ")"));
  }
  // Stamped before the files are, so a file added meanwhile is not missed
  // by the cache's check.
  StampFolders(context.folder, &listing);
  common::ParallelFor(listing.samples.size(), std::max(1, threads),
                      [&](size_t i) {
                        FileSample& s = listing.samples[i];
                        for (FileMember& m : s.members) {
                          if (!m.is_file()) continue;
                          std::string defect = m.object != nullptr
                                                   ? LookUp(*store, &m)
                                                   : StatFile(&m);
                          if (!defect.empty() && s.defect.empty()) {
                            s.defect = std::move(defect);
                          }
                        }
                      });
  return listing;
}

}  // namespace stoker::server
