// parallel/parallel.h — the public parallel API in one include:
//   the world: process groups and their stores, launchers' variables, spawn and the supervisor's
//     workers, heartbeats, device meshes; communicators (threads, shared memory, Gloo, MPI, NCCL)
//   data parallelism: DistributedDataParallel and its comm hooks (PowerSGD), ZeRO-1/2
//     (zero_optimizer), fully_shard (ZeRO-3), DataParallel
//   model parallelism: split and Pipeline (one process's devices), DistributedPipeline (ranks)
//     with its tied weights and whole state dicts; tensor and sequence parallelism (tp/)
//   placement as data: every wrapper records how each tensor it cuts lies in the whole model
//     (placement.h); the gradient norm, the partial-gradient reduction and the sharded
//     checkpoint (each rank its elements, read back under any layout) read it for any layout
//   accounting: state_bytes, memory_summary, tracing
#pragma once

#include <tandem/core/trace.h>
#include <tandem/parallel/all_reduce_gradients.h>
#include <tandem/parallel/clip_grad_norm.h>
#include <tandem/parallel/comm/communicator.h>
#include <tandem/parallel/comm/gloo_communicator.h>
#include <tandem/parallel/comm/mpi_communicator.h>
#include <tandem/parallel/comm/nccl_communicator.h>
#include <tandem/parallel/comm/shm_communicator.h>
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/cp/plan.h>
#include <tandem/parallel/cp/ring_attention.h>
#include <tandem/parallel/cp/sequence_split.h>
#include <tandem/parallel/cp/ulysses_attention.h>
#include <tandem/parallel/data_parallel/criterion.h>
#include <tandem/parallel/data_parallel/data_parallel.h>
#include <tandem/parallel/ddp/bucket_plan.h>
#include <tandem/parallel/ddp/comm_hook.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/ddp/powersgd.h>
#include <tandem/parallel/ddp/reducer.h>
#include <tandem/parallel/ddp/state_bytes.h>
#include <tandem/parallel/ddp/zero_optimizer.h>
#include <tandem/parallel/ddp/zero_shards.h>
#include <tandem/parallel/device_mesh.h>
#include <tandem/parallel/ep/dispatch.h>
#include <tandem/parallel/ep/plan.h>
#include <tandem/parallel/fsdp/fully_shard.h>
#include <tandem/parallel/fsdp/sharded_checkpoint.h>
#include <tandem/parallel/heartbeat.h>
#include <tandem/parallel/launcher_env.h>
#include <tandem/parallel/memory_summary.h>
#include <tandem/parallel/pipeline/distributed_pipeline.h>
#include <tandem/parallel/pipeline/fully_sharded_stages.h>
#include <tandem/parallel/pipeline/pipeline.h>
#include <tandem/parallel/pipeline/schedule_check.h>
#include <tandem/parallel/pipeline/schedule_svg.h>
#include <tandem/parallel/pipeline/split.h>
#include <tandem/parallel/pipeline/tied.h>
#include <tandem/parallel/placement.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/sharded_checkpoint.h>
#include <tandem/parallel/spawn.h>
#include <tandem/parallel/store/file_store.h>
#include <tandem/parallel/store/hash_store.h>
#include <tandem/parallel/store/prefix_store.h>
#include <tandem/parallel/store/store.h>
#include <tandem/parallel/store/tcp_store.h>
#include <tandem/parallel/tp/gpt.h>
#include <tandem/parallel/tp/layers.h>
#include <tandem/parallel/tp/regions.h>
#include <tandem/parallel/tp/vocab_parallel.h>
#include <tandem/parallel/whole_state.h>
