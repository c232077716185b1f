// core/kernels/cuda/kernels_cuda.h — the CUDA kernels that exist so far, in the order of
// kernels.h. The rest of the table is registered as not_available until issue #4.
#pragma once

#include <tandem/core/kernels/kernels.h>

namespace tandem::cuda {

// copy.cu
void copy(const Tensor& src, Tensor& dst);
void fill(Tensor& out, double value);

}  // namespace tandem::cuda
