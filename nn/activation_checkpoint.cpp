// nn/activation_checkpoint.cpp — the forward's hooks, the recompute, and checkpoint_sequential.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/saved_tensor.h>
#include <tandem/autograd/thread_local_state.h>
#include <tandem/core/check.h>
#include <tandem/core/generator.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/nn/activation_checkpoint.h>
#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>

namespace tandem::nn {
namespace {

thread_local int t_recomputing = 0;

// One checkpointed call: what the recompute needs, and what the forward saved (its metadata
// only; the tensors themselves are not kept).
struct Frame {
  CheckpointFn fn;
  std::vector<SavedTensor> inputs;  // saved as an op saves its inputs (version check, outer hooks)
  std::vector<bool> input_requires_grad;
  ThreadLocalState state;  // the forward's grad mode, streams, intra-op threads
  std::vector<std::pair<Device, GeneratorState>> rng;
  std::vector<OwnGeneratorState> own_rng;  // generators of fn's own (a rank's stream)
  bool early_stop = true;
  struct Meta {
    Shape shape;
    DType dtype;
    Device device;
  };
  std::vector<Meta> saved;  // in the order the forward's ops saved them

  std::mutex mutex;                // backward threads of several devices may unpack at once
  std::vector<Tensor> recomputed;  // slot i: saved tensor i from the last recompute
  std::vector<bool> ready;         // slot i not yet handed to backward
};

// What the forward's pack hook leaves in each op's node instead of the tensor.
struct Handle {
  std::shared_ptr<Frame> frame;
  size_t index;
};

struct StopRecompute {};  // thrown by the recompute's pack hook: everything needed is there

std::string describe(const Frame::Meta& m) { return str(m.shape, " ", m.dtype, " on ", m.device); }

// Runs fn again from the saved inputs, under the forward's thread-local state and random
// numbers, collecting what its ops save, in order, into the frame's slots. Caller holds f.mutex.
void recompute(Frame& f) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < f.inputs.size(); ++i) {
    Tensor t = f.inputs[i].unpack("activation_checkpoint");
    if (t.defined()) t = f.input_requires_grad[i] ? t.detach().requires_grad_() : t.detach();
    in.push_back(std::move(t));
  }
  std::vector<Tensor> made;
  const size_t wanted = f.saved.size();
  const bool early_stop = f.early_stop;
  ThreadLocalState state = f.state;
  state.saved_tensor_hooks = std::make_shared<const SavedTensorHooksPair>(SavedTensorHooksPair{
      [&made, wanted, early_stop](const Tensor& t) -> std::any {
        made.push_back(t);
        if (early_stop && made.size() == wanted) throw StopRecompute{};
        return {};
      },
      [](const std::any&) -> Tensor { return Tensor(); }});  // the recompute's graph is dropped
  {
    ThreadLocalStateGuard guard(state);
    std::optional<ReplayGenerators> replay;
    if (!f.rng.empty() || !f.own_rng.empty()) replay.emplace(f.rng, f.own_rng);
    struct Recomputing {
      Recomputing() { ++t_recomputing; }
      ~Recomputing() { --t_recomputing; }
    } recomputing;
    try {
      f.fn(in);
    } catch (const StopRecompute&) {
      // early stop: the rest of fn computes nothing backward needs
    }
  }
  for (size_t i = 0; i < std::min(made.size(), wanted); ++i) {
    const Tensor& t = made[i];
    const Frame::Meta& m = f.saved[i];
    TD_CHECK_AS(AutogradError,
                t.shape() == m.shape && t.dtype() == m.dtype && t.device() == m.device,
                "activation_checkpoint: recomputing the checkpointed function saved ", describe(t),
                " as tensor ", i, " of ", wanted, ", where the forward saved ", describe(m),
                "\n  hint: the function must compute the same shapes when it runs again (no "
                "shape that depends on random numbers, a counter or other state)");
  }
  TD_CHECK_AS(AutogradError, made.size() == wanted,
              "activation_checkpoint: recomputing the checkpointed function saved ", made.size(),
              " tensors for backward, where the forward saved ", wanted,
              "\n  hint: the function must run the same ops when it runs again");
  f.recomputed = std::move(made);
  f.ready.assign(wanted, true);
}

