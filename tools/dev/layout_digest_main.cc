// layout_digest: builds the trainer and engine layouts of one (model,
// trainer, engine, dtype) as `refit plan` does and prints a digest of every
// field of each MappedSide (tensors, buffers, records, per-buffer info, rank
// annotations) and the best build time of N repetitions. A development tool
// for changes to mapping/ that must leave the layouts byte for byte as they
// were: compare the digests before and after, independently of the planner.
//
//   layout_digest MODEL TRAINER ENGINE [DTYPE [REPS [nodigest]]]
//
// Prints the first (cold: fresh memory, as in `refit plan`) and the best
// build time of REPS builds on stderr, as wall and as CPU (user + system)
// seconds: on a shared machine the CPU time is the steadier figure.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include <sys/resource.h>

#include "absl/strings/numbers.h"
#include "common/hash.h"
#include "mapping/mapping.h"
#include "plan/fingerprint.h"

namespace refit {
namespace {

// Two lanes over the fields: FNV-1a, and a variant with an added constant.
class Digest {
 public:
  void Bytes(const void* p, size_t n) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    a_ = Fnv1a64(absl::string_view(reinterpret_cast<const char*>(c), n), a_);
    for (size_t i = 0; i < n; ++i) {
      b_ = (b_ ^ c[i]) * kFnv1aPrime + 0x9e3779b97f4a7c15ULL;
    }
  }
  void I(int64_t v) { Bytes(&v, sizeof v); }
  template <typename V>
  void Ints(const V& v) {
    I(static_cast<int64_t>(v.size()));
    for (auto x : v) I(x);
  }
  std::string Hex() const {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%016llx%016llx",
                  static_cast<unsigned long long>(a_),
                  static_cast<unsigned long long>(b_));
    return buf;
  }

 private:
  uint64_t a_ = kFnv1aOffset, b_ = 7;
};

// The layout's fingerprint (plan/planner.h) and a digest of what
// MappedSide adds to it.
std::string DigestOf(const MappedSide& m) {
  Digest d;
  d.I(m.buffer_info.size());
  for (const BufferInfo& b : m.buffer_info) {
    d.Ints(b.shape);
    d.I(static_cast<int64_t>(b.dtype));
  }
  d.Ints(m.rank_begin);
  return LayoutFingerprint(m.layout) + d.Hex();
}

double CpuSeconds() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

int Main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: layout_digest MODEL TRAINER ENGINE [DTYPE [REPS]]\n");
    return 2;
  }
  const std::string dtype = argc > 4 ? argv[4] : "bf16";
  int reps = 1;
  if (argc > 5 && !absl::SimpleAtoi(argv[5], &reps)) reps = 1;
  const bool digest = !(argc > 6 && std::strcmp(argv[6], "nodigest") == 0);
  auto c = LoadModelConfig(argv[1]);
  if (!c.ok()) {
    std::fprintf(stderr, "%s\n", c.status().ToString().c_str());
    return 1;
  }
  absl::Status st = SetWeightDType(&*c, dtype);
  auto ts = ParseTrainerSpec(argv[2]);
  auto es = ParseEngineSpec(argv[3]);
  if (!st.ok() || !ts.ok() || !es.ok()) {
    std::fprintf(stderr, "bad dtype or spec\n");
    return 1;
  }
  ts->gpus_per_host = es->gpus_per_host = 8;  // refit plan's default
  double best_src = 1e9, best_dst = 1e9, first_src = 0, first_dst = 0;
  double cpu_best_src = 1e9, cpu_best_dst = 1e9, cpu_first_src = 0,
         cpu_first_dst = 0;
  std::string src_digest, dst_digest;
  size_t src_bufs = 0, dst_bufs = 0, src_recs = 0, dst_recs = 0;
  for (int i = 0; i < reps; ++i) {
    const double c0 = CpuSeconds();
    auto t0 = std::chrono::steady_clock::now();
    auto src = BuildTrainerLayout(*c, *ts);
    const double c1 = CpuSeconds();
    auto t1 = std::chrono::steady_clock::now();
    auto dst = BuildEngineLayout(*c, *es);
    const double c2 = CpuSeconds();
    auto t2 = std::chrono::steady_clock::now();
    if (i == 0) cpu_first_src = c1 - c0, cpu_first_dst = c2 - c1;
    cpu_best_src = std::min(cpu_best_src, c1 - c0);
    cpu_best_dst = std::min(cpu_best_dst, c2 - c1);
    const double s = std::chrono::duration<double>(t1 - t0).count();
    const double e = std::chrono::duration<double>(t2 - t1).count();
    if (i == 0) first_src = s, first_dst = e;
    best_src = std::min(best_src, s);
    best_dst = std::min(best_dst, e);
    if (digest || !src.ok()) {
      src_digest = src.ok() ? DigestOf(*src) : src.status().ToString();
    }
    if (digest || !dst.ok()) {
      dst_digest = dst.ok() ? DigestOf(*dst) : dst.status().ToString();
    }
    if (src.ok()) {
      src_bufs = src->layout.buffers.size();
      src_recs = src->layout.records.size();
    }
    if (dst.ok()) {
      dst_bufs = dst->layout.buffers.size();
      dst_recs = dst->layout.records.size();
    }
  }
  std::printf("trainer %s buffers %zu records %zu\n", src_digest.c_str(),
              src_bufs, src_recs);
  std::printf("engine  %s buffers %zu records %zu\n", dst_digest.c_str(),
              dst_bufs, dst_recs);
  std::fprintf(stderr,
               "first: trainer %.4f s, engine %.4f s; best of %d: trainer "
               "%.4f s, engine %.4f s\n",
               first_src, first_dst, reps, best_src, best_dst);
  std::fprintf(stderr,
               "cpu first: trainer %.4f s, engine %.4f s; best of %d: "
               "trainer %.4f s, engine %.4f s\n",
               cpu_first_src, cpu_first_dst, reps, cpu_best_src,
               cpu_best_dst);
  return 0;
}

}  // namespace
}  // namespace refit

int main(int argc, char** argv) { return refit::Main(argc, argv); }
