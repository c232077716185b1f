// parallel/comm/shm_communicator.cpp — the collectives over shared memory. Every collective runs
// in rounds of at most one buffer: write into this rank's buffer, step (wait until every rank has
// written), read what this rank needs from the peers' buffers. The next round writes the other
// buffer, and the one after writes this one again only after a step that every rank reaches
// after it has finished reading it: that is why two buffers make one step per round enough.
#include <tandem/core/check.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/parallel/comm/collective_queue.h>
#include <tandem/parallel/comm/dtype_dispatch.h>
#include <tandem/parallel/comm/host_staging.h>
#include <tandem/parallel/comm/shm_communicator.h>
#include <tandem/parallel/comm/shm_reduce.h>
#include <tandem/parallel/failure_record.h>
#include <tandem/parallel/store/prefix_store.h>
#include <unistd.h>
#include <algorithm>
#include <cstring>
#include <random>
#include <thread>

namespace tandem::parallel {

using ::tandem::parallel::detail::by_dtype;
using ::tandem::parallel::detail::shm_copy;
using ::tandem::parallel::detail::staged;
using ::tandem::parallel::detail::unstage;
using Clock = std::chrono::steady_clock;

namespace {

std::string segment_prefix() {
  std::random_device rd;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "/tandem-%d-%08x", int(::getpid()), unsigned(rd()));
  return buf;
}

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.data_ptr()); }

}  // namespace

ShmCommunicator::ShmCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                 ShmOptions options)
    : Communicator(rank, size, options.timeout),
      options_(options),
      store_(std::move(store)),
      sent_(size_t(size), 0),
      received_(size_t(size), 0) {
  TD_CHECK_VALUE(options.buffer_bytes >= 4096, "shm: buffer_bytes must be at least 4096, not ",
                 options.buffer_bytes);
  TD_CHECK_VALUE(options.channel.slots >= 1 && options.channel.slot_bytes >= 64 &&
                     options.channel.slot_bytes % 64 == 0,
                 "shm: a message channel needs at least one slot of a multiple of 64 bytes, not ",
                 options.channel.slots, " of ", options.channel.slot_bytes);
  const size_t data_bytes = 2 * options.buffer_bytes + size_t(size) * options.channel.bytes();
  // The host's cores, not this process's affinity: a launcher that pins each rank to a core of
  // its own leaves one core in each mask, and those ranks have a core each.
  if (unsigned(size) > std::max(1u, std::thread::hardware_concurrency()))
    spin_ = std::chrono::microseconds(0);
  if (rank == 0) store_->set("shm/prefix", segment_prefix());
  const std::string prefix = store_->get_string("shm/prefix");
  auto name = [&](int r) { return prefix + "-" + std::to_string(r); };
  segments_.resize(size_t(size));
  segments_[size_t(rank)] = ShmSegment::create(name(rank), data_bytes);
  std::vector<std::string> created, mapped;
  for (int r = 0; r < size; ++r) {
    created.push_back("shm/created/" + std::to_string(r));
    mapped.push_back("shm/mapped/" + std::to_string(r));
  }
  store_->set(created[size_t(rank)], "1");
  store_->wait(created, timeout_);
  for (int r = 0; r < size; ++r)
    if (r != rank) segments_[size_t(r)] = ShmSegment::open(name(r), data_bytes);
  store_->set(mapped[size_t(rank)], "1");
  store_->wait(mapped, timeout_);
  // Every rank maps it now: the name can go, and with it anything a crash could leave behind.
  segments_[size_t(rank)].unlink();
  queue_ = std::make_unique<CollectiveQueue>("shm", rank, nullptr, options.inline_when_idle);
  senders_.resize(size_t(size));
}

ShmCommunicator::~ShmCommunicator() {  // before the segments are unmapped
  senders_.clear();
  queue_.reset();
}

template <typename MakeWork, typename Run>
WorkPtr ShmCommunicator::enqueue_as(MakeWork make_work, size_t bytes, Run run) {
  std::lock_guard lk(mu_);
  const uint64_t seq = next_seq_++;
  WorkPtr work = make_work(seq);
  queue_->push(
      work,
      [this, run = std::move(run)](uint32_t) mutable {
        deadline_ = {};  // set by the first late step (shm_wait): the clock only when waiting
        try {
          run();
        } catch (...) {
          // The peers waiting on this rank's steps would otherwise wait out their timeout.
          shm_fail(segments_[size_t(rank_)].header());
          throw;
        }
      },
      uint32_t(seq), bytes <= options_.inline_max_bytes);
  return work;
}

