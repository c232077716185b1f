// bench/gpt_bench.cpp — where a GPT training step's time goes, and attention alone.
//
//   gpt_bench step [--rounds N] [--threads N] [--device cuda:0] [--recipe cpu|gpu] [--amp bf16]
//     nanoGPT's CPU recipe (4 layers, 4 heads, 128 wide, context 64, batch 12, vocabulary 65; with
//     --recipe gpu its GPU one: 6 layers, 6 heads, 384 wide, context 256, batch 64): the
//     whole step (forward, backward, clip, AdamW) beside each kind of op timed alone, forward and
//     backward, at the shapes and counts the step runs it: the GEMMs of every Linear (lm_head
//     included), attention (the backend Auto takes, and the other one's time printed below),
//     LayerNorm, GELU, and AdamW's update. The share of each is its
//     time over the step's; what is left is the elementwise rest (residual adds, embedding, loss,
//     clipping) and the engine.
//   gpt_bench mfu [--device cuda:0] [--amp bf16] [--batch 8] [--peak-tflops P] [--shape gpt2|test]
//     GPT-2 124M's shape (12 layers, 12 heads, 768 wide, context 1,024, vocabulary 50,304 as
//     nanoGPT pads it, biases): a whole training step's time, tokens/s, and the model FLOPs
//     utilisation against the GPU's peak (nanoGPT's estimate_mfu; llm.c reports about 50 % on
//     A100/H100 in bf16). --shape test: a tiny model, to try the part on a CPU. --profile N: then
//     one more step with every kernel timed (core/kernels/profile.h), its N largest rows printed.
//   --flash on (any part): enable_flash_attention(true), so that Auto takes the tensor-core
//     kernels (AttentionBackend::Flash) where they apply: CUDA, 16-bit (--amp bf16), head dim 64.
//   gpt_bench loss [--device D] [--batch B] [--rounds N]
//     GPT-2's classifier loss under bf16 autocast: cross-entropy over B × 1,024 rows of 50,304
//     bfloat16 logits, forward and backward, read in place against through a float32 copy (what
//     autocast's float32 list did before): time and the bytes held at the peak, in one run.
//   gpt_bench attention [--rounds N] [--threads N]
//     Causal attention, 8 heads of 64, T = 64 … 2048: forward + backward of the fused op and of
//     the composed form (matmul, mask, softmax, matmul), and the bytes each graph holds after the
//     forward (the fused op: q, k, v, the output and T log-sum-exps; composed: the T×T scores and
//     probabilities too). bench/gpt_bench.sh prints PyTorch's attention beside it.
#include <tandem/tandem.h>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "bench_util.h"

using namespace tandem;

namespace {

struct Options {
  std::string part;
  int rounds = 7;
  int threads = 0;  // 0: the default
  std::string device = "cpu";
  std::string recipe = "cpu";
  std::string amp = "none";  // bf16: the step and its parts under autocast, as nanoGPT on a GPU
  int64_t batch = 8;         // mfu: sequences per step
  double peak_tflops = 0;    // mfu: the GPU's dense peak; 0: from its name where known
  std::string shape = "gpt2";
  int profile_rows = 0;  // mfu: > 0 prints the step's kernel table
  std::string flash = "off";
};

Options parse(int argc, char** argv) {
  Options o;
  if (argc > 1) o.part = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds"))
      o.rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads"))
      o.threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--device"))
      o.device = argv[i + 1];
    else if (!std::strcmp(argv[i], "--recipe"))
      o.recipe = argv[i + 1];
    else if (!std::strcmp(argv[i], "--amp"))
      o.amp = argv[i + 1];
    else if (!std::strcmp(argv[i], "--batch"))
      o.batch = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--peak-tflops"))
      o.peak_tflops = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--shape"))
      o.shape = argv[i + 1];
    else if (!std::strcmp(argv[i], "--profile"))
      o.profile_rows = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--flash"))
      o.flash = argv[i + 1];
  }
  if ((o.part != "step" && o.part != "attention" && o.part != "mfu" && o.part != "loss") ||
      (o.recipe != "cpu" && o.recipe != "gpu") || (o.amp != "none" && o.amp != "bf16") ||
      (o.shape != "gpt2" && o.shape != "test") || (o.flash != "on" && o.flash != "off") ||
      o.batch < 1) {
    std::fprintf(stderr,
                 "usage: %s step|attention|mfu|loss [--rounds N] [--threads N] [--device D] "
                 "[--recipe cpu|gpu] [--amp none|bf16] [--batch B] [--peak-tflops P] "
                 "[--shape gpt2|test] [--profile N] [--flash on|off]\n",
                 argv[0]);
    std::exit(2);
  }
  return o;
}

