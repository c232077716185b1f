// parallel/comm/world_agreement.h — the first step of a store rendezvous: every rank says what it
// was told (its rank, the world size, the backend) and ranks told different things fail at once,
// each naming both ranks and both values. Without it they wait for each other until the timeout
// (30 minutes): a rank told a world of 3 waits for a rank 2 that never comes, and one told 2
// never learns why the other does not answer.
// It runs before anyone waits for a full world. Rank 0 (the TCPStore's server, so always there)
// publishes its claim, then reads the others' in the order they arrive (a counter hands out
// arrival numbers), so that it sees a rank told another world, a rank outside its world, or two
// processes with one rank, as soon as that rank arrives; it then publishes its verdict. Every
// other rank publishes its claim, compares it with rank 0's at once, and waits for the verdict,
// so that a rank whose own claim was fine learns why the group failed.
#pragma once

#include <tandem/parallel/store/store.h>
#include <chrono>
#include <string>

namespace tandem::parallel {

struct WorldClaim {
  int rank = 0;
  int world_size = 1;
  std::string backend;  // as this rank asked for it: "shm", "gloo", "nccl" or "cpu" (either)
  std::string told_by;  // where the world size came from: "torchrun (RANK, WORLD_SIZE)", ...
};

/// Every rank of a new group calls it once, right after connecting to the store. DistributedError
/// when ranks disagree (naming both ranks and both values), or when rank 0 has not seen every
/// rank arrive within `timeout` (naming the missing ranks).
void check_world_agreement(Store& store, const WorldClaim& mine, std::chrono::milliseconds timeout);

namespace detail {
/// A claim as the store holds it, and back (DistributedError when the text is not one).
std::string encode_claim(const WorldClaim& claim);
WorldClaim decode_claim(const std::string& text);
}  // namespace detail

}  // namespace tandem::parallel
