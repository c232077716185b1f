// autograd/gradcheck.cpp — the Jacobian comparison. Inputs are copied first, so the caller's
// tensors are never perturbed and their .grad is never touched.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/gradcheck.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>
#include <cmath>
#include <sstream>

namespace tandem {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  std::vector<Tensor> xs;
  for (const Tensor& in : inputs) {
    Tensor x = detail::convert(in, in.device(), in.dtype());  // a private contiguous copy
    if (in.requires_grad()) {
      check_dtype("gradcheck", "every input that requires grad", in, DType::f64);
      x.requires_grad_(true);
    }
    xs.push_back(x);
  }
  const Tensor out = fn(xs);
  TD_CHECK_AS(AutogradError, out.requires_grad(),
              "gradcheck: the output does not require grad (no input "
              "requires grad, or the function cut the graph)");
  const int64_t n_out = out.numel();

  // Analytic Jacobian, one row per output element: backward of a one-hot gradient.
  std::vector<std::vector<std::vector<double>>> analytic(xs.size());  // [input][out][elem]
  for (int64_t i = 0; i < n_out; ++i) {
    for (const Tensor& x : xs)
      if (x.requires_grad()) x.set_grad(Tensor());
    std::vector<double> onehot(size_t(n_out), 0.0);
    onehot[size_t(i)] = 1.0;
    out.backward(detail::convert(from_vector(onehot, out.shape()), out.device(), out.dtype()),
                 true);
    for (size_t j = 0; j < xs.size(); ++j) {
      if (!xs[j].requires_grad()) continue;
      const Tensor g = xs[j].grad();
      analytic[j].push_back(g.defined() ? g.to_vector<double>()
                                        : std::vector<double>(size_t(xs[j].numel()), 0.0));
    }
  }

  // Numeric Jacobian, one column per input element, compared as it is built.
  GradcheckResult result;
  NoGradGuard no_grad;
  for (size_t j = 0; j < xs.size(); ++j) {
    if (!xs[j].requires_grad()) continue;
    Tensor host = detail::convert(xs[j], Device::cpu(), DType::f64);
    for (int64_t e = 0; e < xs[j].numel(); ++e) {
      double* p = host.data<double>() + e;
      const double saved = *p;
      auto eval = [&](double v) {
        *p = v;
        xs[j].copy_(host);
        return fn(xs).to_vector<double>();
      };
      const std::vector<double> plus = eval(saved + options.eps), minus = eval(saved - options.eps);
      *p = saved;
      xs[j].copy_(host);
      for (int64_t i = 0; i < n_out; ++i) {
        const double numeric = (plus[size_t(i)] - minus[size_t(i)]) / (2 * options.eps);
        const double a = analytic[j][size_t(i)][size_t(e)];
        const double err = std::fabs(a - numeric);
        result.max_abs_error = std::max(result.max_abs_error, err);
        if (result.ok && !(err <= options.atol + options.rtol * std::fabs(numeric))) {
          result.ok = false;
          std::ostringstream os;
          os << "gradcheck: input " << j << " element " << e << ", output element " << i
             << ": analytic " << a << " vs numeric " << numeric << " (error " << err << ")";
          result.message = os.str();
        }
      }
    }
  }
  return result;
}

}  // namespace tandem
