// staged_bench's replay experiment (see staged_replay.h).
#include "bench/staged_replay.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/staged_replay_kernels.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_status.h"

namespace refit {
namespace bench {
namespace {

#define RK(x) REFIT_RETURN_IF_CUDA_ERROR(x)

constexpr int64_t kWindowWords = int64_t{1} << 32;  // words one 32-bit position reaches

// Device memory of at least `bytes` at *p (holding *cap bytes).
absl::Status Grow(void** p, int64_t* cap, int64_t bytes) {
  if (bytes <= *cap) return absl::OkStatus();
  if (*p != nullptr) RK(cudaFree(*p));
  *p = nullptr;
  *cap = 0;
  RK(cudaMalloc(p, static_cast<size_t>(std::max<int64_t>(bytes, 16))));
  *cap = bytes;
  return absl::OkStatus();
}

int64_t Chunks(int64_t words) { return (words + kReplayChunkWords - 1) / kReplayChunkWords; }

// The packed changed words of a round: positions per buffer and in the
// arena, values, the replay's messages (one per buffer) and the floor's
// (one per 2^32 words of the arena).
class Payload {
 public:
  ~Payload() {
    for (void* p : {pos_, global_, val_, counts_, offsets_, messages_, windows_}) {
      if (p != nullptr) (void)cudaFree(p);
    }
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  // Packs what differs between staging and live in `st`; *elements: how many.
  absl::Status Pack(const StagedBuffers& st, char* arena, int64_t* elements) {
    if (stream_ == nullptr) RK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    std::vector<size_t> order;
    for (size_t b = 0; b < st.live().size(); ++b) {
      if (st.live()[b] == nullptr || st.bytes()[b] == 0) continue;
      if (st.bytes()[b] % 2 != 0 || st.live()[b] < arena || (st.live()[b] - arena) % 2 != 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("replay: buffer ", b, " is not BF16 words of the arena"));
      }
      order.push_back(b);
    }
    std::sort(order.begin(), order.end(),
              [&](size_t x, size_t y) { return st.live()[x] < st.live()[y]; });
    std::vector<int64_t> first_chunk;
    int64_t chunks = 0;
    for (size_t b : order) {
      first_chunk.push_back(chunks);
      chunks += Chunks(st.bytes()[b] / 2);
    }
    REFIT_RETURN_IF_ERROR(Grow(&counts_, &counts_cap_, (chunks + 1) * 4));
    REFIT_RETURN_IF_ERROR(Grow(&offsets_, &offsets_cap_, (chunks + 1) * 8));
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t b = order[k];
      RK(static_cast<cudaError_t>(LaunchCountChangedWords(
          Words(st.staging()[b]), Words(st.live()[b]), st.bytes()[b] / 2,
          static_cast<int32_t*>(counts_) + first_chunk[k], stream_)));
    }
    std::vector<int32_t> counts(static_cast<size_t>(chunks));
    RK(cudaMemcpyAsync(counts.data(), counts_, chunks * 4, cudaMemcpyDeviceToHost, stream_));
    RK(cudaStreamSynchronize(stream_));
    std::vector<int64_t> offsets(static_cast<size_t>(chunks) + 1, 0);
    for (int64_t c = 0; c < chunks; ++c) offsets[c + 1] = offsets[c] + counts[c];
    total_ = offsets.back();
    RK(cudaMemcpyAsync(offsets_, offsets.data(), (chunks + 1) * 8, cudaMemcpyHostToDevice,
                       stream_));
    REFIT_RETURN_IF_ERROR(Grow(&pos_, &pos_cap_, total_ * 4));
    REFIT_RETURN_IF_ERROR(Grow(&global_, &global_cap_, total_ * 4));
    REFIT_RETURN_IF_ERROR(Grow(&val_, &val_cap_, total_ * 2));
    std::vector<ReplayMessage> messages;
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t b = order[k];
      RK(static_cast<cudaError_t>(LaunchPackChangedWords(
          Words(st.staging()[b]), Words(st.live()[b]), st.bytes()[b] / 2,
          static_cast<int64_t*>(offsets_) + first_chunk[k],
          static_cast<uint64_t>((st.live()[b] - arena) / 2), static_cast<uint32_t*>(pos_),
          static_cast<uint32_t*>(global_), static_cast<uint16_t*>(val_), stream_)));
      messages.push_back({st.live()[b], offsets[first_chunk[k]]});
    }
    RK(cudaStreamSynchronize(stream_));
    REFIT_ASSIGN_OR_RETURN(std::vector<ReplayMessage> windows,
                           Windows(st, arena, order, first_chunk, offsets));
    REFIT_RETURN_IF_ERROR(Upload(messages, &messages_, &messages_cap_));
    num_messages_ = static_cast<int32_t>(messages.size());
    REFIT_RETURN_IF_ERROR(Upload(windows, &windows_, &windows_cap_));
    num_windows_ = static_cast<int32_t>(windows.size());
    RK(cudaStreamSynchronize(stream_));
    *elements = total_;
    return absl::OkStatus();
  }

