// torchvision.transforms.AutoAugment(policy=AutoAugmentPolicy.IMAGENET,
// interpolation=nearest, fill=None), with the imagenet, cifar10 and svhn
// policies (25 sub-policies of two (op, probability, magnitude bin) steps
// each, copied from torchvision 0.14).
//
// Arguments: policy imagenet, cifar10 or svhn (any case, also written
// AutoAugmentPolicy.IMAGENET); interpolation nearest, bilinear or bicubic;
// fill a value or (r, g, b) (None means 0, as PIL).
//
// Draws, as AutoAugment.get_params then forward:
//   policy_id = torch.randint(25)     -> UniformInt(0, 25)
//   probs = torch.rand(2)             -> two NextDouble()
//   signs = torch.randint(2, (2,))    -> two UniformInt(0, 2)
// Step i applies iff probs[i] <= p_i (torchvision compares a float32 draw
// with float32(p_i); we compare doubles, a difference in probability below
// 1e-7), with the magnitude table entry (augment_policy.h; 10 bins, sized
// for the image at the start of AutoAugment), 0 for steps without one,
// negated iff the op is signed and signs[i] == 0, then applied by
// ApplyAugmentOp.
// Trace: "AutoAugment" {policy_id, applied_0, applied_1}, then the
// functional call of each applied step as ApplyAugmentOp records it.

#include <array>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "image/ops/augment_policy.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

// AutoAugment._augmentation_space(10, ...).
constexpr int kNumBins = 10;

enum class Policy { kImagenet, kCifar10, kSvhn };

struct Step {
  AugmentOp op;
  double p;
  int magnitude_id;  // -1: None
};
using SubPolicy = std::array<Step, 2>;
using PolicyTable = std::array<SubPolicy, 25>;

constexpr AugmentOp kShearX = AugmentOp::kShearX;
constexpr AugmentOp kShearY = AugmentOp::kShearY;
constexpr AugmentOp kTranslateX = AugmentOp::kTranslateX;
constexpr AugmentOp kTranslateY = AugmentOp::kTranslateY;
constexpr AugmentOp kRotate = AugmentOp::kRotate;
constexpr AugmentOp kBrightness = AugmentOp::kBrightness;
constexpr AugmentOp kColor = AugmentOp::kColor;
constexpr AugmentOp kContrast = AugmentOp::kContrast;
constexpr AugmentOp kSharpness = AugmentOp::kSharpness;
constexpr AugmentOp kPosterize = AugmentOp::kPosterize;
constexpr AugmentOp kSolarize = AugmentOp::kSolarize;
constexpr AugmentOp kAutoContrast = AugmentOp::kAutoContrast;
constexpr AugmentOp kEqualize = AugmentOp::kEqualize;
constexpr AugmentOp kInvert = AugmentOp::kInvert;
constexpr int kNone = -1;

constexpr PolicyTable kImagenet = {{
    {{{kPosterize, 0.4, 8}, {kRotate, 0.6, 9}}},
    {{{kSolarize, 0.6, 5}, {kAutoContrast, 0.6, kNone}}},
    {{{kEqualize, 0.8, kNone}, {kEqualize, 0.6, kNone}}},
    {{{kPosterize, 0.6, 7}, {kPosterize, 0.6, 6}}},
    {{{kEqualize, 0.4, kNone}, {kSolarize, 0.2, 4}}},
    {{{kEqualize, 0.4, kNone}, {kRotate, 0.8, 8}}},
    {{{kSolarize, 0.6, 3}, {kEqualize, 0.6, kNone}}},
    {{{kPosterize, 0.8, 5}, {kEqualize, 1.0, kNone}}},
    {{{kRotate, 0.2, 3}, {kSolarize, 0.6, 8}}},
    {{{kEqualize, 0.6, kNone}, {kPosterize, 0.4, 6}}},
    {{{kRotate, 0.8, 8}, {kColor, 0.4, 0}}},
    {{{kRotate, 0.4, 9}, {kEqualize, 0.6, kNone}}},
    {{{kEqualize, 0.0, kNone}, {kEqualize, 0.8, kNone}}},
    {{{kInvert, 0.6, kNone}, {kEqualize, 1.0, kNone}}},
    {{{kColor, 0.6, 4}, {kContrast, 1.0, 8}}},
    {{{kRotate, 0.8, 8}, {kColor, 1.0, 2}}},
    {{{kColor, 0.8, 8}, {kSolarize, 0.8, 7}}},
    {{{kSharpness, 0.4, 7}, {kInvert, 0.6, kNone}}},
    {{{kShearX, 0.6, 5}, {kEqualize, 1.0, kNone}}},
    {{{kColor, 0.4, 0}, {kEqualize, 0.6, kNone}}},
    {{{kEqualize, 0.4, kNone}, {kSolarize, 0.2, 4}}},
    {{{kSolarize, 0.6, 5}, {kAutoContrast, 0.6, kNone}}},
    {{{kInvert, 0.6, kNone}, {kEqualize, 1.0, kNone}}},
    {{{kColor, 0.6, 4}, {kContrast, 1.0, 8}}},
    {{{kEqualize, 0.8, kNone}, {kEqualize, 0.6, kNone}}},
}};