template <typename Run>
WorkPtr ShmCommunicator::enqueue(const std::string& op, const Tensor* t, const std::string& extra,
                                 Run run) {
  // The transport's own wait ends first, with the more precise error (who is missing).
  return enqueue_as(
      [&](uint64_t seq) { return new_work(op, seq, t, extra, timeout_ + kWorkGrace); },
      t == nullptr ? 0 : t->nbytes(), std::move(run));
}

void ShmCommunicator::step() {
  shm_arrive(segments_[size_t(rank_)].header());
  ++steps_;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const ShmHeader& peer = segments_[size_t(r)].header();
    const ShmWait result = shm_wait(peer, steps_, deadline_, timeout_, spin_);
    if (result == ShmWait::kReached) continue;
    const std::string why =
        detail::shm_wait_failure(result, r, peer, str("reach step ", steps_), timeout_);
    // A late peer may still be alive and merely slow: only a known failure is recorded as its.
    if (result != ShmWait::kTimedOut) detail::record_peer_failure(r);
    ::tandem::detail::fail<DistributedError>(why);
  }
}

char* ShmCommunicator::buffer(int rank) const {
  return segments_[size_t(rank)].data() + (rounds_ % 2) * options_.buffer_bytes;
}

char* ShmCommunicator::channel(int src, int dst) const {
  return segments_[size_t(dst)].data() + 2 * options_.buffer_bytes +
         size_t(src) * options_.channel.bytes();
}

int64_t ShmCommunicator::capacity(size_t element_size) const {
  const auto per_rank = int64_t(options_.buffer_bytes / element_size) / size_;
  return per_rank * size_;
}

WorkPtr ShmCommunicator::all_reduce(Tensor& tensor, ReduceOp op) {
  check_all_reduce(tensor, op);
  return enqueue("all_reduce", &tensor, name(op), [this, t = tensor, op]() mutable {
    Tensor host = staged(t);
    const detail::ShmPiece whole{bytes_of(host), host.numel()};
    all_reduce_pieces({&whole, 1}, host.numel(), host.dtype(), op);
    unstage(t, host);
  });
}

WorkPtr ShmCommunicator::all_reduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op) {
  check_all_reduce_coalesced(tensors, op);
  if (!tensors.front().device().is_cpu()) return nullptr;
  std::vector<detail::ShmPiece> pieces;
  int64_t count = 0;
  for (const Tensor& t : tensors) {
    pieces.push_back({bytes_of(t), t.numel()});
    count += t.numel();
  }
  const DType dtype = tensors.front().dtype();
  const std::string extra = str(name(op), ", ", tensors.size(), " tensors");
  return enqueue_as(
      [&](uint64_t seq) {
        return new_work("all_reduce", seq, count, dtype, extra, timeout_ + kWorkGrace);
      },
      size_t(count) * element_size(dtype),
      [this, ts = tensors, pieces = std::move(pieces), count, dtype, op]() mutable {
        all_reduce_pieces(pieces, count, dtype, op);
        for (Tensor& t : ts) unstage(t, t);  // a new version for each, as for all_reduce
      });
}

WorkPtr ShmCommunicator::broadcast(Tensor& tensor, int root) {
  check_broadcast(tensor, root);
  return enqueue("broadcast", &tensor, "root " + std::to_string(root),
                 [this, t = tensor, root]() mutable {
                   Tensor host = staged(t);
                   const size_t es = element_size(host.dtype());
                   const int64_t cap = capacity(es);
                   for (int64_t off = 0; off < host.numel(); off += cap) {
                     const size_t n = size_t(std::min(cap, host.numel() - off)) * es;
                     char* at = bytes_of(host) + size_t(off) * es;
                     if (rank_ == root) shm_copy(buffer(rank_), at, n);
                     step();
                     if (rank_ != root) shm_copy(at, buffer(root), n);
                     ++rounds_;
                   }
                   if (rank_ != root) unstage(t, host);
                 });
}

