// parallel/comm/locality.h — which ranks share a host, decided from what each rank reports of
// itself through the store (not from LOCAL_WORLD_SIZE, which a launcher may set wrongly):
// ranks share a host when they share a kernel boot, a hostname and the mount and PID
// namespaces, i.e. when they see the same /dev/shm and the same process IDs.
#pragma once

#include <tandem/parallel/store/store.h>
#include <string>

namespace tandem::parallel {

/// This process's host identity: "hostname boot-id mnt:[…] pid:[…]".
std::string host_identity();

/// Publishes this rank's identity under `key_prefix` and returns whether every one of the `size`
/// ranks has the same (every rank must call it).
bool all_ranks_on_one_host(Store& store, int rank, int size,
                           const std::string& key_prefix = "host/");

}  // namespace tandem::parallel