Device g_device = Device::cpu();  // where the step part runs (--device)

// The median over `rounds` of milliseconds per call of f (each sample about 0.3 s of calls); on a
// GPU each call ends with a synchronisation, so the time is the kernels', not their launches'.
template <typename F>
double median_ms(int rounds, F&& f) {
  auto call = [&] {
    f();
    if (g_device.is_cuda()) cuda::synchronize(g_device.index());
  };
  const int reps = bench::calibrate(call, 0.3);
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) ms.push_back(1e3 * bench::time_per_call(call, reps));
  return bench::median(ms);
}

// Forward and backward of f(), timed as median_ms does, with dy converted once, outside the
// timing, to the dtype f's output has (bfloat16 for a GEMM under autocast).
template <typename F>
double fwd_bwd_ms(int rounds, const Tensor& dy, F&& f) {
  const Tensor g = dy.to(f().dtype());
  return median_ms(rounds, [&] { f().backward(g); });
}

Tensor leaf(const Shape& s) { return randn(s, {.device = g_device}).requires_grad_(); }
Tensor gradient(const Shape& s) { return randn(s, {.device = g_device}); }

// ---- step: the whole step and its parts -------------------------------------------------------
void step_part(const Options& o) {
  const bool gpu = o.recipe == "gpu";
  const int64_t kB = gpu ? 64 : 12, kT = gpu ? 256 : 64, kC = gpu ? 384 : 128, kL = gpu ? 6 : 4,
                kH = gpu ? 6 : 4, kV = 65;
  manual_seed(0);
  nn::Sequential model = nn::gpt({.block_size = kT,
                                  .vocab_size = kV,
                                  .n_layer = kL,
                                  .n_head = kH,
                                  .n_embd = kC,
                                  .dropout = 0,
                                  .bias = false});
  model.to(g_device);
  std::optional<AutocastGuard> autocast;  // the whole part, step and ops alike
  if (o.amp == "bf16") autocast.emplace(g_device.type(), kBFloat16);
  optim::AdamW opt(optim::adamw_groups(
      model.named_parameters(), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1}));
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < kB * (kT + 1); ++i) ids.push_back((i * 7 + i / 5) % kV);
  const Tensor tokens = from_vector(ids, {kB, kT + 1});
  const Tensor x = tokens.narrow(1, 0, kT).contiguous().to(g_device),
               y = tokens.narrow(1, 1, kT).contiguous().to(g_device);
  const double step = median_ms(o.rounds, [&] {
    opt.zero_grad();
    nn::gpt_loss(model(x), y).backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
  });

  struct Part {
    const char* name;
    double ms;
  };
  std::vector<Part> parts;
  std::string alternative;
  const int64_t n = kB * kT;
  {  // every Linear of the step, forward and backward (x needs its gradient too, as in the model)
    struct Shape2 {
      int64_t in, out, count;
    };
    const std::vector<Shape2> linears = {
        {kC, 3 * kC, kL}, {kC, kC, kL}, {kC, 4 * kC, kL}, {4 * kC, kC, kL}, {kC, kV, 1}};
    double ms = 0;
    for (const Shape2& s : linears) {
      const Tensor in = leaf({n, s.in}), w = leaf({s.out, s.in});
      const Tensor dy = gradient({n, s.out});
      ms += double(s.count) * fwd_bwd_ms(o.rounds, dy, [&] { return linear(in, w, Tensor()); });
    }
    parts.push_back({"GEMM (Linear fwd+bwd)", ms});
  }
  {
    const Tensor q = leaf({kB, kH, kT, kC / kH}), k = leaf({kB, kH, kT, kC / kH}),
                 v = leaf({kB, kH, kT, kC / kH}), dy = gradient({kB, kH, kT, kC / kH});
    auto attention_ms = [&](AttentionBackend backend) {
      return double(kL) * fwd_bwd_ms(o.rounds, dy, [&] {
               return scaled_dot_product_attention(q, k, v, {.causal = true, .backend = backend});
             });
    };
    // The step runs Auto's choice; the other backend at the same shapes is printed after.
    const double fused = attention_ms(AttentionBackend::Fused);
    const double math = attention_ms(AttentionBackend::Math);
    const bool auto_math = g_device.is_cuda();
    parts.push_back({auto_math ? "attention (math fwd+bwd)" : "attention (fused fwd+bwd)",
                     auto_math ? math : fused});
    alternative = std::string("attention the other way: ") + (auto_math ? "fused " : "math ") +
                  std::to_string(auto_math ? fused : math) + " ms/step";
  }
  {
    const Tensor in = leaf({kB, kT, kC}), w = leaf({kC}), dy = gradient({kB, kT, kC});
    parts.push_back({"LayerNorm fwd+bwd", double(2 * kL + 1) * fwd_bwd_ms(o.rounds, dy, [&] {
                                            return layer_norm(in, {kC}, w, Tensor());
                                          })});
  }
  {
    const Tensor in = leaf({kB, kT, 4 * kC}), dy = gradient({kB, kT, 4 * kC});
    parts.push_back(
        {"GELU fwd+bwd", double(kL) * fwd_bwd_ms(o.rounds, dy, [&] { return gelu(in); })});
  }
  {
    for (Tensor& p : model.parameters()) p.set_grad(zeros_like(p));
    parts.push_back({"AdamW update", median_ms(o.rounds, [&] { opt.step(); })});
  }
  std::printf("GPT step (nanoGPT %s recipe, %lld parameters) on %s, %s, %d intra-op threads\n",
              gpu ? "GPU" : "CPU", (long long)model.parameter_count(), g_device.str().c_str(),
              o.amp == "bf16" ? "autocast bf16" : "float32", get_num_threads());
  std::printf("%-28s %10s %8s\n", "part", "ms/step", "share");
  double sum = 0;
  for (const Part& p : parts) {
    std::printf("%-28s %10.2f %7.1f%%\n", p.name, p.ms, 100 * p.ms / step);
    sum += p.ms;
  }
  std::printf("%-28s %10.2f %7.1f%%\n", "rest (elementwise, engine)", step - sum,
              100 * (step - sum) / step);
  std::printf("%-28s %10.2f %7.1f%%   %.0f tokens/s\n", "whole step", step, 100.0,
              double(kB * kT) / (step * 1e-3));
  std::printf("(%s)\n", alternative.c_str());
}

