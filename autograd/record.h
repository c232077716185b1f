// autograd/record.h — the one place the graph is built. An op runs its checks and forward kernel,
// then calls record(); when grad mode is on and an input requires grad, record() makes the node
// and returns the output marked as requiring grad. Every tensor the backward function reads is
// listed in `saved` (by name, for errors) and reaches it, unpacked and version-checked, as
// `saved[i]`; the lambda itself captures only non-tensor values (shapes, options):
//
//   return record("mul", y, {a, b}, {{"a", a}, {"b", b}},
//                 [](const Tensor& dy, const NeedsGrad& need, const Saved& s) -> Grads { ... });
#pragma once

#include <tandem/autograd/node.h>
#include <initializer_list>
#include <span>

namespace tandem {

Tensor record(const char* name, Tensor output, std::initializer_list<Tensor> inputs,
              std::initializer_list<ToSave> saved, BackwardFn backward);
/// The same, with the op's weight-gradient part (node.h): a backward called with
/// {.defer_weight_grads = true} leaves input `weight_grad.input`'s gradient to weight_grad.fn,
/// later (deferred_weight_grads.h). The backward function computes it too, when asked.
Tensor record(const char* name, Tensor output, std::initializer_list<Tensor> inputs,
              std::initializer_list<ToSave> saved, BackwardFn backward, WeightGrad weight_grad);
/// The same for an op with a run-time number of inputs (cat).
Tensor record(const char* name, Tensor output, std::span<const Tensor> inputs,
              std::initializer_list<ToSave> saved, BackwardFn backward);

/// True when an op with these inputs would be recorded (grad mode on, some input requires grad).
bool any_requires_grad(std::initializer_list<Tensor> inputs);
bool any_requires_grad(std::span<const Tensor> inputs);

}  // namespace tandem
