// Reference copy: an obviously-correct CPU executor of a Plan, a test oracle.
//
// It performs every segment element by element through the records'
// DimMaps (no packing, no messages, no rounds), plus helpers that fill source
// buffers with values derived from (tensor name, global element index) and
// check every destination element against that expected value.
#ifndef REFIT_TESTING_REFERENCE_COPY_H_
#define REFIT_TESTING_REFERENCE_COPY_H_

#include <cstdint>
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

// Copies every segment of `plan` from src to dst memory, element by element.
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
};

// Writes the pattern value into every element of every selected record of
// `side`. Buffers of unselected ranks may be null. Work is per element but
// row by row (one offset computation per innermost row), so it is cheap
// enough for real model sizes.
void FillPattern(const SideLayout& side, const HostBuffers& buffers,
                 PatternOptions options = {});

// Checks every element of every selected record of `side` holds its pattern
// value. Returns OK, or INTERNAL naming the tensor, element, rank and buffer
// of the first mismatches (at most 10 listed) and how many are wrong.
absl::Status CheckPattern(const SideLayout& side, const HostBuffers& buffers,
                          PatternOptions options = {});

}  // namespace refit

#endif  // REFIT_TESTING_REFERENCE_COPY_H_
