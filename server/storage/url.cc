#include "server/storage/url.h"

#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace stoker::storage {
namespace {

// Position of the '}' closing the '{' at `open`, or npos.
size_t MatchingBrace(absl::string_view text, size_t open) {
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '{') ++depth;
    if (text[i] == '}' && --depth == 0) return i;
  }
  return absl::string_view::npos;
}

// The alternatives of a group's inside, split at top-level commas.
std::vector<absl::string_view> SplitAlternatives(absl::string_view inside) {
  std::vector<absl::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < inside.size(); ++i) {
    if (inside[i] == '{') ++depth;
    if (inside[i] == '}') --depth;
    if (inside[i] == ',' && depth == 0) {
      parts.push_back(inside.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(inside.substr(start));
  return parts;
}

absl::Status ExpandInto(absl::string_view pattern, const std::string& prefix,
                        size_t max_results, std::vector<std::string>* out) {
  const size_t open = pattern.find('{');
  if (open == absl::string_view::npos) {
    if (pattern.find('}') != absl::string_view::npos) {
      return absl::InvalidArgumentError("unmatched '}'");
    }
    if (out->size() >= max_results) {
      return absl::InvalidArgumentError(
          absl::StrCat("expands to more than ", max_results, " names"));
    }
    out->push_back(absl::StrCat(prefix, pattern));
    return absl::OkStatus();
  }
  const size_t close = MatchingBrace(pattern, open);
  if (close == absl::string_view::npos) {
    return absl::InvalidArgumentError("unmatched '{'");
  }
  const std::string head = absl::StrCat(prefix, pattern.substr(0, open));
  const absl::string_view inside = pattern.substr(open + 1, close - open - 1);
  const absl::string_view rest = pattern.substr(close + 1);

  std::vector<std::string> alternatives;
  const size_t dots = inside.find("..");
  if (inside.find(',') == absl::string_view::npos &&
      dots != absl::string_view::npos) {
    const absl::string_view low = inside.substr(0, dots);
    const absl::string_view high = inside.substr(dots + 2);
    int64_t lo = 0;
    int64_t hi = 0;
    if (!absl::SimpleAtoi(low, &lo) || !absl::SimpleAtoi(high, &hi) || lo < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "range '{", inside, "}' needs two non-negative integers"));
    }
    if (hi < lo) {
      return absl::InvalidArgumentError(
          absl::StrCat("range '{", inside, "}' goes down"));
    }
    if (static_cast<uint64_t>(hi - lo) >= max_results) {
      return absl::InvalidArgumentError(
          absl::StrCat("expands to more than ", max_results, " names"));
    }
    const int width =
        low.size() > 1 && low[0] == '0' ? static_cast<int>(low.size()) : 0;
    for (int64_t v = lo; v <= hi; ++v) {
      alternatives.push_back(absl::StrFormat("%0*d", width, v));
    }
  } else {
    for (absl::string_view alt : SplitAlternatives(inside)) {
      alternatives.emplace_back(alt);
    }
  }
  for (const std::string& alt : alternatives) {
    // The alternative may hold groups of its own.
    std::vector<std::string> expanded;
    if (absl::Status s = ExpandInto(alt, "", max_results, &expanded); !s.ok()) {
      return s;
    }
    for (const std::string& e : expanded) {
      if (absl::Status s =
              ExpandInto(rest, absl::StrCat(head, e), max_results, out);
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

Scheme SchemeOf(absl::string_view url) {
  if (absl::StartsWith(url, "http://") || absl::StartsWith(url, "https://")) {
    return Scheme::kHttp;
  }
  if (absl::StartsWith(url, "s3://")) return Scheme::kS3;
  return Scheme::kLocal;
}

absl::StatusOr<std::vector<std::string>> ExpandBraces(absl::string_view pattern,
                                                      size_t max_results) {
  std::vector<std::string> out;
  if (absl::Status s = ExpandInto(pattern, "", max_results, &out); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", pattern, "': ", s.message()));
  }
  return out;
}

bool HasWildcard(absl::string_view text) {
  return text.find_first_of("*?[") != absl::string_view::npos;
}

absl::string_view LiteralPrefix(absl::string_view text) {
  return text.substr(0, text.find_first_of("*?[{"));
}

std::string UriEncode(absl::string_view text, bool keep_slash) {
  std::string out;
  for (const char c : text) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                            c == '.' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "%%%02X", static_cast<unsigned char>(c));
    }
  }
  return out;
}

absl::StatusOr<S3Location> ParseS3Url(absl::string_view url) {
  if (!absl::ConsumePrefix(&url, "s3://")) {
    return absl::InvalidArgumentError(absl::StrCat("'", url, "' is not s3://"));
  }
  const size_t slash = url.find('/');
  S3Location location;
  location.bucket = std::string(url.substr(0, slash));
  if (slash != absl::string_view::npos) {
    location.key = std::string(url.substr(slash + 1));
  }
  if (location.bucket.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'s3://", url, "' names no bucket"));
  }
  return location;
}

std::string BaseNameOf(absl::string_view url_or_path) {
  absl::string_view s = url_or_path;
  s = s.substr(0, s.find_first_of("?#"));
  const size_t slash = s.rfind('/');
  return std::string(slash == absl::string_view::npos ? s : s.substr(slash + 1));
}

}  // namespace stoker::storage
