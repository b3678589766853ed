#include "image/ops/registry.h"

namespace stoker::image {

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

const std::vector<const OpDef*>& AllOps() {
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

const OpDef* FindOp(absl::string_view name) {
  for (const OpDef* def : AllOps()) {
    if (def->name == name) return def;
  }
  return nullptr;
}

}  // namespace stoker::image
