// parallel/comm/thread_communicator.cpp — the collectives between threads. Each runs on the rank's
// own worker (collective_queue.h) and meets the other ranks in thread_world.cpp; there each rank
// reads the others' tensors directly, so a collective costs the copies and the arithmetic only.
// An all-reduce is a reduce-scatter then an all-gather: rank r reduces the r-th slice of every
// rank's tensor (in rank order), then every rank copies all the slices. The ranks' threads share
// the arithmetic, and no rank writes its tensor before every rank has read it (phase 1).
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/parallel/comm/collective_queue.h>
#include <tandem/parallel/comm/thread_communicator.h>
#include <thread>

namespace tandem::parallel {
namespace {

// Reductions of 16-bit floats add in float32 and round once, as every backend does.
DType accumulation_dtype(DType dt) { return dt == kBFloat16 || dt == kFloat16 ? kFloat32 : dt; }

// Reduces `part(k)` over the ranks k = 0, 1, ... in that order, into a new tensor on `device`.
template <typename Part>
Tensor reduce_in_rank_order(int size, ReduceOp op, Device device, Part part) {
  const Tensor first = part(0);
  Tensor acc = empty(first.shape(), {.dtype = accumulation_dtype(first.dtype()), .device = device});
  acc.copy_(first);
  for (int k = 1; k < size; ++k) {
    Tensor x = part(k).to(device).to(acc.dtype());
    if (op == ReduceOp::Max) {
      acc = maximum(acc, x);
    } else if (op == ReduceOp::Min) {
      acc = minimum(acc, x);
    } else {
      acc.add_(x);
    }
  }
  if (op == ReduceOp::Mean) acc.div_(double(size));
  return acc;
}

Tensor flat(const Tensor& t) { return t.reshape({t.numel()}); }

// Elements [lo, lo + n) of `tensors` read as one array, in a new tensor on `device` (zeros past
// the array's end), and the other way: `src` into elements [lo, lo + src.numel()), dropping those
// past the end.
Tensor pack_range(const std::vector<Tensor>& tensors, int64_t lo, int64_t n, Device device) {
  Tensor out = zeros({n}, {.dtype = tensors.front().dtype(), .device = device});
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    const int64_t a = std::max(lo, start), b = std::min(lo + n, start + t.numel());
    if (a < b) out.narrow(0, a - lo, b - a).copy_(flat(t).narrow(0, a - start, b - a));
    start += t.numel();
  }
  return out;
}

void unpack_range(std::vector<Tensor>& tensors, int64_t lo, const Tensor& src) {
  int64_t start = 0;
  for (Tensor& t : tensors) {
    const int64_t a = std::max(lo, start), b = std::min(lo + src.numel(), start + t.numel());
    if (a < b) flat(t).narrow(0, a - start, b - a).copy_(src.narrow(0, a - lo, b - a));
    start += t.numel();
  }
}

std::string signature(const std::string& op, const Tensor* t, const std::string& extra) {
  std::string s = op;
  if (!extra.empty()) s += " " + extra;
  if (t != nullptr) s += str(" ", t->shape(), " ", t->dtype());
  return s;
}

}  // namespace

ThreadCommunicator::ThreadCommunicator(std::shared_ptr<ThreadWorld> world, int rank)
    : Communicator(rank, world->size(), world->timeout()),
      world_(std::move(world)),
      queue_(
          std::make_unique<CollectiveQueue>("threads", rank, nullptr, /*inline_when_idle=*/true)),
      sent_(size_t(size_), 0),
      received_(size_t(size_), 0) {}

ThreadCommunicator::~ThreadCommunicator() = default;

WorkPtr ThreadCommunicator::enqueue(const std::string& op, const Tensor* t,
                                    const std::string& extra,
                                    std::function<void(uint64_t, const std::string&)> run) {
  std::lock_guard lk(mu_);
  const uint64_t seq = next_seq_++;
  // The transport's own wait ends first, with the more precise error (who is missing).
  auto work = new_work(op, seq, t, extra, timeout_ + kWorkGrace);
  queue_->push(
      work, [run = std::move(run), seq, d = work->description()](uint32_t) { run(seq, d); },
      uint32_t(seq));
  return work;
}

void ThreadCommunicator::run_all_reduce(Tensor& t, ReduceOp op, const std::string& call,
                                        uint64_t seq, const std::string& d) {
  auto m = world_->arrive(seq, rank_, t, call, d);
  const int64_t n = t.numel();
  auto lo = [&](int r) { return n * r / size_; };
  m->parts[size_t(rank_)] = reduce_in_rank_order(size_, op, t.device(), [&](int k) {
    return flat(m->inputs[size_t(k)]).narrow(0, lo(rank_), lo(rank_ + 1) - lo(rank_));
  });
  world_->sync(*m, 1, d);
  Tensor out = flat(t);
  for (int k = 0; k < size_; ++k)
    out.narrow(0, lo(k), lo(k + 1) - lo(k)).copy_(m->parts[size_t(k)]);
  world_->leave(seq, *m);
}

