// parallel/data_parallel/data_parallel.h — one process, several devices (PyTorch's
// nn.DataParallel). Each forward: replicate the module onto the devices (differentiable copies of
// its parameters), scatter the batch along `dim`, run the replicas at once (one thread per
// device), gather the outputs on `output_device`. Backward flows back through all four steps, so
// the gradients land in the module's own parameters on device_ids[0], summed over the replicas,
// and one optimizer over module().parameters() trains it:
//
//   parallel::DataParallel dp(Net{}, {.device_ids = {"cpu:0", "cpu:1"}});
//   optim::SGD opt(dp.module().parameters(), {.lr = 0.1});
//   cross_entropy(dp(x), y).backward();  opt.step();
//   save_model(dp.module(), "net.safetensors");  // the module, not the wrapper
#pragma once

#include <tandem/parallel/data_parallel/criterion.h>
#include <tandem/parallel/data_parallel/parallel_apply.h>
#include <tandem/parallel/data_parallel/replicate.h>
#include <tandem/parallel/data_parallel/scatter_gather.h>
#include <optional>
#include <utility>
#include <vector>

namespace tandem::parallel {

struct DataParallelOptions {
  std::vector<Device> device_ids;        // devices[0] holds the module; empty: {cpu}
  std::optional<Device> output_device;   // where outputs are gathered; default device_ids[0]
  int64_t dim = 0;                       // the batch dimension of inputs and outputs
  bool allow_duplicate_devices = false;  // the same device twice (for tests on one device)
};

namespace detail {
/// The checked device list: one device type, no duplicates unless allowed, and the module's
/// parameters on the first. Errors name the offending device or parameter.
std::vector<Device> check_data_parallel(nn::Module& module, const DataParallelOptions& options);
}  // namespace detail

template <typename M>
class DataParallel {
 public:
  explicit DataParallel(M module, DataParallelOptions options = {})
      : module_(std::move(module)),
        devices_(detail::check_data_parallel(module_, options)),
        output_device_(options.output_device.value_or(devices_[0])),
        dim_(options.dim) {}

  /// The wrapped module: its parameters are the ones that train; save this, not the wrapper.
  M& module() { return module_; }
  const std::vector<Device>& devices() const { return devices_; }

  /// The replicas' outputs gathered on output_device.
  Tensor forward(const Tensor& x) {
    if (devices_.size() == 1) return module_.forward(x).to(output_device_);
    return gather(forward_shards(x), output_device_, dim_);
  }
  Tensor operator()(const Tensor& x) { return forward(x); }

  /// The replicas' outputs, each left on its device (for DataParallelCriterion).
  std::vector<Tensor> forward_shards(const Tensor& x) {
    if (devices_.size() == 1) return {module_.forward(x)};
    std::vector<Tensor> pieces = scatter(x, devices_, dim_);
    // A small batch may give fewer pieces than devices: only those replicas run.
    const std::vector<Device> used(devices_.begin(), devices_.begin() + pieces.size());
    std::vector<M> replicas = replicate(module_, used);
    std::vector<Tensor> outputs(used.size());
    parallel_apply(used, [&](size_t k) { outputs[k] = replicas[k].forward(pieces[k]); });
    return outputs;
  }

 private:
  M module_;
  std::vector<Device> devices_;
  Device output_device_;
  int64_t dim_;
};

}  // namespace tandem::parallel
