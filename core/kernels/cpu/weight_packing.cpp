// core/kernels/cpu/weight_packing.cpp — the packed copies a WeightPacking keeps (why:
// core/weight_packing.h), and the thread's current packing.
#include <tandem/core/kernels/cpu/onednn.h>
#include <tandem/core/weight_packing.h>
#include <mutex>
#include <vector>

namespace tandem {

using Copy = std::shared_ptr<dnnl::memory>;

// One operand seen in the region: where it lives, at which version, and its copy once it has one.
// Copies are shared with the products using them; memory is recycled only when no product holds
// it any more (use_count 1), so a copy dropped while another thread still multiplies by it (a
// version bump, another layout) is never overwritten under that product.
struct WeightPacking::State {
  struct Entry {
    std::weak_ptr<Storage> storage;  // weak: a freed storage's address may come back
    int64_t offset, rows, cols;
    uint64_t version;
    Copy packed;  // null until the second use
  };
  size_t max_bytes, bytes = 0;  // of the copies, spare ones included
  int64_t packs = 0;
  mutable std::mutex mutex;
  std::vector<Entry> entries;
  std::vector<Copy> spare;  // copies no longer current, whose memory is reused

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
  // Forgets the operands whose storage is gone (they would never be asked for again).
  void prune() {
    std::erase_if(entries, [&](Entry& e) {
      if (!e.storage.expired()) return false;
      drop(e);
      return true;
    });
  }
  // Memory for a copy laid out as `d`: a spare one of that layout that no product holds (the same
  // weight in the next step: no new pages to fault in, which would cost more than the copy), else
  // a new one within max_bytes (freeing idle spares of other layouts to make room), else none.
  Copy take(const dnnl::memory::desc& d) {
    auto idle = [](const Copy& c) { return c.use_count() == 1; };
    for (size_t i = 0; i < spare.size(); ++i)
      if (idle(spare[i]) && spare[i]->get_desc() == d) {
        Copy c = std::move(spare[i]);
        spare.erase(spare.begin() + int64_t(i));
        return c;
      }
    std::erase_if(spare, [&](const Copy& c) {
      if (bytes + d.get_size() <= max_bytes || !idle(c)) return false;
      bytes -= c->get_desc().get_size();
      return true;
    });
    if (bytes + d.get_size() > max_bytes) return nullptr;
    Copy c = std::make_shared<dnnl::memory>(d, cpu::onednn_engine());
    bytes += d.get_size();
    return c;
  }
};

WeightPacking::WeightPacking(size_t max_bytes) : state_(std::make_unique<State>()) {
  state_->max_bytes = max_bytes;
}
WeightPacking::~WeightPacking() = default;

int64_t WeightPacking::packs() const {
  std::lock_guard lk(state_->mutex);
  return state_->packs;
}
size_t WeightPacking::bytes() const {
  std::lock_guard lk(state_->mutex);
  return state_->bytes;
}
void WeightPacking::reset() {
  std::lock_guard lk(state_->mutex);
  for (State::Entry& e : state_->entries) state_->drop(e);
  state_->entries.clear();
}

namespace {
thread_local std::shared_ptr<WeightPacking> t_current;
}

std::shared_ptr<WeightPacking> WeightPacking::current() { return t_current; }
void WeightPacking::set_current(std::shared_ptr<WeightPacking> packing) {
  t_current = std::move(packing);
}

WeightPackingGuard::WeightPackingGuard(std::shared_ptr<WeightPacking> packing)
    : previous_(WeightPacking::current()) {
  WeightPacking::set_current(std::move(packing));
}
WeightPackingGuard::~WeightPackingGuard() { WeightPacking::set_current(std::move(previous_)); }

namespace cpu {

std::shared_ptr<dnnl::memory> packed_weight(WeightPacking& packing, const Tensor& b,
                                            const dnnl::memory& plain,
                                            const dnnl::memory::desc& packed) {
  WeightPacking::State& s = packing.state();
  const uint64_t version = b.version();
  Copy copy;
  {
    std::lock_guard lk(s.mutex);
    WeightPacking::State::Entry* e = s.find(b);
    if (!e) {  // the first use: remember it, read it as it is
      s.prune();
      s.entries.push_back(
          {b.impl().storage, b.storage_offset(), b.size(0), b.size(1), version, nullptr});
      return nullptr;
    }
    if (e->version != version) {  // written since: a first use again
      s.drop(*e);
      e->version = version;
      return nullptr;
    }
    if (e->packed && e->packed->get_desc() == packed) return e->packed;
    s.drop(*e);
    copy = s.take(packed);
    if (!copy) return nullptr;  // no room left
  }
  // The second use: pack it, outside the lock (a reorder is a pass over the whole weight, and the
  // other stages' products look their weights up meanwhile).
  try {
    dnnl::memory from = plain;
    dnnl::reorder(from, *copy).execute(onednn_stream(), from, *copy);
  } catch (...) {
    std::lock_guard lk(s.mutex);
    s.spare.push_back(std::move(copy));  // its memory stays counted and reusable
    throw;
  }
  std::lock_guard lk(s.mutex);
  WeightPacking::State::Entry* e = s.find(b);
  if (e && e->version == version && !e->packed) {
    e->packed = copy;
    ++s.packs;
  } else {  // written (or packed by another thread) meanwhile: used this once, then recycled
    s.spare.push_back(copy);
  }
  return copy;
}

}  // namespace cpu
}  // namespace tandem
