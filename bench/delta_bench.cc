// delta_bench: a delta round next to a dense one, trainer GPU -> engine GPU
// over NCCL, on Qwen3-8B's tensors (8.19 B parameters, 16.4 GB in BF16;
// synthetic normal(0, 0.02) weights), one process driving GPUs 0 and 1.
//
// Per message (one per tensor, contiguous on both sides as with tp=1 ->
// tp=1) the trainer compares its engine-format bytes with its snapshot on
// the GPU (exec/delta/cuda: count, then gather), sends every message's
// 32-byte header first, then the payloads sized from them, and the engine
// applies them in place (checked before writing). After each round the
// engine's bytes are compared with the trainer's, byte for byte, on the
// GPU. Rows: 0.5%, 2%, 5%, 20% of the BF16 elements changed at random
// positions, and one AdamW-like step (lr 1e-6); for a BF16 engine and for
// an FP8 engine (the trainer quantizes to e4m3 with 128x128 block scales,
// exec/cuda's kernel, and the delta compares the FP8 codes and scales).
// Columns: changed engine words, wire bytes over dense, the delta round
// (quantize, encode, headers, payloads, apply), the dense round (quantize,
// one send per message), raw NCCL of the dense bytes in one send, the
// encoder's read rate next to a device copy's, and a verified round's
// digests of every engine byte on both GPUs. Prints the table last.
//
//   delta_bench [--gib_limit=N]   (needs 2 GPUs; exits 0 with SKIP otherwise)
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/delta_bench_kernels.h"
#include "exec/cuda/convert_kernels.h"
#include "exec/delta/cuda/gpu_delta.h"
#include "exec/delta/delta_codec.h"
#include "exec/delta/digest_term.h"

namespace refit {
namespace {

#define CU(x) Check(static_cast<int>(x), #x, __LINE__)
#define NC(x) CheckNccl((x), #x, __LINE__)

void Check(int e, const char* what, int line) {
  if (e != 0) {
    std::fprintf(stderr, "delta_bench: %s (line %d): %s\n", what, line,
                 cudaGetErrorString(static_cast<cudaError_t>(e)));
    std::exit(1);
  }
}
void CheckNccl(ncclResult_t r, const char* what, int line) {
  if (r != ncclSuccess) {
    std::fprintf(stderr, "delta_bench: %s (line %d): %s\n", what, line, ncclGetErrorString(r));
    std::exit(1);
  }
}
template <typename T>
T Ok(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "delta_bench: %s: %s\n", what, std::string(v.status().message()).c_str());
    std::exit(1);
  }
  return *v;
}
void Ok(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "delta_bench: %s: %s\n", what, std::string(s.message()).c_str());
    std::exit(1);
  }
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Tensor {
  int64_t rows = 1, cols = 1;  // a norm: rows 1
  bool matrix = false;
};

// Qwen3-8B (config.json: hidden 4096, intermediate 12288, 36 layers, 32
// heads and 8 KV heads of 128, vocab 151936, untied embeddings).
std::vector<Tensor> Qwen3_8B() {
  const int64_t h = 4096, inter = 12288, q = 32 * 128, kv = 8 * 128, vocab = 151936;
  std::vector<Tensor> t;
  t.push_back({vocab, h, true});
  for (int l = 0; l < 36; ++l) {
    for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{
             {q, h}, {kv, h}, {kv, h}, {h, q}, {inter, h}, {inter, h}, {h, inter}}) {
      t.push_back({r, c, true});
    }
    for (int64_t n : {h, h, int64_t{128}, int64_t{128}}) t.push_back({1, n, false});
  }
  t.push_back({1, h, false});
  t.push_back({vocab, h, true});
  return t;
}

struct Message {
  int64_t src = 0;     // offset in the trainer's BF16 weights
  int64_t elems = 0;
  int64_t off = 0;     // offset in the engine format (current, snapshot, target)
  int64_t bytes = 0;   // engine-format bytes (FP8: codes, then scales)
  int word = 2;
  const Tensor* t = nullptr;
  int64_t out = 0;     // offset of its encoding in out / recv
};

struct Row {
  std::string engine, change;
  double changed = 0, wire_ratio = 0, delta_s = 0, dense_s = 0, raw_s = 0;
  double encode_gbps = 0, copy_gbps = 0, digest_s = 0, encode_s = 0, apply_s = 0;
  bool bytes_ok = false;
};

