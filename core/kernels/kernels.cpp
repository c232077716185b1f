// core/kernels/kernels.cpp — the switch from a device to its kernel table. The only #if for CUDA
// in the op path.
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/kernels/profile.h>

namespace tandem {

extern const Kernels cpu_kernels;   // cpu/registry.cpp
extern const Kernels meta_kernels;  // meta/registry.cpp
#if TANDEM_WITH_CUDA
extern const Kernels cuda_kernels;  // cuda/registry.cpp
#endif

namespace {
const Kernels& plain_kernels(Device device) {
  switch (device.type()) {
    case DeviceType::CPU:
      return cpu_kernels;  // cpu and cpu:N share one table
    case DeviceType::Meta:
      return meta_kernels;
    case DeviceType::CUDA:
#if TANDEM_WITH_CUDA
      return cuda_kernels;
#else
      detail::fail<DeviceError>("cannot run on ", device,
                                ": this build of Tandem has no CUDA (configured with "
                                "TANDEM_WITH_CUDA=OFF, or nvcc was not found)");
#endif
  }
  TD_INTERNAL_ASSERT(false, "unknown device type ", int(device.type()));
  return cpu_kernels;
}
}  // namespace

const Kernels& kernels(Device device) {
  const Kernels& plain = plain_kernels(device);
  // While kernel_profile (profile.h) is on, a table that times each call stands in.
  if (kernel_profile::detail::g_active.load(std::memory_order_relaxed)) [[unlikely]]
    return kernel_profile::detail::timed(plain, device);
  return plain;
}

const char* name(UnaryOp op) {
  constexpr const char* names[] = {"neg",  "exp",     "log",  "sqrt", "abs",
                                   "relu", "sigmoid", "tanh", "gelu", "gelu_tanh"};
  return names[int(op)];
}
const char* name(BinaryOp op) {
  constexpr const char* names[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"};
  return names[int(op)];
}
const char* name(CompareOp op) {
  constexpr const char* names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  return names[int(op)];
}
const char* name(ReduceOp op) {  // core/reduce_op.h
  constexpr const char* names[] = {"sum", "mean", "max", "min", "argmax"};
  return names[int(op)];
}

}  // namespace tandem
