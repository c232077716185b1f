// tests/autograd/nonfinite_test.cpp — NaN and ∞ go through every op as IEEE arithmetic carries
// them, as PyTorch's ops do (issue 55: the CPU's fused attention turned a NaN into zeros, so a
// model with a NaN weight generated plausible text and exited 0). Each row of the op table, and
// each attention backend, gets a NaN, then +∞, in one element of one input at a time:
//   NaN: the output holds a NaN. Rows that may leave an element unread (kReadsPart) are held to
//        this only where the element reaches the output;
//   +∞:  the output holds a NaN or ±∞ where the element reaches it, except where the op saturates
//        (inf_may_vanish says why).
// "Reaches": the element's gradient for a random upstream gradient is nonzero. The backward, which
// gradcheck_test.cpp checks, knows what an output depends on: not a maximum the element does not
// win, a dropped element, a masked key. On the CPU in float64 and float32, and on cuda:0 when there
// is one (skipped, visibly, without). Then the fused attention's NaNs are the Math backend's,
// element for element, in the output and all three gradients.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "autograd/op_table.h"
#include "support/expect.h"

// A named namespace: this file shares a unity batch with others' file-local helpers.
namespace nonfinite {

using namespace tandem;
using tandem::testing::OpCase;
using V = const std::vector<Tensor>&;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Rows that may leave an element of an input unread, so that a NaN there vanishes in PyTorch too:
// views of part of an input, selections (where, gather, the embedding's unused rows, tril) and
// the rows of an ignored target.
const std::set<std::string> kReadsPart = {"matmul_of_offset_views",
                                          "batched_matmul_of_offset_view",
                                          "softmax_of_offset_view",
                                          "sum_of_offset_view",
                                          "narrow",
                                          "select",
                                          "cat_dim1_views",
                                          "linear_of_offset_view",
                                          "conv2d_of_offset_view",
                                          "where",
                                          "gather_dim0",
                                          "embedding",
                                          "embedding_padding_idx_unused",
                                          "tril_above_diagonal",
                                          "cross_entropy_ignore_index_none"};

// Why a NaN in this input may leave no trace where it reaches the output, or nullptr.
const char* nan_may_vanish(const std::string& row, size_t input) {
  if (row == "where" && input == 0) return "NaN > 0 is false: the other input is taken";
  return nullptr;
}

// Why +∞ in this input may give a finite output where it reaches it, or nullptr.
const char* inf_may_vanish(const std::string& row, size_t input) {
  if (row == "sigmoid" || row == "tanh" || row == "mlp_layer") return "saturates at ±1";
  if ((row == "scalar_div_by_tensor" && input == 0) || (row == "div" && input == 1))
    return "x/∞ = 0";
  if (row == "minimum" || row == "min_all") return "∞ is not the smaller";
  if (row == "pow_tensor" && input == 1) return "x^∞ = 0 for x < 1";
  if (row.starts_with("attention") && input < 2)
    return "a score of −∞ is a masked key, and a row of them gives zeros";
  if (row == "sequential_cnn") return "relu(−∞) = 0";
  return nullptr;
}

// One element of one input replaced.
struct Plant {
  size_t input;
  int64_t at;
  double value;
};

// The row's inputs (make_inputs' values, from `base`) on `device` in `dtype`, with `plant`.
std::vector<Tensor> inputs_for(const std::vector<Tensor>& base, Device device, DType dtype,
                               const Plant* plant) {
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < base.size(); ++i) {
    std::vector<double> v = base[i].to_vector<double>();
    if (plant && plant->input == i) v[size_t(plant->at)] = plant->value;
    inputs.push_back(from_vector(v, base[i].shape()).to(dtype).to(device).requires_grad_());
  }
  return inputs;
}

// For each input, the gradient of Σ out·g for a random g: nonzero where an element reaches out.
std::vector<std::vector<double>> reach(const OpCase& row, const std::vector<Tensor>& base,
                                       Device device, DType dtype) {
  std::vector<Tensor> inputs = inputs_for(base, device, dtype, nullptr);
  const Tensor out = row.fn(inputs);
  manual_seed(7);
  (out * randn(out.shape(), {.dtype = dtype}).to(device)).sum().backward();
  std::vector<std::vector<double>> r;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& g = inputs[i].grad();
    r.push_back(g.defined() ? g.to_vector<double>()
                            : std::vector<double>(size_t(base[i].numel()), 0.0));
  }
  return r;
}