WorkPtr ThreadCommunicator::all_reduce(Tensor& tensor, ReduceOp op) {
  check_all_reduce(tensor, op);
  const std::string call = signature("all_reduce", &tensor, name(op));
  return enqueue("all_reduce", &tensor, name(op),
                 [this, t = tensor, op, call](uint64_t seq, const std::string& d) mutable {
                   run_all_reduce(t, op, call, seq, d);
                 });
}

// Packed at the call into one tensor, reduced as all_reduce reduces one, and copied back: the
// ranks read each other's tensors whole here, so reading the pieces in place would save only
// copies, which this backend (for tests and for reading) does not count. One collective still,
// numbered and checked as one.
WorkPtr ThreadCommunicator::all_reduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op) {
  check_all_reduce_coalesced(tensors, op);
  std::vector<Tensor> flats;
  for (const Tensor& t : tensors) flats.push_back(flat(t));
  Tensor packed = cat(flats, 0);
  const std::string extra = str(name(op), ", ", tensors.size(), " tensors");
  const std::string call = signature("all_reduce", &packed, extra);
  return enqueue(
      "all_reduce", &packed, extra,
      [this, packed, ts = tensors, op, call](uint64_t seq, const std::string& d) mutable {
        run_all_reduce(packed, op, call, seq, d);
        int64_t at = 0;
        for (Tensor& t : ts) {
          flat(t).copy_(packed.narrow(0, at, t.numel()));
          at += t.numel();
        }
      });
}

WorkPtr ThreadCommunicator::broadcast(Tensor& tensor, int root) {
  check_broadcast(tensor, root);
  const std::string call = signature("broadcast", &tensor, "root " + std::to_string(root));
  return enqueue("broadcast", &tensor, "root " + std::to_string(root),
                 [this, t = tensor, root, call](uint64_t seq, const std::string& d) mutable {
                   auto m = world_->arrive(seq, rank_, t, call, d);
                   if (rank_ != root) t.copy_(m->inputs[size_t(root)]);
                   world_->sync(*m, 1, d);  // the root's tensor is read until here
                   world_->leave(seq, *m);
                 });
}

WorkPtr ThreadCommunicator::all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  check_all_gather(outputs, input);
  const std::string call = signature("all_gather", &input, "");
  return enqueue(
      "all_gather", &input, "",
      [this, in = input, outs = outputs, call](uint64_t seq, const std::string& d) mutable {
        auto m = world_->arrive(seq, rank_, in, call, d);
        for (int k = 0; k < size_; ++k) outs[size_t(k)].copy_(m->inputs[size_t(k)]);
        world_->sync(*m, 1, d);
        world_->leave(seq, *m);
      });
}

WorkPtr ThreadCommunicator::reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) {
  check_reduce_scatter(output, input, op);
  const std::string call = signature("reduce_scatter", &input, name(op));
  return enqueue(
      "reduce_scatter", &input, name(op),
      [this, in = input, out = output, op, call](uint64_t seq, const std::string& d) mutable {
        auto m = world_->arrive(seq, rank_, in, call, d);
        const int64_t chunk = out.numel();
        Tensor mine = reduce_in_rank_order(size_, op, out.device(), [&](int k) {
          return flat(m->inputs[size_t(k)]).narrow(0, chunk * rank_, chunk);
        });
        out.copy_(mine.reshape(out.shape()));
        world_->sync(*m, 1, d);  // the inputs are read until here
        world_->leave(seq, *m);
      });
}

// Packed at the call, as all_reduce_coalesced: the reduction reads the packed copies, so an
// output that is this rank's own chunk of the inputs is simply written.
WorkPtr ThreadCommunicator::reduce_scatter_coalesced(Tensor& output, std::vector<Tensor>& inputs,
                                                     ReduceOp op) {
  check_reduce_scatter_coalesced(output, inputs, op);
  const Tensor packed = pack_range(inputs, 0, output.numel() * size_, output.device());
  return reduce_scatter(output, packed, op);
}

