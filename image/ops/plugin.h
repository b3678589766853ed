#ifndef STOKER_IMAGE_OPS_PLUGIN_H_
#define STOKER_IMAGE_OPS_PLUGIN_H_

// The host side of the plugin ABI (image/ops/plugin_api.h): loads a shared
// library of user ops and adds its ops to the op registry
// (image/ops/registry.h), where ParseTransform, ValidatePipeline and
// Transform::Create find them like built-in ops.
//
// A plugin op is a pixel op: in a sample's plan it is a custom step
// (image/plan.h) that SampleProcessor runs in place on the current image.
// Its random numbers come from the CounterRng of its position in the
// pipeline, keyed like every built-in op's, so its output is the same on
// every server and thread. Its arguments are passed to the plugin's
// create() when a pipeline is validated or created (a refusal is
// InvalidArgument naming the step); a failing apply() fails that one
// sample with DataLoss "plugin op NAME: message".
//
// Plugins are loaded at start-up, before serving, and never unloaded.

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::image {

// What LoadPlugin loaded.
struct LoadedPlugin {
  std::string path;
  // The name the plugin gives itself.
  std::string name;
  // Its ops' names, in the plugin's order.
  std::vector<std::string> ops;
};

// Loads the shared library at `path` (a file path; a bare file name means
// one in the current directory, not dlopen's library search), checks its
// ABI version and registers its ops. Thread-safe. On error nothing is
// registered (the library may stay mapped). Errors, each naming the path:
//   NotFound         no file at `path`;
//   InvalidArgument  the file does not load (dlerror's text), exports no
//                    stoker_plugin_init, was built for another ABI version
//                    ("... built for Stoker plugin ABI N, this server
//                    speaks M"), has a malformed op table, or an op name
//                    that a built-in op or another plugin already uses
//                    (loading one plugin twice is such a collision).
absl::StatusOr<LoadedPlugin> LoadPlugin(const std::string& path);

}  // namespace stoker::image

#endif  // STOKER_IMAGE_OPS_PLUGIN_H_
