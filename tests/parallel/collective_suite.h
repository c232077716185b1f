// tests/parallel/collective_suite.h — the collective suite every communicator passes (Gloo,
// shared memory, threads): every op and dtype against values computed by hand, odd and zero
// sizes, tensors larger than a transport's buffer, all_to_all, messages, and many operations in
// flight at once; and all_reduce_coalesced where a backend has it. It runs inside a rank (a
// forked process or a thread), so it reports a failure by throwing: gtest's assertions do not
// cross a fork.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <tandem/tandem.h>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::testing {

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

inline bool same(const Tensor& a, const std::vector<double>& expected) {
  const auto got = a.to_vector<double>();
  if (got.size() != expected.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::abs(got[i] - expected[i]) > 1e-6 * (1 + std::abs(expected[i]))) return false;
  return true;
}

/// Runs every collective of `comm` (rank r of n) and checks the results; `large` elements make
/// the tensors that must take several rounds of a transport's buffer.
/// all_to_all_v: rank r sends (r + i) % 3 rows of width 2 to rank i (parts of no rows among them),
/// each row naming its sender, receiver and index, in float32, float64 and int64, with the splits
/// exchanged by all_to_all_splits; then `large` rows of 4 to the next rank (a part larger than a
/// transport's buffers) and one row to each other.
inline void check_all_to_all_v(parallel::Communicator& comm, int64_t large) {
  const int n = comm.size(), r = comm.rank();
  const auto value = [](int from, int to, int64_t k) {
    return 1000.0 * from + 10.0 * to + double(k);
  };
  std::vector<int64_t> ins, outs;
  for (int i = 0; i < n; ++i) ins.push_back((r + i) % 3), outs.push_back((i + r) % 3);
  require(parallel::all_to_all_splits(comm, ins) == outs, "all_to_all_splits");
  for (DType dt : {kFloat32, kFloat64, kInt64}) {
    std::vector<double> sent, want;
    for (int i = 0; i < n; ++i)
      for (int64_t k = 0; k < ins[size_t(i)]; ++k) sent.insert(sent.end(), 2, value(r, i, k));
    for (int j = 0; j < n; ++j)
      for (int64_t k = 0; k < outs[size_t(j)]; ++k) want.insert(want.end(), 2, value(j, r, k));
    const int64_t in_rows = int64_t(sent.size() / 2), out_rows = int64_t(want.size() / 2);
    const Tensor in = from_vector(sent, {in_rows, 2}).to(dt);
    Tensor out = full({out_rows, 2}, -1.0, {.dtype = dt});
    comm.all_to_all_v(out, in, outs, ins)->wait();
    require(same(out, want), str("all_to_all_v (", dt, ")"));
  }
  std::vector<int64_t> big_in(size_t(n), 1), big_out(size_t(n), 1);
  if (n > 1)
    big_in[size_t((r + 1) % n)] = large + r,
                            big_out[size_t((r + n - 1) % n)] = large + (r + n - 1) % n;
  int64_t in_rows = 0, out_rows = 0;
  for (int i = 0; i < n; ++i) in_rows += big_in[size_t(i)], out_rows += big_out[size_t(i)];
  const Tensor in = full({in_rows, 4}, double(r + 1));
  Tensor out = zeros({out_rows, 4});
  comm.all_to_all_v(out, in, big_out, big_in)->wait();
  std::vector<double> want;
  for (int j = 0; j < n; ++j)
    want.insert(want.end(), size_t(4 * big_out[size_t(j)]), double(j + 1));
  require(same(out, want), "all_to_all_v of a large part");
}

