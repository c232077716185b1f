// parallel/data_parallel/replicate.cpp — coalesced, differentiable broadcast of the parameters.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/record.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/parallel/data_parallel/replicate.h>
#include <map>
#include <unordered_map>

namespace tandem::parallel {

// Each replica parameter is a view of its device's flat copy, recorded as an op whose input is
// the original parameter: backward copies the view's gradient back to the original's device,
// where the engine adds the replicas' parts (in a fixed order) into the original's .grad. The
// forward copy is coalesced; the gradients come back one tensor each.
std::vector<std::vector<Tensor>> broadcast_coalesced(const std::vector<Tensor>& params,
                                                     const std::vector<Device>& devices) {
  std::vector<std::vector<Tensor>> out(devices.size(), std::vector<Tensor>(params.size()));
  if (params.empty()) return out;
  const Device source = params[0].device();
  for (const Tensor& p : params)
    check_same_device("replicate", {{"first parameter", params[0]}, {"parameter", p}});
  // One group per dtype (a model may keep, say, float32 weights and float64 statistics).
  std::map<DType, std::vector<size_t>> groups;
  for (size_t i = 0; i < params.size(); ++i) groups[params[i].dtype()].push_back(i);
  for (const auto& [dtype, members] : groups) {
    Tensor flat;
    {
      NoGradGuard no_grad;  // the graph is made per parameter below
      std::vector<Tensor> pieces;
      for (size_t i : members) pieces.push_back(params[i].reshape({params[i].numel()}));
      flat = cat(pieces, 0);
    }
    for (size_t k = 0; k < devices.size(); ++k) {
      if (devices[k] == source) {
        for (size_t i : members) out[k][i] = params[i];
        continue;
      }
      Tensor there;
      {
        NoGradGuard no_grad;
        there = flat.to(devices[k]);  // one copy per device and dtype
      }
      int64_t offset = 0;
      for (size_t i : members) {
        const Tensor& p = params[i];
        Tensor view;
        {
          NoGradGuard no_grad;
          view = there.narrow(0, offset, p.numel()).reshape(p.shape());
        }
        offset += p.numel();
        // y = p on devices[k]              dp = dy copied back to p's device
        out[k][i] = record(
            "broadcast", view, {p}, {},
            [source, dtype = p.dtype()](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
              return {::tandem::detail::convert(dy, source, dtype)};
            });
      }
    }
  }
  return out;
}

namespace detail {

void install_replica(nn::Module& replica, const std::vector<Tensor>& originals,
                     const std::vector<Tensor>& copies, size_t k, Device device) {
  // By identity, not by position: a tied tensor (a GPT's wte, read again by lm_head) is visited
  // under each of its names but listed once, and both names must get its one copy.
  std::unordered_map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < originals.size(); ++i) index.emplace(&originals[i].impl(), i);
  size_t installed = 0;
  nn::for_each_tensor(replica, [&](const std::string& name, Tensor& t, bool is_buffer) {
    if (!t.defined()) return;
    if (!is_buffer) {
      const auto it = index.find(&t.impl());
      TD_INTERNAL_ASSERT(it != index.end(), "replicate: ", name,
                         " is not a parameter of the module");
      t = copies[it->second];
      ++installed;
    } else if (k > 0) {
      t = t.detach().to(device);  // updates to this copy are dropped with the replica
    }
  });
  TD_INTERNAL_ASSERT(installed >= copies.size(), "replicate: ", copies.size(),
                     " parameters copied, ", installed, " installed");
}

}  // namespace detail

std::vector<nn::AnyModule> replicate(const nn::AnyModule& module,
                                     const std::vector<Device>& devices) {
  const std::vector<Tensor> params = module->parameters();
  const auto copies = broadcast_coalesced(params, devices);
  std::vector<nn::AnyModule> replicas;
  replicas.reserve(devices.size());
  for (size_t k = 0; k < devices.size(); ++k) {
    replicas.push_back(module);  // a copy: the same structure, the same tensor handles
    detail::install_replica(replicas.back().get(), params, copies[k], k, devices[k]);
  }
  return replicas;
}

}  // namespace tandem::parallel
