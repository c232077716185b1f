// parallel/ddp/bucket_plan.h — which gradients travel together. DDP all-reduces gradients in
// buckets rather than one by one (fewer, larger messages) and rather than all at once (so the
// first buckets can be on the wire while backward is still computing the rest).
#pragma once

#include <tandem/core/tensor.h>
#include <cstddef>
#include <vector>

namespace tandem::parallel {

struct BucketPlanOptions {
  size_t bucket_cap_bytes = size_t(25) << 20;   // PyTorch's bucket_cap_mb = 25
  size_t first_bucket_bytes = size_t(1) << 20;  // small, so the last layers' gradients go early
};

/// Parameter indices grouped into buckets. Parameters are taken in reverse registration order
/// (backward produces the last layers' gradients first) and packed greedily: a bucket closes
/// when the next parameter would push it past its cap, or has another dtype or device. A
/// parameter larger than the cap gets a bucket of its own.
std::vector<std::vector<size_t>> plan_buckets(const std::vector<Tensor>& params,
                                              const BucketPlanOptions& options = {});

}  // namespace tandem::parallel
