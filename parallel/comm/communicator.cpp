// parallel/comm/communicator.cpp — Work (a completion flag with a deadline) and the checks and
// descriptions every backend shares.
#include <tandem/core/check.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/parallel/comm/blocked_time.h>
#include <tandem/parallel/comm/communicator.h>
#include <algorithm>
#include <cstdio>

namespace tandem::parallel {

Work::Work(CollectiveInfo info, std::chrono::milliseconds timeout)
    : info_(std::move(info)), timeout_(timeout) {}

const std::string& Work::description() const {
  std::call_once(described_, [&] { description_ = info_.text(); });
  return description_;
}

void Work::wait(std::chrono::milliseconds timeout) {
  if (on_wait_) on_wait_();
  if (!done_.load(std::memory_order_acquire)) {
    const auto from = std::chrono::steady_clock::now();
    std::unique_lock lk(mu_);
    const bool done = cv_.wait_for(lk, timeout, [&] { return done_.load(); });
    detail::note_blocked(from, std::chrono::steady_clock::now());
    TD_CHECK_AS(DistributedError, done, description(), " did not complete within ",
                timeout.count() / 1000.0,
                " s (timeout)\n  hint: a rank that stopped calling collectives, or called them "
                "in a different order, leaves the others waiting; compare the sequence numbers");
  }
  if (error_) std::rethrow_exception(error_);
}

void Work::mark_done(std::exception_ptr error) {
  {
    std::lock_guard lk(mu_);
    if (done_.load(std::memory_order_relaxed)) return;  // the first completion stands
    error_ = std::move(error);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

Communicator::Communicator(int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), timeout_(timeout) {
  TD_CHECK_VALUE(size >= 1 && rank >= 0 && rank < size, "Communicator: rank ", rank,
                 " is not in a world of size ", size);
}

Communicator::~Communicator() = default;

void Communicator::check_tensor(const Tensor& t, const std::string& what) const {
  TD_CHECK_VALUE(t.defined(), backend(), " ", what, ": the tensor is undefined");
  TD_CHECK_VALUE(t.is_contiguous(), backend(), " ", what,
                 ": expected a contiguous tensor, but got ", ::tandem::describe(t),
                 " with strides ", t.strides(),
                 "\n  hint: call .contiguous() first; a collective works on the memory in place");
  TD_CHECK_DTYPE(t.dtype() != kBool, backend(), " ", what, ": ", t.dtype(),
                 " is not supported (float32, float64, int64, bfloat16, float16 are)");
}

void Communicator::check_reduce_op(ReduceOp op, const std::string& what) const {
  TD_CHECK_VALUE(op != ReduceOp::ArgMax, backend(), " ", what,
                 ": argmax is a reduction of one tensor, not across ranks (sum, mean, max, min)");
}

void Communicator::check_all_reduce(const Tensor& t, ReduceOp op) const {
  check_tensor(t, "all_reduce");
  check_reduce_op(op, "all_reduce");
  TD_CHECK_DTYPE(op != ReduceOp::Mean || t.dtype() != DType::i64, backend(),
                 " all_reduce: mean needs a floating tensor, but got int64");
}

int64_t Communicator::check_one_array(const std::vector<Tensor>& tensors,
                                      const std::string& what) const {
  TD_CHECK_VALUE(!tensors.empty(), backend(), " ", what, ": no tensors");
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];  // the message names the tensor: built only for an error
    if (!t.defined() || !t.is_contiguous() || t.dtype() == kBool)
      check_tensor(t, str(what, " (tensor ", i, ")"));
    TD_CHECK_DTYPE(t.dtype() == tensors[0].dtype(), backend(), " ", what, ": tensor ", i, " is ",
                   ::tandem::describe(t), " but tensor 0 is ", ::tandem::describe(tensors[0]),
                   "; one dtype for all");
    TD_CHECK_DEVICE(t.device() == tensors[0].device(), backend(), " ", what, ": tensor ", i,
                    " is on ", t.device(), " but tensor 0 is on ", tensors[0].device(),
                    "; one device for all");
    total += t.numel();
  }
  // Overlapping tensors would hold one element twice: sorted by address, each must begin where
  // every earlier one has ended.
  std::vector<size_t> order;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].nbytes() > 0) order.push_back(i);
  auto begin = [&](size_t i) { return static_cast<const char*>(tensors[i].address()); };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return begin(a) < begin(b); });
  for (size_t k = 1, last = order.empty() ? 0 : order[0]; k < order.size(); ++k) {
    const size_t i = order[k];
    TD_CHECK_VALUE(begin(last) + tensors[last].nbytes() <= begin(i), backend(), " ", what,
                   ": tensors ", std::min(last, i), " and ", std::max(last, i),
                   " overlap in memory; each element must be in one tensor");
    last = i;
  }
  return total;
}