// This rank's chunk packed at the call; the peers' copied out of their packed chunks.
WorkPtr ThreadCommunicator::all_gather_in_place(std::vector<Tensor>& tensors, int64_t chunk) {
  check_all_gather_in_place(tensors, chunk);
  const Tensor mine = pack_range(tensors, rank_ * chunk, chunk, tensors.front().device());
  const std::string extra = str(tensors.size(), " tensors in place");
  const std::string call = signature("all_gather", &mine, extra);
  return enqueue(
      "all_gather", &mine, extra,
      [this, mine, ts = tensors, chunk, call](uint64_t seq, const std::string& d) mutable {
        auto m = world_->arrive(seq, rank_, mine, call, d);
        for (int k = 0; k < size_; ++k)
          if (k != rank_) unpack_range(ts, k * chunk, m->inputs[size_t(k)]);
        world_->sync(*m, 1, d);  // the packed chunks are read until here
        world_->leave(seq, *m);
      });
}

WorkPtr ThreadCommunicator::all_to_all(Tensor& output, const Tensor& input) {
  check_all_to_all(output, input);
  const std::string call = signature("all_to_all", &input, "");
  return enqueue(
      "all_to_all", &input, "",
      [this, in = input, out = output, call](uint64_t seq, const std::string& d) mutable {
        auto m = world_->arrive(seq, rank_, in, call, d);
        const int64_t rows = in.size(0) / size_;
        for (int k = 0; k < size_; ++k)
          out.narrow(0, rows * k, rows).copy_(m->inputs[size_t(k)].narrow(0, rows * rank_, rows));
        world_->sync(*m, 1, d);
        world_->leave(seq, *m);
      });
}

WorkPtr ThreadCommunicator::barrier() {
  return enqueue("barrier", nullptr, "", [this](uint64_t seq, const std::string& d) {
    auto m = world_->arrive(seq, rank_, Tensor(), "barrier", d);
    world_->leave(seq, *m);
  });
}

WorkPtr ThreadCommunicator::send(const Tensor& tensor, int dst) {
  check_tensor(tensor, "send");
  check_peer(dst, "send");
  std::lock_guard lk(mu_);
  const uint64_t n = sent_[size_t(dst)]++;
  auto work = message_work("send", n, tensor, dst);
  queue_->push(
      work,
      [this, t = tensor, dst](uint32_t) {
        world_->post(rank_, dst, t.clone());  // a copy: the sender may reuse its tensor at once
      },
      uint32_t(n));
  return work;
}

WorkPtr ThreadCommunicator::recv(Tensor& tensor, int src) {
  check_tensor(tensor, "recv");
  check_peer(src, "recv");
  std::lock_guard lk(mu_);
  const uint64_t n = received_[size_t(src)]++;
  auto work = message_work("recv", n, tensor, src);
  queue_->push(
      work,
      [this, t = tensor, src, d = work->description()](uint32_t) mutable {
        const Tensor message = world_->take(src, rank_, d);
        TD_CHECK_SHAPE(message.shape() == t.shape() && message.dtype() == t.dtype(), "threads ", d,
                       ": rank ", src, " sent ", ::tandem::describe(message),
                       ", but this rank expects ", ::tandem::describe(t));
        t.copy_(message);
      },
      uint32_t(n));
  return work;
}

std::vector<std::shared_ptr<Communicator>> make_thread_group(int nranks,
                                                             ThreadGroupOptions options) {
  auto world = std::make_shared<ThreadWorld>(nranks, options.timeout);
  std::vector<std::shared_ptr<Communicator>> group;
  for (int r = 0; r < nranks; ++r) group.push_back(std::make_shared<ThreadCommunicator>(world, r));
  return group;
}

void spawn_threads(const std::function<void(std::shared_ptr<Communicator>)>& fn, int nranks,
                   ThreadGroupOptions options) {
  TD_CHECK_VALUE(nranks >= 1, "spawn_threads: expected nranks >= 1, but got ", nranks);
  auto group = make_thread_group(nranks, options);
  ThreadWorld& world = static_cast<ThreadCommunicator&>(*group[0]).world();
  std::mutex mu;
  int failed = -1;
  std::string failure;
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(group[size_t(r)]);
      } catch (const std::exception& e) {
        {
          std::lock_guard lk(mu);
          if (failed < 0) {
            failed = r;
            failure = e.what();
          }
        }
        world.abort(r, e.what());  // the others fail their next collective at once
      }
    });
  }
  for (std::thread& t : threads) t.join();
  group.clear();  // each communicator finishes its queue (failing fast after an abort)
  TD_CHECK_AS(DistributedError, failed < 0, "spawn_threads: rank ", failed, " of ", nranks,
              " failed: ", failure);
}

std::shared_ptr<Communicator> ThreadCommunicator::make_subgroup(const std::vector<int>& ranks,
                                                                int index,
                                                                const std::string& name) {
  if (index < 0) return nullptr;
  return std::make_shared<ThreadCommunicator>(world_->subworld(name, int(ranks.size())), index);
}

}  // namespace tandem::parallel
