#ifndef STOKER_IMAGE_OPS_REGISTRY_H_
#define STOKER_IMAGE_OPS_REGISTRY_H_

// The list of transform ops a pipeline may use (see image/ops/op.h). Adding
// an op: write image/ops/<op>.cc defining `const OpDef& <Name>Op()`, then add
// one declaration and one table line to registry.cc.

#include <vector>

#include "absl/strings/string_view.h"
#include "image/ops/op.h"

namespace stoker::image {

// The op named `name` (torchvision's class name, exact case), or null.
const OpDef* FindOp(absl::string_view name);

// Every op, in registration order.
const std::vector<const OpDef*>& AllOps();

}  // namespace stoker::image

#endif  // STOKER_IMAGE_OPS_REGISTRY_H_