// The elements a value is planted at: all of a small input, 24 spread over a larger one (the
// first and the last among them: a vectorised loop's head and tail).
std::vector<int64_t> positions(int64_t n) {
  constexpr int64_t kMost = 24;
  std::vector<int64_t> at;
  for (int64_t k = 0; k < std::min(n, kMost); ++k)
    at.push_back(n <= kMost ? k : k * (n - 1) / (kMost - 1));
  return at;
}

// Every plant of the row, on `device` in `dtype`: the failures, named.
void check_row(const OpCase& row, Device device, DType dtype) {
  const std::vector<Tensor> base = tandem::testing::make_inputs(row);
  const std::vector<std::vector<double>> reaches = reach(row, base, device, dtype);
  std::vector<std::string> failures;
  for (size_t i = 0; i < base.size(); ++i) {
    for (int64_t at : positions(base[i].numel())) {
      const bool reached = reaches[i][size_t(at)] != 0;
      for (double value : {kNaN, kInf}) {
        const Plant plant{i, at, value};
        std::vector<double> out;
        {
          NoGradGuard no_grad;
          out = row.fn(inputs_for(base, device, dtype, &plant)).to_vector<double>();
        }
        bool any_nan = false, all_finite = true;
        for (double y : out) any_nan |= std::isnan(y), all_finite &= std::isfinite(y);
        const bool is_nan = std::isnan(value);
        const bool expected =
            is_nan ? !nan_may_vanish(row.name, i) && (reached || !kReadsPart.contains(row.name))
                   : reached && !inf_may_vanish(row.name, i);
        if (expected && (is_nan ? !any_nan : all_finite)) {
          std::ostringstream s;
          s << (is_nan ? "NaN" : "+inf") << " at element " << at << " of input " << i;
          failures.push_back(s.str());
        }
      }
    }
  }
  std::string first;
  for (size_t f = 0; f < std::min<size_t>(failures.size(), 5); ++f) first += "\n  " + failures[f];
  EXPECT_TRUE(failures.empty()) << row.name << " on " << device << " in " << dtype << ": "
                                << failures.size()
                                << " plants left no trace in the output:" << first;
}

class NonfiniteOpTable : public ::testing::TestWithParam<OpCase> {};

TEST_P(NonfiniteOpTable, CpuFloat64) { check_row(GetParam(), Device::cpu(), kFloat64); }
TEST_P(NonfiniteOpTable, CpuFloat32) { check_row(GetParam(), Device::cpu(), kFloat32); }
TEST_P(NonfiniteOpTable, CudaFloat64) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  check_row(GetParam(), Device::cuda(0), kFloat64);
}
TEST_P(NonfiniteOpTable, CudaFloat32) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  check_row(GetParam(), Device::cuda(0), kFloat32);
}

INSTANTIATE_TEST_SUITE_P(OpTable, NonfiniteOpTable,
                         ::testing::ValuesIn(tandem::testing::op_table()),
                         [](const auto& info) { return info.param.name; });

// The attention rows again, through each backend by name (the table's rows take Auto, the Fused
// backend on the CPU, but for one causal row each): no mask, causal across two key tiles of the
// CPU kernel (T = 70 > 64), a bool mask (every query sees a key, every key is seen) and an
// additive mask per batch entry.
std::vector<OpCase> attention_rows() {
  std::vector<OpCase> rows;
  for (AttentionBackend backend : {AttentionBackend::Fused, AttentionBackend::Math}) {
    const std::string name = backend == AttentionBackend::Fused ? "_fused" : "_math";
    rows.push_back({"attention" + name, {{2, 3, 4}, {2, 5, 4}, {2, 5, 3}}, [backend](V x) {
                      return scaled_dot_product_attention(x[0], x[1], x[2], {.backend = backend});
                    }});
    rows.push_back(
        {"attention_causal_two_tiles" + name, {{1, 70, 4}, {1, 70, 4}, {1, 70, 3}}, [backend](V x) {
           return scaled_dot_product_attention(x[0], x[1], x[2],
                                               {.causal = true, .backend = backend});
         }});
    rows.push_back(
        {"attention_bool_mask" + name, {{2, 3, 4}, {2, 4, 4}, {2, 4, 2}}, [backend](V x) {
           const Tensor mask = from_vector(std::vector<bool>{true, false, true, false, false, true,
                                                             false, false, true, true, false, true},
                                           {3, 4})
                                   .to(x[0].device());
           return scaled_dot_product_attention(x[0], x[1], x[2],
                                               {.attn_mask = mask, .backend = backend});
         }});
    rows.push_back({"attention_float_mask_per_batch" + name,
                    {{2, 3, 4}, {2, 4, 4}, {2, 4, 2}},
                    [backend](V x) {
                      manual_seed(5);
                      const Tensor mask = randn({2, 3, 4}, {.dtype = x[0].dtype()});
                      return scaled_dot_product_attention(
                          x[0], x[1], x[2],
                          {.attn_mask = mask.to(x[0].device()), .backend = backend});
                    }});
  }
  return rows;
}

