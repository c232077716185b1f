// tests/autograd/op_table.h — one row per differentiable op (and its broadcasting and view cases).
// gradcheck_test.cpp checks every row's backward against finite differences in float64;
// cuda_matches_cpu_test.cpp and low_precision_test.cpp run the same rows on other devices and
// dtypes against the CPU (expect_close).
#pragma once

#include <tandem/tandem.h>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace tandem::testing {

enum class Inputs { Normal, Positive, AwayFromZero };  // how to draw the inputs

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;  // one float64 input per shape, all requiring grad
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  Inputs inputs = Inputs::Normal;
};

const std::vector<OpCase>& op_table();
/// A row's forward output and the gradients of its inputs (undefined where none flowed).
struct OpResult {
  Tensor out;
  std::vector<Tensor> grads;
};
/// Expects `got` to match `want` within atol + rtol·|want|: the forward output, then each input's
/// gradient (defined exactly where want's is). Failures name the row.
void expect_close(const OpResult& got, const OpResult& want, double atol, double rtol,
                  const std::string& row);
/// gtest prints a row by its name (instead of its bytes).
inline void PrintTo(const OpCase& row, std::ostream* os) { *os << row.name; }
/// The inputs for a row: float64, deterministic, drawn as the row asks, requiring grad.
std::vector<Tensor> make_inputs(const OpCase& row, Device device = Device::cpu());

}  // namespace tandem::testing
