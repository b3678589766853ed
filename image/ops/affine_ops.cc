#include "image/ops/affine_ops.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/str_format.h"

namespace stoker::image {
namespace {

// As Python's math.radians: x * (pi / 180).
double Radians(double degrees) { return degrees * (M_PI / 180.0); }

// Python's round(x, 15): the exact binary value rounded to 15 decimals (half
// to even), read back as the nearest double. glibc's printf rounds exactly.
double Round15(double x) {
  const std::string s = absl::StrFormat("%.15f", x);
  return std::strtod(s.c_str(), nullptr);
}

// Whether some output pixel centre maps outside [0, w) x [0, h).
bool ReadsOutside(const Affine& m, int w, int h) {
  const double xs[2] = {0.5, w - 0.5};
  const double ys[2] = {0.5, h - 0.5};
  for (double x : xs) {
    for (double y : ys) {
      const double sx = m.a * x + m.b * y + m.c;
      const double sy = m.d * x + m.e * y + m.f;
      if (sx < 0 || sy < 0 || sx >= w || sy >= h) return true;
    }
  }
  return false;
}

void SameSizeWarp(PlanBuilder& plan, const Affine& m,
                  Interpolation interpolation,
                  const std::array<uint8_t, 3>& fill) {
  const int w = plan.width(), h = plan.height();
  plan.Warp(m, w, h, interpolation, /*antialias=*/false,
            ReadsOutside(m, w, h), fill);
}

}  // namespace

Affine InverseAffineMatrix(std::pair<double, double> center, double angle,
                           std::pair<double, double> translate, double scale,
                           std::pair<double, double> shear) {
  // Same operations in the same order as torchvision, so the doubles agree.
  const double rot = Radians(angle);
  const double sx = Radians(shear.first);
  const double sy = Radians(shear.second);
  const auto [cx, cy] = center;
  const auto [tx, ty] = translate;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b =
      -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d =
      -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  double m[6] = {d, -b, 0.0, -c, a, 0.0};
  for (double& x : m) x = x / scale;
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return {m[0], m[1], m[2], m[3], m[4], m[5]};
}

void AffineWarp(PlanBuilder& plan, double angle,
                std::pair<double, double> translate, double scale,
                std::pair<double, double> shear, Interpolation interpolation,
                const std::array<uint8_t, 3>& fill,
                std::optional<std::pair<double, double>> center) {
  const std::pair<double, double> c = center.value_or(
      std::make_pair(plan.width() * 0.5, plan.height() * 0.5));
  SameSizeWarp(plan, InverseAffineMatrix(c, angle, translate, scale, shear),
               interpolation, fill);
}

void RotateWarp(PlanBuilder& plan, double angle, Interpolation interpolation,
                const std::array<uint8_t, 3>& fill,
                std::optional<std::pair<double, double>> center) {
  // PIL's Image.rotate (expand=False).
  const double rc_x = center ? center->first : plan.width() / 2.0;
  const double rc_y = center ? center->second : plan.height() / 2.0;
  const double r = -Radians(std::fmod(angle, 360.0) +
                            (std::fmod(angle, 360.0) < 0 ? 360.0 : 0.0));
  Affine m;
  m.a = Round15(std::cos(r));
  m.b = Round15(std::sin(r));
  m.d = Round15(-std::sin(r));
  m.e = Round15(std::cos(r));
  m.c = m.a * -rc_x + m.b * -rc_y + 0.0;
  m.f = m.d * -rc_x + m.e * -rc_y + 0.0;
  m.c += rc_x;
  m.f += rc_y;
  SameSizeWarp(plan, m, interpolation, fill);
}

}  // namespace stoker::image