class NonfiniteAttention : public ::testing::TestWithParam<OpCase> {};

TEST_P(NonfiniteAttention, CpuFloat64) { check_row(GetParam(), Device::cpu(), kFloat64); }
TEST_P(NonfiniteAttention, CpuFloat32) { check_row(GetParam(), Device::cpu(), kFloat32); }
TEST_P(NonfiniteAttention, CudaFloat64) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  check_row(GetParam(), Device::cuda(0), kFloat64);
}

INSTANTIATE_TEST_SUITE_P(Backends, NonfiniteAttention, ::testing::ValuesIn(attention_rows()),
                         [](const auto& info) { return info.param.name; });

// Where the output and the gradients of q, k and v (for a fixed dy) are NaN, with a NaN at
// (batch, row, column) `at` of input `which` (0: q, 1: k, 2: v), each [2, T, 4].
using Pattern = std::vector<std::vector<bool>>;
Pattern nan_pattern(int64_t t, size_t which, std::array<int64_t, 3> at, bool causal,
                    AttentionBackend backend, Device device) {
  manual_seed(21);
  const TensorOptions f64{.dtype = kFloat64};
  std::vector<Tensor> x{randn({2, t, 4}, f64), randn({2, t, 4}, f64), randn({2, t, 4}, f64)};
  const Tensor dy = randn({2, t, 4}, f64).to(device);
  std::vector<double> planted = x[which].to_vector<double>();
  planted[size_t((at[0] * t + at[1]) * 4 + at[2])] = kNaN;
  x[which] = from_vector(planted, {2, t, 4});
  for (Tensor& e : x) e = e.to(device).requires_grad_();
  const Tensor y =
      scaled_dot_product_attention(x[0], x[1], x[2], {.causal = causal, .backend = backend});
  (y * dy).sum().backward();
  Pattern p;
  for (const Tensor& r : {y, x[0].grad(), x[1].grad(), x[2].grad()}) {
    p.emplace_back();
    for (double e : r.to_vector<double>()) p.back().push_back(std::isnan(e));
  }
  return p;
}

// The fused kernel's NaNs against the Math backend's. Causal, the fused kernels skip the key tiles
// past a query's own (and the CUDA kernel the queries before a key's warp block), where the Math
// backend adds −∞ to a NaN score and multiplies a NaN by a zero probability: so there only NaNs
// that every query sees are compared (key row 0; a NaN query row, in the output alone, as its NaN
// probabilities reach the fused kernels' dk and dv only in the tiles they visit).
void expect_fused_nans_are_maths(Device device) {
  struct Case {
    size_t which;
    std::array<int64_t, 3> at;
    bool everywhere;  // seen by every query, also under causality
  };
  const Case plants[] = {{0, {1, 2, 1}, false},
                         {1, {0, 0, 2}, true},
                         {2, {1, 0, 1}, true},
                         {1, {1, 3, 0}, false},
                         {2, {0, 3, 3}, false}};
  const char* what[] = {"output", "dq", "dk", "dv"};
  for (int64_t t : {5, 100})  // one key tile of the CPU kernel, and two
    for (bool causal : {false, true})
      for (const Case& c : plants) {
        const bool forward = !causal || c.everywhere || c.which == 0;
        if (!forward) continue;
        const Pattern fused =
            nan_pattern(t, c.which, c.at, causal, AttentionBackend::Fused, device);
        const Pattern math = nan_pattern(t, c.which, c.at, causal, AttentionBackend::Math, device);
        EXPECT_NE(std::count(fused[0].begin(), fused[0].end(), true), 0)
            << "T " << t << (causal ? " causal" : "") << ", NaN in input " << c.which;
        const size_t compared = !causal || c.everywhere ? 4 : 1;
        for (size_t i = 0; i < compared; ++i) {
          size_t first = 0;
          while (first < math[i].size() && fused[i][first] == math[i][first]) ++first;
          EXPECT_EQ(first, math[i].size())
              << what[i] << ", T " << t << (causal ? " causal" : "") << ", NaN in input " << c.which
              << ": first differs at " << first << " (fused "
              << (first < fused[i].size() && fused[i][first] ? "NaN" : "number") << ")";
        }
      }
}

