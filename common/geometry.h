#ifndef STOKER_COMMON_GEOMETRY_H_
#define STOKER_COMMON_GEOMETRY_H_

// Plain value types shared by the transform planner (common/augment.h) and
// the server's image code (image/sample_processor.h). No logic lives here.

namespace stoker::common {

// An axis-aligned box in source-image pixel coordinates. Edges are real
// numbers: pixel (x, y) covers [x, x+1) x [y, y+1). Invariant for a valid box:
// 0 <= x0 < x1 <= source width and 0 <= y0 < y1 <= source height.
struct Box {
  double x0 = 0;
  double y0 = 0;
  double x1 = 0;
  double y1 = 0;

  double width() const { return x1 - x0; }
  double height() const { return y1 - y0; }
};

// What a whole transform pipeline does to one sample: the region of the
// source image that is resampled, the output size, and whether the output is
// mirrored left-right. Every supported transform (crop, resize, flip) is
// geometric, so a pipeline of any length folds into one of these and the
// server resamples each output pixel once.
struct SampleGeometry {
  Box source;
  int out_width = 0;
  int out_height = 0;
  bool flip_horizontal = false;
};

}  // namespace stoker::common

#endif  // STOKER_COMMON_GEOMETRY_H_
