// Safetensors reading and writing (see safetensors.h).
#include "cli/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace refit {
namespace {

constexpr int64_t kMaxHeaderBytes = int64_t{100} << 20;
// model.safetensors.index.json (DeepSeek-V3's: 9 MB).
constexpr int64_t kMaxIndexBytes = int64_t{256} << 20;

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// prod(shape) * esize, or -1 on a negative dim or overflow.
int64_t ByteSize(const std::vector<int64_t>& shape, int64_t esize) {
  __int128 n = esize;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    n *= d;
    if (n > (static_cast<__int128>(1) << 62)) return -1;
  }
  return static_cast<int64_t>(n);
}

}  // namespace

absl::StatusOr<std::string> SafetensorsDTypeName(DType t) {
  switch (t) {
    case DType::kBF16: return std::string("BF16");
    case DType::kF16: return std::string("F16");
    case DType::kF32: return std::string("F32");
    case DType::kF64: return std::string("F64");
    case DType::kF8E4M3: return std::string("F8_E4M3");
    case DType::kF8E5M2: return std::string("F8_E5M2");
    case DType::kI8: return std::string("I8");
    case DType::kU8: return std::string("U8");
    case DType::kI32: return std::string("I32");
    case DType::kI64: return std::string("I64");
    default: break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("dtype ", DTypeName(t), " has no safetensors name"));
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, map_size_);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ",
                                            std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Bad(path, "not a regular file");
  }
  const int64_t size = st.st_size;
  if (size < 8) {
    close(fd);
    return Bad(path, absl::StrCat("truncated: ", size,
                                  " bytes, less than the 8-byte header length"));
  }
  void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    return Bad(path, absl::StrCat("mmap failed: ", std::strerror(errno)));
  }
  f->map_ = m;
  f->map_size_ = size;
  const uint8_t* base = static_cast<const uint8_t*>(m);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base[i];
  if (n > static_cast<uint64_t>(kMaxHeaderBytes) ||
      static_cast<int64_t>(n) > size - 8) {
    return Bad(path, absl::StrCat("truncated or corrupt: header length ", n,
                                  " exceeds the file (", size, " bytes)"));
  }
  const int64_t data_begin = 8 + static_cast<int64_t>(n);
  const int64_t data_size = size - data_begin;
  nlohmann::json h = nlohmann::json::parse(
      reinterpret_cast<const char*>(base + 8),
      reinterpret_cast<const char*>(base + data_begin), nullptr,
      /*allow_exceptions=*/false);
  if (h.is_discarded() || !h.is_object()) {
    return Bad(path, "header is not a JSON object");
  }
  std::vector<std::pair<int64_t, int64_t>> ranges;  // begin, entry index
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return Bad(path, "__metadata__ is not an object");
      for (auto m2 = v.begin(); m2 != v.end(); ++m2) {
        if (!m2.value().is_string()) {
          return Bad(path, absl::StrCat("__metadata__ value of '", m2.key(),
                                        "' is not a string"));
        }
        f->metadata_[m2.key()] = m2.value().get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrCat("tensor ", name);
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() ||
        !v.contains("shape") || !v["shape"].is_array() ||
        !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2) {
      return Bad(path, where + ": needs dtype, shape and data_offsets [b, e]");
    }
    SafetensorsEntry e;
    e.name = name;
    absl::StatusOr<DType> dt = ParseDType(v["dtype"].get<std::string>());
    if (!dt.ok()) {
      return Bad(path, absl::StrCat(where, ": ", dt.status().message()));
    }
    e.dtype = *dt;
    for (const nlohmann::json& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return Bad(path, where + ": shape has a non-integer or negative dim");
      }
      e.shape.push_back(d.get<int64_t>());
    }
    const nlohmann::json& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return Bad(path, where + ": data_offsets must be non-negative integers");
    }
    const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    if (b > en || en > static_cast<uint64_t>(data_size)) {
      return Bad(path, absl::StrCat(where, ": data_offsets [", b, ", ", en,
                                    ") outside the data (", data_size,
                                    " bytes; file truncated?)"));
    }
    const int64_t want = ByteSize(e.shape, DTypeSize(e.dtype));
    if (want < 0 || static_cast<uint64_t>(want) != en - b) {
      return Bad(path, absl::StrCat(where, ": ", en - b,
                                    " bytes but shape * dtype needs ", want));
    }
    e.data = absl::MakeConstSpan(base + data_begin + b, en - b);
    ranges.emplace_back(static_cast<int64_t>(b),
                        static_cast<int64_t>(f->entries_.size()));
    f->by_name_[name] = f->entries_.size();
    f->entries_.push_back(std::move(e));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    const SafetensorsEntry& prev = f->entries_[ranges[i - 1].second];
    const int64_t prev_end = ranges[i - 1].first +
                             static_cast<int64_t>(prev.data.size());
    if (ranges[i].first < prev_end) {
      return Bad(path, absl::StrCat("tensors ", prev.name, " and ",
                                    f->entries_[ranges[i].second].name,
                                    " overlap"));
    }
  }
  return f;
}

