// core/error.cpp — the out-of-line part of the error machinery.
#include <tandem/core/error.h>

namespace tandem::detail {

namespace {
template <typename E>
std::exception_ptr again(const std::string& where, const E& e) {
  return std::make_exception_ptr(E(where + ": " + e.what()));
}
}  // namespace

std::exception_ptr with_context(std::exception_ptr e, const std::string& where) {
  // Most derived first: a CudaError is also a DeviceError.
  try {
    std::rethrow_exception(e);
  } catch (const CudaError& x) {
    return again(where, x);
  } catch (const ShapeError& x) {
    return again(where, x);
  } catch (const DTypeError& x) {
    return again(where, x);
  } catch (const DeviceError& x) {
    return again(where, x);
  } catch (const IndexError& x) {
    return again(where, x);
  } catch (const ValueError& x) {
    return again(where, x);
  } catch (const AutogradError& x) {
    return again(where, x);
  } catch (const DataError& x) {
    return again(where, x);
  } catch (const DistributedError& x) {
    return again(where, x);
  } catch (const Error& x) {
    return again(where, x);
  } catch (const std::runtime_error& x) {
    return std::make_exception_ptr(Error(where + ": " + x.what()));
  } catch (...) {
    return e;
  }
}

void internal_error(const char* cond, const char* file, int line, const std::string& msg) {
  throw Error(str("internal error in Tandem (please report): ", cond, " failed at ", file, ":",
                  line, msg.empty() ? "" : ": ", msg));
}

}  // namespace tandem::detail
