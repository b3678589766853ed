#include "image/ops/registry.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace stoker::image {
namespace {

// The ops plugins added. Kept apart from the built-in table, which needs no
// lock: it never changes after its first use.
struct AddedOps {
  absl::Mutex mu;
  std::vector<std::unique_ptr<const OpDef>> defs ABSL_GUARDED_BY(mu);
};

AddedOps& Added() {
  static AddedOps* const added = new AddedOps;
  return *added;
}

const std::vector<const OpDef*>& BuiltInOps();

const OpDef* FindBuiltIn(absl::string_view name) {
  for (const OpDef* def : BuiltInOps()) {
    if (def->name == name) return def;
  }
  return nullptr;
}

bool IsIdentifier(absl::string_view s) {
  if (s.empty() || !(absl::ascii_isalpha(s[0]) || s[0] == '_')) return false;
  for (char c : s) {
    if (!(absl::ascii_isalnum(c) || c == '_')) return false;
  }
  return true;
}

}  // namespace

// Geometry (folded into warps).
const OpDef& RandomResizedCropOp();
const OpDef& ResizeOp();
const OpDef& CenterCropOp();
const OpDef& RandomCropOp();
const OpDef& RandomHorizontalFlipOp();
const OpDef& RandomVerticalFlipOp();
const OpDef& RandomRotationOp();
const OpDef& RandomAffineOp();
// Colour and pixel ops.
const OpDef& ColorJitterOp();
const OpDef& GrayscaleOp();
const OpDef& RandomGrayscaleOp();
const OpDef& GaussianBlurOp();
const OpDef& RandomSolarizeOp();
const OpDef& RandomPosterizeOp();
const OpDef& RandomEqualizeOp();
const OpDef& RandomAutocontrastOp();
const OpDef& RandomAdjustSharpnessOp();
const OpDef& RandomInvertOp();
// Automatic augmentation policies.
const OpDef& RandAugmentOp();
const OpDef& TrivialAugmentWideOp();
const OpDef& AutoAugmentOp();

namespace {

const std::vector<const OpDef*>& BuiltInOps() {
  static const std::vector<const OpDef*>* const ops =
      new std::vector<const OpDef*>{
          &RandomResizedCropOp(),    &ResizeOp(),
          &CenterCropOp(),           &RandomCropOp(),
          &RandomHorizontalFlipOp(), &RandomVerticalFlipOp(),
          &RandomRotationOp(),       &RandomAffineOp(),
          &ColorJitterOp(),          &GrayscaleOp(),
          &RandomGrayscaleOp(),      &GaussianBlurOp(),
          &RandomSolarizeOp(),       &RandomPosterizeOp(),
          &RandomEqualizeOp(),       &RandomAutocontrastOp(),
          &RandomAdjustSharpnessOp(), &RandomInvertOp(),
          &RandAugmentOp(),          &TrivialAugmentWideOp(),
          &AutoAugmentOp(),
      };
  return *ops;
}

}  // namespace

const OpDef* FindOp(absl::string_view name) {
  if (const OpDef* def = FindBuiltIn(name)) return def;
  AddedOps& added = Added();
  absl::ReaderMutexLock lock(&added.mu);
  for (const std::unique_ptr<const OpDef>& def : added.defs) {
    if (def->name == name) return def.get();
  }
  return nullptr;
}

std::vector<const OpDef*> AllOps() {
  std::vector<const OpDef*> all = BuiltInOps();
  AddedOps& added = Added();
  absl::ReaderMutexLock lock(&added.mu);
  for (const std::unique_ptr<const OpDef>& def : added.defs) {
    all.push_back(def.get());
  }
  return all;
}

absl::Status RegisterOps(std::vector<OpDef> defs) {
  AddedOps& added = Added();
  absl::MutexLock lock(&added.mu);
  for (size_t i = 0; i < defs.size(); ++i) {
    const OpDef& def = defs[i];
    if (def.plugin.empty() || !def.create) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op '", def.name, "' has no plugin or no create function"));
    }
    if (!IsIdentifier(def.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("op name '", def.name,
                       "' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)"));
    }
    if (FindBuiltIn(def.name) != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op '", def.name, "' has the name of a built-in op"));
    }
    for (const std::unique_ptr<const OpDef>& other : added.defs) {
      if (other->name == def.name) {
        return absl::InvalidArgumentError(
            absl::StrCat("op '", def.name, "' is already provided by plugin ",
                         other->plugin));
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (defs[j].name == def.name) {
        return absl::InvalidArgumentError(
            absl::StrCat("op '", def.name, "' is listed twice"));
      }
    }
  }
  for (OpDef& def : defs) {
    added.defs.push_back(std::make_unique<const OpDef>(std::move(def)));
  }
  return absl::OkStatus();
}

}  // namespace stoker::image
