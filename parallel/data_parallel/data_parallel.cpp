// parallel/data_parallel/data_parallel.cpp — DataParallel's checks of its devices and module, and
// its forward of one tensor: scatter, replicate, parallel_apply, gather.
#include <tandem/core/check.h>
#include <tandem/core/cuda_device.h>
#include <tandem/parallel/data_parallel/data_parallel.h>
#include <algorithm>

namespace tandem::parallel::detail {

std::vector<Device> check_data_parallel(nn::Module& module, const DataParallelOptions& options) {
  std::vector<Device> devices = options.device_ids;
  if (devices.empty()) devices.push_back(Device::cpu());
  for (Device d : devices) {
    TD_CHECK_AS(DeviceError, d.type() == devices[0].type(), "DataParallel: device_ids mix ",
                devices[0], " and ", d, "; use devices of one type (all cpu:N or all cuda:N)");
    if (d.is_cuda())
      TD_CHECK_AS(DeviceError, d.index() < cuda::device_count(), "DataParallel: ", d,
                  " does not exist; ", cuda::device_count(), " CUDA device(s) are visible");
  }
  if (!options.allow_duplicate_devices)
    for (size_t i = 0; i < devices.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        TD_CHECK_VALUE(devices[i] != devices[j], "DataParallel: ", devices[i],
                       " is listed twice in device_ids\n  hint: set allow_duplicate_devices "
                       "if that is meant (it runs two replicas on one device)");
  for (auto& [name, p] : module.named_parameters())
    TD_CHECK_AS(DeviceError, p.device() == devices[0], "DataParallel: parameter '", name,
                "' is on ", p.device(), ", but the module must be on device_ids[0] = ", devices[0],
                "\n  hint: call module.to(", devices[0], ") first");
  return devices;
}

}  // namespace tandem::parallel::detail

namespace tandem::parallel {

DataParallel::DataParallel(nn::AnyModule module, DataParallelOptions options)
    : module_(std::move(module)),
      devices_(detail::check_data_parallel(module_.get(), options)),
      output_device_(options.output_device.value_or(devices_[0])),
      dim_(options.dim) {}

Tensor DataParallel::forward(const Tensor& x) {
  if (devices_.size() == 1) return forward_shards(x)[0].to(output_device_);
  return gather(forward_shards(x), output_device_, dim_);
}

std::vector<Tensor> DataParallel::forward_shards(const Tensor& x) {
  TD_CHECK_VALUE(module_.has_forward(), "DataParallel: ", module_->type_name(),
                 " has no forward(const Tensor&)\n  hint: call dp.forward<", module_->type_name(),
                 ">(args...) for its other forwards");
  if (devices_.size() == 1) return {module_.forward(x)};
  const std::vector<Tensor> pieces = scatter(x, devices_, dim_);
  // A small batch may give fewer pieces than devices: only those replicas run.
  const std::vector<Device> used(devices_.begin(), devices_.begin() + ptrdiff_t(pieces.size()));
  const std::vector<nn::AnyModule> replicas = replicate(module_, used);
  std::vector<Tensor> outputs(used.size());
  parallel_apply(used, [&](size_t k) { outputs[k] = replicas[k].forward(pieces[k]); });
  return outputs;
}

}  // namespace tandem::parallel
