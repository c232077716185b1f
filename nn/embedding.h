// nn/embedding.h — Embedding: a table of num_embeddings vectors of embedding_dim, looked up by
// int64 ids (PyTorch's nn.Embedding: weight drawn from N(0, 1), padding_idx's row zero and left
// alone by the gradient).
#pragma once

#include <tandem/nn/module.h>

namespace tandem::nn {

struct EmbeddingOptions {
  int64_t padding_idx = -1;  // a row that stays zero and gets no gradient; −1: none
  TensorOptions tensor = {};
};

struct Embedding : Module {
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options = {});

  int64_t num_embeddings, embedding_dim, padding_idx;
  Tensor weight;  // [num_embeddings, embedding_dim]

  /// ids (int64, any shape) -> [..., embedding_dim]
  Tensor forward(const Tensor& ids) const;
  Tensor operator()(const Tensor& ids) const { return forward(ids); }
  void visit(Visitor& v) override { v("weight", weight); }
  std::string extra_repr() const override;
};

}  // namespace tandem::nn