TEST(NonfiniteAttentionPattern, FusedNaNsAreTheMathBackendsOnCpu) {
  expect_fused_nans_are_maths(Device::cpu());
}
TEST(NonfiniteAttentionPattern, FusedNaNsAreTheMathBackendsOnCuda) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  expect_fused_nans_are_maths(Device::cuda(0));
}

// A row that sees no key stays zeros (FlashAttention's rule, attention_test.cpp), a NaN in a
// value elsewhere notwithstanding; the rows that see that value are NaN.
TEST(NonfiniteAttentionPattern, ARowThatSeesNoKeyStaysZeros) {
  manual_seed(4);
  Tensor q = randn({3, 4}, {.dtype = kFloat64}), k = randn({5, 4}, {.dtype = kFloat64});
  std::vector<double> v = randn({5, 2}, {.dtype = kFloat64}).to_vector<double>();
  v[2] = kNaN;  // key 1, column 0
  std::vector<bool> m(15, true);
  for (int j = 0; j < 5; ++j) m[size_t(j)] = false;  // query 0 sees nothing
  const Tensor y = scaled_dot_product_attention(
      q, k, from_vector(v, {5, 2}),
      {.attn_mask = from_vector(m, {3, 5}), .backend = AttentionBackend::Fused});
  const std::vector<double> out = y.to_vector<double>();
  EXPECT_EQ(out[0], 0.0);
  EXPECT_EQ(out[1], 0.0);
  EXPECT_TRUE(std::isnan(out[2]) && std::isnan(out[4])) << y.str();
  EXPECT_FALSE(std::isnan(out[3]) || std::isnan(out[5])) << y.str();
}

// The tensor-core kernels (the Flash backend, bfloat16): their NaNs are the CPU fused kernel's
// from the same rounded inputs (no mask, so both visit every key).
TEST(NonfiniteAttentionPattern, FlashNaNsAreTheCpusOnCuda) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  for (size_t which : {0, 1, 2}) {
    manual_seed(8);
    std::vector<Tensor> x;
    for (int i = 0; i < 3; ++i) x.push_back(randn({1, 40, 32}).to(kBFloat16).to(kFloat32));
    std::vector<float> planted = x[which].to_vector<float>();
    planted[size_t(5 * 32 + 7)] = std::numeric_limits<float>::quiet_NaN();
    x[which] = from_vector(planted, {1, 40, 32});
    const Tensor dy = randn({1, 40, 32}).to(kBFloat16).to(kFloat32);
    auto run = [&](Device device, DType dtype, AttentionBackend backend) {
      std::vector<Tensor> in;
      for (const Tensor& e : x) in.push_back(e.to(dtype).to(device).requires_grad_());
      const Tensor y = scaled_dot_product_attention(in[0], in[1], in[2], {.backend = backend});
      (y * dy.to(dtype).to(device)).sum().backward();
      std::vector<std::vector<bool>> p;
      for (const Tensor& r : {y, in[0].grad(), in[1].grad(), in[2].grad()}) {
        p.emplace_back();
        for (double e : r.to_vector<double>()) p.back().push_back(std::isnan(e));
      }
      return p;
    };
    EXPECT_EQ(run(Device::cuda(0), kBFloat16, AttentionBackend::Flash),
              run(Device::cpu(), kFloat32, AttentionBackend::Fused))
        << "NaN in input " << which;
  }
}

}  // namespace nonfinite
