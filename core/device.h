// core/device.h — where a tensor lives: `cpu`, `cpu:N` (virtual CPU devices, one host, separate
// memory statistics), `cuda:N`, or `meta`/`meta:N` (shapes and dtypes only: torch's meta device).
// Virtual CPU devices let every parallel mode run and be tested on a machine with no GPU; an op
// refuses operands on two different devices, `cpu:0` and `cpu:1` included. A meta tensor has no
// memory and no values: ops on it compute their outputs' shapes and dtypes and allocate nothing,
// but count the bytes they would have allocated in memory_stats(meta:N), so a forward and
// backward on meta says what one on a real device would hold (tandem plan's activations).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>

namespace tandem {

enum class DeviceType : int8_t { CPU = 0, CUDA = 1, Meta = 2 };

/// A device: a type and an index. `Device("cpu")` is `cpu:0`, the same device (equal, one hash),
/// but each prints as it was named: `cpu` for Device("cpu"), Device::cpu() and Device(), `cpu:0`
/// for Device("cpu:0") and Device::cpu(0), as torch.device("cpu") and torch.device("cpu", 0).
class Device {
 public:
  static constexpr int kMaxCpuDevices = 64;  // virtual CPU devices cpu:0 … cpu:63
  static constexpr int kMaxCudaDevices = 16;

  constexpr Device() = default;  // cpu:0
  constexpr Device(DeviceType type, int index) : type_(type), index_(int16_t(index)) {}
  /// Parses "cpu", "cpu:N", "cuda" (= cuda:0) or "cuda:N"; anything else throws DeviceError
  /// naming the string.
  Device(std::string_view spec);  // NOLINT(google-explicit-constructor): Device("cpu")
  Device(const char* spec) : Device(std::string_view(spec)) {}         // NOLINT
  Device(const std::string& spec) : Device(std::string_view(spec)) {}  // NOLINT

  static constexpr Device cpu() { return {}; }
  static constexpr Device cpu(int index) {
    Device d{DeviceType::CPU, index};
    d.named_index_ = true;
    return d;
  }
  static constexpr Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  static constexpr Device meta(int index = 0) {
    Device d{DeviceType::Meta, index};
    d.named_index_ = index != 0;
    return d;
  }

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::CPU; }
  bool is_cuda() const { return type_ == DeviceType::CUDA; }
  bool is_meta() const { return type_ == DeviceType::Meta; }
  std::string str() const;

  friend bool operator==(Device a, Device b) { return a.type_ == b.type_ && a.index_ == b.index_; }

 private:
  DeviceType type_ = DeviceType::CPU;
  int16_t index_ = 0;
  bool named_index_ = false;  // printing only: "cpu:0" rather than "cpu"
};

std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace tandem

template <>
struct std::hash<tandem::Device> {
  size_t operator()(tandem::Device d) const noexcept {
    return size_t(d.index()) * 3 + size_t(d.type());
  }
};
