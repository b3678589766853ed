#include "common/mixture.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/random.h"

namespace stoker::common {
namespace {

constexpr uint64_t kMixtureSalt = 0x6d6978747572ULL;  // "mixtur"

}  // namespace

std::string FormatMixture(const std::vector<std::string>& names,
                          const MixtureParams& params) {
  std::string out;
  for (size_t s = 0; s < names.size() && s < params.weights.size(); ++s) {
    absl::StrAppend(&out, s == 0 ? "" : ",", names[s], ":",
                    absl::StrFormat("%.17g", params.weights[s]));
  }
  absl::StrAppend(
      &out, ";mode=",
      params.mode == MixtureMode::kCycle ? "cycle" : "first_exhausted",
      ";unit=", params.unit == MixtureUnit::kSample ? "sample" : "batch:",
      params.unit == MixtureUnit::kBatch ? absl::StrCat(params.unit_samples)
                                         : "",
      ";epoch_samples=", params.epoch_samples);
  return out;
}

absl::Status ValidateMixtureWeights(const std::vector<double>& weights) {
  double total = 0;
  for (size_t s = 0; s < weights.size(); ++s) {
    const double w = weights[s];
    if (!std::isfinite(w) || w <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the weight of mixture source ", s, " must be a finite number > 0 "
          "(leave a source out rather than weighting it 0), got ", w));
    }
    total += w;
  }
  if (!std::isfinite(total)) {
    return absl::InvalidArgumentError("the mixture's weights overflow");
  }
  for (size_t s = 0; s < weights.size(); ++s) {
    if (weights[s] / total < kMinMixtureShare) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mixture source ", s, " has weight ", weights[s], " of ", total,
          " in all, a share below 2^-30; leave it out"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Mixture> Mixture::Create(const MixtureParams& p) {
  const size_t n = p.source_samples.size();
  if (n == 0 || n > static_cast<size_t>(kMaxMixtureSources)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a mixture needs 1 to ", kMaxMixtureSources, " sources, got ", n));
  }
  if (p.weights.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a mixture needs one weight per source: ", n, " sources, ",
        p.weights.size(), " weights"));
  }
  if (p.unit_samples < 1 ||
      (p.unit == MixtureUnit::kSample && p.unit_samples != 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unit_samples must be 1 per sample, or the global batch per batch; "
        "got ", p.unit_samples));
  }
  if (absl::Status s = ValidateMixtureWeights(p.weights); !s.ok()) return s;
  for (size_t s = 0; s < n; ++s) {
    if (p.source_samples[s] < p.unit_samples) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mixture source ", s, " has ", p.source_samples[s],
          " samples, fewer than one unit of ", p.unit_samples,
          p.unit == MixtureUnit::kBatch ? " (world_size x batch_size)" : ""));
    }
  }
  int64_t total_samples = 0;
  for (const int64_t size : p.source_samples) {
    if (size > kMaxMixturePosition - total_samples) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the mixture's sources hold more than ", kMaxMixturePosition,
          " samples"));
    }
    total_samples += size;
  }
  if (p.epoch_samples < 0 || p.epoch_samples > kMaxMixturePosition) {
    return absl::InvalidArgumentError(absl::StrCat(
        "epoch_samples must be in [0, 2^48] (0: the sources' total), got ",
        p.epoch_samples));
  }
  Mixture mixture(p);
  if (p.mode == MixtureMode::kCycle) {
    int64_t l = p.epoch_samples;
    if (l == 0) {
      for (const int64_t size : p.source_samples) l += size;
    }
    l -= l % p.unit_samples;
    if (l == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "epoch_samples ", p.epoch_samples, " is less than one unit of ",
          p.unit_samples, " samples"));
    }
    mixture.cycle_samples_ = l;
  }
  return mixture;
}

Mixture::Mixture(const MixtureParams& params) : params_(params) {
  double total = 0;
  for (const double w : params.weights) total += w;
  for (const double w : params.weights) weights_.push_back(w / total);
}

uint64_t Mixture::KeyOf(int64_t epoch) const {
  const uint64_t key = HashCombine(params_.seed, kMixtureSalt);
  return params_.mode == MixtureMode::kCycle
             ? key
             : HashCombine(key, static_cast<uint64_t>(epoch));
}

double Mixture::Time(uint64_t key, int s, int64_t k) const {
  const uint64_t h = HashCombine(HashCombine(key, static_cast<uint64_t>(s)),
                                 static_cast<uint64_t>(k));
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  return (static_cast<double>(k) + u) / weights_[s];
}