void Communicator::check_all_reduce_coalesced(const std::vector<Tensor>& tensors,
                                              ReduceOp op) const {
  check_reduce_op(op, "all_reduce_coalesced");
  check_one_array(tensors, "all_reduce_coalesced");
  TD_CHECK_DTYPE(op != ReduceOp::Mean || tensors[0].dtype() != DType::i64, backend(),
                 " all_reduce_coalesced: mean needs floating tensors, but got int64");
}

WorkPtr Communicator::all_reduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op) {
  check_all_reduce_coalesced(tensors, op);  // the same errors whether or not a backend has it
  return nullptr;
}

void Communicator::check_reduce_scatter_coalesced(const Tensor& output,
                                                  const std::vector<Tensor>& inputs,
                                                  ReduceOp op) const {
  const std::string what = "reduce_scatter_coalesced";
  check_reduce_op(op, what);
  check_tensor(output, what + " (output)");
  const int64_t total = check_one_array(inputs, what);
  TD_CHECK_DTYPE(inputs[0].dtype() == output.dtype() && inputs[0].device() == output.device(),
                 backend(), " ", what, ": the output is ", ::tandem::describe(output),
                 " but the inputs are ", ::tandem::describe(inputs[0]), "; one dtype and device");
  TD_CHECK_DTYPE(op != ReduceOp::Mean || output.dtype() != DType::i64, backend(), " ", what,
                 ": mean needs floating tensors, but got int64");
  const int64_t chunk = output.numel();
  TD_CHECK_SHAPE(total <= chunk * size_, backend(), " ", what, ": the inputs hold ", total,
                 " elements, more than ", size_, " chunks shaped like the output ",
                 ::tandem::describe(output));
  // The output may be this rank's chunk of the inputs itself, and nothing else of them.
  const size_t es = element_size(output.dtype());
  const char* out = static_cast<const char*>(output.address());
  int64_t start = 0;  // where input k begins in the array
  for (size_t k = 0; k < inputs.size(); ++k) {
    const char* in = static_cast<const char*>(inputs[k].address());
    const int64_t n = inputs[k].numel();
    if (chunk > 0 && n > 0 && out < in + size_t(n) * es && in < out + size_t(chunk) * es) {
      const auto at = (out - in) / std::ptrdiff_t(es);  // the output's place in input k
      TD_CHECK_VALUE(out >= in && (out - in) % std::ptrdiff_t(es) == 0 &&
                         start + at == rank_ * chunk && at + chunk <= n,
                     backend(), " ", what, ": the output overlaps input ", k,
                     " but is not this rank's chunk of the inputs (elements [", rank_ * chunk, ", ",
                     (rank_ + 1) * chunk, ") of the array); it must be that or apart");
    }
    start += n;
  }
}

WorkPtr Communicator::reduce_scatter_coalesced(Tensor& output, std::vector<Tensor>& inputs,
                                               ReduceOp op) {
  check_reduce_scatter_coalesced(output, inputs, op);
  return nullptr;
}

void Communicator::check_all_gather_in_place(const std::vector<Tensor>& tensors,
                                             int64_t chunk) const {
  const int64_t total = check_one_array(tensors, "all_gather_in_place");
  TD_CHECK_VALUE(chunk >= 0 && total <= chunk * size_, backend(),
                 " all_gather_in_place: the tensors hold ", total, " elements, more than ", size_,
                 " chunks of ", chunk);
}