WorkPtr ShmCommunicator::all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  check_all_gather(outputs, input);
  return enqueue("all_gather", &input, "", [this, in = input, outs = outputs]() mutable {
    const Tensor host_in = staged(in);
    std::vector<Tensor> host_outs;
    for (const Tensor& o : outs) host_outs.push_back(staged(o));
    const size_t es = element_size(in.dtype());
    const int64_t cap = capacity(es);
    for (int64_t off = 0; off < in.numel(); off += cap) {
      const size_t n = size_t(std::min(cap, in.numel() - off)) * es;
      shm_copy(buffer(rank_), bytes_of(host_in) + size_t(off) * es, n);
      step();
      for (int r = 0; r < size_; ++r)
        shm_copy(bytes_of(host_outs[size_t(r)]) + size_t(off) * es, buffer(r), n);
      ++rounds_;
    }
    for (int r = 0; r < size_; ++r) unstage(outs[size_t(r)], host_outs[size_t(r)]);
  });
}

WorkPtr ShmCommunicator::reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) {
  check_reduce_scatter(output, input, op);
  return enqueue(
      "reduce_scatter", &input, name(op), [this, in = input, out = output, op]() mutable {
        const Tensor host_in = staged(in);
        Tensor host_out = staged(out);
        const detail::ShmPiece whole{bytes_of(host_in), host_in.numel()};
        reduce_scatter_pieces({&whole, 1}, out.numel(), in.dtype(), op, bytes_of(host_out));
        unstage(out, host_out);
      });
}

WorkPtr ShmCommunicator::reduce_scatter_coalesced(Tensor& output, std::vector<Tensor>& inputs,
                                                  ReduceOp op) {
  check_reduce_scatter_coalesced(output, inputs, op);
  if (!output.device().is_cpu()) return nullptr;
  std::vector<detail::ShmPiece> pieces;
  for (const Tensor& t : inputs) pieces.push_back({bytes_of(t), t.numel()});
  const int64_t count = output.numel() * size_;
  const DType dtype = output.dtype();
  const std::string extra = str(name(op), ", ", inputs.size(), " tensors");
  return enqueue_as(
      [&](uint64_t seq) {
        return new_work("reduce_scatter", seq, count, dtype, extra, timeout_ + kWorkGrace);
      },
      size_t(count) * element_size(dtype),
      // The inputs are held until it is done: they are read in place.
      [this, ins = inputs, out = output, pieces = std::move(pieces), dtype, op]() mutable {
        reduce_scatter_pieces(pieces, out.numel(), dtype, op, bytes_of(out));
        unstage(out, out);  // a new version, as for reduce_scatter
      });
}

WorkPtr ShmCommunicator::all_gather_in_place(std::vector<Tensor>& tensors, int64_t chunk) {
  check_all_gather_in_place(tensors, chunk);
  if (!tensors.front().device().is_cpu()) return nullptr;
  std::vector<detail::ShmPiece> pieces;
  for (const Tensor& t : tensors) pieces.push_back({bytes_of(t), t.numel()});
  const DType dtype = tensors.front().dtype();
  const std::string extra = str(tensors.size(), " tensors in place");
  return enqueue_as(
      [&](uint64_t seq) {
        return new_work("all_gather", seq, chunk, dtype, extra, timeout_ + kWorkGrace);
      },
      size_t(chunk * size_) * element_size(dtype),
      [this, ts = tensors, pieces = std::move(pieces), chunk, dtype]() mutable {
        all_gather_pieces(pieces, chunk, dtype);
        for (Tensor& t : ts) unstage(t, t);
      });
}

WorkPtr ShmCommunicator::all_to_all(Tensor& output, const Tensor& input) {
  check_all_to_all(output, input);
  return enqueue("all_to_all", &input, "", [this, in = input, out = output]() mutable {
    const Tensor host_in = staged(in);
    Tensor host_out = staged(out);
    const size_t es = element_size(in.dtype());
    const int64_t chunk = in.numel() / size_;
    const int64_t piece = capacity(es) / size_;
    for (int64_t off = 0; off < chunk; off += piece) {
      const int64_t m = std::min(piece, chunk - off);
      for (int j = 0; j < size_; ++j)
        shm_copy(buffer(rank_) + size_t(j * m) * es,
                 bytes_of(host_in) + size_t(j * chunk + off) * es, size_t(m) * es);
      step();
      for (int r = 0; r < size_; ++r)  // rank r's piece for this rank
        shm_copy(bytes_of(host_out) + size_t(r * chunk + off) * es,
                 buffer(r) + size_t(rank_ * m) * es, size_t(m) * es);
      ++rounds_;
    }
    unstage(out, host_out);
  });
}

