// parallel/comm/broadcast_object.h — a string from one rank to all (PyTorch's
// broadcast_object_list, for text): a run's directory, a vocabulary, a setting rank 0 decided.
// It goes through the communicator itself, so it works on every backend, MPI's included, which
// has no store.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <string>
#include <vector>

namespace tandem::parallel {

/// Every rank calls it; each returns `root`'s `text` (the others' `text` is ignored).
std::string broadcast_string(Communicator& group, const std::string& text, int root = 0);

/// Every rank calls it; each returns every rank's `text`, in rank order (all_gather_object).
std::vector<std::string> all_gather_strings(Communicator& group, const std::string& text);

}  // namespace tandem::parallel
