/* RandomMask(ratio=0.25): an example Stoker plugin (see
 * image/ops/plugin_api.h and docs/transforms.md, "Plugins").
 *
 * Drops random pixels and their 4-neighbours, as this PyTorch code does to a
 * CHW uint8 image:
 *     mask = np.random.uniform(size=(H, W)) < ratio
 *     dilated = convolve2d(mask, [[0,1,0],[1,1,1],[0,1,0]],
 *                          mode='same').astype(bool)
 *     img[:, dilated] = 0
 * One uniform number is drawn per pixel, in row-major order, from the
 * generator the host hands over, so the result is the same on every server
 * and thread. Pixels outside the image count as unmasked ("same" mode pads
 * with zeros). With ratio r a pixel is dropped with probability
 * 1 - (1 - r)^5 away from the borders (0.763 for r = 0.25). The mask of a
 * sample, if any, is left as it is.
 *
 * Built as a shared library by plugins/random_mask/BUILD; load it with
 *     stoker_server --plugin=bazel-bin/plugins/random_mask/random_mask.so
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/ops/plugin_api.h"

typedef struct RandomMaskState {
  double ratio;
} RandomMaskState;

static int Create(const StokerArg* args, int n_args, void** state, char* error,
                  size_t error_size) {
  double ratio = 0.25;
  /* The host passes only declared params, so every argument is ratio. */
  for (int i = 0; i < n_args; ++i) {
    if (args[i].n_numbers != 1 || args[i].tuple) {
      snprintf(error, error_size, "ratio must be a number in [0, 1]");
      return 1;
    }
    ratio = args[i].numbers[0];
  }
  if (!(ratio >= 0 && ratio <= 1)) {
    snprintf(error, error_size, "ratio must be in [0, 1], got %g", ratio);
    return 1;
  }
  RandomMaskState* s = malloc(sizeof(*s));
  if (s == NULL) {
    snprintf(error, error_size, "out of memory");
    return 1;
  }
  s->ratio = ratio;
  *state = s;
  return 0;
}

static void Destroy(void* state) { free(state); }

static int Apply(const void* state, const StokerRng* rng,
                 const StokerImage* image, const StokerImage* mask, char* error,
                 size_t error_size) {
  (void)mask;
  const double ratio = ((const RandomMaskState*)state)->ratio;
  const int w = image->width;
  const int h = image->height;
  /* Scratch per call: apply runs on many threads at once. */
  unsigned char* drawn = malloc((size_t)w * h);
  if (drawn == NULL) {
    snprintf(error, error_size, "out of memory for a %dx%d mask", w, h);
    return 1;
  }
  for (int i = 0; i < w * h; ++i) {
    drawn[i] = rng->uniform(rng->self) < ratio;
  }
  for (int y = 0; y < h; ++y) {
    const unsigned char* row = drawn + (size_t)y * w;
    uint8_t* pixels = image->data + (size_t)y * image->stride;
    for (int x = 0; x < w; ++x) {
      const int dropped = row[x] || (x > 0 && row[x - 1]) ||
                          (x + 1 < w && row[x + 1]) || (y > 0 && row[x - w]) ||
                          (y + 1 < h && row[x + w]);
      if (dropped) {
        memset(pixels + (size_t)x * image->channels, 0, image->channels);
      }
    }
  }
  free(drawn);
  return 0;
}

static const char* const kParams[] = {"ratio"};

static const StokerOp kOps[] = {
    {
        .name = "RandomMask",
        .params = kParams,
        .n_params = 1,
        .usage = "RandomMask(ratio=0.25)",
        .create = Create,
        .destroy = Destroy,
        .apply = Apply,
    },
};

static const StokerPlugin kPlugin = {
    .abi_version = STOKER_PLUGIN_ABI_VERSION,
    .name = "random_mask",
    .n_ops = 1,
    .ops = kOps,
};

const StokerPlugin* stoker_plugin_init(int host_abi_version) {
  (void)host_abi_version;
  return &kPlugin;
}
