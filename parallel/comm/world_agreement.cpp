// parallel/comm/world_agreement.cpp — claims under "world/…" keys, rank 0's checks, its verdict.
#include <tandem/core/check.h>
#include <tandem/parallel/comm/world_agreement.h>
#include <algorithm>
#include <charconv>
#include <sstream>
#include <vector>

namespace tandem::parallel {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kRank0Claim = "world/rank0";
constexpr const char* kArrivals = "world/arrivals";
constexpr const char* kVerdict = "world/verdict";  // kWhole, or why the group failed
constexpr const char* kWhole = "the world is whole and agrees";

std::string arrival_key(int64_t n) { return "world/arrival/" + std::to_string(n); }

milliseconds time_left(Clock::time_point deadline) {
  return std::max(milliseconds(1), std::chrono::ceil<milliseconds>(deadline - Clock::now()));
}

// Whether a store's wait that failed at `deadline` timed out (a store's own clock may end its
// wait a little early) rather than lost its connection, whose error says more.
bool timed_out(Clock::time_point deadline) { return Clock::now() + milliseconds(50) >= deadline; }

std::string in_seconds(milliseconds t) { return str(double(t.count()) / 1000.0, " s"); }

constexpr const char* kStartHint =
    "\n  hint: every rank must start, with the same WORLD_SIZE and MASTER_ADDR/MASTER_PORT, "
    "within the timeout";

// "rank 1", or "rank 1 (this process)" in the message that process throws.
std::string rank_name(const WorldClaim& c, int me) {
  return str("rank ", c.rank, c.rank == me ? " (this process)" : "");
}

// Why ranks `a` and `b` cannot be one group, as process `me` says it (-1: a third one); empty
// when they can.
std::string disagreement(const WorldClaim& a, const WorldClaim& b, int me) {
  if (a.world_size != b.world_size)
    return str("init_process_group: the ranks disagree on the world size: ", rank_name(a, me),
               " was told a world of ", a.world_size, " (by ", a.told_by, "), ", rank_name(b, me),
               " was told a world of ", b.world_size, " (by ", b.told_by,
               ")\n  hint: start every rank with the same world size: one launcher for all of "
               "them, or the same .world_size");
  if (a.backend != b.backend)
    return str("init_process_group: the ranks disagree on the backend: ", rank_name(a, me),
               " asked for \"", a.backend, "\", ", rank_name(b, me), " for \"", b.backend,
               "\"\n  hint: give every rank the same backend and the same kind of device");
  return "";
}

// Waits for `key` until the deadline; a timeout says what this rank was waiting for.
void wait_or_explain(Store& store, const std::string& key, Clock::time_point deadline,
                     milliseconds timeout, const WorldClaim& mine, const char* what) {
  try {
    store.wait({key}, time_left(deadline));
  } catch (const DistributedError&) {
    if (!timed_out(deadline)) throw;
    ::tandem::detail::fail<DistributedError>("init_process_group: rank ", mine.rank, " of ",
                                             mine.world_size, " waited ", in_seconds(timeout),
                                             " for ", what, kStartHint);
  }
}

// Rank 0: reads each other rank's claim as it arrives, then says whether the world agrees.
void check_as_rank0(Store& store, const WorldClaim& mine, Clock::time_point deadline,
                    milliseconds timeout) {
  store.set(kRank0Claim, detail::encode_claim(mine));
  std::vector<bool> here(size_t(mine.world_size), false);
  here[0] = true;
  std::string mine_says, verdict;  // rank 0's message, and the others' (no "this process")
  for (int n = 1; n < mine.world_size && verdict.empty(); ++n) {
    const std::string key = arrival_key(n);
    try {
      store.wait({key}, time_left(deadline));
    } catch (const DistributedError&) {
      if (!timed_out(deadline)) throw;
      std::string missing;
      for (int r = 1; r < mine.world_size; ++r)
        if (!here[size_t(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      verdict = mine_says = str("init_process_group: rank 0 waited ", in_seconds(timeout),
                                " for the other ranks of its world of ", mine.world_size,
                                ", and rank(s) ", missing, " did not arrive", kStartHint);
      break;
    }
    const WorldClaim c = detail::decode_claim(store.get_string(key));
    mine_says = disagreement(c, mine, 0);
    verdict = disagreement(c, mine, -1);
    if (verdict.empty() && here[size_t(c.rank)])  // the ranks agree: c.rank < world_size
      verdict = mine_says =
          str("init_process_group: two processes say they are rank ", c.rank, " of ",
              mine.world_size, "\n  hint: give each process a RANK of its own");
    if (verdict.empty()) here[size_t(c.rank)] = true;
  }
  store.set(kVerdict, verdict.empty() ? std::string(kWhole) : verdict);
  TD_CHECK_AS(DistributedError, mine_says.empty(), mine_says);
}

// Any other rank: says what it was told, compares it with rank 0's, waits for the verdict.
void check_against_rank0(Store& store, const WorldClaim& mine, Clock::time_point deadline,
                         milliseconds timeout) {
  const int64_t n = store.add(kArrivals, 1);  // first, so that rank 0 sees even a rank that fails
  store.set(arrival_key(n), detail::encode_claim(mine));
  wait_or_explain(store, kRank0Claim, deadline, timeout, mine, "rank 0 to arrive");
  const WorldClaim zero = detail::decode_claim(store.get_string(kRank0Claim));
  const std::string problem = disagreement(mine, zero, mine.rank);
  TD_CHECK_AS(DistributedError, problem.empty(), problem);
  TD_CHECK_AS(DistributedError, n < zero.world_size, "init_process_group: rank ", mine.rank,
              " (this process) is one process too many: rank 0's world of ", zero.world_size,
              " has all its ranks already\n  hint: give each process a RANK of its own");
  wait_or_explain(store, kVerdict, deadline, timeout, mine, "rank 0 to see every rank arrive");
  const std::string verdict = store.get_string(kVerdict);
  TD_CHECK_AS(DistributedError, verdict == kWhole, verdict);
}

}  // namespace

void check_world_agreement(Store& store, const WorldClaim& mine, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  if (mine.rank == 0)
    check_as_rank0(store, mine, deadline, timeout);
  else
    check_against_rank0(store, mine, deadline, timeout);
}

namespace detail {

std::string encode_claim(const WorldClaim& c) {
  return str(c.rank, "\n", c.world_size, "\n", c.backend, "\n", c.told_by);
}

WorldClaim decode_claim(const std::string& text) {
  std::istringstream in(text);
  std::string rank, world;
  WorldClaim c;
  const auto number = [](const std::string& s, int& out) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && end == s.data() + s.size() && out >= 0;
  };
  const bool ok = std::getline(in, rank) && std::getline(in, world) &&
                  std::getline(in, c.backend) && number(rank, c.rank) &&
                  number(world, c.world_size) && c.rank < c.world_size;
  std::getline(in, c.told_by);  // words for the message only: may be empty
  TD_CHECK_AS(DistributedError, ok, "init_process_group: the store holds '", text,
              "' where a rank's claim (rank, world size, backend) should be\n  hint: give each "
              "job a rendezvous of its own (MASTER_PORT, or a fresh file:// directory)");
  return c;
}

}  // namespace detail

}  // namespace tandem::parallel
