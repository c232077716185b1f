// parallel/ddp/reducer.cpp — bucket bookkeeping for one backward pass: copy in, launch in order,
// wait, copy out. Everything runs on the thread running backward; only the all-reduces run
// elsewhere (the communicator's thread or stream).
#include <tandem/autograd/engine.h>
#include <tandem/core/check.h>
#include <tandem/core/trace.h>
#include <tandem/parallel/ddp/reducer.h>
#include <algorithm>

namespace tandem::parallel {

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names,
                 std::vector<std::vector<size_t>> buckets, std::shared_ptr<Communicator> comm,
                 bool find_unused_parameters, std::shared_ptr<CommHook> hook,
                 std::shared_ptr<ZeroShards> zero, bool grad_as_bucket_view)
    : params_(std::move(params)),
      names_(std::move(names)),
      bucket_of_(params_.size()),
      slot_of_(params_.size()),
      ready_(params_.size()),
      copied_(params_.size()),
      had_grad_(params_.size()),
      comm_(std::move(comm)),
      hook_(hook ? std::move(hook) : allreduce_hook()),
      zero_(std::move(zero)),
      find_unused_(find_unused_parameters),
      grad_as_view_(grad_as_bucket_view),
      // Host gradients only: a GPU's go to NCCL, which packs, and their path stays the one
      // measured on GPUs. ZeRO-1 keeps its buffers (the whole gradient between steps). Meta
      // gradients are a host run's rehearsed (tools/plan/), and take the host's path.
      try_in_place_((!zero_ || zero_->stage() == 2) && !grad_as_bucket_view &&
                    std::all_of(params_.begin(), params_.end(),
                                [](const Tensor& p) { return !p.device().is_cuda(); })) {
  for (auto& indices : buckets) {
    Bucket b;
    b.view.index = buckets_.size();
    int64_t total = 0;
    for (size_t i : indices) {
      bucket_of_[i] = buckets_.size();
      slot_of_[i] = b.view.offsets.size();
      b.view.offsets.push_back(total);
      b.view.parameters.push_back(params_[i]);
      total += params_[i].numel();
    }
    b.params = std::move(indices);
    // ZeRO pads the buffer to a multiple of the world size (the padding stays zero); stage 2
    // allocates it when the bucket's first gradient arrives (allocate_buffer).
    if (zero_) total = zero_->padded_size(buckets_.size());
    b.size = total;
    if (zero_ ? zero_->stage() == 1 : !try_in_place_) allocate_buffer(b);
    buckets_.push_back(std::move(b));
  }
  if (find_unused_ && !params_.empty())
    used_ = zeros({int64_t(params_.size())}, {.device = params_.front().device()});
  reset_iteration();
}

void Reducer::allocate_buffer(Bucket& b) {
  const Tensor& first = params_[b.params.front()];
  b.view.buffer = zeros({b.size}, {.dtype = first.dtype(), .device = first.device()});
}

void Reducer::wait_all_quietly() {
  for (Bucket& b : buckets_) {
    if (!b.work) continue;
    try {
      b.work->wait();
    } catch (...) {  // the caller is already failing (or recovering from a failure)
    }
  }
}

void Reducer::recover_from_failed_backward() {
  std::lock_guard lk(mutex_);
  if (!in_backward_) return;
  wait_all_quietly();
  reset_iteration();
}

void Reducer::reset_iteration() {
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.work = nullptr;
    b.in_place.clear();
    if (zero_ && zero_->stage() == 2) b.view.buffer = Tensor();  // reduced: free it
  }
  std::fill(ready_.begin(), ready_.end(), false);
  std::fill(copied_.begin(), copied_.end(), false);
  std::fill(had_grad_.begin(), had_grad_.end(), false);
  next_launch_ = 0;
  released_ = 0;
  in_backward_ = false;
}

void Reducer::ready(size_t i) {
  Bucket& b = buckets_[bucket_of_[i]];
  if (!try_in_place_) copy_in(i);
  ready_[i] = true;
  if (--b.pending == 0) launch_ready_buckets();
}

