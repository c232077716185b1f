// core/kernels/cpu/attention.cpp — fused scaled-dot-product attention on the CPU, FlashAttention's
// algorithm (Dao et al. 2022; the FlashAttention-2 loop order). Forward: for a block of query rows,
// walk the key blocks keeping each row's running maximum m and sum l of e^(s − m) (the online
// softmax), rescale the output accumulated so far when m grows, and save the output and one
// log-sum-exp per row, L = m + log l: never the Tq×Tk probabilities, so what the graph keeps grows
// with T, not T². Backward recomputes each block's probabilities from L (P = e^(S − L)):
//   D_i = Σ_d dO_i·O_i,  dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ∘ (dP − D),  dQ = dS·K·scale,
//   dK = dSᵀ·Q·scale  (with dropout, P and dP carry the keep-mask / (1 − p)).
// dK and dV are summed over the query blocks by a task per key block, dQ over the key blocks by a
// task per query block, each in a fixed order: the bits do not depend on the threads. (With a
// single key block, dQ needs no sum and comes from the first pass.)
#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/thread_pool.h>
#include <cmath>
#include <limits>
#include <vector>

namespace tandem::cpu {
namespace {

constexpr int64_t kBlock = 64;  // query and key rows per tile

template <typename T>
using Tile = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// One (batch entry, query block, key block) tile of scaled, masked scores, and what it needs.
template <typename T>
struct Problem {
  const T *q, *k, *v, *mask;  // mask: additive [1 or B, Tq, Tk], or null
  int64_t b, tq, tk, d, dv;
  bool mask_per_batch;
  AttentionParams p;

  ConstMatrixMap<T> rows(const T* base, int64_t batch, int64_t t, int64_t first, int64_t n,
                         int64_t width) const {
    return ConstMatrixMap<T>(base + (batch * t + first) * width, n, width);
  }
  // The last key block a query block [i0, i1) sees (causal: none past its last row).
  int64_t key_end(int64_t i1) const { return p.causal ? std::min(tk, i1) : tk; }
  // The first query block row that sees key block [j0, ...) under causality.
  int64_t query_begin(int64_t j0) const { return p.causal ? std::min(tq, j0) : 0; }