const SafetensorsEntry* SafetensorsFile::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

absl::Status WriteSafetensors(
    const std::string& path, absl::Span<const SafetensorsTensor> tensors,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    if (h.contains(t.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t.name, " written twice to ", path));
    }
    const int64_t want = ByteSize(t.shape, DTypeSize(t.dtype));
    if (want < 0 || want != static_cast<int64_t>(t.data.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t.name, ": ", t.data.size(),
                       " bytes but shape * dtype needs ", want));
    }
    REFIT_ASSIGN_OR_RETURN(std::string dt, SafetensorsDTypeName(t.dtype));
    h[t.name] = {{"dtype", dt},
                 {"shape", t.shape},
                 {"data_offsets", {offset, offset + want}}};
    offset += want;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // align data to 8
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  uint8_t len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(header.data(), header.size());
  for (const SafetensorsTensor& t : tensors) {
    out.write(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsCheckpoint> SafetensorsCheckpoint::Open(
    const std::string& path_as_given) {
  // "ckpt/" names the directory "ckpt" (file names are joined with '/').
  std::string path = path_as_given;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", path,
                                            " does not exist"));
  }
  std::vector<std::string> files;
  std::map<std::string, std::string> weight_map;
  const bool dir = S_ISDIR(st.st_mode);
  if (dir) {
    const std::string index = path + "/model.safetensors.index.json";
    // No index: the directory's model.safetensors (below).
    absl::StatusOr<std::string> text = ReadFileToString(index, kMaxIndexBytes);
    if (!text.ok() && !absl::IsNotFound(text.status())) return text.status();
    if (text.ok()) {
      nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
          !j["weight_map"].is_object()) {
        return Bad(index, "needs a JSON object with \"weight_map\"");
      }
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end();
           ++it) {
        if (!it.value().is_string()) {
          return Bad(index, absl::StrCat("weight_map[", it.key(),
                                         "] is not a file name"));
        }
        const std::string file = it.value().get<std::string>();
        if (file.empty() || absl::StrContains(file, "/")) {
          return Bad(index, absl::StrCat("weight_map[", it.key(),
                                         "]: bad file name '", file, "'"));
        }
        weight_map[it.key()] = file;
        if (std::find(files.begin(), files.end(), file) == files.end()) {
          files.push_back(file);
        }
      }
    } else {
      const std::string single = path + "/model.safetensors";
      struct stat single_st;
      if (stat(single.c_str(), &single_st) != 0) {
        return absl::NotFoundError(absl::StrCat(
            "checkpoint directory ", path,
            " has neither model.safetensors.index.json nor model.safetensors"));
      }
      files.push_back("model.safetensors");
    }
  }
  SafetensorsCheckpoint c;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> by_file;
  if (!dir) {
    REFIT_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f,
                           SafetensorsFile::Open(path));
    c.files_.push_back(std::move(f));
  } else {
    for (const std::string& file : files) {
      REFIT_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f,
                             SafetensorsFile::Open(path + "/" + file));
      by_file[file] = std::shared_ptr<SafetensorsFile>(std::move(f));
      c.files_.push_back(by_file[file]);
    }
  }
  if (weight_map.empty()) {
    for (const auto& f : c.files_) {
      for (const SafetensorsEntry& e : f->entries()) c.where_[e.name] = &e;
    }
  } else {
    for (const auto& [name, file] : weight_map) {
      const SafetensorsEntry* e = by_file[file]->Find(name);
      if (e == nullptr) {
        return Bad(path + "/" + file,
                   absl::StrCat("tensor ", name,
                                " is in the index but not in the file"));
      }
      c.where_[name] = e;
    }
  }
  return c;
}

const SafetensorsEntry* SafetensorsCheckpoint::Find(
    const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : it->second;
}

}  // namespace refit
