// core/kernels/cpu/weight_cache.cpp — the GEMM's cache of packed weights (why and when:
// weight_cache.h): one process-wide table of operands, their use counts and their copies.
#include <tandem/core/env.h>
#include <tandem/core/kernels/cpu/onednn.h>
#include <tandem/core/kernels/cpu/weight_cache.h>
#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

namespace tandem::cpu {
namespace {

using Copy = std::shared_ptr<dnnl::memory>;

// A copy's memory is recycled only when no product holds it (use_count 1), so a copy dropped while
// another thread still multiplies by it (a version bump, another layout) is never overwritten
// under that product.
bool idle(const Copy& c) { return c.use_count() == 1; }

// The use of an operand, at one version, that packs it: the third, or the second when it was used
// three times or more at its last version (a pipeline's weights meet every micro-batch, step after
// step: the second use packs, and a weight used twice per step is never packed for nothing).
int pack_at_use(int uses_at_last_version) { return uses_at_last_version >= 3 ? 2 : 3; }

struct Cache {
  struct Entry {
    std::weak_ptr<Storage> storage;  // weak: a freed storage's address may come back
    int64_t offset, rows, cols;
    uint64_t version;
    int uses, uses_before;  // at this version, and at the one before
    uint64_t last_use;      // the cache's clock at the last lookup: least recently used go first
    Copy packed;            // null until the use that packs it (the third, or the second)
  };
  std::mutex mutex;
  std::vector<Entry> entries;
  std::vector<Copy> spare;  // copies no longer current, whose memory is reused
  size_t bytes = 0;         // of the copies, spare ones included
  int64_t packs = 0;
  uint64_t clock = 0;
  uint64_t generation = 0;  // clear_weight_cache's count: a copy made before a clear is dropped

  Entry* find(const Tensor& b) {
    const Storage* s = b.impl().storage.get();
    for (Entry& e : entries)
      if (e.storage.lock().get() == s && e.offset == b.storage_offset() && e.rows == b.size(0) &&
          e.cols == b.size(1))
        return &e;
    return nullptr;
  }
  void drop(Entry& e) {
    if (e.packed) spare.push_back(std::move(e.packed));
    e.packed = nullptr;
  }
  // Forgets the operands whose storage is gone (they would never be asked for again), and keeps
  // the table short: a model's weights are a few hundred operands at most.
  void prune() {
    std::erase_if(entries, [&](Entry& e) {
      if (!e.storage.expired()) return false;
      drop(e);
      return true;
    });
    constexpr size_t kMaxEntries = 1024;
    if (entries.size() < kMaxEntries) return;
    auto oldest = std::min_element(entries.begin(), entries.end(),
                                   [](auto& a, auto& b) { return a.last_use < b.last_use; });
    drop(*oldest);
    entries.erase(oldest);
  }
  // Frees idle spare copies, then the least recently used current ones, until `need` more bytes
  // fit under the limit; false if they cannot (every copy is in use).
  bool make_room(size_t need) {
    std::erase_if(spare, [&](const Copy& c) {
      if (bytes + need <= kWeightCacheBytes || !idle(c)) return false;
      bytes -= c->get_desc().get_size();
      return true;
    });
    while (bytes + need > kWeightCacheBytes) {
      Entry* lru = nullptr;
      for (Entry& e : entries)
        if (e.packed && idle(e.packed) && (!lru || e.last_use < lru->last_use)) lru = &e;
      if (!lru) return false;
      bytes -= lru->packed->get_desc().get_size();
      lru->packed = nullptr;
    }
    return true;
  }
  // Memory for a copy laid out as `d`: a spare one of that layout that no product holds (the same
  // weight after the next optimizer step: no new pages to fault in, which would cost more than the
  // copy), else a new one within the limit, else none.
  Copy take(const dnnl::memory::desc& d) {
    for (size_t i = 0; i < spare.size(); ++i)
      if (idle(spare[i]) && spare[i]->get_desc() == d) {
        Copy c = std::move(spare[i]);
        spare.erase(spare.begin() + int64_t(i));
        return c;
      }
    if (!make_room(d.get_size())) return nullptr;
    Copy c = std::make_shared<dnnl::memory>(d, onednn_engine());
    bytes += d.get_size();
    return c;
  }
};

// Immortal: products may run on threads that outlive static destruction.
Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}

std::atomic<int> g_enabled{-1};  // -1: not read from the environment yet

}  // namespace

bool weight_cache_enabled() {
  int on = g_enabled.load(std::memory_order_relaxed);
  if (on < 0) {
    on = detail::env_int("TANDEM_PACK_WEIGHTS", 1) != 0;
    g_enabled.store(on, std::memory_order_relaxed);
  }
  return on != 0;
}

void set_weight_cache_enabled(bool on) { g_enabled = on; }

WeightCacheStats weight_cache_stats() {
  Cache& c = cache();
  std::lock_guard lk(c.mutex);
  return {c.packs, c.bytes, c.entries.size()};
}

void clear_weight_cache() {
  Cache& c = cache();
  std::lock_guard lk(c.mutex);
  for (Cache::Entry& e : c.entries) c.drop(e);
  c.entries.clear();
  // Copies a running product still holds are freed by it; only their accounting goes now.
  c.spare.clear();
  c.bytes = 0;
  c.packs = 0;
  ++c.generation;
}

std::shared_ptr<dnnl::memory> cached_weight(const Tensor& b, const dnnl::memory& plain,
                                            const dnnl::memory::desc& packed) {
  Cache& s = cache();
  const uint64_t version = b.version();
  Copy copy;
  uint64_t generation;
  {
    std::lock_guard lk(s.mutex);
    generation = s.generation;
    const uint64_t now = ++s.clock;
    Cache::Entry* e = s.find(b);
    if (!e) {  // the first use: count it, read it as it is
      s.prune();
      s.entries.push_back({b.impl().storage, b.storage_offset(), b.size(0), b.size(1), version, 1,
                           0, now, nullptr});
      return nullptr;
    }
    e->last_use = now;
    if (e->version != version) {  // written since: a first use again
      s.drop(*e);
      e->version = version;
      e->uses_before = std::exchange(e->uses, 1);
      return nullptr;
    }
    if (e->packed && e->packed->get_desc() == packed) return e->packed;
    if (++e->uses < pack_at_use(e->uses_before)) return nullptr;
    s.drop(*e);
    copy = s.take(packed);
    if (!copy) return nullptr;  // no room left
  }
  // Pack it outside the lock: a reorder is a pass over the whole weight, and the other threads'
  // products look their weights up meanwhile.
  try {
    dnnl::memory from = plain;
    dnnl::reorder(from, *copy).execute(onednn_stream(), from, *copy);
  } catch (...) {
    std::lock_guard lk(s.mutex);
    if (s.generation == generation) s.spare.push_back(std::move(copy));  // counted, reusable
    throw;
  }
  std::lock_guard lk(s.mutex);
  if (s.generation != generation) return copy;  // cleared meanwhile: used this once, uncounted
  Cache::Entry* e = s.find(b);
  if (e && e->version == version && !e->packed) {
    e->packed = copy;
    ++s.packs;
  } else {  // written (or packed by another thread) meanwhile: used this once, then recycled
    s.spare.push_back(copy);
  }
  return copy;
}

}  // namespace tandem::cpu
