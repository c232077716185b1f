// nn/embedding.cpp — Embedding, initialised as PyTorch's.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/core/check.h>
#include <tandem/nn/embedding.h>
#include <tandem/nn/init.h>

namespace tandem::nn {

Embedding::Embedding(int64_t n, int64_t d, EmbeddingOptions o)
    : num_embeddings(n), embedding_dim(d), padding_idx(o.padding_idx) {
  TD_CHECK_VALUE(n > 0 && d > 0,
                 "Embedding: num_embeddings and embedding_dim must be positive, got ", n, " and ",
                 d);
  TD_CHECK_INDEX(padding_idx == -1 || (padding_idx >= 0 && padding_idx < n),
                 "Embedding: padding_idx ", padding_idx, " is out of range for ", n, " embeddings");
  weight = empty({n, d}, o.tensor);
  init::normal_(weight, 0, 1);
  if (padding_idx >= 0) {
    NoGradGuard no_grad;
    weight.select(0, padding_idx).fill_(0);
  }
  weight.requires_grad_();
}

Tensor Embedding::forward(const Tensor& ids) const { return embedding(weight, ids, padding_idx); }

std::string Embedding::extra_repr() const {
  return tandem::str(num_embeddings, ", ", embedding_dim,
                     padding_idx >= 0 ? tandem::str(", padding_idx=", padding_idx) : "");
}

}  // namespace tandem::nn
