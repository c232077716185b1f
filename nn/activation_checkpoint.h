// nn/activation_checkpoint.h — activation checkpointing: trade compute for memory. The forward of
// a checkpointed function keeps none of the tensors its ops save for backward, only its inputs;
// the first time backward needs one of them, the function runs again from its inputs and the
// saved tensors are taken from that recompute. The result is the same bits as without
// checkpointing: the recompute replays the forward's random numbers (dropout masks) and batch
// norm does not update its running statistics a second time.
//
// Built on the saved-tensor hooks (autograd/saved_tensor.h), as PyTorch's non-reentrant
// torch.utils.checkpoint: there is no inner backward, so it works with partial backward, inputs
// that do not require grad, DDP's gradient hooks (each fires once) and nesting.
//
//   auto block = std::make_shared<nn::Sequential>(...);  // fn runs again in backward, so it
//   Tensor h = nn::activation_checkpoint(                 // holds the block by shared_ptr
//       [block](const Tensor& v) { return (*block)(v); }, x);
//   Tensor y = nn::checkpoint_sequential(layers, 6, x);  // √n segments for n layers
//   nn::Sequential net{{"block1", nn::Checkpointed(block1)}, {"head", head}};  // as a module
//
// "Checkpoint" alone in Tandem means the training-state directory of `tandem train --checkpoint`;
// nn/serialize.h writes and reads the files in it.
#pragma once

#include <tandem/nn/container.h>
#include <functional>
#include <type_traits>
#include <vector>

namespace tandem::nn {

struct ActivationCheckpointOptions {
  /// Replay fn's random numbers in the recompute: the state of every device generator fn draws
  /// from (and of every generator of its own it draws through own_generator(), core/generator.h)
  /// is noted at its first draw (two integers each), and the recompute draws from private
  /// copies of them, leaving everyone else's draws alone. Off: the recompute draws fresh numbers
  /// and dropout masks differ from the forward's (the gradients are then wrong).
  bool preserve_rng_state = true;
  /// Stop the recompute as soon as it has produced every tensor the forward saved.
  bool early_stop = true;
};

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// fn(inputs), checkpointed: the outputs and their graph are as fn's own, but the graph holds
/// only `inputs` until backward recomputes the rest. fn is kept and called again in backward:
/// what it captures must outlive the backward pass (capture modules by shared_ptr, or use the
/// Checkpointed module below, which does). Outputs must be defined tensors (ValueError
/// otherwise); the recompute must save tensors of the same shapes, dtypes and devices as the
/// forward did (AutogradError naming the first that differs otherwise).
std::vector<Tensor> activation_checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                                          ActivationCheckpointOptions options = {});

/// The same for a function of tensors returning a Tensor or a std::vector<Tensor>, with options
/// second when given (fn captures what it uses by value: it runs again in backward):
///   activation_checkpoint([f](const Tensor& x, const Tensor& m) { return f(x, m); }, x, m);
///   activation_checkpoint(fn, {.preserve_rng_state = false}, x);
template <typename Fn, typename... T>
requires(std::is_same_v<T, Tensor>&&...) auto activation_checkpoint(
    Fn fn, ActivationCheckpointOptions options, const T&... inputs) {
  using Out = std::invoke_result_t<Fn&, const T&...>;
  static_assert(std::is_same_v<Out, Tensor> || std::is_same_v<Out, std::vector<Tensor>>,
                "activation_checkpoint: fn must return a Tensor or a std::vector<Tensor> (its "
                "outputs are what backward flows through)");
  CheckpointFn erased = [fn](const std::vector<Tensor>& in) mutable {
    auto call = [&]<size_t... I>(std::index_sequence<I...>) { return fn(in[I]...); };
    if constexpr (std::is_same_v<Out, Tensor>)
      return std::vector<Tensor>{call(std::index_sequence_for<T...>{})};
    else
      return call(std::index_sequence_for<T...>{});
  };
  std::vector<Tensor> out = activation_checkpoint(erased, std::vector<Tensor>{inputs...}, options);
  if constexpr (std::is_same_v<Out, Tensor>)
    return out[0];
  else
    return out;
}
template <typename Fn, typename... T>
requires(std::is_same_v<T, Tensor>&&...) auto activation_checkpoint(Fn fn, const T&... inputs) {
  return activation_checkpoint(std::move(fn), ActivationCheckpointOptions{}, inputs...);
}

/// True while this thread recomputes a checkpointed forward (batch norm then leaves its running
/// statistics alone: the forward updated them already).
bool recomputing_activations();

/// seq(x) with seq cut into `segments` runs of consecutive modules (sizes differing by at most
/// one, the longer first), each checkpointed except the last, whose backward starts right away
/// (as PyTorch's checkpoint_sequential). Peak activation memory falls from n layers' to about
/// segments + n / segments layers'.
Tensor checkpoint_sequential(Sequential& seq, int segments, const Tensor& x,
                             ActivationCheckpointOptions options = {});

/// A module run checkpointed: its forward keeps only its input and backward recomputes the rest
/// (the module is held by the graph until then, so a DataParallel replica may go away first). It
/// is transparent to names: its parameters and buffers are the wrapped module's, under the same
/// names, so a model saves and loads the same with or without it. The module needs
/// forward(const Tensor&).
class Checkpointed : public Module {
 public:
  explicit Checkpointed(AnyModule module, ActivationCheckpointOptions options = {});
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  void visit(Visitor& v) override { v.slot("", module_); }
  Module& module() { return module_.get(); }
  const ActivationCheckpointOptions& options() const { return options_; }

 private:
  AnyModule module_;
  ActivationCheckpointOptions options_;
};

}  // namespace tandem::nn
