// Delta and verified rounds on a GPU (see gpu_delta.h).
#include "exec/delta/cuda/gpu_delta.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_status.h"
#include "exec/delta/cuda/delta_kernels.h"
#include "exec/delta/region_digest.h"

namespace refit {
namespace {

constexpr int64_t kHeader = sizeof(DeltaHeader);

int64_t Tiles(int64_t bytes) { return (bytes + kDeltaTileBytes - 1) / kDeltaTileBytes; }

int64_t Align256(int64_t x) { return (x + 255) / 256 * 256; }

// Scratch: [mask: tiles * 1024 u32 (the most, for 1-byte words)]
// [tile counts: tiles u32][tile offsets: tiles u64][total u64][flag u32][digest u64].
struct Scratch {
  uint32_t* mask;
  uint32_t* tile_counts;
  uint64_t* tile_offsets;
  uint64_t* total;
  uint32_t* flag;
  unsigned long long* digest;
};

Scratch Layout(void* base, int64_t bytes) {
  const int64_t tiles = Tiles(bytes);
  auto* p = static_cast<char*>(base);
  Scratch s;
  s.mask = reinterpret_cast<uint32_t*>(p);
  p += Align256(tiles * DeltaMaskWordsPerTile(1) * 4);
  s.tile_counts = reinterpret_cast<uint32_t*>(p);
  p += Align256(tiles * 4);
  s.tile_offsets = reinterpret_cast<uint64_t*>(p);
  p += Align256(tiles * 8);
  s.total = reinterpret_cast<uint64_t*>(p);
  s.flag = reinterpret_cast<uint32_t*>(p + 8);
  s.digest = reinterpret_cast<unsigned long long*>(p + 16);
  return s;
}

absl::Status CheckWords(int64_t bytes, int word_bytes) {
  if (word_bytes != 1 && word_bytes != 2 && word_bytes != 4 && word_bytes != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("delta: word size ", word_bytes, " is not 1, 2, 4 or 8"));
  }
  if (bytes < 0 || bytes % word_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delta: ", bytes, " bytes are not a whole number of ", word_bytes, "-byte words"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ReadTotal(const Scratch& s, cudaStream_t stream) {
  uint64_t total = 0;
  REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  REFIT_RETURN_IF_CUDA_ERROR(
      cudaMemcpyAsync(&total, s.total, sizeof(total), cudaMemcpyDeviceToHost, stream));
  REFIT_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream));
  return total;
}

}  // namespace

int64_t GpuDeltaScratchBytes(int64_t bytes) {
  const int64_t tiles = Tiles(bytes);
  return Align256(tiles * DeltaMaskWordsPerTile(1) * 4) + Align256(tiles * 4) +
         Align256(tiles * 8) + 256;
}

absl::StatusOr<int64_t> GpuCountChanged(const void* cur, const void* snap, int64_t bytes,
                                        int word_bytes, void* scratch, cudaStream_t stream) {
  REFIT_RETURN_IF_ERROR(CheckWords(bytes, word_bytes));
  const Scratch s = Layout(scratch, bytes);
  const int64_t tiles = Tiles(bytes);
  REFIT_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(s.total, 0, sizeof(uint64_t), stream));
  LaunchDeltaMask(cur, snap, bytes, word_bytes, s.mask, s.tile_counts, stream);
  if (tiles > 0) LaunchTileScan(s.tile_counts, tiles, s.tile_offsets, s.total, stream);
  REFIT_ASSIGN_OR_RETURN(uint64_t total, ReadTotal(s, stream));
  return static_cast<int64_t>(total);
}