inline void check_collectives(parallel::Communicator& comm, int64_t large = 100'003) {
  const int n = comm.size();
  const int rank = comm.rank();
  const double r = rank;
  const double sum_r = n * (n - 1) / 2.0;
  using parallel::WorkPtr;
  for (DType dt : {kFloat32, kFloat64, kInt64, kBFloat16, kFloat16}) {
    const std::string what = str(" (", dt, ")");
    Tensor t = full({5}, r + 1, {.dtype = dt});
    comm.all_reduce(t, ReduceOp::Sum)->wait();
    require(t.dtype() == dt && same(t, std::vector<double>(5, sum_r + n)), "sum" + what);
    t = full({2, 3}, r, {.dtype = dt});
    comm.all_reduce(t, ReduceOp::Max)->wait();
    require(same(t, std::vector<double>(6, n - 1)), "max" + what);
    t = full({3}, r + 2, {.dtype = dt});
    comm.all_reduce(t, ReduceOp::Min)->wait();
    require(same(t, std::vector<double>(3, 2)), "min" + what);
    if (dt != kInt64) {
      t = full({4}, 2 * r, {.dtype = dt});
      comm.all_reduce(t, ReduceOp::Mean)->wait();
      require(same(t, std::vector<double>(4, 2 * sum_r / n)), "avg" + what);
    }
    Tensor b = rank == n - 1 ? tensor({7, 8, 9}).to(dt) : zeros({3}, {.dtype = dt});
    comm.broadcast(b, n - 1)->wait();
    require(same(b, {7, 8, 9}), "broadcast from the last rank" + what);

    std::vector<Tensor> outs;
    for (int i = 0; i < n; ++i) outs.push_back(zeros({2}, {.dtype = dt}));
    comm.all_gather(outs, full({2}, r * 10, {.dtype = dt}))->wait();
    for (int i = 0; i < n; ++i)
      require(same(outs[size_t(i)], {i * 10.0, i * 10.0}), "all_gather slot" + what);

    // Input chunk c on rank k holds 4c + k; this rank gets chunk `rank` summed over k.
    Tensor in = empty({n, 2}, {.dtype = dt});
    for (int c = 0; c < n; ++c) in.select(0, c).fill_(4.0 * c + r);
    Tensor out = zeros({2}, {.dtype = dt});
    comm.reduce_scatter(out, in, ReduceOp::Sum)->wait();
    require(same(out, std::vector<double>(2, 4.0 * rank * n + sum_r)), "reduce_scatter" + what);

    // all_to_all: rank k's chunk j holds 10k + j (two rows each); this rank receives, as chunk
    // k, rank k's chunk `rank`.
    Tensor send = empty({2 * n, 3}, {.dtype = dt});
    for (int j = 0; j < n; ++j) send.narrow(0, 2 * j, 2).fill_(10.0 * r + j);
    Tensor recv = zeros({2 * n, 3}, {.dtype = dt});
    comm.all_to_all(recv, send)->wait();
    for (int k = 0; k < n; ++k)
      require(same(recv.narrow(0, 2 * k, 2), std::vector<double>(6, 10.0 * k + rank)),
              "all_to_all chunk " + std::to_string(k) + what);
  }

  // Averages of float64 keep float64's precision (no detour through float32).
  Tensor fine = full({3}, 1.0 / 3 + r * 1e-9, {.dtype = kFloat64});
  comm.all_reduce(fine, ReduceOp::Mean)->wait();
  for (double v : fine.to_vector<double>())
    require(std::abs(v - (1.0 / 3 + 1e-9 * sum_r / n)) < 1e-15, "float64 mean precision");

  // Odd and zero sizes, and tensors larger than a transport's buffer (several rounds): element
  // i of rank k holds i % 7 + k, so the sum is n·(i % 7) + sum_r.
  auto pattern = [](int64_t size, double offset, int copies = 1) {  // i % 7 + offset, repeated
    std::vector<double> v;
    for (int c = 0; c < copies; ++c)
      for (int64_t i = 0; i < size; ++i) v.push_back(double(i % 7) + offset);
    return v;
  };
  for (int64_t size : {int64_t(0), int64_t(1), int64_t(13), large}) {
    for (DType dt : {kFloat32, kFloat64}) {
      // [size], or [chunks, size] holding `chunks` copies.
      auto make = [&](double offset, int chunks = 0) {
        const auto v = pattern(size, offset, std::max(chunks, 1));
        return from_vector(v, chunks == 0 ? Shape{size} : Shape{chunks, size}).to(dt);
      };
      std::vector<double> sum = pattern(size, 0);
      for (double& v : sum) v = v * n + sum_r;
      Tensor t = make(r);
      comm.all_reduce(t)->wait();
      require(same(t, sum), str("all_reduce of ", size));
      Tensor b = rank == 0 ? make(0) : zeros({size}, {.dtype = dt});
      comm.broadcast(b, 0)->wait();
      require(same(b, pattern(size, 0)), str("broadcast of ", size));
      std::vector<Tensor> outs;
      for (int i = 0; i < n; ++i) outs.push_back(zeros({size}, {.dtype = dt}));
      comm.all_gather(outs, make(r))->wait();
      for (int i = 0; i < n; ++i)
        require(same(outs[size_t(i)], pattern(size, i)), str("all_gather of ", size));
      Tensor mine = zeros({size}, {.dtype = dt});
      comm.reduce_scatter(mine, make(r, n), ReduceOp::Max)->wait();
      require(same(mine, pattern(size, n - 1)), str("reduce_scatter of ", size));
      Tensor a2a_out = zeros({n, size}, {.dtype = dt});
      comm.all_to_all(a2a_out, make(r, n))->wait();
      for (int k = 0; k < n; ++k)
        require(same(a2a_out.select(0, k), pattern(size, k)), str("all_to_all of ", size));
    }
  }

  // Messages around a ring: even ranks send first, odd ranks receive first, and every
  // transport completes it; two messages to the same peer arrive in order.
  if (n > 1) {
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    Tensor got1 = zeros({3}), got2 = zeros({3});
    std::vector<WorkPtr> works;
    works.push_back(comm.send(full({3}, r), next));
    works.push_back(comm.send(full({3}, r + 100), next));
    works.push_back(comm.recv(got1, prev));
    works.push_back(comm.recv(got2, prev));
    for (auto& w : works) w->wait();
    require(same(got1, std::vector<double>(3, prev)), "recv, first message");
    require(same(got2, std::vector<double>(3, prev + 100)), "recv, second message");
  }

  check_all_to_all_v(comm, large);

  // Several collectives in flight at once complete in order, numbered alike on every rank.
  std::vector<Tensor> ts;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 8; ++i) {
    ts.push_back(full({1000 + 37 * i}, double(i)));
    works.push_back(comm.all_reduce(ts.back()));
  }
  for (int i = 0; i < 8; ++i) {
    works[size_t(i)]->wait();
    require(same(ts[size_t(i)].narrow(0, 0, 1), {double(i) * n}), "async all_reduce");
  }
  require(works[7]->sequence_number() == works[0]->sequence_number() + 7, "sequence");
  comm.barrier()->wait();
}