  // S = Q_i·K_jᵀ·scale + mask, −∞ where causality hides a key.
  Tile<T> scores(int64_t batch, int64_t i0, int64_t ni, int64_t j0, int64_t nj) const {
    Tile<T> s = rows(q, batch, tq, i0, ni, d) * rows(k, batch, tk, j0, nj, d).transpose();
    s *= T(p.scale);
    if (mask) {
      const T* m = mask + ((mask_per_batch ? batch : 0) * tq + i0) * tk + j0;
      for (int64_t r = 0; r < ni; ++r)
        s.row(r) += ConstArrayMap<T>(m + r * tk, nj).matrix().transpose();
    }
    if (p.causal)
      for (int64_t r = 0; r < ni; ++r)
        for (int64_t c = std::max<int64_t>(0, i0 + r + 1 - j0); c < nj; ++c)
          s(r, c) = -std::numeric_limits<T>::infinity();
    return s;
  }
  // keep/(1 − p) for each element of the tile (1 without dropout).
  void drop(Tile<T>& t, int64_t batch, int64_t i0, int64_t j0) const {
    if (p.dropout_p <= 0) return;
    const T scale = T(1 / (1 - p.dropout_p));
    for (int64_t r = 0; r < t.rows(); ++r)
      for (int64_t c = 0; c < t.cols(); ++c) {
        const uint64_t at = p.dropout_counter(batch, i0 + r, j0 + c, tq, tk);
        const bool keep = philox_unit<T>(philox(at, p.rng.seed), 0) >= T(p.dropout_p);
        t(r, c) *= keep ? scale : T(0);
      }
  }
  // P = e^(S − L) for the rows' saved log-sum-exps (a row that saw no key: L = −∞, P = 0; a row
  // with a NaN: L = NaN, P = NaN throughout, as the Math backend's softmax gives).
  Tile<T> probabilities(const Tile<T>& s, const T* lse) const {
    Tile<T> prob(s.rows(), s.cols());
    for (int64_t r = 0; r < s.rows(); ++r) {
      if (lse[r] == -std::numeric_limits<T>::infinity())
        prob.row(r).setZero();
      else
        prob.row(r) = (s.row(r).array() - lse[r]).exp().matrix();
    }
    return prob;
  }
};

template <typename T>
Problem<T> problem(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                   const AttentionParams& p) {
  return {q.data<T>(),
          k.data<T>(),
          v.data<T>(),
          mask.defined() ? mask.data<T>() : nullptr,
          q.size(0),
          q.size(1),
          k.size(1),
          q.size(2),
          v.size(2),
          mask.defined() && mask.size(0) > 1,
          p};
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                       const AttentionParams& params, Tensor& out, Tensor& lse) {
  dispatch_float(q.dtype(), "scaled_dot_product_attention", [&]<typename T>() {
    const Problem<T> pr = problem<T>(q, k, v, mask, params);
    const int64_t qblocks = (pr.tq + kBlock - 1) / kBlock;
    T* po = out.data<T>();
    T* pl = lse.data<T>();
    const T inf = std::numeric_limits<T>::infinity();
    detail::parallel_for(0, pr.b * qblocks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t batch = task / qblocks, i0 = (task % qblocks) * kBlock;
        const int64_t ni = std::min(kBlock, pr.tq - i0);
        Tile<T> o = Tile<T>::Zero(ni, pr.dv);
        Eigen::Array<T, Eigen::Dynamic, 1> m = Eigen::Array<T, Eigen::Dynamic, 1>::Constant(ni,
                                                                                            -inf),
                                           l = Eigen::Array<T, Eigen::Dynamic, 1>::Zero(ni);
        for (int64_t j0 = 0; j0 < pr.key_end(i0 + ni); j0 += kBlock) {
          const int64_t nj = std::min(kBlock, pr.tk - j0);
          Tile<T> s = pr.scores(batch, i0, ni, j0, nj);
          for (int64_t r = 0; r < ni; ++r) {
            // NaN when a score is NaN (std::max and maxCoeff() may drop it, and a row of NaN
            // scores then passed for a row that saw no key: zeros out); from there e^(s − m),
            // l, o and the log-sum-exp are NaN, as the Math backend's softmax.
            const T mnew = nan_max(m(r), max_or_nan(s.row(r)));
            if (mnew == -inf) {  // nothing seen yet in this row
              s.row(r).setZero();
              continue;
            }
            s.row(r) = (s.row(r).array() - mnew).exp().matrix();  // P, before dropout
            const T alpha = std::exp(m(r) - mnew);                // 0 when m was −∞
            l(r) = alpha * l(r) + s.row(r).sum();
            o.row(r) *= alpha;
            m(r) = mnew;
          }
          pr.drop(s, batch, i0, j0);
          o.noalias() += s * pr.rows(pr.v, batch, pr.tk, j0, nj, pr.dv);
        }
        for (int64_t r = 0; r < ni; ++r) {
          const int64_t row = batch * pr.tq + i0 + r;
          MatrixMap<T> dst(po + row * pr.dv, 1, pr.dv);
          if (l(r) == T(0)) {  // a row that saw no key (all masked): output 0, as FlashAttention
            dst.setZero();
            pl[row] = -inf;
          } else {  // l NaN too (not `l > 0`, which sent a NaN row to the branch above)
            dst = o.row(r) / l(r);
            pl[row] = m(r) + std::log(l(r));
          }
        }
      }
    });
  });
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                        const Tensor& out, const Tensor& lse, const Tensor& dout,
                        const AttentionParams& params, Tensor& dq, Tensor& dk, Tensor& dv) {
  dispatch_float(q.dtype(), "scaled_dot_product_attention_backward", [&]<typename T>() {
    const Problem<T> pr = problem<T>(q, k, v, mask, params);
    const T* po = out.data<T>();
    const T* pd = dout.data<T>();
    const T* pl = lse.data<T>();
    // D_i = Σ dO_i·O_i, once per row.
    const int64_t rows = pr.b * pr.tq;
    std::vector<T> delta(static_cast<size_t>(rows));
    detail::parallel_for(0, rows, 256, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r)
        delta[size_t(r)] =
            (ConstArrayMap<T>(po + r * pr.dv, pr.dv) * ConstArrayMap<T>(pd + r * pr.dv, pr.dv))
                .sum();
    });
    // dS of one tile, with P and P after dropout (for dV).
    auto tile = [&](int64_t batch, int64_t i0, int64_t ni, int64_t j0, int64_t nj, Tile<T>& pdrop,
                    Tile<T>& ds) {
      const Tile<T> s = pr.scores(batch, i0, ni, j0, nj);
      const Tile<T> prob = pr.probabilities(s, pl + batch * pr.tq + i0);
      pdrop = prob;
      pr.drop(pdrop, batch, i0, j0);
      Tile<T> dp = pr.rows(pd, batch, pr.tq, i0, ni, pr.dv) *
                   pr.rows(pr.v, batch, pr.tk, j0, nj, pr.dv).transpose();
      pr.drop(dp, batch, i0, j0);
      ds = prob;
      for (int64_t r = 0; r < ni; ++r)
        ds.row(r) =
            (prob.row(r).array() * (dp.row(r).array() - delta[size_t(batch * pr.tq + i0 + r)]))
                .matrix();
    };
    const T scale = T(params.scale);
    const int64_t kblocks = (pr.tk + kBlock - 1) / kBlock, qblocks = (pr.tq + kBlock - 1) / kBlock;
    // With one key block (T ≤ 64: a short context, nanoGPT's CPU recipe) each query block's dQ is
    // one tile's product, with nothing to sum over tasks: the dK, dV pass writes it too, and no
    // tile is recomputed a second time.
    const bool dq_in_first_pass = kblocks == 1;
    // dK, dV: a task per key block, the query blocks in order.
    detail::parallel_for(0, pr.b * kblocks, 1, [&](int64_t lo, int64_t hi) {
      Tile<T> pdrop, ds;
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t batch = task / kblocks, j0 = (task % kblocks) * kBlock;
        const int64_t nj = std::min(kBlock, pr.tk - j0);
        Tile<T> gk = Tile<T>::Zero(nj, pr.d), gv = Tile<T>::Zero(nj, pr.dv);
        for (int64_t i0 = pr.query_begin(j0) / kBlock * kBlock; i0 < pr.tq; i0 += kBlock) {
          const int64_t ni = std::min(kBlock, pr.tq - i0);
          tile(batch, i0, ni, j0, nj, pdrop, ds);
          gv.noalias() += pdrop.transpose() * pr.rows(pd, batch, pr.tq, i0, ni, pr.dv);
          gk.noalias() += ds.transpose() * pr.rows(pr.q, batch, pr.tq, i0, ni, pr.d);
          if (dq_in_first_pass) {
            MatrixMap<T> gq(dq.data<T>() + (batch * pr.tq + i0) * pr.d, ni, pr.d);
            gq.noalias() = ds * pr.rows(pr.k, batch, pr.tk, j0, nj, pr.d);
            gq *= scale;
          }
        }
        MatrixMap<T>(dk.data<T>() + (batch * pr.tk + j0) * pr.d, nj, pr.d) = gk * scale;
        MatrixMap<T>(dv.data<T>() + (batch * pr.tk + j0) * pr.dv, nj, pr.dv) = gv;
      }
    });
    if (dq_in_first_pass) return;
    // dQ: a task per query block, the key blocks in order.
    detail::parallel_for(0, pr.b * qblocks, 1, [&](int64_t lo, int64_t hi) {
      Tile<T> pdrop, ds;
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t batch = task / qblocks, i0 = (task % qblocks) * kBlock;
        const int64_t ni = std::min(kBlock, pr.tq - i0);
        Tile<T> gq = Tile<T>::Zero(ni, pr.d);
        for (int64_t j0 = 0; j0 < pr.key_end(i0 + ni); j0 += kBlock) {
          const int64_t nj = std::min(kBlock, pr.tk - j0);
          tile(batch, i0, ni, j0, nj, pdrop, ds);
          gq.noalias() += ds * pr.rows(pr.k, batch, pr.tk, j0, nj, pr.d);
        }
        MatrixMap<T>(dq.data<T>() + (batch * pr.tq + i0) * pr.d, ni, pr.d) = gq * scale;
      }
    });
  });
}

}  // namespace tandem::cpu
