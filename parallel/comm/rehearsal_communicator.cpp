// parallel/comm/rehearsal_communicator.cpp — meta collectives done at once, the rest underneath.
#include <tandem/parallel/comm/rehearsal_communicator.h>

namespace tandem::parallel {
namespace {

bool on_meta(const Tensor& t) { return t.defined() && t.device().is_meta(); }

int64_t elements(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += t.numel();
  return n;
}

}  // namespace

RehearsalCommunicator::RehearsalCommunicator(std::shared_ptr<Communicator> inner)
    : Communicator(inner->rank(), inner->size(), inner->timeout()),
      inner_(std::move(inner)),
      members_(size_t(size_)),
      sent_(size_t(size_), 0),
      received_(size_t(size_), 0) {
  for (int i = 0; i < size_; ++i) members_[size_t(i)] = i;  // the world, until a parent says
}

WorkPtr RehearsalCommunicator::told(WorkPtr w, const std::string& op, uint64_t bytes, int peer) {
  if (!observer_) return w;
  const int to = peer < 0 ? -1 : members_[size_t(peer)];
  const uint64_t id = observer_->issued({.op = op,
                                         .bytes = bytes,
                                         .wire = wire_bytes(op, bytes, size_),
                                         .members = members_,
                                         .peer = to});
  w->on_wait([observer = observer_, id] { observer->waited(id); });
  return w;
}

WorkPtr RehearsalCommunicator::done(const std::string& op, const Tensor* t,
                                    const std::string& extra) {
  WorkPtr w = new_work(op, next_seq_++, t, extra, timeout_);
  w->mark_done();
  return t == nullptr ? w : told(w, op, uint64_t(t->numel()) * element_size(t->dtype()));
}

WorkPtr RehearsalCommunicator::done(const std::string& op, int64_t numel, DType dtype,
                                    const std::string& extra) {
  WorkPtr w = new_work(op, next_seq_++, numel, dtype, extra, timeout_);
  w->mark_done();
  return told(w, op, uint64_t(numel) * element_size(dtype));
}

WorkPtr RehearsalCommunicator::all_reduce(Tensor& tensor, ReduceOp op) {
  check_all_reduce(tensor, op);
  return on_meta(tensor) ? done("all_reduce", &tensor) : inner_->all_reduce(tensor, op);
}

WorkPtr RehearsalCommunicator::all_reduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op) {
  check_all_reduce_coalesced(tensors, op);
  if (!on_meta(tensors.front())) return inner_->all_reduce_coalesced(tensors, op);
  return done("all_reduce", elements(tensors), tensors.front().dtype(), "coalesced");
}

WorkPtr RehearsalCommunicator::broadcast(Tensor& tensor, int root) {
  check_broadcast(tensor, root);
  return on_meta(tensor) ? done("broadcast", &tensor) : inner_->broadcast(tensor, root);
}

WorkPtr RehearsalCommunicator::all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  check_all_gather(outputs, input);
  return on_meta(input) ? done("all_gather", &input) : inner_->all_gather(outputs, input);
}

WorkPtr RehearsalCommunicator::reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) {
  check_reduce_scatter(output, input, op);
  return on_meta(input) ? done("reduce_scatter", &input)
                        : inner_->reduce_scatter(output, input, op);
}

WorkPtr RehearsalCommunicator::reduce_scatter_coalesced(Tensor& output, std::vector<Tensor>& inputs,
                                                        ReduceOp op) {
  check_reduce_scatter_coalesced(output, inputs, op);
  if (!on_meta(output)) return inner_->reduce_scatter_coalesced(output, inputs, op);
  return done("reduce_scatter", output.numel() * size_, output.dtype(), "coalesced");
}

WorkPtr RehearsalCommunicator::all_gather_in_place(std::vector<Tensor>& tensors, int64_t chunk) {
  check_all_gather_in_place(tensors, chunk);
  if (!on_meta(tensors.front())) return inner_->all_gather_in_place(tensors, chunk);
  return done("all_gather", chunk, tensors.front().dtype(), "in place");
}

WorkPtr RehearsalCommunicator::all_to_all(Tensor& output, const Tensor& input) {
  check_all_to_all(output, input);
  return on_meta(input) ? done("all_to_all", &input) : inner_->all_to_all(output, input);
}

WorkPtr RehearsalCommunicator::all_to_all_v(Tensor& output, const Tensor& input,
                                            const std::vector<int64_t>& output_splits,
                                            const std::vector<int64_t>& input_splits) {
  const int64_t sent = check_all_to_all_v(output, input, output_splits, input_splits);
  if (!on_meta(input)) return inner_->all_to_all_v(output, input, output_splits, input_splits);
  return done("all_to_all_v", sent, input.dtype(), "");
}

WorkPtr RehearsalCommunicator::barrier() { return inner_->barrier(); }

WorkPtr RehearsalCommunicator::send(const Tensor& tensor, int dst) {
  check_peer(dst, "send");
  if (!on_meta(tensor)) return inner_->send(tensor, dst);
  WorkPtr w = message_work("send", sent_[size_t(dst)]++, tensor, dst);
  w->mark_done();
  return told(w, "send", uint64_t(tensor.numel()) * element_size(tensor.dtype()), dst);
}

WorkPtr RehearsalCommunicator::recv(Tensor& tensor, int src) {
  check_peer(src, "recv");
  if (!on_meta(tensor)) return inner_->recv(tensor, src);
  WorkPtr w = message_work("recv", received_[size_t(src)]++, tensor, src);
  w->mark_done();
  return told(w, "recv", uint64_t(tensor.numel()) * element_size(tensor.dtype()), src);
}

std::shared_ptr<Communicator> RehearsalCommunicator::make_subgroup(const std::vector<int>& ranks,
                                                                   int, const std::string&) {
  std::shared_ptr<Communicator> inner = inner_->new_group(ranks);  // every rank calls it
  if (!inner) return nullptr;
  auto child = std::make_shared<RehearsalCommunicator>(std::move(inner));
  for (size_t i = 0; i < ranks.size(); ++i) child->members_[i] = members_[size_t(ranks[i])];
  child->observer_ = observer_;
  const std::lock_guard<std::mutex> lock(children_mu_);
  children_.push_back(child);
  return child;
}

CommStats RehearsalCommunicator::wire() const {
  CommStats all = stats();
  const std::lock_guard<std::mutex> lock(children_mu_);
  for (const auto& child : children_)
    for (const auto& [op, e] : child->wire().ops) {
      all.ops[op].calls += e.calls;
      all.ops[op].bytes += e.bytes;
    }
  return all;
}

}  // namespace tandem::parallel
