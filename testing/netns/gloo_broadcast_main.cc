// gloo_broadcast: the baseline of the fan-out scenario (tests/netns/
// netns_fanout_test.sh): the same bytes a refit round moves, sent from one
// root to every receiver the way broadcast-based weight sync does it over
// Gloo: the bytes packed into one buffer and broadcast bucket by bucket,
// each bucket one gloo::broadcast (Gloo's binomial tree, the collective
// torch.distributed's Gloo backend runs for broadcast), in order.
// One process per host; rank 0 is the root. Every received byte is checked.
//
// Flags (--name=value): --rank=R --world=N --bind=ADDR (the host's data
// address) --store=DIR (a directory all ranks see: Gloo's file store)
// --bytes=B (per round) --bucket_bytes=B (default 4 MiB) --rounds=N
// (default 3) --timeout_s=S (default 120).
// Rank 0 prints "round V SECONDS" per round (barrier to barrier: every
// receiver holds the round's bytes); every rank prints "ok" or
// "error: ..." at the end. Exit code 0 only when every byte matched.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/device.h"
#include "testing/netns/dash_flags.h"

namespace {

// Word i of round v's bytes.
uint64_t PatternWord(int64_t v, int64_t i) {
  uint64_t x = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ULL ^
               static_cast<uint64_t>(v) * 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 31;
  return x * 0x94D049BB133111EBULL;
}

int64_t IntFlag(const std::map<std::string, std::string>& f, const std::string& k,
                int64_t d) {
  int64_t v = d;
  auto it = f.find(k);
  if (it != f.end() && !absl::SimpleAtoi(it->second, &v)) v = d;
  return v;
}

int Run(const std::map<std::string, std::string>& f) {
  const int rank = static_cast<int>(IntFlag(f, "rank", -1));
  const int world = static_cast<int>(IntFlag(f, "world", 0));
  const int64_t bytes = IntFlag(f, "bytes", 0) / 8 * 8;
  const int64_t bucket = IntFlag(f, "bucket_bytes", 4 << 20) / 8 * 8;
  const int64_t rounds = IntFlag(f, "rounds", 3);
  const auto timeout = std::chrono::seconds(IntFlag(f, "timeout_s", 120));
  if (rank < 0 || rank >= world || bytes <= 0 || bucket <= 0 || !f.count("store") ||
      !f.count("bind")) {
    std::printf("error: need --rank in [0, --world), --bytes > 0, --bucket_bytes > 0, "
                "--store, --bind\n");
    return 2;
  }
  gloo::transport::tcp::attr attr;
  attr.hostname = f.at("bind");
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
  ctx->setTimeout(timeout);
  gloo::rendezvous::FileStore store(f.at("store"));
  ctx->connectFullMesh(store, dev);

  std::vector<uint64_t> buf(bytes / 8);
  int64_t bad = 0;
  for (int64_t v = 1; v <= rounds; ++v) {
    if (rank == 0) {
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = PatternWord(v, i);
    } else {
      std::memset(buf.data(), 0, buf.size() * 8);
    }
    gloo::BarrierOptions before(ctx);
    gloo::barrier(before);
    const absl::Time t0 = absl::Now();
    uint32_t tag = 0;
    for (int64_t off = 0; off < bytes; off += bucket) {
      const int64_t n = std::min(bucket, bytes - off) / 8;
      gloo::BroadcastOptions o(ctx);
      o.setRoot(0);
      o.setTag(tag++);
      if (rank == 0) o.setInput(buf.data() + off / 8, n);
      o.setOutput(buf.data() + off / 8, n);
      gloo::broadcast(o);
    }
    gloo::BarrierOptions after(ctx);
    gloo::barrier(after);
    if (rank == 0) std::printf("round %lld %.3f\n", static_cast<long long>(v),
                               absl::ToDoubleSeconds(absl::Now() - t0));
    for (size_t i = 0; rank != 0 && i < buf.size(); ++i) bad += buf[i] != PatternWord(v, i);
  }
  if (bad != 0) {
    std::printf("error: rank %d: %lld words differ from the root's\n", rank,
                static_cast<long long>(bad));
    return 1;
  }
  std::printf("ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, std::string> f = refit::DashFlags(argc, argv);
  try {
    return Run(f);
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    std::fflush(stdout);
    return 1;
  }
}
