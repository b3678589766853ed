/* Plugins for the plugin tests, all from this one source (see BUILD):
 *   test_ops.so   ops FailingOp() and AddConst(value, channel=-1);
 *   no_entry.so   (TEST_PLUGIN_NO_ENTRY) exports no stoker_plugin_init;
 *   abi_999.so    (TEST_PLUGIN_ABI_VERSION=999) claims ABI version 999;
 *   collision.so  (TEST_PLUGIN_COLLIDE) ops CollisionFirst and RandomCrop,
 *                 a built-in op's name, so that nothing may be registered;
 *   bad_table.so  (TEST_PLUGIN_BAD_TABLE) an op without apply.
 */

#include <stdio.h>
#include <stdlib.h>

#include "image/ops/plugin_api.h"

#ifndef TEST_PLUGIN_ABI_VERSION
#define TEST_PLUGIN_ABI_VERSION STOKER_PLUGIN_ABI_VERSION
#endif

/* Not every variant's table uses every function. */
#define MAYBE_UNUSED __attribute__((unused))

MAYBE_UNUSED static int CreateNoArgs(const StokerArg* args, int n_args,
                                     void** state, char* error,
                                     size_t error_size) {
  (void)args;
  (void)n_args;
  (void)error;
  (void)error_size;
  *state = NULL;
  return 0;
}

/* Fails every sample, after drawing one number (so that a failure does not
 * depend on drawing nothing). */
MAYBE_UNUSED static int ApplyFailing(const void* state, const StokerRng* rng,
                                     const StokerImage* image,
                                     const StokerImage* mask, char* error,
                                     size_t error_size) {
  (void)state;
  (void)image;
  (void)mask;
  rng->next_u64(rng->self);
  snprintf(error, error_size, "failing on purpose");
  return 1;
}

typedef struct AddConstState {
  int value;
  int channel; /* -1: all */
} AddConstState;

MAYBE_UNUSED static int CreateAddConst(const StokerArg* args, int n_args,
                                       void** state, char* error,
                                       size_t error_size) {
  AddConstState s = {0, -1};
  int has_value = 0;
  for (int i = 0; i < n_args; ++i) {
    const double v = args[i].n_numbers == 1 ? args[i].numbers[0] : 1e9;
    if (args[i].name[0] == 'v') {
      if (!(v >= -255 && v <= 255) || v != (int)v) {
        snprintf(error, error_size, "value must be an integer in [-255, 255]");
        return 1;
      }
      s.value = (int)v;
      has_value = 1;
    } else {
      if (!(v >= -1 && v <= 2) || v != (int)v) {
        snprintf(error, error_size, "channel must be -1, 0, 1 or 2");
        return 1;
      }
      s.channel = (int)v;
    }
  }
  if (!has_value) {
    snprintf(error, error_size, "value is required");
    return 1;
  }
  AddConstState* out = malloc(sizeof(*out));
  if (out == NULL) return 1;
  *out = s;
  *state = out;
  return 0;
}

MAYBE_UNUSED static void Destroy(void* state) { free(state); }

MAYBE_UNUSED static int ApplyAddConst(const void* state, const StokerRng* rng,
                                      const StokerImage* image,
                                      const StokerImage* mask, char* error,
                                      size_t error_size) {
  (void)rng;
  (void)mask;
  (void)error;
  (void)error_size;
  const AddConstState* s = state;
  for (int y = 0; y < image->height; ++y) {
    uint8_t* row = image->data + (size_t)y * image->stride;
    for (int x = 0; x < image->width; ++x) {
      for (int c = 0; c < image->channels; ++c) {
        if (s->channel >= 0 && c != s->channel) continue;
        int v = row[x * image->channels + c] + s->value;
        row[x * image->channels + c] = v < 0 ? 0 : v > 255 ? 255 : v;
      }
    }
  }
  return 0;
}

MAYBE_UNUSED static const char* const kAddConstParams[] = {"value", "channel"};

// Copies the mask's first channel into the image's red channel, and
// writes 255 - image red into the mask: shows that the op sees the mask
// aligned with the image and may change it. Fails without a mask.
MAYBE_UNUSED static int ApplyMaskToRed(const void* state, const StokerRng* rng,
                                       const StokerImage* image,
                                       const StokerImage* mask, char* error,
                                       size_t error_size) {
  (void)state;
  (void)rng;
  if (mask == NULL) {
    snprintf(error, error_size, "no mask");
    return 1;
  }
  if (mask->width != image->width || mask->height != image->height) {
    snprintf(error, error_size, "mask and image differ in size");
    return 1;
  }
  for (int y = 0; y < image->height; ++y) {
    uint8_t* row = image->data + (size_t)y * image->stride;
    uint8_t* mrow = mask->data + (size_t)y * mask->stride;
    for (int x = 0; x < image->width; ++x) {
      const uint8_t red = row[x * image->channels];
      row[x * image->channels] = mrow[x * mask->channels];
      mrow[x * mask->channels] = (uint8_t)(255 - red);
    }
  }
  return 0;
}

#if defined(TEST_PLUGIN_COLLIDE)
static const StokerOp kOps[] = {
    {"CollisionFirst", NULL, 0, NULL, CreateNoArgs, NULL, ApplyFailing},
    {"RandomCrop", NULL, 0, NULL, CreateNoArgs, NULL, ApplyFailing},
};
#elif defined(TEST_PLUGIN_BAD_TABLE)
static const StokerOp kOps[] = {
    {"NoApply", NULL, 0, NULL, CreateNoArgs, NULL, NULL},
};
#else
static const StokerOp kOps[] = {
    {"FailingOp", NULL, 0, NULL, CreateNoArgs, NULL, ApplyFailing},
    {"AddConst", kAddConstParams, 2, NULL, CreateAddConst, Destroy,
     ApplyAddConst},
    {"MaskToRed", NULL, 0, NULL, CreateNoArgs, NULL, ApplyMaskToRed},
};
#endif

static const StokerPlugin kPlugin = {
    TEST_PLUGIN_ABI_VERSION,
    "test_ops",
    (int)(sizeof(kOps) / sizeof(kOps[0])),
    kOps,
};

#if !defined(TEST_PLUGIN_NO_ENTRY)
const StokerPlugin* stoker_plugin_init(int host_abi_version) {
  (void)host_abi_version;
  return &kPlugin;
}
#else
/* Something to export, so the library is otherwise a valid plugin. */
STOKER_PLUGIN_EXPORT const StokerPlugin* some_other_entry(void) {
  return &kPlugin;
}
#endif
