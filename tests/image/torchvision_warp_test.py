"""Stoker's warps (image/warp.h, through tests/image/warp_tool) against
torchvision 0.14's functional ops on PIL images (Pillow 9.4).

Each case builds the WarpStep the op amounts to, from the same matrix
torchvision/PIL compute (torchvision's _get_inverse_affine_matrix for
F.affine, PIL's Image.rotate arithmetic for F.rotate, the resize box for
F.resize / F.resized_crop), runs it, and compares with the op's output:
  * exact where PIL's arithmetic is reproduced (affine transforms with
    nearest / bilinear / bicubic, nearest resize);
  * within +-1 and PSNR >= 35 dB where Stoker's fixed point differs from
    Pillow's (antialiased bilinear / bicubic resize: int16 weights), and
    PSNR >= 35 dB for resized_crop, whose crop edge Stoker does not clip
    the filter windows at (it resamples a box, as resize(box=...));
  * PSNR >= 35 dB for a crop + resize + rotation folded into one warp
    against torchvision's three steps.
Run with /usr/bin/python3 (Debian's torch, torchvision and PIL):
  python3 torchvision_warp_test.py PATH/TO/warp_tool
Prints the measured figures."""

import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
from PIL import Image, ImageDraw
import torchvision.transforms.functional as F
from torchvision.transforms import InterpolationMode

TOOL = None  # set from argv in __main__
RESULTS = []  # (name, exact %, within +-1 %, max diff, PSNR) for the summary

MODES = {
    InterpolationMode.NEAREST: "nearest",
    InterpolationMode.BILINEAR: "bilinear",
    InterpolationMode.BICUBIC: "bicubic",
}


def photo(w, h, seed):
    """A deterministic photo-like RGB image: smooth colour field, hard-edged
    shapes, a striped texture and mild noise."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (h // 40 + 2, w // 40 + 2, 3), dtype=np.uint8)
    image = Image.fromarray(coarse).resize((w, h), Image.BICUBIC)
    draw = ImageDraw.Draw(image)
    for _ in range(10):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        x1, y1 = x0 + int(rng.integers(10, w // 3)), y0 + int(rng.integers(10, h // 3))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.integers(0, 2):
            draw.ellipse([x0, y0, x1, y1], fill=colour)
        else:
            draw.rectangle([x0, y0, x1, y1], fill=colour)
    a = np.asarray(image).astype(np.int16)
    yy, xx = np.mgrid[0:h, 0:w]
    stripes = (12 * np.sin((xx * 0.7 + yy * 0.3) / 3.0)).astype(np.int16)
    a[h // 2:, : w // 2] += stripes[h // 2:, : w // 2, None]
    a += rng.integers(-4, 5, a.shape).astype(np.int16)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def warp(image, out_size, interpolation, antialias, matrix, fill=(0, 0, 0),
         clips=()):
    """Runs warp_tool; returns (PIL image, the Warper's path)."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as d:
        src, dst = os.path.join(d, "in.rgb"), os.path.join(d, "out.rgb")
        with open(src, "wb") as f:
            f.write(image.tobytes())
        args = [TOOL, src, str(image.width), str(image.height), dst,
                str(out_size[0]), str(out_size[1]), MODES[interpolation],
                "1" if antialias else "0"]
        args += [repr(float(v)) for v in matrix]
        args += [str(int(v)) for v in fill]
        for clip_matrix, clip_w, clip_h in clips:
            args += [repr(float(v)) for v in clip_matrix]
            args += [str(clip_w), str(clip_h)]
        path = subprocess.run(args, check=True, capture_output=True,
                              text=True).stdout.strip()
        with open(dst, "rb") as f:
            data = f.read()
    return Image.frombytes("RGB", out_size, data), path


def compare(name, got, want):
    a = np.asarray(got).astype(np.int32)
    b = np.asarray(want).astype(np.int32)
    assert a.shape == b.shape, (name, a.shape, b.shape)
    diff = np.abs(a - b)
    mse = float(np.mean(diff.astype(np.float64) ** 2))
    psnr = float("inf") if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)
    stats = (100.0 * np.mean(diff == 0), 100.0 * np.mean(diff <= 1),
             int(diff.max()), psnr)
    RESULTS.append((name,) + stats)
    return stats


def pil_rotate_matrix(angle, w, h):
    """Image.rotate's inverse matrix (Pillow 9.4), centre (w/2, h/2), no
    translation, no expand."""
    angle = -math.radians(angle % 360.0)
    matrix = [round(math.cos(angle), 15), round(math.sin(angle), 15), 0.0,
              round(-math.sin(angle), 15), round(math.cos(angle), 15), 0.0]
    cx, cy = w / 2.0, h / 2.0
    a, b, c, d, e, f = matrix
    matrix[2], matrix[5] = a * -cx + b * -cy + c, d * -cx + e * -cy + f
    matrix[2] += cx
    matrix[5] += cy
    return matrix


