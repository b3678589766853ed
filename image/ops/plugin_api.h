/* The Stoker plugin ABI: user transform ops in a shared library, loaded by
 * the server with --plugin=PATH.so (image/ops/plugin.h is the host side).
 * Plain C, so that a plugin can be written in C, C++ or anything that
 * exports C functions; it needs this header only, never Stoker's C++ code.
 *
 * A plugin exports one function, stoker_plugin_init, that returns a table
 * of ops (StokerPlugin). Each op is a pixel op: it changes the pixels of the
 * image (and of its mask) in place, never the size. In the transform text a
 * plugin op is written like a built-in one, e.g.
 *     RandomCrop(32) | RandomMask(ratio=0.25)
 * and its arguments reach the op's create() as StokerArg values.
 *
 * Versioning. STOKER_PLUGIN_ABI_VERSION names the layout of every struct and
 * the meaning of every function here. The host calls stoker_plugin_init with
 * the version it speaks and reads the returned table's abi_version (the
 * first member, where it stays in every version) before anything else; a
 * plugin built for another version is refused at start-up. Any change to
 * this file that is not purely additive documentation bumps the version.
 *
 * Contract for plugin authors:
 *   Lifetime  The plugin is never unloaded. The table, its ops array and
 *             every string it points to must stay valid and unchanged for
 *             the life of the process (static storage is the easy way). The
 *             host copies the names at load time.
 *   Threads   stoker_plugin_init is called once, at start-up. create() and
 *             destroy() may be called from any thread, concurrently (every
 *             request's pipeline is validated and created on its own). apply()
 *             is called concurrently from many worker threads with the same
 *             state: treat the state as read-only after create() returns and
 *             keep any scratch memory local to the call.
 *   Determinism  Stoker promises that a sample's augmentation depends only
 *             on (seed, epoch, sample, pipeline), never on the server, the
 *             thread or the order of work. An op keeps that promise by
 *             drawing random numbers only from the StokerRng it is given and
 *             by computing its output from (state, those numbers, the input
 *             pixels) alone: no clocks, no rand(), no global state.
 *   Errors    create() rejects bad arguments with a message; the client's
 *             request then fails with InvalidArgument naming the step.
 *             apply() may fail one sample with a message; that sample is
 *             skipped and reported (DataLoss "plugin op NAME: message")
 *             like a corrupt image, and the stream goes on. A crash in a
 *             plugin crashes the server: the host cannot contain it.
 */

#ifndef STOKER_IMAGE_OPS_PLUGIN_API_H_
#define STOKER_IMAGE_OPS_PLUGIN_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STOKER_PLUGIN_ABI_VERSION 1

/* The name of the one function a plugin exports (see stoker_plugin_init). */
#define STOKER_PLUGIN_ENTRY_POINT "stoker_plugin_init"

/* Size of the error buffers the host passes to create() and apply(), in
 * bytes, terminating NUL included. Longer messages should be truncated
 * (snprintf does that). */
#define STOKER_PLUGIN_ERROR_SIZE 256

#if defined(__GNUC__)
#define STOKER_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define STOKER_PLUGIN_EXPORT
#endif

/* An interleaved uint8 image: `height` rows of `width` pixels of `channels`
 * bytes, rows `stride` bytes apart (stride >= width * channels). The image
 * a transform works on is RGB (channels == 3); a segmentation mask has 1 to
 * 4 channels and the image's width and height. The host owns the memory;
 * an op may write the pixels, not past them, and must not keep the pointer
 * after apply() returns. */
typedef struct StokerImage {
  uint8_t* data;
  int width;
  int height;
  int channels;
  int stride;
} StokerImage;

/* One argument as written in the transform text, e.g. ratio=0.25,
 * size=(3, 5), mode=fast. Positional arguments arrive under the name the
 * op's `params` give their position. Exactly one of `numbers` and `word` is
 * set. */
