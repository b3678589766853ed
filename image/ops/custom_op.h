#ifndef STOKER_IMAGE_OPS_CUSTOM_OP_H_
#define STOKER_IMAGE_OPS_CUSTOM_OP_H_

// The Op of an op whose code lives outside the tree (a plugin's op,
// image/ops/plugin.h; an operator's Python op, image/ops/python_op.h): a
// custom step of the sample's plan that runs its kernel when the sample
// runs, from a copy of the op's generator as the planner hands it over.
// Such ops keep the size. The host knows no defaults, so every argument
// given is written by name in the canonical text form (processes without
// the op, i.e. clients, read it back).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/random.h"
#include "image/ops/op.h"
#include "image/plan.h"

namespace stoker::image {

class CustomOp : public Op {
 public:
  // `args` in the order of the op's params.
  CustomOp(std::shared_ptr<const CustomKernel> kernel,
           std::vector<std::pair<std::string, ArgValue>> args)
      : kernel_(std::move(kernel)), args_(std::move(args)) {}

  void WriteArgs(ArgWriter& writer) const override;
  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override;

 private:
  const std::shared_ptr<const CustomKernel> kernel_;
  const std::vector<std::pair<std::string, ArgValue>> args_;
};

// The arguments given among `params` (in that order), each marked read.
std::vector<std::pair<std::string, ArgValue>> GivenArgs(
    const std::vector<std::string>& params, const OpArgs& args);

}  // namespace stoker::image

#endif  // STOKER_IMAGE_OPS_CUSTOM_OP_H_