class Bench {
 public:
  Bench(bool fp8, ncclComm_t* comms) : fp8_(fp8), comms_(comms) {}

  void Setup() {
    tensors_ = Qwen3_8B();
    int64_t src = 0, off = 0, out = 0;
    for (const Tensor& t : tensors_) {
      Message m;
      m.t = &t;
      m.src = src;
      m.elems = t.rows * t.cols;
      m.off = fp8_ ? off : m.src * 2;
      const bool q = fp8_ && t.matrix;
      m.word = q ? 1 : 2;
      m.bytes = q ? m.elems + ((t.rows + 127) / 128) * ((t.cols + 127) / 128) * 4 : m.elems * 2;
      m.out = out;
      src += m.elems;
      // BF16 engines: the engine format is the weights' own layout.
      off = fp8_ ? off + (m.bytes + 255) / 256 * 256 : src * 2;
      out += (32 + m.bytes + 255) / 256 * 256;
      max_bytes_ = std::max(max_bytes_, m.bytes);
      msgs_.push_back(m);
      engine_bytes_ += m.bytes;
    }
    weights_elems_ = src;
    format_bytes_ = off;
    out_bytes_ = out;
    CU(cudaSetDevice(0));
    CU(cudaStreamCreateWithFlags(&s0_, cudaStreamNonBlocking));
    CU(cudaMalloc(&w_, weights_elems_ * 2));
    cur_ = fp8_ ? nullptr : reinterpret_cast<uint8_t*>(w_);
    if (fp8_) CU(cudaMalloc(&cur_, format_bytes_));
    CU(cudaMalloc(&snap_, format_bytes_));
    CU(cudaMalloc(&out_, out_bytes_));
    CU(cudaMalloc(&hdr0_, msgs_.size() * 32));
    CU(cudaMalloc(&scratch0_, GpuDeltaScratchBytes(max_bytes_)));
    CU(cudaMalloc(&bad_, sizeof(long long)));
    CU(cudaSetDevice(1));
    CU(cudaStreamCreateWithFlags(&s1_, cudaStreamNonBlocking));
    CU(cudaMalloc(&target_, format_bytes_));
    CU(cudaMalloc(&recv_, std::max(out_bytes_, format_bytes_)));
    CU(cudaMalloc(&hdr1_, msgs_.size() * 32));
    CU(cudaMalloc(&scratch1_, GpuDeltaScratchBytes(max_bytes_)));
    CU(cudaMalloc(&diff_, sizeof(unsigned long long)));
    CU(cudaSetDevice(0));
    CU(bench::LaunchFillWeights(w_, weights_elems_, 1, s0_));
    Quantize();
    // Version 0 committed everywhere: snapshot and engine hold it.
    CU(cudaMemcpyAsync(snap_, cur_, format_bytes_, cudaMemcpyDeviceToDevice, s0_));
    CU(cudaStreamSynchronize(s0_));
    CU(cudaMemcpyPeer(target_, 1, cur_, 0, format_bytes_));
    for (int dev : {1, 0}) {
      CU(cudaSetDevice(dev));
      CU(cudaDeviceSynchronize());
    }
  }

  ~Bench() {
    CU(cudaSetDevice(0));
    for (void* p : {static_cast<void*>(w_), static_cast<void*>(snap_), static_cast<void*>(out_),
                    static_cast<void*>(hdr0_), scratch0_, static_cast<void*>(bad_)}) {
      cudaFree(p);
    }
    if (fp8_) cudaFree(cur_);
    cudaStreamDestroy(s0_);
    CU(cudaSetDevice(1));
    for (void* p : {static_cast<void*>(target_), static_cast<void*>(recv_),
                    static_cast<void*>(hdr1_), scratch1_, static_cast<void*>(diff_)}) {
      cudaFree(p);
    }
    cudaStreamDestroy(s1_);
  }