WorkPtr Communicator::all_gather_in_place(std::vector<Tensor>& tensors, int64_t chunk) {
  check_all_gather_in_place(tensors, chunk);
  return nullptr;
}

void Communicator::check_broadcast(const Tensor& t, int root) const {
  check_tensor(t, "broadcast");
  TD_CHECK_VALUE(root >= 0 && root < size_, backend(), " broadcast: root ", root,
                 " is not a rank of a world of size ", size_);
}

void Communicator::check_all_gather(const std::vector<Tensor>& outputs, const Tensor& input) const {
  check_tensor(input, "all_gather");
  TD_CHECK_VALUE(int(outputs.size()) == size_, backend(), " all_gather: expected ", size_,
                 " output tensors (one per rank), but got ", outputs.size());
  for (const Tensor& o : outputs) {
    check_tensor(o, "all_gather");
    TD_CHECK_SHAPE(o.shape() == input.shape() && o.dtype() == input.dtype(), backend(),
                   " all_gather: every output must match the input ", ::tandem::describe(input),
                   ", but one is ", ::tandem::describe(o));
  }
}

void Communicator::check_reduce_scatter(const Tensor& output, const Tensor& input,
                                        ReduceOp op) const {
  check_tensor(input, "reduce_scatter");
  check_tensor(output, "reduce_scatter");
  check_reduce_op(op, "reduce_scatter");
  TD_CHECK_SHAPE(input.numel() == output.numel() * size_ && input.dtype() == output.dtype(),
                 backend(), " reduce_scatter: the input must hold ", size_,
                 " chunks shaped like the output ", ::tandem::describe(output), ", but it is ",
                 ::tandem::describe(input));
  TD_CHECK_DTYPE(op != ReduceOp::Mean || input.dtype() != DType::i64, backend(),
                 " reduce_scatter: mean needs a floating tensor, but got int64");
}

uint64_t wire_bytes(const std::string& op, uint64_t bytes, int n) {
  if (n <= 1) return 0;
  if (op == "all_reduce") return 2 * (uint64_t(n) - 1) * bytes / uint64_t(n);
  if (op == "reduce_scatter" || op == "all_to_all") return (uint64_t(n) - 1) * bytes / uint64_t(n);
  if (op == "all_to_all_v") return bytes;  // its Work counts what goes to the others
  if (op == "all_gather") return (uint64_t(n) - 1) * bytes;
  if (op == "broadcast" || op == "send") return bytes;
  return 0;  // barrier, recv
}

namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

}  // namespace

uint64_t CommStats::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [op, e] : ops) total += e.bytes;
  return total;
}

std::string CommStats::str() const {
  std::string s;
  for (const auto& [op, e] : ops)
    s += (s.empty() ? "" : ", ") + op + " " + std::to_string(e.calls) + " calls " +
         human_bytes(double(e.bytes));
  return s.empty() ? "none" : s;
}

CommStats Communicator::stats() const {
  std::lock_guard lk(stats_mu_);
  return stats_;
}

WorkPtr Communicator::new_work(const std::string& op, uint64_t seq, const Tensor* t,
                               const std::string& extra, std::chrono::milliseconds timeout) {
  if (t != nullptr) return new_work(op, seq, t->numel(), t->dtype(), extra, timeout);
  {
    std::lock_guard lk(stats_mu_);
    ++stats_.ops[op].calls;
  }
  return std::make_shared<Work>(info(op, seq, nullptr, extra), timeout);
}

