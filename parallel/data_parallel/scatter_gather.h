// parallel/data_parallel/scatter_gather.h — cutting the batch across devices and joining the
// outputs, both differentiable: scatter's backward gathers the pieces' gradients back onto the
// input's device, and gather's backward hands each device its slice of the output's gradient.
#pragma once

#include <tandem/core/tensor.h>
#include <vector>

namespace tandem::parallel {

/// `x` cut along `dim` as torch.chunk cuts it into devices.size() pieces (ceil(n / devices) each,
/// the last smaller, and fewer pieces than devices when n is small), piece k copied to devices[k].
std::vector<Tensor> scatter(const Tensor& x, const std::vector<Device>& devices, int64_t dim = 0);

/// Each tensor of `xs` scattered alike: result[k][j] is piece k of xs[j]. Every tensor must give
/// the same number of pieces (the same size along `dim`).
std::vector<std::vector<Tensor>> scatter(const std::vector<Tensor>& xs,
                                         const std::vector<Device>& devices, int64_t dim = 0);

/// outputs[k] copied to `device` and concatenated along `dim`.
Tensor gather(const std::vector<Tensor>& outputs, Device device, int64_t dim = 0);

}  // namespace tandem::parallel
