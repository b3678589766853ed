#ifndef STOKER_IMAGE_OPS_GEOMETRY_UTIL_H_
#define STOKER_IMAGE_OPS_GEOMETRY_UTIL_H_

// Small helpers shared by the geometric ops.

#include <cmath>
#include <cstdint>

namespace stoker::image {

// Python 3's round(): nearest integer, ties to even. Exact for all doubles.
inline double PythonRound(double x) {
  const double r = std::round(x);  // Ties away from zero.
  // x - trunc(x) is exact, so this detects ties exactly.
  if (std::fabs(x - std::trunc(x)) != 0.5) return r;
  return 2.0 * std::round(x / 2.0);
}

// Python's a // b for b > 0.
inline int64_t FloorDiv(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

}  // namespace stoker::image

#endif  // STOKER_IMAGE_OPS_GEOMETRY_UTIL_H_