  // The trainer's engine-format bytes of its current weights (FP8: e4m3
  // codes and 128x128 block scales; norms stay BF16).
  void Quantize() {
    if (!fp8_) return;
    CU(cudaSetDevice(0));
    for (const Message& m : msgs_) {
      const char* src = reinterpret_cast<const char*>(w_ + m.src);
      if (!m.t->matrix) {
        CU(cudaMemcpyAsync(cur_ + m.off, src, m.bytes, cudaMemcpyDeviceToDevice, s0_));
        continue;
      }
      cuda::DenseBox b{src, cuda::kConvertBF16, 1, m.t->rows, m.t->cols, 0, 0, 128, 128};
      CU(cuda::LaunchQuantizeFused(b, cuda::kScaleFloat, cur_ + m.off,
                                   reinterpret_cast<float*>(cur_ + m.off + m.elems), bad_, s0_));
    }
  }

  void Change(const std::string& how, double fraction, uint64_t seed) {
    CU(cudaSetDevice(0));
    if (how == "adamw") {
      CU(bench::LaunchAdamStep(w_, weights_elems_, 1e-6f, seed, s0_));
    } else {
      CU(bench::LaunchRandomChange(w_, weights_elems_, fraction, seed, s0_));
    }
    CU(cudaStreamSynchronize(s0_));
  }

  // One delta round; fills the row's delta, encode, apply time and wire ratio.
  void DeltaRound(Row* row) {
    const double t0 = Now();
    CU(cudaSetDevice(0));
    Quantize();
    int64_t wire = 0, changed = 0, words = 0;
    std::vector<DeltaHeader> headers(msgs_.size());
    for (size_t i = 0; i < msgs_.size(); ++i) {
      const Message& m = msgs_[i];
      const int64_t n = m.bytes / m.word;
      const int64_t c = Ok(GpuCountChanged(cur_ + m.off, snap_ + m.off, m.bytes, m.word,
                                           scratch0_, s0_), "count");
      const DeltaEncoding e = ChooseEncoding(m.word, n, c);
      const int64_t w = Ok(GpuEncodeDelta(cur_ + m.off, m.bytes, m.word, e, c, scratch0_,
                                          out_ + m.out, 32 + m.bytes, s0_), "encode");
      CU(cudaMemcpyAsync(hdr0_ + 32 * i, out_ + m.out, 32, cudaMemcpyDeviceToDevice, s0_));
      wire += w;
      changed += c;
      words += n;
    }
    CU(cudaStreamSynchronize(s0_));
    const double t1 = Now();
    // Headers first: the engine sizes its receives from them.
    NC(ncclGroupStart());
    NC(ncclSend(hdr0_, msgs_.size() * 32, ncclUint8, 1, comms_[0], s0_));
    NC(ncclRecv(hdr1_, msgs_.size() * 32, ncclUint8, 0, comms_[1], s1_));
    NC(ncclGroupEnd());
    CU(cudaSetDevice(1));
    CU(cudaMemcpyAsync(headers.data(), hdr1_, msgs_.size() * 32, cudaMemcpyDeviceToHost, s1_));
    CU(cudaStreamSynchronize(s1_));
    NC(ncclGroupStart());
    for (size_t i = 0; i < msgs_.size(); ++i) {
      const Message& m = msgs_[i];
      const int64_t p = static_cast<int64_t>(headers[i].payload_bytes);
      if (p <= 0) continue;
      NC(ncclSend(out_ + m.out + 32, p, ncclUint8, 1, comms_[0], s0_));
      NC(ncclRecv(recv_ + m.out + 32, p, ncclUint8, 0, comms_[1], s1_));
    }
    NC(ncclGroupEnd());
    CU(cudaSetDevice(1));
    for (size_t i = 0; i < msgs_.size(); ++i) {
      CU(cudaMemcpyAsync(recv_ + msgs_[i].out, hdr1_ + 32 * i, 32, cudaMemcpyDeviceToDevice, s1_));
    }
    CU(cudaStreamSynchronize(s1_));
    const double t2 = Now();
    for (size_t i = 0; i < msgs_.size(); ++i) {
      const Message& m = msgs_[i];
      Ok(GpuApplyDelta(recv_ + m.out, 32 + static_cast<int64_t>(headers[i].payload_bytes),
                       target_ + m.off, m.bytes, scratch1_, s1_),
         "apply");
    }
    CU(cudaStreamSynchronize(s1_));
    const double t3 = Now();
    row->delta_s = t3 - t0;
    row->encode_s = t1 - t0;
    row->apply_s = t3 - t2;
    row->wire_ratio = static_cast<double>(wire) / engine_bytes_;
    row->changed = static_cast<double>(changed) / words;
    // The encoder read current and snapshot: its read rate.
    row->encode_gbps = 2.0 * engine_bytes_ / row->encode_s / 1e9;
    // Commit: the snapshot takes the sent changes (off the round).
    CU(cudaSetDevice(0));
    for (size_t i = 0; i < msgs_.size(); ++i) {
      const Message& m = msgs_[i];
      Ok(GpuApplyDelta(out_ + m.out, 32 + static_cast<int64_t>(headers[i].payload_bytes),
                       snap_ + m.off, m.bytes, scratch0_, s0_),
         "snapshot");
    }
    CU(cudaStreamSynchronize(s0_));
  }