// ---- mfu: GPT-2 124M's step against the GPU's peak ---------------------------------------------
// The dense bf16 peak of the GPUs whose name says which they are (NVIDIA's data sheets), in
// TFLOP/s; 0 when unknown.
double known_peak_tflops(const std::string& name) {
  if (name.find("H100") != std::string::npos && name.find("PCIe") != std::string::npos) return 756;
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) return 989;
  if (name.find("A100") != std::string::npos) return 312;
  return 0;
}

void mfu_part(const Options& o) {
  const bool test = o.shape == "test";
  const nn::GPTConfig c{.block_size = test ? 64 : 1024,
                        .vocab_size = test ? 512 : 50304,
                        .n_layer = test ? 2 : 12,
                        .n_head = test ? 2 : 12,
                        .n_embd = test ? 64 : 768,
                        .dropout = 0,
                        .bias = true};
  const int64_t kB = o.batch, kT = c.block_size;
  manual_seed(0);
  nn::Sequential model = nn::gpt(c);
  model.to(g_device);
  optim::AdamW opt(optim::adamw_groups(
      model.named_parameters(), {.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1}));
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < kB * (kT + 1); ++i) ids.push_back((i * 7919 + i / 3) % c.vocab_size);
  const Tensor tokens = from_vector(ids, {kB, kT + 1});
  const Tensor x = tokens.narrow(1, 0, kT).contiguous().to(g_device),
               y = tokens.narrow(1, 1, kT).contiguous().to(g_device);
  auto train_step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(g_device.type(), kBFloat16, o.amp == "bf16");
      loss = nn::gpt_loss(model(x), y);
    }
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
  };
  const double ms = median_ms(o.rounds, train_step);
  // nanoGPT's estimate_mfu (PaLM, appendix B): 6N + 12·L·H·Q·T FLOPs per token, N the parameters
  // less the position embedding (the tied token embedding counted once).
  const double n = double(model.parameter_count() - c.block_size * c.n_embd);
  const double per_token = 6 * n + 12.0 * double(c.n_layer * c.n_head * (c.n_embd / c.n_head) * kT);
  const double tokens_per_s = double(kB * kT) / (ms * 1e-3);
  const double peak = o.peak_tflops > 0    ? o.peak_tflops
                      : g_device.is_cuda() ? known_peak_tflops(cuda::device_name(g_device.index()))
                                           : 0;
  std::printf("GPT %s (%lld parameters), batch %lld × %lld tokens, %s, on %s%s\n",
              test ? "test shape" : "GPT-2 124M", (long long)model.parameter_count(), (long long)kB,
              (long long)kT, o.amp == "bf16" ? "autocast bf16" : "float32", g_device.str().c_str(),
              g_device.is_cuda() ? (" (" + cuda::device_name(g_device.index()) + ")").c_str() : "");
  std::printf("attention: %s\n", o.flash == "on" ? "Flash where it applies (--flash on)"
                                                 : "Auto without Flash (--flash off)");
  std::printf("mfu_step_ms %.3f\nmfu_tokens_per_s %.0f\nmfu_model_tflops %.2f\n", ms, tokens_per_s,
              per_token * tokens_per_s / 1e12);
  if (peak > 0)
    std::printf("mfu_percent %.1f (peak %.0f TFLOP/s)\n",
                100 * per_token * tokens_per_s / 1e12 / peak, peak);
  else
    std::printf("mfu_percent unknown (pass --peak-tflops)\n");
  if (o.profile_rows > 0) {  // shares of the step's time above; what the kernels leave is idle
    kernel_profile::start();
    train_step();
    std::printf("%s",
                kernel_profile::format(kernel_profile::stop(), ms, size_t(o.profile_rows)).c_str());
  }
}

