// core/check.h — the check macros. Message arguments are streamed with << and evaluated only when
// the check fails, as in PyTorch's TORCH_CHECK. Messages follow the format
// "<op>: <what was expected>, but <what was found>" with both operands' values.
#pragma once

#include <tandem/core/error.h>

#define TD_CHECK_AS(Type, cond, ...)             \
  do {                                           \
    if (!(cond)) [[unlikely]]                    \
      ::tandem::detail::fail<Type>(__VA_ARGS__); \
  } while (0)

#define TD_CHECK(cond, ...) TD_CHECK_AS(::tandem::Error, cond, __VA_ARGS__)
#define TD_CHECK_SHAPE(cond, ...) TD_CHECK_AS(::tandem::ShapeError, cond, __VA_ARGS__)
#define TD_CHECK_DTYPE(cond, ...) TD_CHECK_AS(::tandem::DTypeError, cond, __VA_ARGS__)
#define TD_CHECK_DEVICE(cond, ...) TD_CHECK_AS(::tandem::DeviceError, cond, __VA_ARGS__)
#define TD_CHECK_INDEX(cond, ...) TD_CHECK_AS(::tandem::IndexError, cond, __VA_ARGS__)
#define TD_CHECK_VALUE(cond, ...) TD_CHECK_AS(::tandem::ValueError, cond, __VA_ARGS__)

// A broken invariant inside Tandem, not a user mistake: says so and asks for a report.
#define TD_INTERNAL_ASSERT(cond, ...)                                                 \
  do {                                                                                \
    if (!(cond)) [[unlikely]]                                                         \
      ::tandem::detail::internal_error(#cond, __FILE__, __LINE__,                     \
                                       ::tandem::str("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
