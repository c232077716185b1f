// parallel/placed_elements.cpp — a placement chain applied to the whole's element indices: the
// same narrow and cat a wrapper applied to the values, applied to 0, 1, 2, ... instead.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/parallel/placed_elements.h>
#include <cstring>

namespace tandem::parallel {

std::vector<AppliedPlacement> applied_placements(const PlacedTensor& e,
                                                 const PlacementTable& table) {
  std::vector<AppliedPlacement> out;
  for (const auto& [dim, p] : e.placements) {
    if (std::holds_alternative<Replicate>(p) || std::holds_alternative<Partial>(p)) continue;
    const Communicator& g = table.group(dim);
    out.push_back({p, g.size(), g.rank()});
  }
  return out;
}

std::vector<int64_t> whole_elements(const Shape& whole, const std::vector<AppliedPlacement>& chain,
                                    std::string_view what) {
  NoGradGuard no_grad;
  Tensor t = arange(double(numel(whole))).reshape(whole);
  for (const AppliedPlacement& a : chain) {
    TD_CHECK_VALUE(a.ranks >= 1 && a.at >= 0 && a.at < a.ranks, what, ": coordinate ", a.at, " of ",
                   a.ranks, " ranks");
    if (const auto* s = std::get_if<Shard>(&a.how)) {
      if (t.dim() == 0) t = t.reshape({1});  // a scalar is one row (fully_shard's chunks)
      TD_CHECK_VALUE(s->dim >= 0 && s->dim < t.dim() && s->blocks >= 1 && s->padding >= 0, what,
                     ": ", to_string(a.how), " does not fit a tensor of shape ", t.shape());
      if (s->padding > 0) {  // rows the whole does not have
        Shape pad = t.shape();
        pad[size_t(s->dim)] = s->padding;
        t = cat({t, full(pad, -1, {.dtype = kInt64})}, s->dim);
      }
      const int64_t size = t.size(s->dim);
      TD_CHECK_VALUE(size % (s->blocks * a.ranks) == 0, what, ": ", to_string(a.how), " over ",
                     a.ranks, " ranks does not divide ", size, " rows of dim ", s->dim);
      const int64_t block = size / s->blocks, part = block / a.ranks;
      std::vector<Tensor> mine;  // the rank's slice of every block, in block order
      for (int64_t b = 0; b < s->blocks; ++b)
        mine.push_back(t.narrow(s->dim, b * block + a.at * part, part));
      t = mine.size() == 1 ? mine[0] : cat(mine, s->dim);
    } else if (const auto* p = std::get_if<Piece>(&a.how)) {
      TD_CHECK_VALUE(p->begin >= 0 && p->length >= 0 && p->begin + p->length <= t.numel(), what,
                     ": ", to_string(a.how), " of a tensor of ", t.numel(), " elements");
      t = t.contiguous().reshape({t.numel()}).narrow(0, p->begin, p->length);
    }
  }
  return t.contiguous().to_vector<int64_t>();
}

std::vector<int64_t> held_elements(const Shape& whole, const std::vector<AppliedPlacement>& chain,
                                   int64_t numel, std::string_view what) {
  std::vector<int64_t> v = whole_elements(whole, chain, what);
  while (int64_t(v.size()) > numel && v.back() < 0) v.pop_back();
  TD_CHECK_VALUE(int64_t(v.size()) == numel, what, ": the tensor has ", numel,
                 " elements, its placements ", v.size());
  return v;
}

namespace {

// The element copies of put_elements and take_elements: `at` indexes the whole on one side.
template <bool kToWhole>
void copy_elements(const Tensor& part, const std::vector<int64_t>& at, const Tensor& whole) {
  TD_CHECK_VALUE(part.dtype() == whole.dtype() && part.is_contiguous() && whole.is_contiguous() &&
                     int64_t(at.size()) == part.numel(),
                 "placed elements: a part of ", part.numel(), " ", name(part.dtype()),
                 " elements and a whole of ", whole.numel(), " ", name(whole.dtype()),
                 " elements do not match ", at.size(), " indices");
  const size_t size = element_size(part.dtype());
  char* p = static_cast<char*>(part.data_ptr());
  char* w = static_cast<char*>(whole.data_ptr());
  for (size_t i = 0; i < at.size(); ++i) {
    if (at[i] < 0) continue;
    TD_CHECK_VALUE(at[i] < whole.numel(), "placed elements: index ", at[i], " past the whole's ",
                   whole.numel(), " elements");
    char* whole_at = w + size_t(at[i]) * size;
    if constexpr (kToWhole)
      std::memcpy(whole_at, p + i * size, size);
    else
      std::memcpy(p + i * size, whole_at, size);
  }
}

}  // namespace

void put_elements(const Tensor& part, const std::vector<int64_t>& at, Tensor& whole) {
  copy_elements<true>(part, at, whole);
}

void take_elements(const Tensor& whole, const std::vector<int64_t>& at, Tensor& part) {
  copy_elements<false>(part, at, whole);
}

}  // namespace tandem::parallel
