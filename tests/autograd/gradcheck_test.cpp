// Every row of the op table: backward matches central finite differences in float64
// (eps 1e-6, |analytic − numeric| <= 1e-5 + 1e-3·|numeric|).
#include "autograd/op_table.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::OpCase;

class Gradcheck : public ::testing::TestWithParam<OpCase> {};

TEST_P(Gradcheck, BackwardMatchesFiniteDifferences) {
  const OpCase& row = GetParam();
  const GradcheckResult r = gradcheck(row.fn, tandem::testing::make_inputs(row));
  EXPECT_TRUE(r.ok) << row.name << ": " << r.message;
  EXPECT_LT(r.max_abs_error, 1e-5) << row.name;
}

INSTANTIATE_TEST_SUITE_P(OpTable, Gradcheck, ::testing::ValuesIn(tandem::testing::op_table()),
                         [](const auto& info) { return info.param.name; });

TEST(GradcheckItself, CatchesAWrongBackward) {
  // A deliberately wrong gradient (sigmoid's forward with tanh's backward) must be caught, so the
  // op table's checks can fail.
  auto wrong = [](const std::vector<Tensor>& x) {
    Tensor y = x[0].sigmoid().detach();
    Tensor t = x[0].tanh();
    return y + (t - t.detach());  // value of sigmoid, gradient of tanh
  };
  Tensor x = randn({4}, {.dtype = kFloat64}).requires_grad_();
  EXPECT_FALSE(gradcheck(wrong, {x}).ok);
  EXPECT_THROW(gradcheck([](const std::vector<Tensor>& v) { return v[0] * 2.0; },
                         {randn({2}).requires_grad_()}),
               DTypeError);
}