typedef struct StokerArg {
  /* Argument name, one of the op's params. */
  const char* name;
  /* n_numbers finite values (1 to 4), or NULL with n_numbers == 0 when the
   * argument is a word. */
  const double* numbers;
  int n_numbers;
  /* Nonzero when written as a tuple "(a, b)" (even "(a,)"), zero for a
   * plain number. */
  int tuple;
  /* A word such as fast, True, None or Mode.FAST, or NULL. */
  const char* word;
} StokerArg;

/* The random numbers of one op on one sample, handed to apply() by the
 * host: Stoker's counter-based generator (common/random.h) keyed by
 * (seed, epoch, sample, op position) exactly as the built-in ops' are, so
 * every server and every thread draws the same numbers for the same
 * sample. Call the functions with `self`; only on the calling thread, and
 * only during the apply() call that received it. */
typedef struct StokerRng {
  void* self;
  /* The next 64 uniformly distributed bits: the n-th call (n = 0, 1, ...)
   * returns SplitMix64's n-th output for the op's key. */
  uint64_t (*next_u64)(void* self);
  /* Uniform in [0, 1): the top 53 bits of one next_u64() times 2^-53
   * (consumes exactly one next_u64()). */
  double (*uniform)(void* self);
} StokerRng;

/* One op of a plugin. */
typedef struct StokerOp {
  /* The name used in the transform text: an identifier ([A-Za-z_]
   * [A-Za-z0-9_]*) that no built-in op and no other loaded plugin uses. */
  const char* name;
  /* The argument names the op accepts, in positional order (like a Python
   * signature): RandomMask(0.25) binds 0.25 to params[0]. Arguments with
   * other names are refused by the host before create() sees them. May be
   * NULL when n_params == 0. */
  const char* const* params;
  int n_params;
  /* Usage text for error messages, e.g. "RandomMask(ratio=0.25)"; NULL
   * lets the host write one from the params. */
  const char* usage;

  /* Validates `args` (n_args of them, each name at most once, only names
   * from params; absent ones mean the op's defaults) and makes the op's
   * state, stored in *state (NULL is a valid state for an op that needs
   * none). Returns 0 on success; otherwise nonzero with a message in
   * `error` (error_size bytes) saying which argument is wrong and what is
   * expected, and *state is ignored. Must be thread-safe and must not keep
   * `args` or the strings they point to. */
  int (*create)(const StokerArg* args, int n_args, void** state, char* error,
                size_t error_size);
  /* Frees a state create() made, once the last pipeline using it is gone.
   * Called for every successful create(), with its state (NULL included).
   * May be NULL when states need no freeing. */
  void (*destroy)(void* state);
  /* Runs the op on one sample, in place: `image` is the current RGB image
   * (channels == 3) and `mask` the sample's segmentation mask (the
   * request's first mask field, warped with the image up to this step:
   * same width and height; changes are kept) or NULL when the request has
   * no mask field. Random numbers come from
   * `rng` only. Returns 0 on success; otherwise nonzero with a message in
   * `error` (error_size bytes): the sample is skipped and reported, and its
   * pixels are discarded. Called concurrently with the same state. */
  int (*apply)(const void* state, const StokerRng* rng,
               const StokerImage* image, const StokerImage* mask, char* error,
               size_t error_size);
} StokerOp;

/* What stoker_plugin_init returns. */
typedef struct StokerPlugin {
  /* STOKER_PLUGIN_ABI_VERSION as the plugin was compiled. Always first. */
  int abi_version;
  /* The plugin's name, for logs and errors, e.g. "random_mask". */
  const char* name;
  /* n_ops ops (at least one). */
  int n_ops;
  const StokerOp* ops;
} StokerPlugin;

/* The plugin's entry point, called once by the host at load time with the
 * ABI version the host speaks. Returns the plugin's table (never NULL).
 * A plugin that supports only STOKER_PLUGIN_ABI_VERSION simply returns its
 * table; the host refuses it if the versions differ. */
STOKER_PLUGIN_EXPORT const StokerPlugin* stoker_plugin_init(
    int host_abi_version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STOKER_IMAGE_OPS_PLUGIN_API_H_ */
