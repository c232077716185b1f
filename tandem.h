// tandem/tandem.h — the whole public API in one include.
#pragma once

#include <tandem/autograd/autocast.h>
#include <tandem/autograd/deferred_weight_grads.h>
#include <tandem/autograd/engine.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/gradcheck.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/saved_tensor.h>
#include <tandem/autograd/thread_local_state.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/device.h>
#include <tandem/core/dtype.h>
#include <tandem/core/error.h>
#include <tandem/core/generator.h>
#include <tandem/core/kernels/profile.h>
#include <tandem/core/memory_stats.h>
#include <tandem/core/serialize/safetensors.h>
#include <tandem/core/tensor.h>
#include <tandem/core/thread_pool.h>
#include <tandem/core/world.h>
#include <tandem/data/data.h>
#include <tandem/nn/nn.h>
#include <tandem/parallel/parallel.h>
