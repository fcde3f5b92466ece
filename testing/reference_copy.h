// Reference copy: an obviously-correct CPU executor of a Plan, a test oracle.
//
// It performs every segment element by element through the records'
// DimMaps (no packing, no messages, no rounds), plus helpers that fill source
// buffers with values derived from (tensor name, global element index) and
// check every destination element against that expected value.
#ifndef REFIT_TESTING_REFERENCE_COPY_H_
#define REFIT_TESTING_REFERENCE_COPY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "layout/layout.h"
#include "plan/plan.h"

namespace refit {

// Host memory per buffer: buffers[i] points at side.buffers[i].byte_size
// bytes.
using HostBuffers = std::vector<uint8_t*>;

// Host buffers owning their memory, one per buffer of `side`, zero-filled.
struct OwnedBuffers {
  std::vector<std::vector<uint8_t>> storage;
  HostBuffers ptrs;
};
OwnedBuffers AllocateBuffers(const SideLayout& side, uint8_t fill = 0);

// Copies every segment of `plan` from src to dst memory, element by element;
// with relays (Message::relay), message by message in plan order, a relay
// copying from dst memory as the earlier messages left it.
// Scratch buffers of a converted plan may be left out of `src` (they come
// last): they are then computed with testing/reference_convert.h.
// Fails with INVALID_ARGUMENT if the buffer counts differ from the plan's or
// a segment's indices or box are out of range of its records.
absl::Status ReferenceCopy(const Plan& plan, const HostBuffers& src,
                           const HostBuffers& dst);

// The expected value of element `index` (row-major linear index in the
// global shape) of the tensor whose NameHash is `name_hash`, for weight
// version `seed`: a 64-bit word whose low DTypeSize bytes (little endian)
// are the element's bytes.
uint64_t PatternWord(uint64_t name_hash, int64_t index, uint64_t seed = 0);
// Byte k (< 8) of PatternWord(name_hash, index, seed).
uint8_t PatternByte(uint64_t name_hash, int64_t index, int64_t k,
                    uint64_t seed = 0);
// FNV-1a of the tensor's name (common/hash.h).
uint64_t NameHash(const std::string& name);

// Which records a pattern fill/check touches, and which version it encodes.
struct PatternOptions {
  int32_t rank = -1;   // only records of this rank; -1 = every rank
  uint64_t seed = 0;   // e.g. the weight version: other seeds differ
  // 0: every element is of `seed`. N > 0: only the elements whose index
  // hashes to 0 mod N are; the others are of `base_seed` (a version that
  // changes about 1/N of the words of version `base_seed`; plain copies
  // only, not converted tensors).
  int64_t changed_every = 0;
  uint64_t base_seed = 0;
  // CheckPattern on an engine: the trainer's dtype of each tensor by name.
  // A tensor the engine holds in another dtype, or with a transform, and
  // the "<w>_scale_inv" of an e4m3 weight w the trainer holds in a float
  // dtype, are expected converted (testing/reference_convert.h: -exp
  // within one ulp, FP8 bytes and scales exactly).
  const std::map<std::string, DType>* source_dtypes = nullptr;
  int64_t fp8_block = 128;
};

// The seed of element `index` of the tensor whose name hashes to
// `name_hash` under `options` (seed, or base_seed, as changed_every says).
uint64_t ElementSeed(const PatternOptions& options, uint64_t name_hash, int64_t index);

// The dtype of every tensor of a trainer layout by name, as
// PatternOptions::source_dtypes wants it. Pass the layout as registered
// (before BuildPlan converts it).
std::map<std::string, DType> SourceDTypes(const SideLayout& trainer);

// Writes the pattern value into every element of every selected record of
// `side` (float dtypes: a finite value, testing::FiniteWord). Buffers of unselected ranks may be null. Work is per element but
// row by row (one offset computation per innermost row), so it is cheap
// enough for real model sizes.
void FillPattern(const SideLayout& side, const HostBuffers& buffers,
                 PatternOptions options = {});

// Calls row(record, buffer, inner, off, lin) for every innermost row of
// every selected record of `side`, in record order: element j of the row is
// at byte off + inner[j] of side buffer `buffer` and has linear index
// lin + j in its tensor (row-major over the tensor's global shape). The
// walk FillPattern and CheckPattern make, for pattern code elsewhere (a GPU
// fill or check).
void ForEachPatternRow(
    const SideLayout& side, PatternOptions options,
    const std::function<void(const Record& record, int32_t buffer,
                             const std::vector<int64_t>& inner, int64_t off, int64_t lin)>& row);

// Checks every element of every selected record of `side` holds its pattern
// value. Returns OK, or INTERNAL naming the tensor, element, rank and buffer
// of the first mismatches (at most 10 listed) and how many are wrong.
absl::Status CheckPattern(const SideLayout& side, const HostBuffers& buffers,
                          PatternOptions options = {});

}  // namespace refit

#endif  // REFIT_TESTING_REFERENCE_COPY_H_
