// core/storage.cpp — ownership of tensor memory.
#include <tandem/core/allocator.h>
#include <tandem/core/storage.h>

namespace tandem {

Storage::Storage(Device device, size_t nbytes)
    : device_(device), data_(allocate(device, nbytes)), nbytes_(nbytes) {}

Storage::Storage(Device device, void* data, size_t nbytes, std::function<void(void*)> deleter)
    : device_(device), data_(data), nbytes_(nbytes), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (deleter_) {
    deleter_(data_);
  } else {
    deallocate(device_, data_, nbytes_);
  }
}

}  // namespace tandem