  // The replay (per buffer) or the floor (one prepacked array), waited for; ms.
  absl::StatusOr<double> Scatter(bool floor) {
    const absl::Time t0 = absl::Now();
    RK(static_cast<cudaError_t>(LaunchReplayScatter(
        static_cast<const ReplayMessage*>(floor ? windows_ : messages_),
        floor ? num_windows_ : num_messages_, static_cast<const uint32_t*>(floor ? global_ : pos_),
        static_cast<const uint16_t*>(val_), total_, ReplayBlocks(), stream_)));
    RK(cudaStreamSynchronize(stream_));
    return absl::ToDoubleMilliseconds(absl::Now() - t0);
  }

 private:
  static const uint16_t* Words(const char* p) { return reinterpret_cast<const uint16_t*>(p); }

  absl::Status Upload(const std::vector<ReplayMessage>& v, void** p, int64_t* cap) {
    const int64_t bytes = static_cast<int64_t>(v.size() * sizeof(ReplayMessage));
    REFIT_RETURN_IF_ERROR(Grow(p, cap, bytes));
    RK(cudaMemcpy(*p, v.data(), bytes, cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }

  // The floor's messages: window w holds the elements at arena words
  // [w 2^32, (w + 1) 2^32); where a buffer straddles a window's start, the
  // changed words before it are counted.
  absl::StatusOr<std::vector<ReplayMessage>> Windows(const StagedBuffers& st, char* arena,
                                                     const std::vector<size_t>& order,
                                                     const std::vector<int64_t>& first_chunk,
                                                     const std::vector<int64_t>& offsets) {
    std::vector<ReplayMessage> windows = {{arena, 0}};
    const size_t last = order.back();
    const int64_t end = (st.live()[last] - arena) / 2 + st.bytes()[last] / 2;
    for (int64_t w = 1; w * kWindowWords < end; ++w) {
      const int64_t at = w * kWindowWords;
      int64_t first = total_;
      for (size_t k = 0; k < order.size(); ++k) {
        const size_t b = order[k];
        const int64_t start = (st.live()[b] - arena) / 2;
        if (start >= at) {
          first = offsets[first_chunk[k]];
          break;
        }
        if (start + st.bytes()[b] / 2 <= at) continue;
        RK(cudaMemsetAsync(counts_, 0, counts_cap_, stream_));
        RK(static_cast<cudaError_t>(
            LaunchCountChangedWords(Words(st.staging()[b]), Words(st.live()[b]), at - start,
                                    static_cast<int32_t*>(counts_), stream_)));
        std::vector<int32_t> c(static_cast<size_t>(Chunks(at - start)));
        RK(cudaMemcpyAsync(c.data(), counts_, c.size() * 4, cudaMemcpyDeviceToHost, stream_));
        RK(cudaStreamSynchronize(stream_));
        first = offsets[first_chunk[k]] + std::accumulate(c.begin(), c.end(), int64_t{0});
        break;
      }
      windows.push_back({arena + 2 * at, first});
    }
    return windows;
  }

  cudaStream_t stream_ = nullptr;
  void *pos_ = nullptr, *global_ = nullptr, *val_ = nullptr, *counts_ = nullptr,
       *offsets_ = nullptr, *messages_ = nullptr, *windows_ = nullptr;
  int64_t pos_cap_ = 0, global_cap_ = 0, val_cap_ = 0, counts_cap_ = 0, offsets_cap_ = 0,
          messages_cap_ = 0, windows_cap_ = 0;
  int64_t total_ = 0;
  int32_t num_messages_ = 0, num_windows_ = 0;
};

// Fails the run's check when staging and live still differ after `what`.
absl::Status CheckEqual(const ReplayHooks& hooks, const std::string& what, std::string* check) {
  REFIT_ASSIGN_OR_RETURN(unsigned long long left, hooks.diff(1));
  if (left != 0) {
    const std::string why = absl::StrCat(what, ": ", left, " live bytes differ from staging");
    std::printf("CHECK FAILED: %s\n", why.c_str());
    if (*check == "PASS") *check = why;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ReplayFigures>> RunReplayRounds(StagedBuffers* st,
                                                           const ReplayHooks& hooks, int iters,
                                                           std::string* check) {
  const absl::Time far = absl::Now() + absl::Minutes(10);
  int64_t engine_bytes = 0;
  for (size_t b = 0; b < st->live().size(); ++b) {
    if (st->live()[b] != nullptr) engine_bytes += st->bytes()[b];
  }
  Payload payload;
  std::vector<ReplayFigures> out;
  for (const bool rows : {false, true}) {
    ReplayFigures f;
    f.pattern = rows ? "whole rows" : "uniform";
    for (int r = 1; r <= 2 * iters + 2; ++r) {
      REFIT_RETURN_IF_ERROR(hooks.change(rows));
      REFIT_RETURN_IF_ERROR(hooks.receive());
      // Every change flips bits of a word's low byte: changed bytes = changed words.
      REFIT_ASSIGN_OR_RETURN(unsigned long long changed, hooks.diff(1));
      if (r == 1) {
        REFIT_ASSIGN_OR_RETURN(unsigned long long sectors, hooks.diff(32));
        f.changed_share = static_cast<double>(changed) / (engine_bytes / 2);
        f.sector_share = static_cast<double>(sectors) * 32 / engine_bytes;
      }
      REFIT_ASSIGN_OR_RETURN(bool listed, st->FindChanged(far));
      if (!listed) return absl::FailedPreconditionError("device staging listed no changed words");
      REFIT_RETURN_IF_ERROR(payload.Pack(*st, hooks.arena, &f.elements));
      const std::string round = absl::StrCat(f.pattern, " round ", r);
      if (f.elements != static_cast<int64_t>(changed) || changed == 0) {
        const std::string why = absl::StrCat(round, ": the payload holds ", f.elements,
                                             " words but ", changed, " bytes changed");
        std::printf("CHECK FAILED: %s\n", why.c_str());
        if (*check == "PASS") *check = why;
      }
      REFIT_ASSIGN_OR_RETURN(double replay, payload.Scatter(/*floor=*/false));
      REFIT_RETURN_IF_ERROR(CheckEqual(hooks, absl::StrCat(round, " replay"), check));
      // The floor and the product write the same bytes again (the writes,
      // not their values, cost the time).
      REFIT_ASSIGN_OR_RETURN(double floor, payload.Scatter(/*floor=*/true));
      REFIT_RETURN_IF_ERROR(CheckEqual(hooks, absl::StrCat(round, " floor"), check));
      REFIT_ASSIGN_OR_RETURN(double product, st->ApplyChanged(far));
      REFIT_RETURN_IF_ERROR(CheckEqual(hooks, absl::StrCat(round, " sectors"), check));
      if (r > 2) {
        f.replay.push_back(replay);
        f.floor.push_back(floor);
        f.product.push_back(product * 1e3);
      }
      std::printf("%s: %lld words changed; sectors (product) %.3f ms, replay %.3f ms, floor "
                  "%.3f ms\n",
                  round.c_str(), static_cast<long long>(f.elements), product * 1e3, replay, floor);
      std::fflush(stdout);
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace bench
}  // namespace refit
