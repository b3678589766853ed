#include "image/ops/custom_op.h"

#include "image/ops/plan_builder.h"

namespace stoker::image {

void CustomOp::WriteArgs(ArgWriter& writer) const {
  for (const auto& [name, value] : args_) {
    writer.Value(name, value, /*is_default=*/false);
  }
}

void CustomOp::Plan(PlanBuilder& plan, common::CounterRng& rng) const {
  plan.Custom(kernel_, rng);
}

std::vector<std::pair<std::string, ArgValue>> GivenArgs(
    const std::vector<std::string>& params, const OpArgs& args) {
  std::vector<std::pair<std::string, ArgValue>> given;
  for (const std::string& param : params) {
    if (const ArgValue* value = args.Find(param)) {
      given.emplace_back(param, *value);
    }
  }
  return given;
}

}  // namespace stoker::image
