// autograd/gradcheck.h — checks an op's backward against central finite differences, in float64.
// Every differentiable op has a row in tests/autograd/op_table.cpp that runs through this.
#pragma once

#include <tandem/core/tensor.h>
#include <functional>
#include <string>
#include <vector>

namespace tandem {

struct GradcheckOptions {
  double eps = 1e-6;   // perturbation for (f(x + eps) − f(x − eps)) / 2eps
  double atol = 1e-5;  // |analytic − numeric| <= atol + rtol·|numeric|
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;       // which input, element and output disagreed, with both values
  double max_abs_error = 0;  // largest |analytic − numeric| seen
};

/// Builds fn's full Jacobian both ways for every float64 input that requires grad (one backward
/// per output element, two forwards per input element) and compares them.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace tandem