WorkPtr Communicator::new_work(const std::string& op, uint64_t seq, int64_t numel, DType dtype,
                               const std::string& extra, std::chrono::milliseconds timeout) {
  const uint64_t bytes = wire_bytes(op, uint64_t(numel) * element_size(dtype), size_);
  {
    std::lock_guard lk(stats_mu_);
    CommStats::Entry& e = stats_.ops[op];
    ++e.calls;
    e.bytes += bytes;
  }
  // The trace shows each collective by its description, so the wire bytes go in it; formatted
  // only when asked for, like the rest of it.
  CollectiveInfo i = info(op, seq, nullptr, extra, bytes);
  i.has_tensor = true, i.numel = numel, i.dtype = dtype;
  return std::make_shared<Work>(std::move(i), timeout);
}

WorkPtr Communicator::message_work(const std::string& op, uint64_t n, const Tensor& t, int peer) {
  const std::string to = (op == "send" ? "to rank " : "from rank ") + std::to_string(peer);
  return new_work(op, n, &t, to, timeout_);
}

void Communicator::check_all_to_all(const Tensor& output, const Tensor& input) const {
  check_tensor(input, "all_to_all");
  check_tensor(output, "all_to_all");
  TD_CHECK_SHAPE(output.shape() == input.shape() && output.dtype() == input.dtype(), backend(),
                 " all_to_all: the output ", ::tandem::describe(output),
                 " must be shaped like the input ", ::tandem::describe(input));
  TD_CHECK_SHAPE(input.dim() >= 1 && input.size(0) % size_ == 0, backend(),
                 " all_to_all: dim 0 of the input ", ::tandem::describe(input), " must split into ",
                 size_, " equal chunks, one per rank");
}

void Communicator::check_peer(int peer, const std::string& what) const {
  TD_CHECK_VALUE(peer >= 0 && peer < size_ && peer != rank_, backend(), " ", what, ": rank ", rank_,
                 " cannot exchange with rank ", peer, " (the group has ranks 0..", size_ - 1,
                 ", and a rank does not message itself)");
}

std::string Communicator::describe(const std::string& op, uint64_t seq, const Tensor* t,
                                   const std::string& extra) const {
  return info(op, seq, t, extra).text();
}

CollectiveInfo Communicator::info(const std::string& op, uint64_t seq, const Tensor* t,
                                  const std::string& extra, uint64_t wire) const {
  CollectiveInfo i{
      .op = op, .seq = seq, .extra = extra, .wire = wire, .rank = rank_, .size = size_};
  if (t != nullptr) i.has_tensor = true, i.numel = t->numel(), i.dtype = t->dtype();
  return i;
}

std::string CollectiveInfo::text() const {
  std::string e = extra;
  if (wire > 0) e += (e.empty() ? "" : ", ") + human_bytes(double(wire)) + " on the wire";
  std::string s = op + " #" + std::to_string(seq) + " (";
  if (!e.empty()) s += e + (has_tensor ? ", " : "");
  if (has_tensor) {
    char mib[32];
    std::snprintf(mib, sizeof(mib), "%.2f MiB",
                  double(numel) * double(element_size(dtype)) / (1 << 20));
    s += str(numel, " x ", dtype, " = ", mib);
  }
  return s + ") on rank " + std::to_string(rank) + " of " + std::to_string(size);
}

std::shared_ptr<Communicator> Communicator::new_group(const std::vector<int>& ranks) {
  TD_CHECK_VALUE(!ranks.empty(), "new_group: no ranks");
  for (size_t i = 0; i < ranks.size(); ++i)
    TD_CHECK_VALUE(ranks[i] >= 0 && ranks[i] < size_ && (i == 0 || ranks[i] > ranks[i - 1]),
                   "new_group: ranks must be ascending, without repeats, in [0, ", size_, "); got ",
                   ranks[i], " at position ", i);
  int index = -1;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == rank_) index = int(i);
  return make_subgroup(ranks, index, "sub" + std::to_string(subgroups_++));
}

std::shared_ptr<Communicator> Communicator::make_subgroup(const std::vector<int>&, int,
                                                          const std::string&) {
  TD_CHECK_AS(DistributedError, false, "new_group: the ", backend(),
              " backend has no sub-groups (the thread, shm, gloo, mpi and nccl backends have)");
  return nullptr;
}

}  // namespace tandem::parallel
