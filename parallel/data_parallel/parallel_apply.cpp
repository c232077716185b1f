// parallel/data_parallel/parallel_apply.cpp — the replica threads (a DeviceWorkers set of one
// thread per device, for the life of the process) and the fan-out/wait.
#include <tandem/autograd/device_workers.h>
#include <tandem/core/error.h>
#include <tandem/parallel/data_parallel/parallel_apply.h>
#include <exception>
#include <string>

namespace tandem::parallel {
namespace {

// Never destroyed: no exit-time destructor may wait for a thread busy with a replica.
DeviceWorkers& replica_threads() {
  static DeviceWorkers* threads = new DeviceWorkers("dp");
  return *threads;
}

std::string where(size_t k, Device device) { return str("replica ", k, " on ", device); }

}  // namespace

void parallel_apply(const std::vector<Device>& devices, const std::function<void(size_t)>& fn) {
  auto named = [&](size_t k) { return where(k, devices[k]); };
  if (devices.size() == 1) {  // nothing runs beside it: the caller's own thread does it
    try {
      fn(0);
    } catch (...) {
      std::rethrow_exception(::tandem::detail::with_context(std::current_exception(), named(0)));
    }
    return;
  }
  std::vector<WorkerKey> keys;
  for (const Device& d : devices) keys.push_back({d});
  replica_threads().run(keys, fn, named);
}

}  // namespace tandem::parallel
