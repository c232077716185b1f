// autograd/ops/nn_ops.h — the differentiable ops behind nn's layers and losses: convolution,
// pooling and the class losses. nn/ modules call these; they can also be called directly.
#pragma once

#include <tandem/core/kernels/params.h>
#include <tandem/core/tensor.h>

namespace tandem {

// conv.cpp: x [N, C, H, W], weight [C_out, C / groups, kH, kW], bias [C_out] or undefined
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv2dParams& params = {});

// pool.cpp. relu_max_pool2d(x, p) is max_pool2d(relu(x), p), values and gradients, in one pass.
Tensor max_pool2d(const Tensor& x, const Pool2dParams& params);
Tensor relu_max_pool2d(const Tensor& x, const Pool2dParams& params);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& params);

enum class Reduction { Mean, Sum, None };

struct ClassLossOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};

// loss.cpp: logits/log_probs [N, C], int64 targets [N]
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const ClassLossOptions& options = {});
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                const ClassLossOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace tandem