constexpr PolicyTable kCifar10 = {{
    {{{kInvert, 0.1, kNone}, {kContrast, 0.2, 6}}},
    {{{kRotate, 0.7, 2}, {kTranslateX, 0.3, 9}}},
    {{{kSharpness, 0.8, 1}, {kSharpness, 0.9, 3}}},
    {{{kShearY, 0.5, 8}, {kTranslateY, 0.7, 9}}},
    {{{kAutoContrast, 0.5, kNone}, {kEqualize, 0.9, kNone}}},
    {{{kShearY, 0.2, 7}, {kPosterize, 0.3, 7}}},
    {{{kColor, 0.4, 3}, {kBrightness, 0.6, 7}}},
    {{{kSharpness, 0.3, 9}, {kBrightness, 0.7, 9}}},
    {{{kEqualize, 0.6, kNone}, {kEqualize, 0.5, kNone}}},
    {{{kContrast, 0.6, 7}, {kSharpness, 0.6, 5}}},
    {{{kColor, 0.7, 7}, {kTranslateX, 0.5, 8}}},
    {{{kEqualize, 0.3, kNone}, {kAutoContrast, 0.4, kNone}}},
    {{{kTranslateY, 0.4, 3}, {kSharpness, 0.2, 6}}},
    {{{kBrightness, 0.9, 6}, {kColor, 0.2, 8}}},
    {{{kSolarize, 0.5, 2}, {kInvert, 0.0, kNone}}},
    {{{kEqualize, 0.2, kNone}, {kAutoContrast, 0.6, kNone}}},
    {{{kEqualize, 0.2, kNone}, {kEqualize, 0.6, kNone}}},
    {{{kColor, 0.9, 9}, {kEqualize, 0.6, kNone}}},
    {{{kAutoContrast, 0.8, kNone}, {kSolarize, 0.2, 8}}},
    {{{kBrightness, 0.1, 3}, {kColor, 0.7, 0}}},
    {{{kSolarize, 0.4, 5}, {kAutoContrast, 0.9, kNone}}},
    {{{kTranslateY, 0.9, 9}, {kTranslateY, 0.7, 9}}},
    {{{kAutoContrast, 0.9, kNone}, {kSolarize, 0.8, 3}}},
    {{{kEqualize, 0.8, kNone}, {kInvert, 0.1, kNone}}},
    {{{kTranslateY, 0.7, 9}, {kAutoContrast, 0.9, kNone}}},
}};

constexpr PolicyTable kSvhn = {{
    {{{kShearX, 0.9, 4}, {kInvert, 0.2, kNone}}},
    {{{kShearY, 0.9, 8}, {kInvert, 0.7, kNone}}},
    {{{kEqualize, 0.6, kNone}, {kSolarize, 0.6, 6}}},
    {{{kInvert, 0.9, kNone}, {kEqualize, 0.6, kNone}}},
    {{{kEqualize, 0.6, kNone}, {kRotate, 0.9, 3}}},
    {{{kShearX, 0.9, 4}, {kAutoContrast, 0.8, kNone}}},
    {{{kShearY, 0.9, 8}, {kInvert, 0.4, kNone}}},
    {{{kShearY, 0.9, 5}, {kSolarize, 0.2, 6}}},
    {{{kInvert, 0.9, kNone}, {kAutoContrast, 0.8, kNone}}},
    {{{kEqualize, 0.6, kNone}, {kRotate, 0.9, 3}}},
    {{{kShearX, 0.9, 4}, {kSolarize, 0.3, 3}}},
    {{{kShearY, 0.8, 8}, {kInvert, 0.7, kNone}}},
    {{{kEqualize, 0.9, kNone}, {kTranslateY, 0.6, 6}}},
    {{{kInvert, 0.9, kNone}, {kEqualize, 0.6, kNone}}},
    {{{kContrast, 0.3, 3}, {kRotate, 0.8, 4}}},
    {{{kInvert, 0.8, kNone}, {kTranslateY, 0.0, 2}}},
    {{{kShearY, 0.7, 6}, {kSolarize, 0.4, 8}}},
    {{{kInvert, 0.6, kNone}, {kRotate, 0.8, 4}}},
    {{{kShearY, 0.3, 7}, {kTranslateX, 0.9, 3}}},
    {{{kShearX, 0.1, 6}, {kInvert, 0.6, kNone}}},
    {{{kSolarize, 0.7, 2}, {kTranslateY, 0.6, 7}}},
    {{{kShearY, 0.8, 4}, {kInvert, 0.8, kNone}}},
    {{{kShearX, 0.7, 9}, {kTranslateY, 0.8, 3}}},
    {{{kShearY, 0.8, 5}, {kAutoContrast, 0.7, kNone}}},
    {{{kShearX, 0.7, 2}, {kInvert, 0.1, kNone}}},
}};

