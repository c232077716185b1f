// core/error.h — Tandem's typed exceptions. Every error a user can cause is one of these, with the
// values (shapes, dtypes, devices, file names) in its message, so tests and users can tell a shape
// mistake from a missing file. Library code never aborts; it throws.
#pragma once

#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>

namespace tandem {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct ShapeError : Error {  // operands whose shapes do not fit the op
  using Error::Error;
};
struct DTypeError : Error {  // wrong or mismatched element types
  using Error::Error;
};
struct DeviceError : Error {  // mixed devices, unknown device strings, missing backends
  using Error::Error;
};
struct IndexError : Error {  // dimension or element index out of range
  using Error::Error;
};
struct ValueError : Error {  // an argument with a value the op cannot take
  using Error::Error;
};
struct AutogradError : Error {  // misuse of the graph: second backward, modified saved tensors
  using Error::Error;
};
struct DataError : Error {  // corrupt data or checkpoint file: names the file
  using Error::Error;
};
struct DistributedError : Error {  // peer death, timeout: names rank, op, seconds
  using Error::Error;
};
struct CudaError : DeviceError {  // a CUDA, cuBLAS, cuDNN or NCCL status that is not success
  using DeviceError::DeviceError;
};

/// Streams every argument into one string: str("shape ", s, " on ", d).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

namespace detail {

/// Throws `E` with the streamed message. Kept out of line of the check macros so the cold path
/// does not bloat every call site.
template <typename E, typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw E(str(args...));
}

/// `e` with "where: " in front of its message and its type kept (a ShapeError stays a
/// ShapeError), so that an error raised on another thread can say where it happened. Exceptions
/// that are not std::runtime_errors are returned unchanged.
std::exception_ptr with_context(std::exception_ptr e, const std::string& where);

[[noreturn]] void internal_error(const char* cond, const char* file, int line,
                                 const std::string& msg);

}  // namespace detail
}  // namespace tandem