// ---- attention: fused against composed --------------------------------------------------------
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t t = q.size(-2);
  Tensor s = q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(double(q.size(-1))));
  s = s + triu(full({t, t}, -std::numeric_limits<double>::infinity(), {.device = q.device()}), 1);
  return s.softmax(-1).matmul(v);
}

void attention_part(const Options& o) {
  constexpr int64_t kHeads = 8, kD = 64;
  const AttentionOptions kFused{.causal = true, .backend = AttentionBackend::Fused};
  std::printf("causal attention, %lld heads of %lld, float32, on %s, %d intra-op threads\n",
              (long long)kHeads, (long long)kD, g_device.str().c_str(), get_num_threads());
  std::printf("%6s %12s %12s %8s %14s %14s\n", "T", "fused_ms", "composed_ms", "ratio",
              "fused_held_MB", "composed_MB");
  for (int64_t t = 64; t <= 2048; t *= 2) {
    manual_seed(uint64_t(t));
    const Tensor q = leaf({1, kHeads, t, kD}), k = leaf({1, kHeads, t, kD}),
                 v = leaf({1, kHeads, t, kD}), dy = gradient({1, kHeads, t, kD});
    auto held = [&](bool fused) {
      const int64_t before = memory_stats(g_device).allocated_bytes;
      const Tensor y =
          fused ? scaled_dot_product_attention(q, k, v, kFused) : composed_attention(q, k, v);
      return double(memory_stats(g_device).allocated_bytes - before) / 1e6;
    };
    const int rounds = t >= 1024 ? std::max(3, o.rounds / 2) : o.rounds;
    const double fused =
        median_ms(rounds, [&] { scaled_dot_product_attention(q, k, v, kFused).backward(dy); });
    const double plain = median_ms(rounds, [&] { composed_attention(q, k, v).backward(dy); });
    std::printf("%6lld %12.3f %12.3f %8.2f %14.2f %14.2f\n", (long long)t, fused, plain,
                fused / plain, held(true), held(false));
  }
}

