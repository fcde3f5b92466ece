// Safetensors files: reading (memory-mapped, untrusted header validated) and
// writing. Format: 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, optional
// "__metadata__": {string: string}}, then the data; offsets are relative to
// the first byte after the header.
#ifndef REFIT_TOOLS_CLI_SAFETENSORS_H_
#define REFIT_TOOLS_CLI_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "layout/dtype.h"

namespace refit {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  absl::Span<const uint8_t> data;  // into the mapping
};

// A memory-mapped safetensors file. Invariant: every entry's data lies
// inside the file, has exactly prod(shape) * DTypeSize(dtype) bytes, and no
// two entries overlap.
class SafetensorsFile {
 public:
  // Maps and validates `path`. NOT_FOUND if it cannot be opened;
  // INVALID_ARGUMENT naming the file (and the tensor) for a truncated file,
  // bad JSON, an unknown dtype, offsets out of range, a size that disagrees
  // with shape * dtype, or overlapping tensors.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(
      const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // The entry `name`, or nullptr.
  const SafetensorsEntry* Find(const std::string& name) const;
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// The safetensors dtype name ("BF16", "F8_E4M3", ...); INVALID_ARGUMENT for
// a dtype safetensors cannot hold (kBytes).
absl::StatusOr<std::string> SafetensorsDTypeName(DType t);

// One tensor to write; `data` must hold prod(shape) * DTypeSize(dtype)
// bytes.
struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  absl::Span<const uint8_t> data;
};

// Writes `tensors` (in the given order) to `path`. INVALID_ARGUMENT naming
// the tensor whose data size disagrees with its shape or whose name repeats;
// INTERNAL naming the path if writing fails.
absl::Status WriteSafetensors(const std::string& path,
                              absl::Span<const SafetensorsTensor> tensors,
                              const std::map<std::string, std::string>&
                                  metadata = {});

// A checkpoint: one .safetensors file, or a directory with
// model.safetensors.index.json ({"weight_map": {name: file}}) or, without
// an index, a single *.safetensors file in it.
class SafetensorsCheckpoint {
 public:
  // NOT_FOUND / INVALID_ARGUMENT naming the path (and file) otherwise.
  static absl::StatusOr<SafetensorsCheckpoint> Open(const std::string& path);
  // The tensor `name`, or nullptr.
  const SafetensorsEntry* Find(const std::string& name) const;
  size_t num_tensors() const { return where_.size(); }

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsEntry*> where_;
};

}  // namespace refit

#endif  // REFIT_TOOLS_CLI_SAFETENSORS_H_