Tensor unpack(const std::any& packed) {
  const Handle& h = std::any_cast<const Handle&>(packed);
  Frame& f = *h.frame;
  std::lock_guard lk(f.mutex);
  // Each slot is handed out once per recompute; a second backward (retain_graph) recomputes.
  if (f.ready.size() <= h.index || !f.ready[h.index]) recompute(f);
  f.ready[h.index] = false;
  return std::move(f.recomputed[h.index]);  // freed as soon as backward is done with it
}

}  // namespace

bool recomputing_activations() { return t_recomputing > 0; }

std::vector<Tensor> activation_checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                                          ActivationCheckpointOptions options) {
  TD_CHECK_VALUE(fn != nullptr, "activation_checkpoint: no function given");
  auto frame = std::make_shared<Frame>();
  frame->fn = fn;
  frame->early_stop = options.early_stop;
  for (const Tensor& t : inputs) {
    frame->inputs.emplace_back("checkpoint input", t, false);  // an enclosing checkpoint packs it
    frame->input_requires_grad.push_back(t.defined() && t.requires_grad());
  }
  frame->state = ThreadLocalState::capture();
  std::vector<Tensor> outputs;
  {
    // Every generator fn draws from, as it stood before fn's first draw on it.
    std::optional<GeneratorUseRecorder> rng;
    if (options.preserve_rng_state) rng.emplace();
    SavedTensorHooks hooks(
        [frame](const Tensor& t) -> std::any {
          frame->saved.push_back({t.shape(), t.dtype(), t.device()});
          return Handle{frame, frame->saved.size() - 1};
        },
        unpack);
    outputs = fn(inputs);
    if (rng) {
      frame->rng = rng->used();
      frame->own_rng = rng->used_own();
    }
  }
  for (size_t k = 0; k < outputs.size(); ++k)
    TD_CHECK_VALUE(outputs[k].defined(), "activation_checkpoint: output ", k,
                   " of the checkpointed function is an undefined tensor; it must return the "
                   "tensors it computed");
  return outputs;
}

Tensor checkpoint_sequential(Sequential& seq, int segments, const Tensor& x,
                             ActivationCheckpointOptions options) {
  const int64_t n = int64_t(seq.size());
  TD_CHECK_VALUE(segments >= 1 && segments <= n, "checkpoint_sequential: segments = ", segments,
                 ", but the Sequential has ", n, " modules (choose 1 to ", n, ")");
  Tensor h = x;
  int64_t begin = 0;
  for (int s = 0; s < segments; ++s) {
    const int64_t size = n / segments + (s < n % segments ? 1 : 0);  // the longer ones first
    // A slice holds seq's own module objects; it is moved, not copied, into the shared_ptr that
    // the recompute keeps.
    auto part = std::make_shared<Sequential>(seq.slice(size_t(begin), size_t(begin + size)));
    begin += size;
    if (s == segments - 1) return part->forward(h);  // its backward starts at once: keep all
    h = activation_checkpoint(
        [part](const std::vector<Tensor>& in) { return std::vector<Tensor>{part->forward(in[0])}; },
        {h}, options)[0];
  }
  return h;
}

Checkpointed::Checkpointed(AnyModule module, ActivationCheckpointOptions options)
    : module_(std::move(module)), options_(options) {
  TD_CHECK_VALUE(module_.has_forward(), "Checkpointed: ", module_->type_name(),
                 " has no forward(const Tensor&)");
}

Tensor Checkpointed::forward(const Tensor& x) {
  if (!GradMode::is_enabled()) return module_.forward(x);  // no graph: nothing to keep or redo
  // The recompute runs in backward, perhaps after this module (a replica's copy) is gone: the
  // function holds the module object itself.
  return activation_checkpoint(
      [m = module_.shared()](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{m.forward(in[0])};
      },
      {x}, options_)[0];
}

}  // namespace tandem::nn
