#include "client/cursor.h"

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace stoker::client {
namespace {

constexpr char kPrefix[] = "stoker-cursor-v3";
// Cursors of earlier versions: their epochs were in Fisher-Yates orders.
constexpr const char* kOlderPrefixes[] = {"stoker-cursor-v1",
                                          "stoker-cursor-v2"};

bool IsHex16(absl::string_view s) {
  return s.size() == 16 &&
         s.find_first_not_of("0123456789abcdefABCDEF") == absl::string_view::npos;
}

// Letters, digits and "-_./" stay; every other byte becomes %XX.
std::string Escape(absl::string_view s) {
  std::string out;
  for (const unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ||
        c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

bool Unescape(absl::string_view s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out->push_back(s[i]);
      continue;
    }
    int value = 0;
    if (i + 2 >= s.size()) return false;
    for (int k = 1; k <= 2; ++k) {
      const char c = s[i + k];
      if (!absl::ascii_isxdigit(c)) return false;
      value = value * 16 + (absl::ascii_isdigit(c)
                                ? c - '0'
                                : absl::ascii_tolower(c) - 'a' + 10);
    }
    out->push_back(static_cast<char>(value));
    i += 2;
  }
  return true;
}

// "a,b,c" of non-negative integers, strictly ascending.
bool ParseList(absl::string_view text, std::vector<int64_t>* out) {
  out->clear();
  if (text.empty()) return true;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int64_t value;
    if (!absl::SimpleAtoi(item, &value) || value < 0) return false;
    if (!out->empty() && value <= out->back()) return false;
    out->push_back(value);
  }
  return true;
}

}  // namespace

bool PlanFacts::operator==(const PlanFacts& o) const {
  return dataset == o.dataset && fingerprint == o.fingerprint &&
         transform == o.transform && fields == o.fields && seed == o.seed &&
         shuffle == o.shuffle && window == o.window && mixture == o.mixture;
}

std::string PlanFacts::Differences(const PlanFacts& saved) const {
  std::vector<std::string> out;
  auto note = [&](absl::string_view name, const auto& here,
                  const auto& there) {
    if (here != there) {
      out.push_back(absl::StrCat(name, " '", here, "' here, '", there,
                                 "' in the state"));
    }
  };
  note("dataset", dataset, saved.dataset);
  note("dataset fingerprint (the data changed)", fingerprint,
       saved.fingerprint);
  if (transform != saved.transform) out.push_back("the transform differs");
  if (fields != saved.fields) out.push_back("the fields differ");
  note("seed", seed, saved.seed);
  note("shuffle", shuffle ? 1 : 0, saved.shuffle ? 1 : 0);
  note("shuffle_window", window, saved.window);
  if (mixture != saved.mixture) {
    out.push_back(
        "the mixture (sources, weights, mode or epoch length) differs");
  }
  return absl::StrJoin(out, "; ");
}

bool EpochCut::SameCut(const EpochCut& o) const {
  return world_size == o.world_size && batch_size == o.batch_size &&
         drop_last == o.drop_last && consumed_prefix == o.consumed_prefix &&
         consumed_after == o.consumed_after;
}

std::string PlanId(absl::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return absl::StrCat(absl::Hex(h, absl::kZeroPad16));
}

std::string Cursor::Serialize() const {
  std::string out = absl::StrCat(kPrefix, ";plan=", plan_id, ";epoch=",
                                 epoch, ";next=", next_batch);
  if (!delivered_after.empty()) {
    absl::StrAppend(&out, ";after=", absl::StrJoin(delivered_after, ","));
  }
  absl::StrAppend(&out, ";rank=", cut.rank, ";world=", cut.world_size,
                  ";batch=", cut.batch_size, ";drop_last=",
                  cut.drop_last ? 1 : 0);
  if (cut.consumed_prefix > 0) {
    absl::StrAppend(&out, ";prefix=", cut.consumed_prefix);
  }
  if (!cut.consumed_after.empty()) {
    absl::StrAppend(&out, ";consumed=", absl::StrJoin(cut.consumed_after, ","));
  }
  absl::StrAppend(&out, ";dataset=", Escape(facts.dataset), ";fingerprint=",
                  Escape(facts.fingerprint), ";transform=", facts.transform,
                  ";fields=", facts.fields, ";seed=", facts.seed,
                  ";shuffle=", facts.shuffle ? 1 : 0, ";window=",
                  facts.window);
  if (!facts.mixture.empty()) absl::StrAppend(&out, ";mixture=", facts.mixture);
  return out;
}

