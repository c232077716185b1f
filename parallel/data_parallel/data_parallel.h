// parallel/data_parallel/data_parallel.h — one process, several devices (PyTorch's
// nn.DataParallel). Each forward: replicate the module onto the devices (differentiable copies of
// its parameters), scatter the batch along `dim`, run the replicas at once (one thread per
// device), gather the outputs on `output_device`. Backward flows back through all four steps, so
// the gradients land in the module's own parameters on device_ids[0], summed over the replicas,
// and one optimizer over module().parameters() trains it. It holds a module of any type
// (nn::AnyModule): a copy of a module given by value, the object itself given as a shared_ptr.
//
//   auto net = std::make_shared<Net>();
//   parallel::DataParallel dp(net, {.device_ids = {Device("cpu:0"), Device("cpu:1")}});
//   optim::SGD opt(net->parameters(), {.lr = 0.1});
//   cross_entropy(dp(x), y).backward();  opt.step();
//   nn::save_model("net.safetensors", *net);  // the module, not the wrapper
//
// dp(x) calls the module's forward(const Tensor&). A forward of other arguments names the module's
// type: dp.forward<Net>(x, mask).
#pragma once

#include <tandem/core/check.h>
#include <tandem/parallel/data_parallel/criterion.h>
#include <tandem/parallel/data_parallel/parallel_apply.h>
#include <tandem/parallel/data_parallel/replicate.h>
#include <tandem/parallel/data_parallel/scatter_gather.h>
#include <optional>
#include <tuple>
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
// How forward_shards scatters each argument: a Tensor, a vector or tuple of tensors, or a struct
// of tensors (TensorStruct) is cut into pieces, one per replica; anything else (a flag, a scale)
// is shared by every replica. `batch` is the size along dim of what was cut (-1: shared).
template <typename T>
struct Scattered {
  std::vector<T> pieces;
  int64_t batch;
};
template <typename T>
struct Shared {
  const T& value;
};
inline Scattered<Tensor> scatter_argument(const Tensor& t, const std::vector<Device>& d,
                                          int64_t dim) {
  return {scatter(t, d, dim), t.size(dim)};
}
inline Scattered<std::vector<Tensor>> scatter_argument(const std::vector<Tensor>& ts,
                                                       const std::vector<Device>& d, int64_t dim) {
  TD_CHECK_VALUE(!ts.empty(), "DataParallel: an empty vector of tensors cannot be scattered");
  return {scatter(ts, d, dim), ts[0].size(dim)};
}
template <typename... T>
Scattered<std::tuple<T...>> scatter_argument(const std::tuple<T...>& ts,
                                             const std::vector<Device>& d, int64_t dim) {
  std::vector<Tensor> flat =
      std::apply([](const auto&... t) { return std::vector<Tensor>{t...}; }, ts);
  std::vector<std::vector<Tensor>> cut = scatter(flat, d, dim);
  Scattered<std::tuple<T...>> out{{}, flat.at(0).size(dim)};
  for (auto& piece : cut)
    out.pieces.push_back([&]<size_t... I>(std::index_sequence<I...>) {
      return std::tuple<T...>{piece[I]...};
    }(std::index_sequence_for<T...>{}));
  return out;
}
template <TensorStruct T>
Scattered<T> scatter_argument(const T& value, const std::vector<Device>& d, int64_t dim) {
  std::vector<T> pieces = scatter(value, d, dim);  // checks that every member has one size
  T copy = value;
  int64_t batch = -1;
  copy.for_each_tensor([&](Tensor& t) {
    if (batch < 0) batch = t.size(dim);
  });
  return {std::move(pieces), batch};
}
template <typename T>
Shared<T> scatter_argument(const T& value, const std::vector<Device>&, int64_t) {
  return {value};
}

template <typename T>
const T& piece(const Scattered<T>& scattered, size_t k) {
  return scattered.pieces[k];
}
template <typename T>
const T& piece(const Shared<T>& shared, size_t) {
  return shared.value;
}

template <typename T>
std::pair<size_t, int64_t> pieces_of(const Scattered<T>& s) {
  return {s.pieces.size(), s.batch};
}
template <typename T>
std::pair<size_t, int64_t> pieces_of(const Shared<T>&) {
  return {0, -1};  // a shared value fits any number of replicas
}
/// How many replicas run: the pieces every scattered argument was cut into. All of them must
/// have the same batch size, or their pieces would not belong together.
template <typename... P>
size_t piece_count(int64_t dim, const P&... p) {
  size_t n = 0;
  int64_t batch = -1;
  for (auto [count, size] : {pieces_of(p)...}) {
    if (count == 0) continue;
    TD_CHECK_SHAPE(batch < 0 || batch == size, "DataParallel: the inputs have different sizes (",
                   batch, " and ", size, ") along the batch dimension ", dim,
                   "; give every tensor the same batch size");
    n = count;
    batch = size;
  }
  TD_CHECK_VALUE(n > 0, "DataParallel: no tensor among the inputs to scatter");
  return n;
}

/// The checked device list: one device type, no duplicates unless allowed, and the module's
/// parameters on the first. Errors name the offending device or parameter.
std::vector<Device> check_data_parallel(nn::Module& module, const DataParallelOptions& options);
}  // namespace detail

class DataParallel {
 public:
  explicit DataParallel(nn::AnyModule module, DataParallelOptions options = {});

  /// The wrapped module: its parameters are the ones that train; save this, not the wrapper.
  nn::Module& module() { return module_.get(); }
  /// The same as its concrete type (ValueError when it is another).
  template <typename M>
  M& module() {
    return module_.get<M>();
  }
  const std::vector<Device>& devices() const { return devices_; }

  /// The replicas' outputs gathered on output_device: x cut along `dim`, one piece per replica,
  /// each through the module's forward(const Tensor&).
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  /// The replicas' outputs, each left on its device (for DataParallelCriterion).
  std::vector<Tensor> forward_shards(const Tensor& x);

  /// Another forward of the module, an M: arguments are scattered by kind. A Tensor is cut along
  /// `dim`, a vector or tuple of tensors element by element, a struct that names its tensors
  /// (TensorStruct, scatter_gather.h) member by member, and anything else (a flag, a scale) is
  /// passed to every replica as it is. Everything cut must have one batch size.
  template <typename M, typename... Args>
  Tensor forward(const Args&... args) {
    if (devices_.size() == 1) return module<M>().forward(args...).to(output_device_);
    return gather(forward_shards<M>(args...), output_device_, dim_);
  }
  template <typename M, typename... Args>
  std::vector<Tensor> forward_shards(const Args&... args) {
    if (devices_.size() == 1) return {module<M>().forward(args...)};
    auto pieces = std::make_tuple(detail::scatter_argument(args, devices_, dim_)...);
    // A small batch may give fewer pieces than devices: only those replicas run.
    const size_t n =
        std::apply([&](const auto&... p) { return detail::piece_count(dim_, p...); }, pieces);
    const std::vector<Device> used(devices_.begin(), devices_.begin() + ptrdiff_t(n));
    std::vector<nn::AnyModule> replicas = replicate(module_, used);
    std::vector<Tensor> outputs(used.size());
    parallel_apply(used, [&](size_t k) {
      M& replica = replicas[k].get<M>();
      outputs[k] = std::apply(
          [&](const auto&... p) { return replica.forward(detail::piece(p, k)...); }, pieces);
    });
    return outputs;
  }

 private:
  nn::AnyModule module_;
  std::vector<Device> devices_;
  Device output_device_;
  int64_t dim_;
};

}  // namespace tandem::parallel
