// parallel/data_parallel/scatter_gather.h — cutting the batch across devices and joining the
// outputs, both differentiable: scatter's backward gathers the pieces' gradients back onto the
// input's device, and gather's backward hands each device its slice of the output's gradient.
#pragma once

#include <tandem/core/tensor.h>
#include <functional>
#include <vector>

namespace tandem::parallel {

/// `x` cut along `dim` as torch.chunk cuts it into devices.size() pieces (ceil(n / devices) each,
/// the last smaller, and fewer pieces than devices when n is small), piece k copied to devices[k].
std::vector<Tensor> scatter(const Tensor& x, const std::vector<Device>& devices, int64_t dim = 0);

/// Each tensor of `xs` scattered alike: result[k][j] is piece k of xs[j]. Every tensor must have
/// the same size along `dim`.
std::vector<std::vector<Tensor>> scatter(const std::vector<Tensor>& xs,
                                         const std::vector<Device>& devices, int64_t dim = 0);

/// A struct of tensors that scatter can cut: it names its tensor members, in a fixed order, to a
/// function. Its other members are copied into every piece as they are.
///
///   struct Batch {
///     Tensor image, mask;
///     double scale = 1;
///     void for_each_tensor(const std::function<void(Tensor&)>& f) { f(image); f(mask); }
///   };
template <typename T>
concept TensorStruct = requires(T& value, const std::function<void(Tensor&)>& f) {
  value.for_each_tensor(f);
};

/// `value` cut into pieces: piece k is a copy of `value` whose tensors are their pieces k.
template <TensorStruct T>
std::vector<T> scatter(const T& value, const std::vector<Device>& devices, int64_t dim = 0) {
  T copy = value;
  std::vector<Tensor> members;
  copy.for_each_tensor([&](Tensor& t) { members.push_back(t); });
  const std::vector<std::vector<Tensor>> cut = scatter(members, devices, dim);
  std::vector<T> pieces(cut.size(), value);
  for (size_t k = 0; k < cut.size(); ++k) {
    size_t j = 0;
    pieces[k].for_each_tensor([&](Tensor& t) { t = cut[k][j++]; });
  }
  return pieces;
}

/// outputs[k] copied to `device` and concatenated along `dim`.
Tensor gather(const std::vector<Tensor>& outputs, Device device, int64_t dim = 0);

}  // namespace tandem::parallel
