// nn/dropout.h — Dropout: in training, zeroes each element with probability p and scales the rest
// by 1/(1 − p), drawing from the input device's generator, or from a generator of its own when it
// is given one; in eval mode it is the identity.
#pragma once

#include <tandem/core/generator.h>
#include <tandem/nn/module.h>
#include <functional>
#include <memory>

namespace tandem::nn {

/// The dropout op itself (a no-op when !training or p == 0).
Tensor dropout(const Tensor& x, double p, bool training);
/// x where `uniforms` (shaped like x) >= p, scaled by 1/(1 − p), elsewhere 0: dropout with its
/// numbers given.
Tensor dropout_where(const Tensor& x, double p, const Tensor& uniforms);

/// What draws a dropout's uniform numbers for an input of `shape`: rand()'s by default.
using DrawUniforms = std::function<Tensor(const Shape& shape, const TensorOptions& options)>;

/// fn(), its random numbers drawn from `generator` in place of `device`'s default generator
/// (null: from the default): what a module whose masks must differ from the same module's
/// elsewhere is given (a tensor-parallel rank's heads, a sequence-parallel rank's positions), as
/// torch's random ops take generator=. An activation checkpoint's recompute replays it, and
/// leaves it where the forward left it.
Tensor with_generator(const std::shared_ptr<Generator>& generator, Device device,
                      const std::function<Tensor()>& fn);

struct Dropout : Module {
  explicit Dropout(double p = 0.5);
  double p;
  std::shared_ptr<Generator> generator;  // the masks' stream; null: the input device's
  // The masks' numbers for an input's shape, from that stream; null: rand(shape). A
  // context-parallel plan draws one device's numbers at this rank's positions here
  // (parallel/cp/plan.h), so that its masks are one device's.
  DrawUniforms uniforms;
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor&) override {}
  std::string extra_repr() const override { return tandem::str("p=", p, ", inplace=False"); }
};

}  // namespace tandem::nn
