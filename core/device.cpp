// core/device.cpp — parsing and printing devices. The parser is strict: "gpu:0", "cuda:-1",
// "cpu:x", "cpu:" and "cuda:01x" are errors that quote the string, never a silent cpu.
#include <tandem/core/check.h>
#include <tandem/core/device.h>
#include <charconv>
#include <ostream>

namespace tandem {

Device::Device(std::string_view spec) {
  const auto fail = [&](const char* why) {
    detail::fail<DeviceError>(
        "invalid device string '", spec, "': ", why,
        "\n  hint: use \"cpu\", \"cpu:N\", \"cuda:N\" or \"meta:N\" (N >= 0)");
  };
  const size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  if (name == "cpu") {
    type_ = DeviceType::CPU;
  } else if (name == "cuda") {
    type_ = DeviceType::CUDA;
  } else if (name == "meta") {
    type_ = DeviceType::Meta;
  } else {
    fail("unknown device type (expected cpu, cuda or meta)");
  }
  index_ = 0;
  if (colon == std::string_view::npos) return;
  named_index_ = true;
  const std::string_view digits = spec.substr(colon + 1);
  if (digits.empty()) fail("missing index after ':'");
  if (digits[0] == '-') fail("device index must not be negative");
  int value = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) fail("index is not a number");
  const int max = type_ == DeviceType::CUDA ? kMaxCudaDevices : kMaxCpuDevices;
  if (value >= max)
    fail(type_ == DeviceType::CPU    ? "at most 64 virtual CPU devices (cpu:0 … cpu:63)"
         : type_ == DeviceType::Meta ? "at most 64 meta devices (meta:0 … meta:63)"
                                     : "at most 16 CUDA devices");
  index_ = int16_t(value);
}

std::string Device::str() const {
  if (type_ == DeviceType::CPU)
    return index_ == 0 && !named_index_ ? "cpu" : "cpu:" + std::to_string(index_);
  if (type_ == DeviceType::Meta)
    return index_ == 0 && !named_index_ ? "meta" : "meta:" + std::to_string(index_);
  return "cuda:" + std::to_string(index_);
}

std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

}  // namespace tandem
