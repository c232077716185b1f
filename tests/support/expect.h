// tests/support/expect.h — helpers shared by the test executables.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <tandem/tandem.h>
#include <string>
#include <vector>

namespace tandem::testing {

/// The message of the exception `fn` throws as E (a test failure when it throws nothing).
template <typename E, typename F>
std::string error_message(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

/// Element-wise closeness of two tensors, with a readable failure.
inline ::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double atol = 1e-6,
                                            double rtol = 1e-5) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shapes differ: " << a.shape() << " vs " << b.shape();
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i];
  return ::testing::AssertionSuccess();
}

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace tandem::testing
