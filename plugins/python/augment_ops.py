"""Example Python ops for stoker_server --python_ops (docs/python_ops.md).

Two occlusion augmentations written in numpy, the way a team's own
augmentation code usually is:

  GridMask(d_min=96, d_max=224, ratio=0.6, rotate=False, fill=0, p=0.7)
      GridMask (Chen et al., 2020): drops a regular grid of squares. The
      grid period d is drawn in [d_min, d_max), each square's side is
      ratio * d, and the grid's offset is drawn in [0, d) on each axis.
  CoarseDropout(max_holes=8, min_size=8, max_size=32, fill=0, p=0.5)
      albumentations' CoarseDropout: 1 to max_holes rectangles of sides in
      [min_size, max_size] set to `fill` (on the mask too, as 0).

Each op draws only from the `rng` it is given (a numpy Generator seeded by
Stoker's plan), so a sample gets the same pixels on every server and in
every worker process.
"""

import numpy as np


def grid_mask(image, rng, d_min: int = 96, d_max: int = 224,
              ratio: float = 0.6, fill: int = 0, p: float = 0.7):
    if rng.random() >= p:
        return image
    height, width = image.shape[:2]
    d = int(rng.integers(d_min, d_max)) if d_max > d_min else d_min
    side = max(1, min(d, int(round(ratio * d))))
    offset_y, offset_x = (int(v) for v in rng.integers(0, d, size=2))
    # Rows and columns inside a square of the grid.
    rows = ((np.arange(height) + offset_y) % d) < side
    cols = ((np.arange(width) + offset_x) % d) < side
    image[np.ix_(rows, cols)] = fill
    return image


def coarse_dropout(image, mask, rng, max_holes: int = 8, min_size: int = 8,
                   max_size: int = 32, fill: int = 0, p: float = 0.5):
    if rng.random() >= p:
        return image, mask
    height, width = image.shape[:2]
    holes = int(rng.integers(1, max_holes + 1))
    for _ in range(holes):
        h = int(rng.integers(min_size, max_size + 1))
        w = int(rng.integers(min_size, max_size + 1))
        y = int(rng.integers(0, max(1, height - h + 1)))
        x = int(rng.integers(0, max(1, width - w + 1)))
        image[y:y + h, x:x + w] = fill
        if mask is not None:
            mask[y:y + h, x:x + w] = 0
    return image, mask


STOKER_OPS = [
    {"fn": grid_mask, "name": "GridMask",
     "limits": {"d_min": (1, 4096), "d_max": (1, 4096), "ratio": (0, 1),
                "fill": (0, 255), "p": (0, 1)}},
    {"fn": coarse_dropout, "name": "CoarseDropout", "mask": True,
     "limits": {"max_holes": (1, 64), "min_size": (1, 4096),
                "max_size": (1, 4096), "fill": (0, 255), "p": (0, 1)}},
]
