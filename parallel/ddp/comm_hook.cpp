// parallel/ddp/comm_hook.cpp — the plain hooks: average all-reduce, now or after backward, and
// 16-bit compression.
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/parallel/ddp/comm_hook.h>
#include <tandem/parallel/ddp/powersgd.h>
#include <map>

namespace tandem::parallel {

Tensor GradBucket::gradient(size_t i) const {
  return buffer.narrow(0, offsets[i], parameters[i].numel()).reshape(parameters[i].shape());
}

CommHook::~CommHook() = default;
void CommHook::finish(Communicator&, GradBucket&) {}
WorkPtr CommHook::start_in_place(Communicator&, std::vector<Tensor>&) { return nullptr; }

namespace {

class AllReduceHook : public CommHook {
 public:
  explicit AllReduceHook(bool after_backward) : after_backward_(after_backward) {}
  std::string name() const override { return after_backward_ ? "delay_allreduce" : "allreduce"; }
  WorkPtr start(Communicator& group, GradBucket& bucket) override {
    return group.all_reduce(bucket.buffer, ReduceOp::Mean);
  }
  WorkPtr start_in_place(Communicator& group, std::vector<Tensor>& gradients) override {
    return group.all_reduce_coalesced(gradients, ReduceOp::Mean);
  }
  bool after_backward() const override { return after_backward_; }

 private:
  const bool after_backward_;
};

// Sends buffer / world in 16 bits. Dividing first means the sum is an average of values that
// fit, where a sum of large gradients could pass float16's 65,504 and become inf.
class CompressHook : public CommHook {
 public:
  explicit CompressHook(DType dtype) : dtype_(dtype) {}
  std::string name() const override {
    return dtype_ == kFloat16 ? "fp16_compress" : "bf16_compress";
  }
  WorkPtr start(Communicator& group, GradBucket& bucket) override {
    Tensor& c = compressed_[bucket.index];
    if (!c.defined() || c.numel() != bucket.buffer.numel())
      c = empty(bucket.buffer.shape(), {.dtype = dtype_, .device = bucket.buffer.device()});
    c.copy_(bucket.buffer * (1.0 / group.size()));
    return group.all_reduce(c, ReduceOp::Sum);
  }
  void finish(Communicator&, GradBucket& bucket) override {
    bucket.buffer.copy_(compressed_[bucket.index]);
  }

 private:
  const DType dtype_;
  std::map<size_t, Tensor> compressed_;  // per bucket, reused every step
};

}  // namespace

std::shared_ptr<CommHook> allreduce_hook() { return std::make_shared<AllReduceHook>(false); }
std::shared_ptr<CommHook> delay_allreduce() { return std::make_shared<AllReduceHook>(true); }
std::shared_ptr<CommHook> fp16_compress() { return std::make_shared<CompressHook>(kFloat16); }
std::shared_ptr<CommHook> bf16_compress() { return std::make_shared<CompressHook>(kBFloat16); }

std::shared_ptr<CommHook> comm_hook_named(const std::string& name) {
  if (name.empty() || name == "allreduce") return allreduce_hook();
  if (name == "delay_allreduce") return delay_allreduce();
  if (name == "fp16_compress") return fp16_compress();
  if (name == "bf16_compress") return bf16_compress();
  if (name == "powersgd") return powersgd({});
  if (name.rfind("powersgd:", 0) == 0) {  // powersgd:RANK or powersgd:RANK:START_ITER
    const std::string spec = name.substr(9);
    const size_t colon = spec.find(':');
    auto number = [&](const std::string& text, int min) {
      TD_CHECK_VALUE(!text.empty() && text.size() < 9 &&
                         text.find_first_not_of("0123456789") == std::string::npos &&
                         std::stoi(text) >= min,
                     "DDP hook '", name,
                     "': expected powersgd:RANK or powersgd:RANK:START_ITER "
                     "with RANK >= 1 and START_ITER >= 0");
      return std::stoi(text);
    };
    PowerSGDOptions o;
    o.rank = number(spec.substr(0, colon), 1);
    if (colon != std::string::npos) o.start_iter = number(spec.substr(colon + 1), 0);
    return powersgd(o);
  }
  ::tandem::detail::fail<ValueError>("unknown DDP communication hook '", name,
                                     "' (expected allreduce, delay_allreduce, fp16_compress, "
                                     "bf16_compress, powersgd or powersgd:RANK[:START_ITER])");
}

}  // namespace tandem::parallel