absl::StatusOr<int64_t> GpuEncodeDelta(const void* cur, int64_t bytes, int word_bytes,
                                       DeltaEncoding e, int64_t num_changed, void* scratch,
                                       void* out, int64_t out_capacity, cudaStream_t stream) {
  REFIT_RETURN_IF_ERROR(CheckWords(bytes, word_bytes));
  const int64_t n = bytes / word_bytes;
  if (e == DeltaEncoding::kDense) num_changed = n;
  const int64_t payload = DeltaPayloadBytes(e, word_bytes, n, num_changed);
  if (payload < 0 || num_changed < 0 || num_changed > n) {
    return absl::InvalidArgumentError(absl::StrCat("delta encode: ", DeltaEncodingName(e),
                                                   " cannot hold ", num_changed, " of ", n,
                                                   " words"));
  }
  if (out_capacity < kHeader + payload) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delta encode: output of ", out_capacity, " bytes, ", kHeader + payload, " needed"));
  }
  DeltaHeader h;
  h.encoding = static_cast<uint8_t>(e);
  h.word_bytes = static_cast<uint8_t>(word_bytes);
  h.num_words = static_cast<uint64_t>(n);
  h.num_changed = static_cast<uint64_t>(num_changed);
  h.payload_bytes = static_cast<uint64_t>(payload);
  auto* o = static_cast<uint8_t*>(out);
  // The header goes from pageable memory: copy it before returning.
  REFIT_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(o, &h, kHeader, cudaMemcpyHostToDevice, stream));
  uint8_t* p = o + kHeader;
  const Scratch s = Layout(scratch, bytes);
  const int64_t tiles = Tiles(bytes);
  switch (e) {
    case DeltaEncoding::kDense:
      if (bytes > 0) {
        REFIT_RETURN_IF_CUDA_ERROR(
            cudaMemcpyAsync(p, cur, bytes, cudaMemcpyDeviceToDevice, stream));
      }
      break;
    case DeltaEncoding::kIndices:
      LaunchDeltaGather(cur, word_bytes, tiles, reinterpret_cast<const uint8_t*>(s.mask),
                        s.tile_offsets, reinterpret_cast<uint32_t*>(p), p + num_changed * 4,
                        stream);
      break;
    case DeltaEncoding::kBitmask: {
      const int64_t mask_bytes = (n + 7) / 8;
      if (mask_bytes > 0) {
        REFIT_RETURN_IF_CUDA_ERROR(
            cudaMemcpyAsync(p, s.mask, mask_bytes, cudaMemcpyDeviceToDevice, stream));
      }
      LaunchDeltaGather(cur, word_bytes, tiles, reinterpret_cast<const uint8_t*>(s.mask),
                        s.tile_offsets, nullptr, p + mask_bytes, stream);
      break;
    }
  }
  REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  // The header's host copy must outlive the async copy.
  REFIT_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream));
  return kHeader + payload;
}

