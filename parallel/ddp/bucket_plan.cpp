// parallel/ddp/bucket_plan.cpp — the greedy packing described in bucket_plan.h.
#include <tandem/core/check.h>
#include <tandem/parallel/ddp/bucket_plan.h>

namespace tandem::parallel {

std::vector<std::vector<size_t>> plan_buckets(const std::vector<Tensor>& params,
                                              const BucketPlanOptions& options) {
  TD_CHECK_VALUE(options.bucket_cap_bytes > 0 && options.first_bucket_bytes > 0,
                 "plan_buckets: bucket caps must be positive");
  std::vector<std::vector<size_t>> buckets;
  size_t bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const Tensor& p = params[k];
    bool open_new = buckets.empty();
    if (!open_new) {
      const Tensor& first = params[buckets.back().front()];
      const size_t cap =
          buckets.size() == 1 ? options.first_bucket_bytes : options.bucket_cap_bytes;
      open_new =
          first.dtype() != p.dtype() || first.device() != p.device() || bytes + p.nbytes() > cap;
    }
    if (open_new) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(k);
    bytes += p.nbytes();
  }
  return buckets;
}

}  // namespace tandem::parallel