absl::StatusOr<Cursor> Cursor::Parse(absl::string_view text) {
  for (const char* older : kOlderPrefixes) {
    if (absl::StartsWith(text, older)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cursor '", text.substr(0, 60), "...' was written by an older "
          "Stoker (", older, "), whose epochs were in Fisher-Yates orders "
          "this version no longer computes (it keeps no per-sample order); "
          "it cannot resume that epoch exactly. Finish the epoch with the "
          "version that wrote it, or start the next epoch with this one"));
    }
  }
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad cursor '", text.substr(0, 200), text.size() > 200 ? "...'" : "'",
        ": ", why, " (expected a cursor from Loader::cursor(), ",
        kPrefix, ";plan=...)"));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(text, ';');
  if (parts.empty() || parts[0] != kPrefix) return bad("wrong format");
  std::map<std::string, std::string, std::less<>> values;
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    if (eq == absl::string_view::npos) {
      return bad(absl::StrCat("'", parts[i], "' is not key=value"));
    }
    std::string key(parts[i].substr(0, eq));
    if (!values.emplace(key, std::string(parts[i].substr(eq + 1))).second) {
      return bad(absl::StrCat("'", key, "' given twice"));
    }
  }
  static constexpr const char* kRequired[] = {
      "plan",    "epoch",       "next",      "rank",   "world",
      "batch",   "drop_last",   "dataset",   "fingerprint",
      "transform", "fields",    "seed",      "shuffle", "window"};
  static constexpr const char* kOptional[] = {"after", "prefix", "consumed",
                                              "mixture"};
  for (const char* key : kRequired) {
    if (!values.count(key)) return bad(absl::StrCat("'", key, "' is missing"));
  }
  for (const auto& entry : values) {
    const std::string& key = entry.first;
    auto is_key = [&key](const char* k) { return key == k; };
    const bool known =
        std::any_of(std::begin(kRequired), std::end(kRequired), is_key) ||
        std::any_of(std::begin(kOptional), std::end(kOptional), is_key);
    if (!known) return bad(absl::StrCat("unknown part '", key, "'"));
  }
  auto integer = [&](const char* key, int64_t minimum, int64_t* out) {
    auto it = values.find(key);
    if (it == values.end()) return true;
    return absl::SimpleAtoi(it->second, out) && *out >= minimum;
  };
  Cursor c;
  c.plan_id = values["plan"];
  if (!IsHex16(c.plan_id)) return bad("plan id is not 16 hex digits");
  int64_t rank = 0, world = 0, batch = 0, drop_last = 0, shuffle = 0;
  if (!integer("epoch", 0, &c.epoch)) return bad("epoch is not an integer >= 0");
  if (!integer("next", 0, &c.next_batch)) return bad("next is not an integer >= 0");
  if (!integer("rank", 0, &rank) || !integer("world", 1, &world) ||
      rank >= world || world > (1 << 30)) {
    return bad("rank and world must satisfy 0 <= rank < world");
  }
  if (!integer("batch", 1, &batch) || batch > (1 << 30)) {
    return bad("batch is not an integer >= 1");
  }
  if (!integer("drop_last", 0, &drop_last) || drop_last > 1 ||
      !integer("shuffle", 0, &shuffle) || shuffle > 1) {
    return bad("drop_last and shuffle must be 0 or 1");
  }
  c.cut.rank = static_cast<int>(rank);
  c.cut.world_size = static_cast<int>(world);
  c.cut.batch_size = static_cast<int>(batch);
  c.cut.drop_last = drop_last == 1;
  if (!integer("prefix", 0, &c.cut.consumed_prefix)) {
    return bad("prefix is not an integer >= 0");
  }
  if (!ParseList(values["after"], &c.delivered_after) ||
      (!c.delivered_after.empty() && c.delivered_after.front() < c.next_batch)) {
    return bad("after is not an ascending list of batches past next");
  }
  if (!ParseList(values["consumed"], &c.cut.consumed_after) ||
      (!c.cut.consumed_after.empty() &&
       c.cut.consumed_after.front() < c.cut.consumed_prefix)) {
    return bad("consumed is not an ascending list of positions past prefix");
  }
  if (!Unescape(values["dataset"], &c.facts.dataset) ||
      !Unescape(values["fingerprint"], &c.facts.fingerprint)) {
    return bad("dataset or fingerprint is badly escaped");
  }
  c.facts.transform = values["transform"];
  c.facts.fields = values["fields"];
  c.facts.mixture = values["mixture"];
  if (!IsHex16(c.facts.transform) || !IsHex16(c.facts.fields) ||
      (!c.facts.mixture.empty() && !IsHex16(c.facts.mixture))) {
    return bad("transform, fields and mixture must be 16 hex digits");
  }
  if (!absl::SimpleAtoi(values["seed"], &c.facts.seed)) {
    return bad("seed is not an unsigned integer");
  }
  c.facts.shuffle = shuffle == 1;
  if (!integer("window", 0, &c.facts.window)) {
    return bad("window is not an integer >= 0");
  }
  return c;
}

}  // namespace stoker::client
