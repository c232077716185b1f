// parallel/parallel.h — the public parallel API in one include: process groups and stores,
// communicators, the launcher's spawn, DistributedDataParallel, tracing.
#pragma once

#include <tandem/core/trace.h>
#include <tandem/parallel/all_reduce_gradients.h>
#include <tandem/parallel/clip_grad_norm.h>
#include <tandem/parallel/comm/communicator.h>
#include <tandem/parallel/comm/gloo_communicator.h>
#include <tandem/parallel/comm/nccl_communicator.h>
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/data_parallel/data_parallel.h>
#include <tandem/parallel/ddp/bucket_plan.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/ddp/reducer.h>
#include <tandem/parallel/ddp/state_bytes.h>
#include <tandem/parallel/ddp/zero_optimizer.h>
#include <tandem/parallel/ddp/zero_shards.h>
#include <tandem/parallel/device_mesh.h>
#include <tandem/parallel/fsdp/fully_shard.h>
#include <tandem/parallel/memory_summary.h>
#include <tandem/parallel/pipeline/distributed_pipeline.h>
#include <tandem/parallel/pipeline/pipeline.h>
#include <tandem/parallel/pipeline/split.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>
#include <tandem/parallel/store/file_store.h>
#include <tandem/parallel/store/hash_store.h>
#include <tandem/parallel/store/prefix_store.h>
#include <tandem/parallel/store/store.h>
#include <tandem/parallel/store/tcp_store.h>
#include <tandem/parallel/tp/gpt.h>
#include <tandem/parallel/tp/layers.h>
#include <tandem/parallel/tp/model_state.h>
#include <tandem/parallel/tp/regions.h>
#include <tandem/parallel/tp/vocab_parallel.h>