/// all_reduce_coalesced, for a backend that has it (false: it returned null, as the default
/// does): the same bits as all_reduce of the tensors concatenated, for every op and dtype, with
/// empty tensors among them and one of `large` elements that crosses a transport's buffers.
inline bool check_coalesced(parallel::Communicator& comm, int64_t large = 100'003) {
  const std::vector<int64_t> sizes{0, 1, 13, large, 0, 7};
  for (DType dt : {kFloat32, kFloat64, kInt64, kBFloat16, kFloat16}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min}) {
      if (op == ReduceOp::Mean && dt == kInt64) continue;
      std::vector<Tensor> pieces, flat;
      for (size_t k = 0; k < sizes.size(); ++k) {
        manual_seed(uint64_t(1000 * comm.rank() + k));
        pieces.push_back((randn({sizes[k]}) * (dt == kInt64 ? 1000.0 : 1.0)).to(dt));
        flat.push_back(pieces.back());
      }
      Tensor whole = cat(flat, 0);
      parallel::WorkPtr work = comm.all_reduce_coalesced(pieces, op);
      if (!work) return false;
      comm.all_reduce(whole, op)->wait();
      work->wait();
      int64_t at = 0;
      for (size_t k = 0; k < sizes.size(); ++k) {
        require(pieces[k].to_vector<double>() == whole.narrow(0, at, sizes[k]).to_vector<double>(),
                str("all_reduce_coalesced, ", name(op), ", ", dt, ", tensor ", k, " of ", sizes[k],
                    ": not the bits of all_reduce"));
        at += sizes[k];
      }
    }
  }
  return true;
}

