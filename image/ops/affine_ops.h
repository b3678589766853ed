#ifndef STOKER_IMAGE_OPS_AFFINE_OPS_H_
#define STOKER_IMAGE_OPS_AFFINE_OPS_H_

// torchvision's functional affine and rotate on PIL images, as warps of the
// current image: shared by RandomRotation, RandomAffine and the geometric
// branches of the automatic augmentation policies.

#include <array>
#include <cstdint>
#include <optional>
#include <utility>

#include "image/ops/plan_builder.h"
#include "image/plan.h"

namespace stoker::image {

// torchvision.transforms.functional._get_inverse_affine_matrix: the map from
// output to input coordinates of an affine transform by `angle` degrees
// (counter-clockwise), `translate` pixels, `scale` and `shear` degrees
// (x, y) around `center` (pixels).
Affine InverseAffineMatrix(std::pair<double, double> center, double angle,
                           std::pair<double, double> translate, double scale,
                           std::pair<double, double> shear);

// F.affine(img, angle, translate, scale, shear, interpolation, fill,
// center) on the current image (PIL: the centre defaults to
// (width / 2, height / 2)).
void AffineWarp(PlanBuilder& plan, double angle,
                std::pair<double, double> translate, double scale,
                std::pair<double, double> shear, Interpolation interpolation,
                const std::array<uint8_t, 3>& fill,
                std::optional<std::pair<double, double>> center = std::nullopt);

// F.rotate(img, angle, interpolation, expand=False, center, fill): PIL's
// Image.rotate matrix (cos/sin rounded to 15 digits as PIL does).
void RotateWarp(PlanBuilder& plan, double angle, Interpolation interpolation,
                const std::array<uint8_t, 3>& fill,
                std::optional<std::pair<double, double>> center = std::nullopt);

}  // namespace stoker::image

#endif  // STOKER_IMAGE_OPS_AFFINE_OPS_H_
