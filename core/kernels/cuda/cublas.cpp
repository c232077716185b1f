// core/kernels/cuda/cublas.cpp — opens cuBLAS with dlopen on first use (why: cublas.h).
#include <dlfcn.h>
#include <tandem/core/error.h>
#include <tandem/core/kernels/cuda/cublas.h>
#include <string>

namespace tandem::cuda {
namespace {

// The soname of the cuBLAS the kernels were compiled against: its ABI changes with the major.
const std::string kLibrary = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);

void* open_library() {
  // RTLD_LOCAL: its symbols stay out of the global namespace, so a program that links its own
  // cuBLAS (or loads PyTorch's) is not affected; a library already loaded is simply shared.
  void* handle = dlopen(kLibrary.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr)
    throw CudaError("cannot load cuBLAS (" + kLibrary +
                    "), which matrix products on a GPU need: " + dlerror());
  return handle;
}

void* symbol(void* library, const char* name) {
  void* f = dlsym(library, name);
  if (f == nullptr)
    throw CudaError(kLibrary + " has no function " + name +
                    ": it is not the cuBLAS Tandem was built against");
  return f;
}

Cublas load() {
  void* lib = open_library();  // never closed: the handles it made live until the process exits
  // Field F is the function cublasF, whose symbol is that name after cublas_v2.h's macros
  // (cublasSgemm is cublasSgemm_v2): TD_CUBLAS_STRING expands its argument before quoting it.
#define TD_CUBLAS_QUOTE(name) #name
#define TD_CUBLAS_STRING(name) TD_CUBLAS_QUOTE(name)
#define TD_CUBLAS_LOAD(field) \
  .field = reinterpret_cast<decltype(Cublas::field)>(symbol(lib, TD_CUBLAS_STRING(cublas##field)))
  Cublas api{
      TD_CUBLAS_LOAD(Create),
      TD_CUBLAS_LOAD(Destroy),
      TD_CUBLAS_LOAD(SetStream),
      TD_CUBLAS_LOAD(SetMathMode),
      TD_CUBLAS_LOAD(GetStatusString),
      TD_CUBLAS_LOAD(GetProperty),
      TD_CUBLAS_LOAD(Sgemm),
      TD_CUBLAS_LOAD(Dgemm),
      TD_CUBLAS_LOAD(SgemmStridedBatched),
      TD_CUBLAS_LOAD(DgemmStridedBatched),
      TD_CUBLAS_LOAD(GemmEx),
      TD_CUBLAS_LOAD(GemmStridedBatchedEx),
  };
#undef TD_CUBLAS_LOAD
#undef TD_CUBLAS_STRING
#undef TD_CUBLAS_QUOTE
  return api;
}

}  // namespace

const Cublas& cublas() {
  static const Cublas api = load();  // C++ makes this first call thread-safe; a throw retries
  return api;
}

}  // namespace tandem::cuda