/// reduce_scatter_coalesced and all_gather_in_place, for a backend that has them (false: they
/// returned null). The reduce-scatter gives the bits of reduce_scatter on the tensors packed and
/// zero-padded, into a separate output and in place (the output this rank's chunk of the input);
/// the all-gather puts each rank's chunk in every rank's tensors and leaves the padding alone.
inline bool check_scatter_gather_in_place(parallel::Communicator& comm, int64_t large = 100'003) {
  const int n = comm.size(), rank = comm.rank();
  const std::vector<int64_t> sizes{0, 1, 13, large, 0, 7};
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  for (DType dt : {kFloat32, kFloat64, kInt64, kBFloat16, kFloat16}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min}) {
      if (op == ReduceOp::Mean && dt == kInt64) continue;
      for (int64_t pad : {int64_t(0), int64_t(5)}) {  // the chunks padded to the world, or more
        const int64_t chunk = (total + n - 1) / n + pad;
        const std::string what = str(name(op), ", ", dt, ", chunk ", chunk);
        std::vector<Tensor> inputs;
        for (size_t k = 0; k < sizes.size(); ++k) {
          manual_seed(uint64_t(1000 * rank + k));
          inputs.push_back((randn({sizes[k]}) * (dt == kInt64 ? 1000.0 : 1.0)).to(dt));
        }
        Tensor packed = zeros({chunk * n}, {.dtype = dt});
        packed.narrow(0, 0, total).copy_(cat(inputs, 0));
        Tensor expected = empty({chunk}, {.dtype = dt});
        comm.reduce_scatter(expected, packed, op)->wait();
        Tensor out = full({chunk}, 3.0, {.dtype = dt});
        parallel::WorkPtr work = comm.reduce_scatter_coalesced(out, inputs, op);
        if (!work) return false;
        work->wait();
        require(out.to_vector<double>() == expected.to_vector<double>(),
                "reduce_scatter_coalesced, " + what + ": not the bits of reduce_scatter");
        // In place: the output is this rank's chunk of the one input.
        std::vector<Tensor> whole{packed.clone()};
        Tensor mine = whole[0].narrow(0, rank * chunk, chunk);
        comm.reduce_scatter_coalesced(mine, whole, op)->wait();
        require(mine.to_vector<double>() == expected.to_vector<double>(),
                "reduce_scatter_coalesced in place, " + what);
      }
    }
    // The all-gather: element i of chunk k is k·10 + i % 7 on every rank afterwards (exact in
    // 16 bits), whatever the tensors held outside this rank's chunk before.
    const int64_t chunk = (total + n - 1) / n + 3;
    auto value = [&](int64_t i) { return double((i / chunk) * 10 + (i % chunk) % 7); };
    std::vector<Tensor> tensors;
    int64_t at = 0;
    for (int64_t s : sizes) {
      std::vector<double> v(size_t(s), -1.0);
      for (int64_t i = 0; i < s; ++i)
        if ((at + i) / chunk == rank) v[size_t(i)] = value(at + i);
      tensors.push_back(from_vector(v, {s}).to(dt));
      at += s;
    }
    parallel::WorkPtr work = comm.all_gather_in_place(tensors, chunk);
    if (!work) return false;
    work->wait();
    at = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const std::vector<double> got = tensors[k].to_vector<double>();
      for (int64_t i = 0; i < sizes[k]; ++i)
        require(got[size_t(i)] == value(at + i), str("all_gather_in_place, ", dt, ", tensor ", k,
                                                     " element ", i, ": ", got[size_t(i)]));
      at += sizes[k];
    }
  }
  return true;
}

}  // namespace tandem::testing