void Reducer::copy_in(size_t i) {
  Bucket& b = buckets_[bucket_of_[i]];
  if (!b.view.buffer.defined()) allocate_buffer(b);
  Tensor dst = b.view.buffer.narrow(0, b.view.offsets[slot_of_[i]], params_[i].numel());
  const Tensor g = params_[i].grad();
  if (!g.defined()) {  // unused on this rank (find_unused_parameters): zeros
    dst.fill_(0);
  } else {
    if (g.address() != dst.address()) dst.copy_(g.reshape({params_[i].numel()}));
    // ZeRO: the whole gradient is in the bucket now; only this rank's chunk comes back.
    if (zero_) params_[i].set_grad(Tensor());
    // gradient_as_bucket_view: .grad becomes its slice of the bucket, and backward's own copy
    // goes (a later backward without zero_grad() accumulates into the slice in place).
    if (grad_as_view_) params_[i].set_grad(dst.view(params_[i].shape()));
  }
  copied_[i] = true;
}

void Reducer::launch_ready_buckets() {
  if (hook_->after_backward()) return;  // finish() launches them all (delay_allreduce)
  // In index order only: bucket 3 waits for bucket 2 even if its gradients were ready first,
  // so every rank issues the same collectives in the same order.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0)
    launch(next_launch_++);
}

void Reducer::launch(size_t index) {
  Bucket& b = buckets_[index];
  if (!(try_in_place_ && launch_in_place(b))) {
    for (size_t i : b.params)
      if (!copied_[i]) copy_in(i);  // the gradients left for an in-place launch
    b.work = zero_ ? zero_->reduce_scatter(index, b.view.buffer) : hook_->start(*comm_, b.view);
  }
  if (zero_ && zero_->stage() == 2) release_reduced_buckets(index);
  if (trace::enabled()) trace::instant("bucket " + std::to_string(index) + " launched", "ddp");
}

// The bucket's gradients to the hook (ZeRO-2: to the reduce-scatter) as they lie. False, with
// nothing launched, if it declines: every bucket is packed from then on (the same on every rank:
// it is the backend's or the hook's answer, not the data's).
bool Reducer::launch_in_place(Bucket& b) {
  for (size_t i : b.params) {
    Tensor g = params_[i].grad();
    if (!g.defined()) {
      g = zeros(params_[i].shape(), params_[i].options());  // unused here: finish() hands it over
    } else if (!g.is_contiguous()) {  // a .grad set by hand: reduced as a contiguous copy
      g = g.contiguous();
      params_[i].set_grad(g);
    }
    b.in_place.push_back(std::move(g));
  }
  if (zero_) {
    b.work = zero_->reduce_scatter_gradients(b.view.index, b.in_place);
    // Only this rank's chunk comes back (ZeRO-2): the gradients go as soon as the collective,
    // which holds what it reads until it is done, has reduced them.
    if (b.work) {
      for (size_t i : b.params) params_[i].set_grad(Tensor());
      b.in_place.clear();
    }
  } else {
    b.work = hook_->start_in_place(*comm_, b.in_place);
  }
  if (b.work) return true;
  try_in_place_ = false;
  b.in_place.clear();
  return false;
}

// ZeRO-2: a reduced bucket's buffer is freed as soon as its reduce-scatter is done, and at most two
// buckets are on the wire (DeepSpeed's reduce_bucket_size): backward then holds the gradients of
// two buckets at most, beside this rank's chunks, instead of the whole model's.
void Reducer::release_reduced_buckets(size_t launched) {
  constexpr size_t kInFlight = 2;
  while (released_ < launched) {
    Bucket& b = buckets_[released_];
    if (launched - released_ < kInFlight && !b.work->is_completed()) break;
    b.work->wait();
    b.view.buffer = Tensor();
    b.in_place.clear();  // the gradients reduced where they lay
    ++released_;
  }
}

void Reducer::mark_ready(size_t i) {
  std::lock_guard lk(mutex_);
  if (!sync_) return;  // no_sync(): gradients just accumulate in .grad
  if (!in_backward_) {
    // The first gradient of this backward: have the engine call finalize() when it is done.
    in_backward_ = true;
    queue_callback([this] { finalize(); });
  }
  TD_CHECK_AS(AutogradError, !ready_[i], "DistributedDataParallel: parameter '", names_[i],
              "' received a second gradient in one backward pass\n  hint: call backward() once "
              "per forward, or use no_sync() for the extra passes");
  had_grad_[i] = true;
  ready(i);
}

void Reducer::finalize() {
  std::lock_guard lk(mutex_);
  finish_and_reset();
}

