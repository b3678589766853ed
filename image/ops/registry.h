#ifndef STOKER_IMAGE_OPS_REGISTRY_H_
#define STOKER_IMAGE_OPS_REGISTRY_H_

// The list of transform ops a pipeline may use (see image/ops/op.h): the
// built-in ops, then the ops plugins added (image/ops/plugin.h). Adding a
// built-in op: write image/ops/<op>.cc defining `const OpDef& <Name>Op()`,
// then add one declaration and one table line to registry.cc.
//
// Thread-safe. Plugins register their ops at start-up, before the server
// serves; a lookup concurrent with a registration sees the registry either
// before or after it. Ops are never removed, so the OpDef pointers returned
// here stay valid for the life of the process.

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "image/ops/op.h"

namespace stoker::image {

// The op named `name` (torchvision's class name or the plugin's op name,
// exact case), or null.
const OpDef* FindOp(absl::string_view name);

// Every op: the built-in ones in registration order, then added ones in the
// order they were added.
std::vector<const OpDef*> AllOps();

// Adds `defs` (all from one plugin) to the registry, all or none.
// InvalidArgument, adding nothing, when a name is not an identifier, is
// used by a built-in op, by an op added before (naming that op's plugin) or
// twice in `defs`, or when a def has no `create` or no `plugin`. Messages
// name the op, not the plugin being added (the caller knows it).
absl::Status RegisterOps(std::vector<OpDef> defs);

}  // namespace stoker::image

#endif  // STOKER_IMAGE_OPS_REGISTRY_H_
