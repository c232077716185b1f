// autograd/ops/join.cpp — joining tensors and cutting one apart: cat and stack make one tensor of
// several; split and chunk make several views of one. Each piece of split/chunk is a narrow()
// view, so it has its own node (nodes have one output) and backward writes its gradient into the
// matching slice. cat copies each input into its slice of the output with the backend's strided
// copy, so it runs wherever copy runs (CPU and CUDA); its backward hands each input the slice of
// dy it came from.
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/record.h>
#include <tandem/core/check.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/tensor_checks.h>
#include <string>

namespace tandem {
namespace {

std::string shapes_of(const std::vector<Tensor>& ts) {
  std::string out;
  for (size_t i = 0; i < ts.size(); ++i) out += (i ? ", " : "") + describe(ts[i]);
  return out;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  TD_CHECK_VALUE(!tensors.empty(), "cat: expected at least one tensor, but got none");
  if (auto c = autocast::promote(tensors)) return cat(*c, dim);
  const Tensor& first = tensors[0];
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_defined("cat", "tensor " + std::to_string(i), tensors[i]);
    check_same_device("cat", {{"tensor 0", first}, {"tensor " + std::to_string(i), tensors[i]}});
    check_same_dtype("cat", {{"tensor 0", first}, {"tensor " + std::to_string(i), tensors[i]}});
  }
  TD_CHECK_SHAPE(first.dim() > 0, "cat: cannot join 0-dim tensors (", shapes_of(tensors),
                 ")\n  hint: use stack(), which adds a dimension");
  const int64_t d = wrap_dim(dim, first.dim(), "cat");
  Shape out_shape = first.shape();
  out_shape[size_t(d)] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    bool fits = t.dim() == first.dim();
    for (int64_t k = 0; fits && k < t.dim(); ++k) fits = k == d || t.size(k) == first.size(k);
    TD_CHECK_SHAPE(fits, "cat: tensor ", i, " has shape ", t.shape(), " but tensor 0 has shape ",
                   first.shape(), "; along dim ", d, " they may differ, elsewhere they must match");
    out_shape[size_t(d)] += t.size(d);
  }

  Tensor out = empty(out_shape, first.options());
  std::vector<int64_t> offsets;  // where each input starts along d
  for (int64_t at = 0; const Tensor& t : tensors) {
    offsets.push_back(at);
    if (t.numel() > 0) {
      Tensor slice = out.narrow(d, at, t.size(d));  // records nothing: out needs no grad
      kernels(out.device()).copy(t, slice);
    }
    at += t.size(d);
  }

  // out = [x0 | x1 | ...] along d     dx_i = dy[..., offset_i : offset_i + size_i, ...]
  if (!any_requires_grad(tensors)) return out;
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) sizes.push_back(t.size(d));
  return record(
      "cat", out, tensors, {},
      [d, offsets, sizes](const Tensor& dy, const NeedsGrad& need, const Saved&) -> Grads {
        Grads dx(sizes.size());
        for (size_t i = 0; i < sizes.size(); ++i)
          if (need[i]) dx[i] = dy.narrow(d, offsets[i], sizes[i]).contiguous();
        return dx;
      });
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  TD_CHECK_VALUE(!tensors.empty(), "stack: expected at least one tensor, but got none");
  for (size_t i = 1; i < tensors.size(); ++i)
    TD_CHECK_SHAPE(tensors[i].shape() == tensors[0].shape(), "stack: tensor ", i, " has shape ",
                   tensors[i].shape(), " but tensor 0 has shape ", tensors[0].shape(),
                   "; stack needs equal shapes\n  hint: cat() joins along an existing dimension");
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> expanded;
  for (const Tensor& t : tensors) expanded.push_back(t.unsqueeze(d));
  return cat(expanded, d);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  TD_CHECK_SHAPE(x.dim() > 0, "split: cannot split a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    TD_CHECK_VALUE(s >= 0, "split: sizes must be non-negative, but got ", s);
    total += s;
  }
  TD_CHECK_SHAPE(total == x.size(d), "split: sizes add up to ", total, " but dimension ", d, " of ",
                 x.shape(), " has size ", x.size(d));
  std::vector<Tensor> pieces;
  for (int64_t at = 0; int64_t s : sizes) {
    pieces.push_back(x.narrow(d, at, s));
    at += s;
  }
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  TD_CHECK_VALUE(split_size > 0, "split: split_size must be positive, but got ", split_size);
  TD_CHECK_SHAPE(x.dim() > 0, "split: cannot split a 0-dim tensor");
  const int64_t n = x.size(wrap_dim(dim, x.dim(), "split"));
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += split_size) sizes.push_back(std::min(split_size, n - at));
  if (sizes.empty()) sizes.push_back(0);  // torch.split of an empty dim: one empty piece
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  TD_CHECK_VALUE(chunks > 0, "chunk: chunks must be positive, but got ", chunks);
  TD_CHECK_SHAPE(x.dim() > 0, "chunk: cannot chunk a 0-dim tensor");
  const int64_t n = x.size(wrap_dim(dim, x.dim(), "chunk"));
  // As torch.chunk: pieces of ceil(n / chunks), the last one smaller; so there may be fewer than
  // `chunks` pieces (5 rows in 4 chunks: 2, 2, 1).
  const int64_t size = std::max<int64_t>(1, (n + chunks - 1) / chunks);
  return split(x, size, dim);
}

}  // namespace tandem
