// autograd/ops/ops.h — the differentiable ops as free functions (the Tensor methods call these).
// Each is written once in autograd/ops/<family>.cpp: checks, output, forward kernel, record() with
// the backward right below. Shapes broadcast as in NumPy; scalars take the tensor's dtype.
#pragma once

#include <tandem/core/tensor.h>
#include <utility>
#include <vector>

namespace tandem {

// elementwise.cpp
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& x, double exponent);
Tensor pow(const Tensor& x, const Tensor& exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& x);

// activation.cpp
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
/// GELU's two forms: the exact x·Φ(x) (PyTorch's default) and GPT-2's tanh approximation.
enum class GeluApproximate { None, Tanh };
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::None);

// compare.cpp: bool results, no gradient; where() is differentiable in a and b
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// index.cpp: gather along dim (index int64, input's shape but in dim; differentiable in x); the
// k largest (or smallest) along dim, in order, with their indices; num_samples category indices
// per row of weights [N] or [B, N] (the device's generator); tril/triu keep the elements on and
// below (above) the diagonal of the last two dims.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// join.cpp: cat/stack join tensors along a dim; split/chunk cut one into views (torch's rules:
// chunk gives pieces of ceil(n / chunks), the last smaller, so possibly fewer than `chunks`)
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// reduce.cpp: empty `dims` means every dim
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);  // ties share the grad
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);  // int64, first maximum

// matmul.cpp: 1-D, 2-D and batched with broadcast batch dims, as torch.matmul
Tensor matmul(const Tensor& a, const Tensor& b);

// linear.cpp: y = x·Wᵀ + b (b may be undefined)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// softmax.cpp: numerically stable, over `dim`
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace tandem
