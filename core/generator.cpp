// core/generator.cpp — the per-device default generators.
#include <tandem/core/check.h>
#include <tandem/core/generator.h>

namespace tandem {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lk(mu_);
  state_ = {seed, 0};
}

GeneratorState Generator::get_state() const {
  std::lock_guard lk(mu_);
  return state_;
}

void Generator::set_state(const GeneratorState& state) {
  std::lock_guard lk(mu_);
  state_ = state;
}

GeneratorState Generator::reserve(uint64_t counters) {
  std::lock_guard lk(mu_);
  GeneratorState s = state_;
  state_.offset += counters;
  return s;
}

Generator& default_generator(Device device) {
  static Generator cpu[Device::kMaxCpuDevices];
  static Generator cuda[Device::kMaxCudaDevices];
  const int i = device.index();
  TD_INTERNAL_ASSERT(
      i >= 0 && i < (device.is_cpu() ? Device::kMaxCpuDevices : Device::kMaxCudaDevices), "device ",
      device);
  return device.is_cpu() ? cpu[i] : cuda[i];
}

void manual_seed(uint64_t seed) {
  for (int i = 0; i < Device::kMaxCpuDevices; ++i)
    default_generator(Device::cpu(i)).manual_seed(seed);
  for (int i = 0; i < Device::kMaxCudaDevices; ++i)
    default_generator(Device::cuda(i)).manual_seed(seed);
}

}  // namespace tandem