absl::Status GpuApplyDelta(const void* encoded, int64_t encoded_bytes, void* target,
                           int64_t target_bytes, void* scratch, cudaStream_t stream) {
  if (encoded_bytes < kHeader) {
    return absl::DataLossError(
        absl::StrCat("delta message: ", encoded_bytes, " bytes, shorter than its header"));
  }
  uint8_t head[sizeof(DeltaHeader)];
  REFIT_RETURN_IF_CUDA_ERROR(
      cudaMemcpyAsync(head, encoded, kHeader, cudaMemcpyDeviceToHost, stream));
  REFIT_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream));
  REFIT_ASSIGN_OR_RETURN(DeltaHeader h, ReadDeltaHeader(absl::MakeConstSpan(head, kHeader)));
  const int w = h.word_bytes;
  const int64_t n = static_cast<int64_t>(h.num_words);
  const int64_t c = static_cast<int64_t>(h.num_changed);
  if (target_bytes != n * w) {
    return absl::DataLossError(absl::StrCat("delta message: for ", n * w,
                                            " bytes, applied to ", target_bytes));
  }
  if (encoded_bytes < kHeader + static_cast<int64_t>(h.payload_bytes)) {
    return absl::DataLossError(absl::StrCat("delta message: ", encoded_bytes,
                                            " bytes, its header says ",
                                            kHeader + h.payload_bytes));
  }
  const auto* p = static_cast<const uint8_t*>(encoded) + kHeader;
  const Scratch s = Layout(scratch, target_bytes);
  switch (static_cast<DeltaEncoding>(h.encoding)) {
    case DeltaEncoding::kDense:
      if (target_bytes > 0) {
        REFIT_RETURN_IF_CUDA_ERROR(
            cudaMemcpyAsync(target, p, target_bytes, cudaMemcpyDeviceToDevice, stream));
      }
      break;
    case DeltaEncoding::kIndices: {
      const auto* idx = reinterpret_cast<const uint32_t*>(p);
      if ((reinterpret_cast<uintptr_t>(idx) & 3u) != 0) {
        return absl::InvalidArgumentError(
            "delta apply: a message with indices must start 4-byte aligned");
      }
      REFIT_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(s.flag, 0, sizeof(uint32_t), stream));
      LaunchCheckIndices(idx, c, static_cast<uint64_t>(n), s.flag, stream);
      uint32_t bad = 0;
      REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
      REFIT_RETURN_IF_CUDA_ERROR(
          cudaMemcpyAsync(&bad, s.flag, sizeof(bad), cudaMemcpyDeviceToHost, stream));
      REFIT_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream));
      if (bad != 0) {
        return absl::DataLossError(
            "delta message: an index is past the message's end or not increasing");
      }
      LaunchScatterIndexed(idx, p + c * 4, c, w, target, stream);
      break;
    }
    case DeltaEncoding::kBitmask: {
      const int64_t mask_bytes = (n + 7) / 8;
      const int64_t tiles = Tiles(target_bytes);
      if (tiles > 0) {
        REFIT_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(s.total, 0, sizeof(uint64_t), stream));
        LaunchMaskTileCounts(p, mask_bytes, w, tiles, s.tile_counts, stream);
        LaunchTileScan(s.tile_counts, tiles, s.tile_offsets, s.total, stream);
      }
      REFIT_ASSIGN_OR_RETURN(uint64_t set, ReadTotal(s, stream));
      const int tail = static_cast<int>(n % 8);
      if (tail != 0) {
        uint8_t last = 0;
        REFIT_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(&last, p + mask_bytes - 1, 1,
                                                   cudaMemcpyDeviceToHost, stream));
        REFIT_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream));
        if ((last >> tail) != 0) {
          return absl::DataLossError("delta message: bitmask has bits past the message's end");
        }
      }
      if (set != static_cast<uint64_t>(c)) {
        return absl::DataLossError(absl::StrCat("delta message: bitmask marks ", set,
                                                " words, header says ", c));
      }
      LaunchScatterMasked(p, mask_bytes, w, tiles, s.tile_offsets, p + mask_bytes, target,
                          stream);
      break;
    }
  }
  REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  REFIT_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> GpuDigest(const void* data, int64_t bytes, int element_bytes,
                                   uint64_t first_key, void* scratch, cudaStream_t stream) {
  if (element_bytes != 1 && element_bytes != 2 && element_bytes != 4 && element_bytes != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("digest: element size ", element_bytes, " is not 1, 2, 4 or 8"));
  }
  REFIT_RETURN_IF_ERROR(CheckWords(bytes, element_bytes));
  const uint64_t offset = first_key & static_cast<uint64_t>(kDigestMaxOffset);
  if (offset + static_cast<uint64_t>(bytes) > static_cast<uint64_t>(kDigestMaxOffset) + 1) {
    return absl::InvalidArgumentError("digest: run passes the end of its buffer's key range");
  }
  const Scratch s = Layout(scratch, 0);
  REFIT_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(s.digest, 0, sizeof(uint64_t), stream));
  LaunchDigest(data, bytes, element_bytes, first_key, s.digest, stream);
  uint64_t sum = 0;
  REFIT_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  REFIT_RETURN_IF_CUDA_ERROR(
      cudaMemcpyAsync(&sum, s.digest, sizeof(sum), cudaMemcpyDeviceToHost, stream));
  REFIT_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream));
  return sum;
}

}  // namespace refit