const PolicyTable& Table(Policy policy) {
  switch (policy) {
    case Policy::kImagenet:
      return kImagenet;
    case Policy::kCifar10:
      return kCifar10;
    case Policy::kSvhn:
      return kSvhn;
  }
  return kImagenet;
}

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kImagenet:
      return "imagenet";
    case Policy::kCifar10:
      return "cifar10";
    case Policy::kSvhn:
      return "svhn";
  }
  return "imagenet";
}

bool IsSigned(AugmentOp op) {
  for (const AugmentSpaceEntry& e :
       AugmentationSpace(AugmentSpace::kAutoAugment)) {
    if (e.op == op) return e.is_signed;
  }
  return false;
}

class AutoAugment : public Op {
 public:
  Policy policy = Policy::kImagenet;
  PolicyWarpArgs warp;

  void WriteArgs(ArgWriter& w) const override {
    ArgValue v;
    v.word = PolicyName(policy);
    w.Value("policy", v, policy == Policy::kImagenet);
    WritePolicyWarpArgs(warp, w);
  }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const PolicyTable& table = Table(policy);
    const int policy_id = static_cast<int>(rng.UniformInt(0, table.size()));
    double probs[2];
    for (double& u : probs) u = rng.NextDouble();
    int64_t signs[2];
    for (int64_t& s : signs) s = rng.UniformInt(0, 2);
    const SubPolicy& sub = table[policy_id];
    const bool applied[2] = {probs[0] <= sub[0].p, probs[1] <= sub[1].p};
    plan.Trace("AutoAugment", {{"policy_id", policy_id},
                               {"applied_0", applied[0] ? 1.0 : 0.0},
                               {"applied_1", applied[1] ? 1.0 : 0.0}});
    const int width = plan.width(), height = plan.height();
    for (int i = 0; i < 2; ++i) {
      if (!applied[i]) continue;
      const Step& step = sub[i];
      double m =
          step.magnitude_id == kNone
              ? 0.0
              : AugmentMagnitude(AugmentSpace::kAutoAugment, step.op, kNumBins,
                                 step.magnitude_id, width, height);
      if (IsSigned(step.op) && signs[i] == 0) m *= -1.0;
      ApplyAugmentOp(plan, step.op, m, warp);
    }
  }
};

absl::StatusOr<Policy> ReadPolicy(const OpArgs& args) {
  const ArgValue* v = args.Find("policy");
  if (v == nullptr) return Policy::kImagenet;
  std::string w = absl::AsciiStrToLower(v->word);
  if (absl::StartsWith(w, "autoaugmentpolicy.")) {
    w = w.substr(sizeof("autoaugmentpolicy.") - 1);
  }
  if (w == "imagenet") return Policy::kImagenet;
  if (w == "cifar10") return Policy::kCifar10;
  if (w == "svhn") return Policy::kSvhn;
  return absl::InvalidArgumentError(
      absl::StrCat("policy must be imagenet, cifar10 or svhn, got ",
                   v->is_word() ? v->word : "a number"));
}

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<AutoAugment>();
  absl::StatusOr<Policy> policy = ReadPolicy(args);
  if (!policy.ok()) return policy.status();
  op->policy = *policy;
  absl::StatusOr<PolicyWarpArgs> warp = ReadPolicyWarpArgs(args);
  if (!warp.ok()) return warp.status();
  op->warp = *warp;
  return op;
}

}  // namespace

const OpDef& AutoAugmentOp() {
  static const OpDef* const def = new OpDef{
      "AutoAugment",
      {"policy", "interpolation", "fill"},
      "AutoAugment(policy=imagenet, interpolation=nearest, fill=None), "
      "policy imagenet, cifar10 or svhn",
      &Create};
  return *def;
}

}  // namespace stoker::image
