// parallel/device_mesh.cpp — a rank's coordinates are its row-major digits in the mesh's shape;
// its group along a dimension is the line through it that varies only that digit.
#include <tandem/core/check.h>
#include <tandem/parallel/device_mesh.h>
#include <sstream>

namespace tandem::parallel {

DeviceMesh::DeviceMesh(std::shared_ptr<Communicator> world, std::vector<int> shape,
                       std::vector<std::string> names)
    : world_(std::move(world)), shape_(std::move(shape)), names_(std::move(names)) {
  TD_CHECK_VALUE(world_ != nullptr, "DeviceMesh: no world group");
  TD_CHECK_VALUE(!shape_.empty() && shape_.size() == names_.size(), "DeviceMesh: ", shape_.size(),
                 " dimensions but ", names_.size(), " names");
  int64_t ranks = 1;
  for (size_t d = 0; d < shape_.size(); ++d) {
    TD_CHECK_VALUE(shape_[d] >= 1, "DeviceMesh: dimension '", names_[d], "' has size ", shape_[d]);
    for (size_t e = 0; e < d; ++e)
      TD_CHECK_VALUE(names_[e] != names_[d], "DeviceMesh: two dimensions are named '", names_[d],
                     "'");
    ranks *= shape_[d];
  }
  TD_CHECK_VALUE(ranks == world_->size(), "DeviceMesh: a mesh of ", ranks,
                 " ranks over a group of ", world_->size());
  // Row-major digits: stride[d] = product of the sizes after d.
  std::vector<int> stride(shape_.size(), 1);
  for (size_t d = shape_.size() - 1; d > 0; --d) stride[d - 1] = stride[d] * shape_[d];
  for (size_t d = 0; d < shape_.size(); ++d)
    coordinates_.push_back(world_->rank() / stride[d] % shape_[d]);
  // Every line along each dimension, in the order of its first rank: the same calls everywhere.
  for (size_t d = 0; d < shape_.size(); ++d) {
    std::shared_ptr<Communicator> mine;
    for (int first = 0; first < world_->size(); ++first) {
      if (first / stride[d] % shape_[d] != 0) continue;  // not the start of a line along d
      std::vector<int> line;
      for (int k = 0; k < shape_[d]; ++k) line.push_back(first + k * stride[d]);
      auto group = world_->new_group(line);
      if (group) mine = std::move(group);
    }
    groups_.push_back(std::move(mine));
  }
}

size_t DeviceMesh::dim(const std::string& name) const {
  for (size_t d = 0; d < names_.size(); ++d)
    if (names_[d] == name) return d;
  TD_CHECK_VALUE(false, "DeviceMesh: no dimension '", name, "' in ", str());
  return 0;
}

const std::shared_ptr<Communicator>& DeviceMesh::group(const std::string& name) const {
  return groups_[dim(name)];
}
std::shared_ptr<Communicator> DeviceMesh::flatten(const std::vector<std::string>& names) {
  TD_CHECK_VALUE(!names.empty(), "DeviceMesh::flatten: no dimensions named");
  if (names.size() == 1) return group(names[0]);
  std::vector<bool> flat(shape_.size(), false);
  for (const std::string& name : names) {
    TD_CHECK_VALUE(!flat[dim(name)], "DeviceMesh::flatten: '", name, "' named twice");
    flat[dim(name)] = true;
  }
  std::vector<int> stride(shape_.size(), 1);
  for (size_t d = shape_.size() - 1; d > 0; --d) stride[d - 1] = stride[d] * shape_[d];
  const auto digit = [&](int rank, size_t d) { return rank / stride[d] % shape_[d]; };
  // One group per setting of the other dimensions, in the order of its first rank.
  std::shared_ptr<Communicator> mine;
  for (int first = 0; first < world_->size(); ++first) {
    bool starts = true;
    for (size_t d = 0; d < shape_.size(); ++d)
      starts = starts && (!flat[d] || digit(first, d) == 0);
    if (!starts) continue;
    std::vector<int> ranks;
    for (int r = first; r < world_->size(); ++r) {
      bool same = true;
      for (size_t d = 0; d < shape_.size(); ++d)
        same = same && (flat[d] || digit(r, d) == digit(first, d));
      if (same) ranks.push_back(r);
    }
    auto g = world_->new_group(ranks);
    if (g) mine = std::move(g);
  }
  return mine;
}

int DeviceMesh::coordinate(const std::string& name) const { return coordinates_[dim(name)]; }
int DeviceMesh::size(const std::string& name) const { return shape_[dim(name)]; }

std::string DeviceMesh::str() const {
  std::ostringstream s, n, c;
  for (size_t d = 0; d < shape_.size(); ++d) {
    s << (d ? " x " : "") << shape_[d];
    n << (d ? ", " : "") << names_[d];
    c << (d ? ", " : "") << (d < coordinates_.size() ? coordinates_[d] : 0);
  }
  return tandem::str(s.str(), " mesh (", n.str(), "); rank ", world_->rank(), " at (", c.str(),
                     ")");
}

}  // namespace tandem::parallel
