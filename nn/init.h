// nn/init.h — parameter initialisers matching torch.nn.init, drawing from the tensor's device
// generator. Each fills the tensor in place (without recording) and returns it.
#pragma once

#include <tandem/core/tensor.h>
#include <cstdint>
#include <utility>

namespace tandem::nn::init {

enum class FanMode { FanIn, FanOut };

/// (fan_in, fan_out) of a weight: [out, in] or [out, in, k...] (receptive field multiplies both).
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t);

Tensor& uniform_(Tensor& t, double low, double high);
Tensor& normal_(Tensor& t, double mean = 0, double std = 1);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
/// He initialisation for a leaky-ReLU slope `a`: U(±√3·gain/√fan), gain = √(2/(1 + a²)).
/// PyTorch's Linear and Conv2d use a = √5 (bound 1/√fan_in).
Tensor& kaiming_uniform_(Tensor& t, double a = 0, FanMode mode = FanMode::FanIn);
Tensor& kaiming_normal_(Tensor& t, double a = 0, FanMode mode = FanMode::FanIn);
/// Glorot initialisation: U(±gain·√(6/(fan_in + fan_out))) and N(0, gain·√(2/(fan_in + fan_out))).
Tensor& xavier_uniform_(Tensor& t, double gain = 1);
Tensor& xavier_normal_(Tensor& t, double gain = 1);

}  // namespace tandem::nn::init
