#include "server/auth.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace stoker::server {
namespace {

constexpr size_t kMinTokenLength = 16;

bool TokenCharacter(char c) {
  return absl::ascii_isalnum(c) || absl::string_view("._~+/=-").find(c) !=
                                       absl::string_view::npos;
}

// Equal, in a time that depends on the lengths only.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const TokenAuthorizer>> TokenAuthorizer::Load(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("--auth_tokens_file '", path, "' cannot be read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<std::shared_ptr<const TokenAuthorizer>> auth =
      Parse(text.str());
  if (!auth.ok()) {
    return absl::Status(auth.status().code(),
                        absl::StrCat("--auth_tokens_file '", path, "': ",
                                     auth.status().message()));
  }
  return auth;
}

absl::StatusOr<std::shared_ptr<const TokenAuthorizer>> TokenAuthorizer::Parse(
    absl::string_view text) {
  std::vector<Entry> entries;
  std::set<std::string> jobs;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const std::vector<absl::string_view> parts =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const auto bad = [line_number](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number, ": ", why,
                       " (want: <token> <job> <dataset>[,<dataset>...] or *)"));
    };
    if (parts.size() != 3) return bad("not three fields");
    Entry entry{std::string(parts[0]), std::string(parts[1]), {}};
    if (entry.token.size() < kMinTokenLength ||
        !std::all_of(entry.token.begin(), entry.token.end(), TokenCharacter)) {
      return bad(absl::StrCat("the token must be at least ", kMinTokenLength,
                              " characters of [A-Za-z0-9._~+/=-]"));
    }
    for (const Entry& other : entries) {
      if (ConstantTimeEquals(other.token, entry.token)) {
        return bad("the token of an earlier line again");
      }
    }
    if (!jobs.insert(entry.job).second) {
      return bad(absl::StrCat("job '", entry.job, "' appears twice"));
    }
    if (parts[2] != "*") {
      for (absl::string_view d : absl::StrSplit(parts[2], ',')) {
        if (d.empty()) return bad("an empty dataset name");
        entry.datasets.emplace_back(d);
      }
    }
    entries.push_back(std::move(entry));
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError("no tokens (every client would be "
                                      "refused)");
  }
  return std::shared_ptr<const TokenAuthorizer>(
      new TokenAuthorizer(std::move(entries)));
}

absl::StatusOr<std::string> TokenAuthorizer::Check(
    absl::string_view authorization, absl::string_view dataset) const {
  absl::string_view token = authorization;
  if (!absl::ConsumePrefix(&token, "Bearer ")) {
    return absl::UnauthenticatedError(
        "no bearer token (this server requires one: give the client its "
        "token file)");
  }
  // Every entry is compared, so the time does not tell which one matched.
  const Entry* found = nullptr;
  for (const Entry& entry : entries_) {
    if (ConstantTimeEquals(entry.token, token)) found = &entry;
  }
  if (found == nullptr) {
    return absl::UnauthenticatedError("unknown bearer token");
  }
  if (!found->datasets.empty() &&
      std::find(found->datasets.begin(), found->datasets.end(), dataset) ==
          found->datasets.end()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "job '", found->job, "' may not read dataset '", dataset, "'"));
  }
  return found->job;
}

absl::StatusOr<std::unique_ptr<JobStreamLimits::Slot>> JobStreamLimits::Acquire(
    const std::string& job) {
  absl::MutexLock lock(&mu_);
  int& open = open_[job];
  if (open >= max_per_job_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job '", job, "' has ", open, " streams open, its limit on this "
        "server (--max_streams_per_job); retry later or elsewhere"));
  }
  ++open;
  return std::unique_ptr<Slot>(new Slot(this, job));
}

int JobStreamLimits::open(const std::string& job) const {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(job);
  return it == open_.end() ? 0 : it->second;
}

void JobStreamLimits::Release(const std::string& job) {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(job);
  if (it != open_.end() && --it->second == 0) open_.erase(it);
}

}  // namespace stoker::server
