// parallel/data_parallel/scatter_gather.cpp — chunk + to, and to + cat.
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/parallel/data_parallel/scatter_gather.h>

namespace tandem::parallel {

std::vector<Tensor> scatter(const Tensor& x, const std::vector<Device>& devices, int64_t dim) {
  TD_CHECK_VALUE(!devices.empty(), "scatter: no devices to scatter to");
  TD_CHECK_SHAPE(x.dim() > 0, "scatter: cannot cut a 0-dimensional tensor into pieces");
  std::vector<Tensor> pieces = chunk(x, int64_t(devices.size()), dim);
  for (size_t k = 0; k < pieces.size(); ++k) pieces[k] = pieces[k].to(devices[k]);
  return pieces;
}

std::vector<std::vector<Tensor>> scatter(const std::vector<Tensor>& xs,
                                         const std::vector<Device>& devices, int64_t dim) {
  TD_CHECK_VALUE(!xs.empty(), "scatter: no tensors to scatter");
  std::vector<std::vector<Tensor>> out;
  for (size_t j = 0; j < xs.size(); ++j) {
    TD_CHECK_SHAPE(xs[j].size(dim) == xs[0].size(dim), "scatter: tensor ", j, " has shape ",
                   xs[j].shape(), " but tensor 0 has shape ", xs[0].shape(),
                   "; they must have the same size along dim ", dim);
    std::vector<Tensor> pieces = scatter(xs[j], devices, dim);
    if (j == 0) out.resize(pieces.size());
    for (size_t k = 0; k < pieces.size(); ++k) out[k].push_back(std::move(pieces[k]));
  }
  return out;
}

Tensor gather(const std::vector<Tensor>& outputs, Device device, int64_t dim) {
  TD_CHECK_VALUE(!outputs.empty(), "gather: no outputs to gather");
  std::vector<Tensor> here;
  here.reserve(outputs.size());
  for (const Tensor& t : outputs) here.push_back(t.to(device));
  return here.size() == 1 ? here[0] : cat(here, dim);
}

}  // namespace tandem::parallel