// ---- loss: 16-bit logits in place against a float32 copy ---------------------------------------
void loss_part(const Options& o) {
  const int64_t rows = o.batch * 1024, classes = 50304;
  manual_seed(0);
  const Tensor logits = randn({rows, classes}, {.device = g_device}).to(kBFloat16).requires_grad_();
  const Tensor target = (rand({rows}) * double(classes)).to(kInt64).to(g_device);
  std::printf("cross-entropy, %lld x %lld bfloat16 logits (%.0f MB), autocast bf16, on %s\n",
              (long long)rows, (long long)classes, double(logits.nbytes()) / 1e6,
              g_device.str().c_str());
  auto run = [&](bool copy) {
    logits.set_grad(Tensor());
    AutocastGuard autocast(g_device.type(), kBFloat16);
    cross_entropy(copy ? logits.to(kFloat32) : logits, target).backward();
  };
  auto peak_mb = [&](bool copy) {
    run(copy);  // the allocator's blocks exist before the peak is read
    logits.set_grad(Tensor());
    const int64_t start = memory_stats(g_device).allocated_bytes;
    reset_peak_memory_stats(g_device);
    run(copy);
    return double(memory_stats(g_device).peak_allocated_bytes - start) / 1e6;
  };
  double in_place = 0, copied = 0;
  std::vector<double> ratio;  // rounds interleaved, the ratio taken within each
  for (int r = 0; r < o.rounds; ++r) {
    const double a = median_ms(1, [&] { run(false); }), b = median_ms(1, [&] { run(true); });
    in_place += a / o.rounds;
    copied += b / o.rounds;
    ratio.push_back(a / b);
  }
  std::printf("  %-22s %10s %12s\n", "", "fwd+bwd ms", "peak MB");
  std::printf("  %-22s %10.2f %12.1f\n", "in place (Tandem)", in_place, peak_mb(false));
  std::printf("  %-22s %10.2f %12.1f\n", "float32 copy", copied, peak_mb(true));
  std::printf("  in place / copy: %.3f (median of %d interleaved rounds, range %.3f-%.3f)\n",
              bench::median(ratio), o.rounds, *std::min_element(ratio.begin(), ratio.end()),
              *std::max_element(ratio.begin(), ratio.end()));
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.threads > 0) set_num_threads(o.threads);
  g_device = Device(o.device);
  enable_flash_attention(o.flash == "on");
  bench::report_load();
  if (o.part == "step")
    step_part(o);
  else if (o.part == "mfu")
    mfu_part(o);
  else if (o.part == "loss")
    loss_part(o);
  else
    attention_part(o);
  return 0;
}