def affine_matrix(image, angle, translate, scale, shear):
    """What F.affine hands PIL: torchvision's own inverse matrix."""
    w, h = image.size
    return F._get_inverse_affine_matrix([w * 0.5, h * 0.5], angle,
                                        list(translate), scale, list(shear))


def compose(outer, inner):
    """outer(inner(p)) for 2x3 maps [a, b, c, d, e, f]."""
    a, b, c, d, e, f = outer
    A, B, C, D, E, G = inner
    return [a * A + b * D, a * B + b * E, a * C + b * G + c,
            d * A + e * D, d * B + e * E, d * C + e * G + f]


class TorchvisionWarpTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.image = photo(320, 240, 1)
        cls.square = photo(256, 256, 2)
        cls.big = photo(900, 700, 3)

    def assert_exact(self, name, got, want):
        exact, _, max_diff, _ = compare(name, got, want)
        self.assertEqual(max_diff, 0, f"{name}: {exact:.4f}% exact")

    def test_rotate_is_exact(self):
        for mode in (InterpolationMode.NEAREST, InterpolationMode.BILINEAR,
                     InterpolationMode.BICUBIC):
            for angle in (12.5, -33.0, 90.0, 137.0, 180.0, 271.3):
                for image in (self.image, self.square):
                    fill = [17, 200, 90]
                    want = F.rotate(image, angle, interpolation=mode, fill=fill)
                    got, _ = warp(image, image.size, mode, False,
                                  pil_rotate_matrix(angle, *image.size), fill)
                    self.assert_exact(
                        f"rotate {angle} {MODES[mode]} {image.size}", got, want)

    def test_affine_is_exact(self):
        cases = [(25.0, (10, -7), 1.0, (0.0, 0.0)),
                 (-40.0, (0, 0), 0.8, (15.0, 0.0)),
                 (0.0, (5, 3), 1.25, (0.0, 0.0)),
                 (170.0, (-20, 11), 0.6, (-8.0, 12.0)),
                 (0.0, (12, -9), 1.0, (0.0, 0.0)),
                 (63.0, (2, 2), 2.2, (30.0, -5.0))]
        for mode in (InterpolationMode.NEAREST, InterpolationMode.BILINEAR,
                     InterpolationMode.BICUBIC):
            for angle, translate, scale, shear in cases:
                fill = [0, 128, 255]
                want = F.affine(self.image, angle=angle, translate=list(translate),
                                scale=scale, shear=list(shear),
                                interpolation=mode, fill=fill)
                matrix = affine_matrix(self.image, angle, translate, scale, shear)
                got, _ = warp(self.image, self.image.size, mode, False, matrix,
                              fill)
                self.assert_exact(
                    f"affine {angle} {translate} {scale} {shear} {MODES[mode]}",
                    got, want)

    def test_nearest_resize_is_exact(self):
        for image in (self.image, self.big):
            w, h = image.size
            for size in ((224, 224), (100, 37), (w * 2 + 1, h + 3),
                         (w * 3 // 2, h * 3 // 2)):
                want = F.resize(image, [size[1], size[0]],
                                interpolation=InterpolationMode.NEAREST)
                got, path = warp(image, size, InterpolationMode.NEAREST, True,
                                 [w / size[0], 0, 0, 0, h / size[1], 0])
                self.assertEqual(path, "resample")
                self.assert_exact(f"resize nearest {(w, h)}->{size}", got, want)
        # RandomResizedCrop(interpolation=NEAREST): crop, then resize.
        w, h = self.big.size
        for top, left, ch, cw in ((10, 20, 300, 411), (0, 0, 700, 900),
                                  (333, 123, 97, 150)):
            want = F.resized_crop(self.big, top, left, ch, cw, [224, 224],
                                  interpolation=InterpolationMode.NEAREST)
            got, _ = warp(self.big, (224, 224), InterpolationMode.NEAREST, True,
                          [cw / 224, 0, left, 0, ch / 224, top])
            self.assert_exact(f"resized_crop nearest {(left, top, cw, ch)}",
                              got, want)

    def test_filtered_resize_is_close(self):
        for mode in (InterpolationMode.BICUBIC, InterpolationMode.BILINEAR):
            for image in (self.image, self.big):
                w, h = image.size
                for size in ((224, 224), (97, 61), (w * 2, h * 2 - 5)):
                    want = F.resize(image, [size[1], size[0]], interpolation=mode)
                    got, path = warp(image, size, mode, True,
                                     [w / size[0], 0, 0, 0, h / size[1], 0])
                    self.assertEqual(path, "resample")
                    exact, within1, max_diff, psnr = compare(
                        f"resize {MODES[mode]} {(w, h)}->{size}", got, want)
                    self.assertLessEqual(max_diff, 1)
                    self.assertGreaterEqual(within1, 100.0)
                    self.assertGreaterEqual(exact, 80.0)
                    self.assertGreaterEqual(psnr, 35.0)
            # resized_crop with a flip folded in (RandomResizedCrop +
            # RandomHorizontalFlip). Stoker resamples the box within the
            # image, as PIL's resize(box=...) does: windows at the box's
            # edges also weigh the pixels just outside it, which
            # torchvision's crop-then-resize cannot see. Hence a few
            # larger differences along the border.
            top, left, ch, cw = 50, 70, 400, 520
            want = F.hflip(F.resized_crop(self.big, top, left, ch, cw,
                                          [224, 224], interpolation=mode))
            got, _ = warp(self.big, (224, 224), mode, True,
                          [-cw / 224, 0, left + cw, 0, ch / 224, top])
            _, within1, _, psnr = compare(
                f"resized_crop+hflip {MODES[mode]}", got, want)
            self.assertGreaterEqual(within1, 99.5)
            self.assertGreaterEqual(psnr, 35.0)
            # The same box as PIL's resize(box=...) is within +-1.
            want = F.hflip(self.big.resize(
                (224, 224), {InterpolationMode.BILINEAR: Image.BILINEAR,
                             InterpolationMode.BICUBIC: Image.BICUBIC}[mode],
                box=(left, top, left + cw, top + ch)))
            _, _, max_diff, psnr = compare(
                f"resize(box)+hflip {MODES[mode]}", got, want)
            self.assertLessEqual(max_diff, 1)
            self.assertGreaterEqual(psnr, 35.0)

    def test_padded_crop_and_resize_then_pad(self):
        # RandomCrop(200, padding=12, fill) + RandomHorizontalFlip: a
        # whole-pixel copy with fill, exact for every interpolation.
        fill = (40, 50, 60)
        w, h = self.image.size
        for top, left in ((0, 0), (5, 60), (52, 132)):
            want = F.hflip(F.crop(F.pad(self.image, 12, fill=fill), top, left,
                                  200, 200))
            # Output x -> padded crop x' = 199 - x + left -> image x' - 12.
            matrix = [-1, 0, 200 + left - 12, 0, 1, top - 12]
            for mode in MODES:
                got, path = warp(self.image, (200, 200), mode, False, matrix,
                                 fill)
                self.assertEqual(path, "copy")
                self.assert_exact(f"pad+crop+hflip {(left, top)} {MODES[mode]}",
                                  got, want)
        # Resize((150, 110)) then Pad((7, 5, 9, 3)): the resize, framed.
        for mode in (InterpolationMode.BILINEAR, InterpolationMode.BICUBIC):
            want = F.pad(F.resize(self.image, [110, 150], interpolation=mode),
                         [7, 5, 9, 3], fill=fill)
            sx, sy = w / 150, h / 110
            pad = [1, 0, -7, 0, 1, -5]
            matrix = compose([sx, 0, 0, 0, sy, 0], pad)
            got, path = warp(self.image, (166, 118), mode, True, matrix, fill,
                             clips=[(pad, 150, 110)])
            self.assertEqual(path, "resample")
            _, _, max_diff, psnr = compare(f"resize+pad {MODES[mode]}", got,
                                           want)
            self.assertLessEqual(max_diff, 1)
            self.assertGreaterEqual(psnr, 35.0)

    def test_folded_crop_resize_rotate_is_close(self):
        # RandomResizedCrop(224) then RandomRotation(angle) as torchvision
        # runs them, against the single folded warp (the crop's output frame
        # becomes a clip; the shrink takes the antialiasing pre-pass).
        top, left, ch, cw = 60, 80, 560, 700
        for mode in (InterpolationMode.BILINEAR, InterpolationMode.BICUBIC):
            for angle in (8.0, -25.0):
                fill = [0, 0, 0]
                resized = F.resized_crop(self.big, top, left, ch, cw,
                                         [224, 224], interpolation=mode)
                want = F.rotate(resized, angle, interpolation=mode, fill=fill)
                rotation = pil_rotate_matrix(angle, 224, 224)
                crop = [cw / 224, 0, left, 0, ch / 224, top]
                got, path = warp(self.big, (224, 224), mode, True,
                                 compose(crop, rotation), fill,
                                 clips=[(rotation, 224, 224)])
                self.assertEqual(path, "prescaled")
                _, _, _, psnr = compare(
                    f"folded crop+resize+rotate {angle} {MODES[mode]}",
                    got, want)
                self.assertGreaterEqual(psnr, 35.0)


def main():
    global TOOL
    TOOL = os.path.abspath(sys.argv.pop(1))
    program = unittest.main(exit=False, verbosity=2)
    print(f"\n{'case':60s} {'exact%':>8s} {'+-1%':>8s} {'max':>4s} {'PSNR dB':>8s}")
    for name, exact, within1, max_diff, psnr in RESULTS:
        print(f"{name:60s} {exact:8.3f} {within1:8.3f} {max_diff:4d} {psnr:8.2f}")
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