  double DenseRound() {
    const double t0 = Now();
    CU(cudaSetDevice(0));
    Quantize();
    NC(ncclGroupStart());
    for (const Message& m : msgs_) {
      NC(ncclSend(cur_ + m.off, m.bytes, ncclUint8, 1, comms_[0], s0_));
      NC(ncclRecv(target_ + m.off, m.bytes, ncclUint8, 0, comms_[1], s1_));
    }
    NC(ncclGroupEnd());
    CU(cudaStreamSynchronize(s0_));
    CU(cudaSetDevice(1));
    CU(cudaStreamSynchronize(s1_));
    return Now() - t0;
  }

  // Raw NCCL: the dense bytes as one send.
  double RawNccl() {
    const double t0 = Now();
    NC(ncclGroupStart());
    NC(ncclSend(cur_, format_bytes_, ncclUint8, 1, comms_[0], s0_));
    NC(ncclRecv(recv_, format_bytes_, ncclUint8, 0, comms_[1], s1_));
    NC(ncclGroupEnd());
    CU(cudaSetDevice(0));
    CU(cudaStreamSynchronize(s0_));
    CU(cudaSetDevice(1));
    CU(cudaStreamSynchronize(s1_));
    return Now() - t0;
  }

  // A device copy of the engine-format bytes: bytes read per second.
  double CopyGbps() {
    CU(cudaSetDevice(0));
    const double t0 = Now();
    CU(cudaMemcpyAsync(out_, cur_, format_bytes_, cudaMemcpyDeviceToDevice, s0_));
    CU(cudaStreamSynchronize(s0_));
    return format_bytes_ / (Now() - t0) / 1e9;
  }

  // Digests of every engine byte on both GPUs (a verified round's); false
  // when they differ. *seconds: the slower side's time.
  bool Digests(double* seconds) {
    uint64_t sums[2] = {0, 0};
    double took[2] = {0, 0};
    for (int dev = 0; dev < 2; ++dev) {
      CU(cudaSetDevice(dev));
      const double t0 = Now();
      for (size_t i = 0; i < msgs_.size(); ++i) {
        const Message& m = msgs_[i];
        const uint8_t* p = (dev == 0 ? cur_ : target_) + m.off;
        sums[dev] += Ok(GpuDigest(p, m.bytes, m.word, PositionKey(static_cast<int64_t>(i), 0),
                                  dev == 0 ? scratch0_ : scratch1_, dev == 0 ? s0_ : s1_),
                        "digest");
      }
      took[dev] = Now() - t0;
    }
    *seconds = std::max(took[0], took[1]);
    return sums[0] == sums[1];
  }

  // Byte compare of the engine with the trainer, on GPU 1.
  bool BytesEqual() {
    // On the stream the compare runs on: cudaMemcpyPeer is not ordered with
    // a non-blocking stream.
    CU(cudaSetDevice(1));
    CU(cudaMemcpyPeerAsync(recv_, 1, cur_, 0, format_bytes_, s1_));
    CU(cudaMemsetAsync(diff_, 0, sizeof(unsigned long long), s1_));
    for (const Message& m : msgs_) {
      CU(bench::LaunchCountDiff(recv_ + m.off, target_ + m.off, m.bytes, diff_, s1_));
    }
    unsigned long long d = 0;
    CU(cudaMemcpyAsync(&d, diff_, sizeof(d), cudaMemcpyDeviceToHost, s1_));
    CU(cudaStreamSynchronize(s1_));
    if (d != 0) std::fprintf(stderr, "delta_bench: %llu engine bytes differ\n", d);
    return d == 0;
  }

  int64_t engine_bytes() const { return engine_bytes_; }

