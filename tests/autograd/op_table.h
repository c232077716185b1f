// tests/autograd/op_table.h — one row per differentiable op (and its broadcasting and view cases).
// gradcheck_test.cpp checks every row's backward against finite differences in float64; the CUDA
// backend will run the same rows on cuda:0 against the CPU.
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
/// gtest prints a row by its name (instead of its bytes).
inline void PrintTo(const OpCase& row, std::ostream* os) { *os << row.name; }
/// The inputs for a row: float64, deterministic, drawn as the row asks, requiring grad.
std::vector<Tensor> make_inputs(const OpCase& row, Device device = Device::cpu());

}  // namespace tandem::testing