WorkPtr ShmCommunicator::all_to_all_v(Tensor& output, const Tensor& input,
                                      const std::vector<int64_t>& output_splits,
                                      const std::vector<int64_t>& input_splits) {
  const int64_t sent = check_all_to_all_v(output, input, output_splits, input_splits);
  int64_t per_row = 1;
  for (int64_t d = 1; d < input.dim(); ++d) per_row *= input.size(d);
  return enqueue_as(
      [&](uint64_t seq) {
        return new_work("all_to_all_v", seq, sent, input.dtype(), "", timeout_ + kWorkGrace);
      },
      size_t(sent) * element_size(input.dtype()),
      [this, in = input, out = output, ins = input_splits, outs = output_splits,
       per_row]() mutable {
        const Tensor host_in = staged(in);
        Tensor host_out = staged(out);
        all_to_all_v_rounds(host_in, host_out, ins, outs, per_row);
        unstage(out, host_out);
      });
}

WorkPtr ShmCommunicator::barrier() {
  return enqueue("barrier", nullptr, "", [this] { step(); });
}

WorkPtr ShmCommunicator::send(const Tensor& tensor, int dst) {
  check_tensor(tensor, "send");
  check_peer(dst, "send");
  // The copy the sender's thread streams from: the caller may write `tensor` once this returns.
  Tensor copy = tensor.device().is_cpu() ? tensor.clone() : staged(tensor);
  std::lock_guard lk(mu_);
  const uint64_t n = sent_[size_t(dst)]++;
  auto work = message_work("send", n, tensor, dst);
  std::unique_ptr<detail::ShmSender>& sender = senders_[size_t(dst)];
  if (!sender)
    sender = std::make_unique<detail::ShmSender>(channel(rank_, dst), options_.channel,
                                                 segments_[size_t(dst)].header(), dst, timeout_);
  try {
    sender->post(std::move(copy));
    work->mark_done();
  } catch (...) {
    work->mark_done(std::current_exception());
  }
  return work;
}

WorkPtr ShmCommunicator::recv(Tensor& tensor, int src) {
  check_tensor(tensor, "recv");
  check_peer(src, "recv");
  std::lock_guard lk(mu_);
  const uint64_t n = received_[size_t(src)]++;
  auto work = message_work("recv", n, tensor, src);
  queue_->push(
      work,
      [this, t = tensor, src](uint32_t) mutable {
        Tensor host = staged(t);
        uint64_t given = 0;
        const ShmHeader& sender = segments_[size_t(src)].header();
        const ShmWait result =
            detail::channel_read(channel(src, rank_), options_.channel, host.data_ptr(),
                                 uint64_t(host.nbytes()), given, sender, timeout_);
        if (result != ShmWait::kReached) {
          if (result != ShmWait::kTimedOut) detail::record_peer_failure(src);
          ::tandem::detail::fail<DistributedError>(
              "shm recv: ", detail::shm_wait_failure(result, src, sender, "send it", timeout_));
        }
        TD_CHECK_SHAPE(given == uint64_t(t.nbytes()), "shm recv: rank ", src, " sent ", given,
                       " bytes, but this rank expects ", ::tandem::describe(t), " (", t.nbytes(),
                       " bytes)");
        unstage(t, host);
      },
      uint32_t(n));
  return work;
}

// A sub-group meets under its own name in this group's store, and maps segments of its own.
std::shared_ptr<Communicator> ShmCommunicator::make_subgroup(const std::vector<int>& ranks,
                                                             int index, const std::string& name) {
  if (index < 0) return nullptr;
  return std::make_shared<ShmCommunicator>(std::make_shared<PrefixStore>(name, store_), index,
                                           int(ranks.size()), options_);
}

}  // namespace tandem::parallel