 private:
  bool fp8_;
  ncclComm_t* comms_;
  std::vector<Tensor> tensors_;
  std::vector<Message> msgs_;
  int64_t weights_elems_ = 0, format_bytes_ = 0, out_bytes_ = 0, engine_bytes_ = 0;
  int64_t max_bytes_ = 0;
  cudaStream_t s0_ = nullptr, s1_ = nullptr;
  uint16_t* w_ = nullptr;
  uint8_t *cur_ = nullptr, *snap_ = nullptr, *out_ = nullptr, *hdr0_ = nullptr;
  uint8_t *target_ = nullptr, *recv_ = nullptr, *hdr1_ = nullptr;
  void *scratch0_ = nullptr, *scratch1_ = nullptr;
  long long* bad_ = nullptr;
  unsigned long long* diff_ = nullptr;
};

int Main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    std::printf("SKIP delta_bench: needs 2 CUDA devices, found %d (REFIT_GPU_SKIP)\n", n);
    return 0;
  }
  cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  int devs[2] = {0, 1};
  ncclComm_t comms[2];
  NC(ncclCommInitAll(comms, 2, devs));
  std::vector<Row> rows;
  bool all_ok = true;
  for (bool fp8 : {false, true}) {
    Bench b(fp8, comms);
    b.Setup();
    const std::string engine = fp8 ? "fp8" : "bf16";
    // Warm-up: NCCL's connections, the kernels' first launches.
    b.RawNccl();
    b.DenseRound();
    Row warm;
    b.DeltaRound(&warm);
    const double raw = b.RawNccl();
    const double copy = b.CopyGbps();
    uint64_t seed = 100;
    for (const auto& [how, f] : std::vector<std::pair<std::string, double>>{
             {"random", 0.005}, {"random", 0.02}, {"random", 0.05}, {"random", 0.20},
             {"adamw", 0}}) {
      Row r;
      r.engine = engine;
      r.change = how == "adamw" ? "AdamW lr 1e-6" : absl::StrFormat("random %.1f%%", 100 * f);
      b.Change(how, f, ++seed);
      b.DeltaRound(&r);
      r.bytes_ok = b.BytesEqual();
      double digest = 0;
      r.bytes_ok = b.Digests(&digest) && r.bytes_ok;
      r.digest_s = digest;
      r.dense_s = b.DenseRound();
      r.bytes_ok = b.BytesEqual() && r.bytes_ok;
      r.raw_s = raw;
      r.copy_gbps = copy;
      all_ok = all_ok && r.bytes_ok;
      std::printf("%s %s: changed %.4f wire %.4f delta %.4f s dense %.4f s %s\n",
                  r.engine.c_str(), r.change.c_str(), r.changed, r.wire_ratio, r.delta_s,
                  r.dense_s, r.bytes_ok ? "bytes ok" : "BYTES WRONG");
      std::fflush(stdout);
      rows.push_back(r);
    }
    std::printf("%s engine: %lld bytes per round\n", engine.c_str(),
                static_cast<long long>(b.engine_bytes()));
  }
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  std::printf(
      "\ndelta_bench: Qwen3-8B (synthetic weights), trainer GPU 0 -> engine GPU 1 over NCCL, %s\n"
      "changed = engine words changed; wire = delta bytes / dense bytes; encode/copy = GB/s\n"
      "read (encoder: current + snapshot; copy: the dense bytes once); digest = both GPUs' digest\n"
      "of every engine byte (the slower); bytes = engine equals trainer after both rounds\n\n",
      prop.name);
  std::printf("%-6s %-15s %8s %7s %9s %9s %8s %9s %9s %8s %9s %9s %5s\n", "engine", "change",
              "changed", "wire", "delta_s", "dense_s", "ratio", "raw_nccl", "encode_s", "enc_GB/s",
              "copy_GB/s", "digest_s", "bytes");
  for (const Row& r : rows) {
    std::printf("%-6s %-15s %8.4f %7.4f %9.4f %9.4f %8.3f %9.4f %9.4f %8.0f %9.0f %9.4f %5s\n",
                r.engine.c_str(), r.change.c_str(), r.changed, r.wire_ratio, r.delta_s,
                r.dense_s, r.delta_s / r.dense_s, r.raw_s, r.encode_s, r.encode_gbps,
                r.copy_gbps, r.digest_s, r.bytes_ok ? "ok" : "WRONG");
  }
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace refit

int main() { return refit::Main(); }