void Reducer::reduce_accumulated() {
  std::lock_guard lk(mutex_);
  TD_CHECK_VALUE(sync_ && !in_backward_, "DistributedDataParallel::reduce_gradients: called ",
                 sync_ ? "inside a backward pass" : "inside no_sync()",
                 "; call it after the backward passes whose gradients it reduces");
  // Each gradient is final: handed over bucket by bucket, in the buckets' order, so each bucket
  // launches as soon as it is full (and ZeRO-2 frees it soon after). A parameter with none is
  // finish()'s to name (or, with find_unused_parameters, to zero).
  for (const Bucket& b : buckets_)
    for (size_t i : b.params)
      if (params_[i].grad().defined()) {
        had_grad_[i] = true;
        ready(i);
      }
  finish_and_reset();
}

void Reducer::finish_and_reset() {
  const trace::Scope span("ddp", trace::enabled() ? "finalize: wait for buckets" : "");
  try {
    finish();
  } catch (...) {
    wait_all_quietly();  // keep the group consistent before failing
    reset_iteration();
    throw;
  }
  reset_iteration();
}

void Reducer::finish() {
  missing_.clear();
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) missing_.push_back(i);
  if (!missing_.empty() && !find_unused_) {
    std::string names;
    for (size_t i : missing_) names += (names.empty() ? "" : ", ") + names_[i];
    ::tandem::detail::fail<DistributedError>(
        "DistributedDataParallel (rank ", comm_->rank(), "): backward produced no gradient for ",
        missing_.size(), " parameter(s): ", names,
        "\n  hint: make every parameter take part in the loss, or construct DDP with "
        ".find_unused_parameters = true (their gradients are then reduced as zeros)");
  }
  // Unused in this backward (maybe used on another rank). A gradient already in .grad (from
  // micro-batches under no_sync()) is this rank's contribution, as in PyTorch's reducer, and marks
  // the parameter used; with none, zeros, so the buckets can go.
  for (size_t i : missing_) {
    const bool accumulated = params_[i].grad().defined();
    had_grad_[i] = had_grad_[i] || accumulated;
    ready(i);
  }
  while (next_launch_ < buckets_.size()) launch(next_launch_++);  // a hook that waits for backward
  WorkPtr used_work;
  if (find_unused_) {
    // One more small all-reduce: which parameters got a gradient on any rank. Those that got
    // none anywhere keep an undefined .grad, exactly as on one device (the optimizer skips them).
    Tensor flags = empty({int64_t(params_.size())});  // on the host, then to the buckets' device
    float* u = flags.data<float>();
    for (size_t i = 0; i < params_.size(); ++i) u[i] = had_grad_[i] ? 1.f : 0.f;
    used_.copy_(flags);
    used_work = comm_->all_reduce(used_, ReduceOp::Max);
  }
  for (Bucket& b : buckets_) {
    b.work->wait();
    if (!zero_ && b.in_place.empty()) hook_->finish(*comm_, b.view);
  }
  Tensor used;  // the reduced flags, read on the host
  if (used_work) {
    used_work->wait();
    used = used_.device().is_cpu() ? used_ : used_.to(Device::cpu());
  }
  if (zero_) {
    zero_->publish_gradients(used);
    return;
  }
  for (Bucket& b : buckets_) {
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const size_t i = b.params[slot];
      if (used.defined() && used.data<float>()[i] == 0.f) continue;
      if (!b.in_place.empty()) {  // the average is in .grad already, or in the zeros made for it
        if (!params_[i].grad().defined()) params_[i].set_grad(b.in_place[slot]);
        continue;
      }
      const Tensor avg = b.view.gradient(slot);
      Tensor g = params_[i].grad();
      if (grad_as_view_ && !g.defined()) {  // unused on this rank: its slice, as for the others
        g = b.view.buffer.narrow(0, b.view.offsets[slot], params_[i].numel())
                .view(params_[i].shape());
        params_[i].set_grad(g);
      }
      if (g.defined()) {
        if (g.address() != avg.address()) g.copy_(avg);  // a view already holds the average
      } else {
        g = empty(params_[i].shape(), params_[i].options());
        g.copy_(avg);
        params_[i].set_grad(g);
      }
    }
  }
}

}  // namespace tandem::parallel
