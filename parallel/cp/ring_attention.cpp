// parallel/cp/ring_attention.cpp — ring attention's forward (blocks merged by log-sum-exp) and
// backward (the same blocks from the saved output and log-sum-exp, dk and dv sent round with k
// and v), on the fused attention kernels.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/record.h>
#include <tandem/core/check.h>
#include <tandem/core/generator.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/parallel/cp/ring_attention.h>
#include <array>
#include <cmath>

namespace tandem::parallel::cp {
namespace {

enum class Block { Whole, Causal, None };

// What query chunk `qc` sees of key chunk `kc`.
Block block(int64_t qc, int64_t kc, bool causal) {
  if (!causal || kc < qc) return Block::Whole;
  return kc == qc ? Block::Causal : Block::None;
}

// The ring's geometry on this rank: its chunks, their length, and its neighbours.
struct Ring {
  Communicator* group;
  int64_t cp, rank, chunk;
  SequenceSplit split;
  bool causal;
  double scale;
  double dropout_p;
  GeneratorState rng;  // one device's draw for the whole [b, T, T] probabilities
  int64_t whole() const { return chunk * chunk_count(cp, split); }
  int64_t next() const { return (rank + 1) % cp; }
  int64_t prev() const { return (rank + cp - 1) % cp; }
  // The rank whose k, v this rank holds at step s.
  int64_t source(int64_t s) const { return (rank - s + cp) % cp; }
  std::vector<int64_t> chunks(int64_t r) const { return chunks_of(r, cp, split); }
  // Chunk i of a part [b, T/cp, D]: a contiguous copy (the kernels' form).
  Tensor part(const Tensor& t, size_t i) const {
    return t.narrow(1, int64_t(i) * chunk, chunk).contiguous();
  }
};

// Calls fn(i, j, kj, vj, params) for each block of step s that is computed: this rank's query
// chunk i against key chunk j of the k, v it holds (kj, vj: that chunk, contiguous), with the
// kernels' parameters (the causal mask on the diagonal).
template <typename Fn>
void for_each_block(const Ring& g, int64_t s, const Tensor& k, const Tensor& v, Fn fn) {
  const std::vector<int64_t> mine = g.chunks(g.rank), theirs = g.chunks(g.source(s));
  for (size_t j = 0; j < theirs.size(); ++j) {
    Tensor kj, vj;  // copied once, for the first query chunk that needs them
    for (size_t i = 0; i < mine.size(); ++i) {
      const Block b = block(mine[i], theirs[j], g.causal);
      if (b == Block::None) continue;
      if (!kj.defined()) kj = g.part(k, j), vj = g.part(v, j);
      // The block's probabilities draw one device's dropout numbers: its first element's
      // counter in the whole [b, T, T], and the whole's strides.
      const int64_t t = g.whole();
      const uint64_t first = g.rng.offset + uint64_t(mine[i] * g.chunk * t + theirs[j] * g.chunk);
      fn(i, j, kj, vj,
         AttentionParams{.scale = g.scale,
                         .causal = b == Block::Causal,
                         .dropout_p = g.dropout_p,
                         .rng = {g.rng.seed, first},
                         .rng_batch_stride = t * t,
                         .rng_row_stride = t});
    }
  }
}

// Sends each of `out` to the next rank and receives as many from the previous one, shaped
// like `like`: one ring step (the caller waits for both). Even ranks send first and odd ones
// receive first, so that a backend whose send waits for the matching receive (NCCL's, outside a
// group call) cannot deadlock with every rank sending at once; the others post both without
// waiting, and the order costs them nothing.
std::vector<Tensor> pass_round(const Ring& g, const std::vector<Tensor>& out,
                               const std::vector<Tensor>& like, std::vector<WorkPtr>& sends,
                               std::vector<WorkPtr>& recvs) {
  std::vector<Tensor> in;
  const auto send_all = [&] {
    for (const Tensor& t : out) sends.push_back(g.group->send(t, int(g.next())));
  };
  if (g.rank % 2 == 0) send_all();
  for (const Tensor& t : like) {
    in.push_back(empty(t.shape(), t.options()));
    recvs.push_back(g.group->recv(in.back(), int(g.prev())));
  }
  if (g.rank % 2 == 1) send_all();
  return in;
}

void wait_all(std::vector<WorkPtr>& works) {
  for (const WorkPtr& w : works) w->wait();
  works.clear();
}

// acc (o, lse) merged with a block's (o_b, lse_b): the softmax over both sets of keys. Every row
// has seen its own position by the first merge, so each lse is finite.
void merge(Tensor& o, Tensor& lse, const Tensor& o_b, const Tensor& lse_b) {
  const Tensor m = maximum(lse, lse_b);
  const Tensor total = m + log(exp(lse - m) + exp(lse_b - m));
  o = o * exp(lse - total).unsqueeze(-1) + o_b.to(o.dtype()) * exp(lse_b - total).unsqueeze(-1);
  lse = total;
}

struct Forward {
  std::vector<Tensor> out, lse;  // per local chunk: [b, c, Dv] (accumulated), [b, c]
};

Forward forward(const Ring& g, const Tensor& q, const Tensor& k, const Tensor& v) {
  const std::vector<int64_t> mine = g.chunks(g.rank);
  std::vector<Tensor> qs;
  for (size_t i = 0; i < mine.size(); ++i) qs.push_back(g.part(q, i));
  Forward f;
  f.out.resize(mine.size());
  f.lse.resize(mine.size());
  const DType acc = accumulate_dtype(q.dtype());
  Tensor k_cur = k, v_cur = v;
  std::vector<WorkPtr> sends, recvs;
  for (int64_t s = 0; s < g.cp; ++s) {
    std::vector<Tensor> next;  // the following block, on its way while this one is computed
    if (s + 1 < g.cp) next = pass_round(g, {k_cur, v_cur}, {k_cur, v_cur}, sends, recvs);
    for_each_block(
        g, s, k_cur, v_cur,
        [&](size_t i, size_t, const Tensor& kj, const Tensor& vj, const AttentionParams& p) {
          Tensor o = empty({q.size(0), g.chunk, v.size(2)}, q.options());
          Tensor lse = empty({q.size(0), g.chunk}, {.dtype = acc, .device = q.device()});
          kernels(q.device()).attention_forward(qs[i], kj, vj, Tensor(), p, o, lse);
          if (!f.out[i].defined()) {
            f.out[i] = o.to(acc), f.lse[i] = lse;
          } else {
            merge(f.out[i], f.lse[i], o, lse);
          }
        });
    wait_all(recvs);
    wait_all(sends);
    if (!next.empty()) k_cur = next[0], v_cur = next[1];
  }
  return f;
}

// dq, dk, dv of this rank's parts, from the output and log-sum-exp forward saved.
std::array<Tensor, 3> backward(const Ring& g, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& out, const Tensor& lse, const Tensor& dout) {
  const std::vector<int64_t> mine = g.chunks(g.rank);
  std::vector<Tensor> qs, outs, lses, douts, dqs;
  for (size_t i = 0; i < mine.size(); ++i) {
    qs.push_back(g.part(q, i));
    outs.push_back(g.part(out, i));
    lses.push_back(lse.narrow(1, int64_t(i) * g.chunk, g.chunk).contiguous());
    douts.push_back(g.part(dout, i));
    dqs.push_back(zeros(qs.back().shape(), q.options()));
  }
  Tensor k_cur = k, v_cur = v, dk_cur = zeros(k.shape(), k.options()),
         dv_cur = zeros(v.shape(), v.options());
  std::vector<WorkPtr> sends, recvs;
  for (int64_t s = 0; s < g.cp; ++s) {
    for_each_block(
        g, s, k_cur, v_cur,
        [&](size_t i, size_t j, const Tensor& kj, const Tensor& vj, const AttentionParams& p) {
          Tensor dq = empty(qs[i].shape(), q.options()), dk = empty(kj.shape(), k.options()),
                 dv = empty(vj.shape(), v.options());
          kernels(q.device())
              .attention_backward(qs[i], kj, vj, Tensor(), outs[i], lses[i], douts[i], p, dq, dk,
                                  dv);
          dqs[i].add_(dq);
          dk_cur.narrow(1, int64_t(j) * g.chunk, g.chunk).add_(dk);
          dv_cur.narrow(1, int64_t(j) * g.chunk, g.chunk).add_(dv);
        });
    if (g.cp == 1) break;  // the block is this rank's own
    const bool more = s + 1 < g.cp;
    const std::vector<Tensor> out_now = more ? std::vector<Tensor>{k_cur, v_cur, dk_cur, dv_cur}
                                             : std::vector<Tensor>{dk_cur, dv_cur};
    std::vector<Tensor> in = pass_round(g, out_now, out_now, sends, recvs);
    wait_all(recvs);
    wait_all(sends);
    if (more) {
      k_cur = in[0], v_cur = in[1], dk_cur = in[2], dv_cur = in[3];
    } else {
      dk_cur = in[0], dv_cur = in[1];
    }
  }
  return {dqs.size() == 1 ? dqs[0] : cat(dqs, 1), dk_cur, dv_cur};
}

}  // namespace

Tensor ring_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                      Communicator& group, const ContextAttentionOptions& options) {
  TD_CHECK_SHAPE(q_in.dim() >= 2 && k_in.dim() == q_in.dim() && v_in.dim() == q_in.dim(),
                 "ring_attention: q, k and v must be [..., T/cp, D] alike, not ", q_in.shape(),
                 ", ", k_in.shape(), ", ", v_in.shape());
  const int64_t t = q_in.size(-2), d = q_in.size(-1);
  Shape batch = q_in.shape();
  batch.resize(batch.size() - 2);
  const auto batch_of = [](const Tensor& x) {
    Shape s = x.shape();
    s.resize(s.size() - 2);
    return s;
  };
  TD_CHECK_SHAPE(k_in.size(-2) == t && v_in.size(-2) == t && k_in.size(-1) == d &&
                     batch_of(k_in) == batch && batch_of(v_in) == batch,
                 "ring_attention: q ", q_in.shape(), ", k ", k_in.shape(), " and v ", v_in.shape(),
                 " must hold the same positions and batch (k the query's head dim)");
  TD_CHECK_DTYPE(
      is_floating(q_in.dtype()) && k_in.dtype() == q_in.dtype() && v_in.dtype() == q_in.dtype(),
      "ring_attention: q, k and v must be one floating dtype, not ", q_in.dtype(), ", ",
      k_in.dtype(), ", ", v_in.dtype());
  check_same_device("ring_attention", {{"query", q_in}, {"key", k_in}, {"value", v_in}});
  const int64_t per_rank = options.split == SequenceSplit::ZigZag ? 2 : 1;
  TD_CHECK_SHAPE(t % per_rank == 0, "ring_attention: this rank's ", t,
                 " positions are not the zig-zag split's two equal chunks");
  TD_CHECK_VALUE(options.dropout_p >= 0 && options.dropout_p < 1,
                 "ring_attention: dropout_p must be in [0, 1), not ", options.dropout_p);
  int64_t b = 1;
  for (int64_t s : batch) b *= s;
  const int64_t whole = t * group.size();
  const Ring g{.group = &group,
               .cp = group.size(),
               .rank = group.rank(),
               .chunk = t / per_rank,
               .split = options.split,
               .causal = options.causal,
               .scale = options.scale.value_or(1.0 / std::sqrt(double(std::max<int64_t>(d, 1)))),
               .dropout_p = options.dropout_p,
               .rng = options.dropout_p > 0
                          ? reserve_random(q_in.device(), uint64_t(b * whole) * uint64_t(whole))
                          : GeneratorState{}};
  const Tensor q = ::tandem::detail::contiguous(q_in).reshape({b, t, d});
  const Tensor k = ::tandem::detail::contiguous(k_in).reshape({b, t, d});
  const Tensor v = ::tandem::detail::contiguous(v_in).reshape({b, t, v_in.size(-1)});
  Forward f;
  {
    NoGradGuard no_grad;
    f = forward(g, q, k, v);
  }
  const Tensor out = (f.out.size() == 1 ? f.out[0] : cat(f.out, 1)).to(q.dtype());
  const Tensor lse = f.lse.size() == 1 ? f.lse[0] : cat(f.lse, 1);
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), {t, v_in.size(-1)});
  return record("ring_attention", out.reshape(out_shape), {q_in, k_in, v_in},
                {{"query", q}, {"key", k}, {"value", v}, {"output", out}, {"lse", lse}},
                [g, shapes = std::array<Shape, 3>{q_in.shape(), k_in.shape(), v_in.shape()}](
                    const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
                  const Tensor dout = ::tandem::detail::contiguous(dy).reshape(s[3].shape());
                  std::array<Tensor, 3> grads = backward(g, s[0], s[1], s[2], s[3], s[4], dout);
                  return {grads[0].reshape(shapes[0]), grads[1].reshape(shapes[1]),
                          grads[2].reshape(shapes[2])};
                });
}

}  // namespace tandem::parallel::cp
