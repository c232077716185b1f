// core/serialize/safetensors.cpp — the file side of safetensors: laying tensors out and writing
// them through an AtomicFile, and reading a file back with every size checked before a byte of
// tensor data is trusted. The header's JSON is in safetensors_header.cpp.
#include <tandem/core/layout.h>
#include <tandem/core/serialize/atomic_file.h>
#include <tandem/core/serialize/safetensors.h>
#include <tandem/core/serialize/safetensors_header.h>
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tandem {
namespace {

// The format is little-endian and Tandem writes host memory as is.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

constexpr uint64_t kMaxHeaderSize = 100'000'000;  // the reference's MAX_HEADER_SIZE

// The reference writer orders tensors by its Dtype enum, descending, then by name (the table's
// safetensors_rank: I64 before F64, F32, BF16, F16, BOOL).
int layout_rank(DType dtype) { return info(dtype).safetensors_rank; }

// A contiguous host copy of `t` (itself when it already is one): what goes on disk.
Tensor host_contiguous(const Tensor& t) {
  return t.device().is_cpu() ? detail::contiguous(t) : detail::convert(t, Device(), t.dtype());
}

// An open file descriptor, closed on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly `n` bytes at `offset`; a short read means the file shrank under us.
void read_at(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& where,
             const std::string& what) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, size_t(std::min<uint64_t>(n, 1u << 30)), off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      throw Error(str(where, ": cannot read ", what, ": ", std::strerror(err)));
    }
    if (got == 0) throw DataError(str(where, ": truncated while reading ", what));
    p += got;
    n -= uint64_t(got);
    offset += uint64_t(got);
  }
}

// bool tensors hold one byte per element, 0 or 1; any other byte is corruption (and would be
// undefined behaviour as a C++ bool).
void check_bool_bytes(const Tensor& t, const std::string& where, const std::string& name) {
  const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i)
    if (bytes[i] > 1)
      throw DataError(str(where, ": tensor \"", name, "\": BOOL element ", i, " has byte value ",
                          int(bytes[i]), " (must be 0 or 1)"));
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensorList& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::set<std::string_view> seen;
  for (const auto& [name, t] : tensors) {
    TD_CHECK_VALUE(t.defined(), "save_safetensors: tensor \"", name, "\" is undefined (", path,
                   ")");
    TD_CHECK_VALUE(name != "__metadata__", "save_safetensors: \"__metadata__\" is reserved for ",
                   "the metadata map and cannot name a tensor (", path, ")");
    TD_CHECK_VALUE(seen.insert(name).second, "save_safetensors: duplicate tensor name \"", name,
                   "\" (", path, "); each name may appear once");
  }

  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int ra = layout_rank(tensors[a].second.dtype()),
              rb = layout_rank(tensors[b].second.dtype());
    return ra != rb ? ra > rb : tensors[a].first < tensors[b].first;
  });
  std::vector<detail::SafetensorsEntry> entries;
  uint64_t offset = 0;
  for (size_t i : order) {
    const Tensor& t = tensors[i].second;
    entries.push_back({tensors[i].first, t.dtype(), t.shape(), offset, offset + t.nbytes()});
    offset += t.nbytes();
  }
  const std::string header = detail::format_safetensors_header(entries, metadata);

  AtomicFile file(path, "save_safetensors");
  const uint64_t n = header.size();
  file.write(&n, sizeof(n));
  file.write(header.data(), header.size());
  // One host copy at a time, so saving GPU or strided tensors needs memory for the largest one,
  // not for the whole checkpoint.
  for (size_t i : order) {
    const Tensor host = host_contiguous(tensors[i].second);
    if (host.nbytes() > 0) file.write(host.data_ptr(), host.nbytes());
  }
  file.commit();
}

SafetensorsFile load_safetensors(const std::string& path, Device device) {
  const std::string where = str("load_safetensors: ", path);
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    const int err = errno;
    throw Error(str(where, ": cannot open: ", std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw Error(str(where, ": not a regular file"));
  const uint64_t file_size = uint64_t(st.st_size);
  if (file_size < 8)
    throw DataError(str(where, ": truncated: the file has ", file_size,
                        " bytes; a safetensors file starts with an 8-byte header size"));

  uint64_t n = 0;
  read_at(f.fd, &n, 8, 0, where, "the header size");
  if (n > kMaxHeaderSize)
    throw DataError(str(where, ": header size ", n, " exceeds the limit of ", kMaxHeaderSize,
                        " bytes (not a safetensors file, or corrupt)"));
  if (n > file_size - 8)
    throw DataError(str(where, ": truncated: the header size is ", n, " bytes but only ",
                        file_size - 8, " bytes follow it"));
  std::string text(n, '\0');
  read_at(f.fd, text.data(), n, 8, where, "the header");
  const detail::SafetensorsHeader header =
      detail::parse_safetensors_header(text, file_size - 8 - n, where);

  SafetensorsFile out{path, {}, header.metadata};
  out.tensors.reserve(header.entries.size());
  // Read straight into the tensor's memory (host memory for cpu:N), then move it if needed.
  const Device host = device.is_cpu() ? device : Device();
  for (const detail::SafetensorsEntry& e : header.entries) {
    Tensor t = empty(e.shape, {.dtype = e.dtype, .device = host});
    if (t.nbytes() > 0)
      read_at(f.fd, t.data_ptr(), t.nbytes(), 8 + n + e.begin, where,
              str("tensor \"", e.name, "\""));
    if (e.dtype == DType::b8) check_bool_bytes(t, where, e.name);
    if (host != device) t = detail::convert(t, device, e.dtype);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

bool SafetensorsFile::contains(std::string_view name) const {
  return std::any_of(tensors.begin(), tensors.end(),
                     [&](const auto& p) { return p.first == name; });
}

const Tensor& SafetensorsFile::at(std::string_view name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  // Name a few of the tensors that are there: a typo or a prefix ("module.") shows at a glance.
  std::string some;
  for (size_t i = 0; i < tensors.size() && i < 5; ++i)
    some += str(i ? ", " : "", "\"", tensors[i].first, "\"");
  if (tensors.size() > 5) some += ", ...";
  throw DataError(str("load_safetensors: ", path, ": no tensor \"", name, "\" (the file holds ",
                      tensors.size(), " tensors: ", some, ")"));
}

}  // namespace tandem