int64_t Mixture::CountBefore(uint64_t key, int s, double t,
                             bool or_equal) const {
  // Times increase with k (t_s(k) < (k + 1) / w_s <= t_s(k + 1)), so the
  // count is where `before` turns false; floor(t w_s) is within one of it.
  auto before = [&](int64_t k) {
    const double tk = Time(key, s, k);
    return or_equal ? tk <= t : tk < t;
  };
  if (t <= 0) return before(0) ? 1 : 0;
  // Past the stream's end (a far time of a rare source): saturate rather
  // than count that far.
  const double guess = std::floor(t * weights_[s]);
  if (!(guess < static_cast<double>(kMaxMixturePosition))) {
    return kMaxMixturePosition;
  }
  int64_t j = std::max<int64_t>(static_cast<int64_t>(guess), 0);
  while (j > 0 && !before(j - 1)) --j;
  while (before(j)) ++j;
  return j;
}

std::pair<int, int64_t> Mixture::Unit(uint64_t key, int64_t q) const {
  // At most S units precede time q - S - 1 ... so the q-th unit lies in
  // [q - S - 1, q + S + 1): the sources' counts there are within one of
  // their share.
  const int n = num_sources();
  const double low = static_cast<double>(q) - n - 1;
  const double high = static_cast<double>(q) + n + 1;
  int64_t base = 0;
  std::vector<std::tuple<double, int, int64_t>> near;
  for (int s = 0; s < n; ++s) {
    const int64_t from = CountBefore(key, s, low, false);
    const int64_t to = CountBefore(key, s, high, false);
    base += from;
    for (int64_t k = from; k < to; ++k) near.emplace_back(Time(key, s, k), s, k);
  }
  std::sort(near.begin(), near.end());
  const int64_t i = q - base;
  // The bounds above guarantee 0 <= i < near.size() for q below
  // kMaxMixturePosition with shares of at least kMinMixtureShare (the
  // times stay exact to well under a unit); never index outside.
  if (near.empty()) return {0, 0};
  const auto& [t, s, k] =
      near[std::clamp<int64_t>(i, 0, static_cast<int64_t>(near.size()) - 1)];
  return {s, k};
}

std::vector<int64_t> Mixture::UnitsBefore(uint64_t key, int s,
                                          int64_t k) const {
  const double t = Time(key, s, k);
  std::vector<int64_t> units(num_sources());
  for (int other = 0; other < num_sources(); ++other) {
    // Ties go to the lower source.
    units[other] =
        other == s ? k : CountBefore(key, other, t, /*or_equal=*/other < s);
  }
  return units;
}

int64_t Mixture::RankOf(uint64_t key, int s, int64_t k) const {
  int64_t rank = 0;
  for (const int64_t units : UnitsBefore(key, s, k)) rank += units;
  return rank;
}

int64_t Mixture::StreamPosition(int64_t epoch, int64_t position) const {
  return params_.mode == MixtureMode::kCycle
             ? epoch * cycle_samples_ + position
             : position;
}

absl::Status Mixture::CheckEpoch(int64_t epoch) const {
  if (epoch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch must be >= 0, got ", epoch));
  }
  if (params_.mode == MixtureMode::kCycle &&
      epoch >= kMaxMixturePosition / cycle_samples_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "epoch ", epoch, " of a mixture of ", cycle_samples_,
        " samples per epoch lies past the stream's 2^48 samples"));
  }
  return absl::OkStatus();
}

int64_t Mixture::EpochSamples(int64_t epoch) const {
  if (params_.mode == MixtureMode::kCycle) return cycle_samples_;
  const uint64_t key = KeyOf(epoch);
  int64_t units = std::numeric_limits<int64_t>::max();
  for (int s = 0; s < num_sources(); ++s) {
    // The unit that would need more samples than the epoch has.
    const int64_t available = params_.source_samples[s] / params_.unit_samples;
    units = std::min(units, RankOf(key, s, available));
  }
  // At most the stream's end.
  units = std::min(units, kMaxMixturePosition / params_.unit_samples);
  return units * params_.unit_samples;
}

MixturePick Mixture::At(int64_t epoch, int64_t position) const {
  const int64_t g = params_.unit_samples;
  const int64_t q = StreamPosition(epoch, position);
  const auto [s, k] = Unit(KeyOf(epoch), q / g);
  const int64_t pick = k * g + q % g;
  MixturePick out;
  out.source = s;
  if (params_.mode == MixtureMode::kCycle) {
    const int64_t size = params_.source_samples[s];
    out.source_epoch = pick / size;
    out.position = pick % size;
  } else {
    out.source_epoch = epoch;
    out.position = pick;
  }
  return out;
}

std::vector<int64_t> Mixture::PicksBefore(int64_t epoch,
                                          int64_t position) const {
  const int64_t g = params_.unit_samples;
  const int64_t q = StreamPosition(epoch, position);
  const uint64_t key = KeyOf(epoch);
  // The units before unit q / g, then the part of that unit before q.
  const auto [s, k] = Unit(key, q / g);
  std::vector<int64_t> picks = UnitsBefore(key, s, k);
  for (int64_t& units : picks) units *= g;
  picks[s] += q % g;
  return picks;
}

}  // namespace stoker::common
