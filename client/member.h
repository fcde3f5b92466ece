// Member: the whole client library behind one object, for members that
// follow a convention of the mapping tables (what the C API and the Python
// module expose). It computes the buffers the member's convention expects,
// checks the ones the caller gives against them (names and byte sizes),
// connects to refitd, registers, and then runs rounds through a
// DataPlaneMember over the caller's own memory, which it never allocates,
// moves or frees.
//
//   MemberOptions o;                       // server, side, rank, model, convention
//   REFIT_ASSIGN_OR_RETURN(std::vector<LocalBuffer> want, ExpectedBuffers(o));
//   std::map<std::string, BufferRef> mine = ...;   // one per name in `want`
//   REFIT_ASSIGN_OR_RETURN(auto m, Member::Join(o, mine, {}, deadline));
//   REFIT_RETURN_IF_ERROR(m->Prepare(deadline));
//   if (trainer rank 0) REFIT_RETURN_IF_ERROR(m->StartRound(v, deadline));
//   REFIT_ASSIGN_OR_RETURN(int64_t got, m->WaitForRound(deadline));
//   REFIT_ASSIGN_OR_RETURN(RunStats s, m->RunRound(got, deadline));
#ifndef REFIT_CLIENT_MEMBER_H_
#define REFIT_CLIENT_MEMBER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/data_plane.h"
#include "client/refit_client.h"
#include "layout/side.h"
#include "mapping/layout_builder.h"

namespace refit {

struct MemberOptions {
  RefitClient::Options connection;  // target "host:port", token, TLS
  std::string job = "refit";
  Side side = Side::kTrainer;  // kEngine: an engine worker
  std::string engine_id;   // engines: the replica's id
  int32_t rank = 0;        // within the trainer / within the engine replica
  std::string model;       // a built-in model name, or a config.json path
  std::string convention;  // "megatron:tp=2", "fsdp:dp=4", "vllm:tp=2,dp=1"
  std::string host_id;     // empty: this host's name
  std::string device = "cpu";  // what the buffers are: "cpu" or "cuda:N"
};

// One buffer the caller gives: `byte_size` bytes at `data` (host or device
// memory, as MemberOptions::device says). Engines' buffers are written in
// place; trainers' are only read.
struct BufferRef {
  char* data = nullptr;
  int64_t byte_size = 0;
};

// The buffers `options.rank` must give, in layout order (names, local
// shapes, dtypes, byte sizes). INVALID_ARGUMENT for an unparsable
// convention, a rank outside its world, or a model the convention cannot
// place (naming it); NOT_FOUND for an unknown model or unreadable
// config.json.
absl::StatusOr<std::vector<LocalBuffer>> ExpectedBuffers(
    const MemberOptions& options);

// Tells refitd that the member `options` names cannot join, and why (its
// engine holds a layout refit does not write, its parameters do not match
// the convention): every member waiting for a plan then fails at once with
// FAILED_PRECONDITION naming it and `reason`, instead of at its deadline.
// The refusal stands until this member registers (or refitd's heartbeat
// timeout passes). UNAVAILABLE when refitd is not reachable by `deadline`;
// refitd's status otherwise (PERMISSION_DENIED for a wrong job key).
absl::Status RefuseToJoin(const MemberOptions& options, const std::string& reason,
                          absl::Time deadline);

class Member {
 public:
  // Checks `buffers` against ExpectedBuffers(options) (INVALID_ARGUMENT
  // listing every problem, each naming the rank and the parameter: unknown,
  // missing, wrong byte size, null address) before it contacts refitd; then
  // connects (UNAVAILABLE naming the target within the connection's
  // connect_timeout, 2 s by default, or by `deadline`) and registers
  // (refitd's status: INVALID_ARGUMENT, UNAUTHENTICATED, ...; naming the
  // members that stopped heart-beating when refitd refuses it, as Prepare).
  static absl::StatusOr<std::unique_ptr<Member>> Join(
      MemberOptions options, std::map<std::string, BufferRef> buffers,
      DataPlaneOptions data_plane, absl::Time deadline);

  // Leaves the membership (bounded: at most a few seconds, and at once
  // when refitd is gone), so that refitd plans without this member and a
  // new process may take its place; then stops the member's threads.
  ~Member();

  // Registers again, with the same buffers, after refitd restarted or
  // expired this member: WaitForRound or RunRound returned UNAVAILABLE
  // (see RefitClient::Rejoin). Call Prepare next: it waits for the plan of
  // the membership once every member is back.
  absl::Status Rejoin(absl::Time deadline);

  // Awaits this member's plan (see DataPlaneMember::Prepare). When the
  // plan fails and refitd holds a member that has stopped heart-beating
  // (a process of an earlier run that ended without leaving), the error
  // names it and says what to do.
  absl::Status Prepare(absl::Time deadline);
  // True when refitd has a newer plan: call Prepare before the next round.
  bool PlanChanged() { return data_plane_->PlanChanged(); }

  // Starts round `version` (a trainer rank; OK when another rank started it
  // already). Retries while refitd answers UNAVAILABLE (a member's round
  // stream is not up yet, a plan is being built) until `deadline`; fails
  // with UNAVAILABLE naming refitd's address within the connect timeout
  // (2 s by default) when refitd is gone (rejoin once it is back).
  absl::Status StartRound(int64_t version, absl::Time deadline);
  // Starts the next version, one above the last round refitd started, and
  // returns it (RefitClient::StartNextRound); retries and fails as
  // StartRound. Versions then stay monotonic across runs without a count
  // of the trainer's own.
  absl::StatusOr<int64_t> StartNextRound(absl::Time deadline);
  // The next announced round (see RefitClient::WaitForRound).
  absl::StatusOr<int64_t> WaitForRound(absl::Time deadline);
  // Moves this member's bytes of round `version` and waits for the commit
  // (see DataPlaneMember::RunRound).
  absl::StatusOr<RunStats> RunRound(int64_t version, absl::Time deadline);
  // A staged engine member (DataPlaneOptions::staging) in two steps, the
  // engine serving between them: see DataPlaneMember::ReceiveRound and
  // ApplyRound.
  absl::StatusOr<RunStats> ReceiveRound(int64_t version, absl::Time deadline);
  absl::StatusOr<RunStats> ApplyRound(int64_t version, absl::Time deadline);

  // What refitd says of round `version` so far (for progress lines; safe
  // to call while another thread is in RunRound): whether it is running,
  // for how long, how many participants reported of how many, and the
  // bytes the engine ranks that reported received; the bytes moved so far
  // against the plan (from the members' heartbeats, about once a second):
  // this member's, and all engine ranks' together. A round that is not
  // running (not started yet, or ended) has running false. Fails with
  // refitd's status (UNAVAILABLE when it is gone).
  struct RoundProgress {
    bool running = false;
    double seconds = 0;
    int32_t reported = 0;
    int32_t members = 0;
    int64_t engine_bytes = 0;
    int32_t engine_ranks = 0;
    int64_t bytes = 0;          // this member's, so far
    int64_t planned_bytes = 0;  // ... of what its plan slice moves
    int64_t round_bytes = 0;          // every engine rank's received so far
    int64_t round_planned_bytes = 0;  // ... of what they receive in all
  };
  absl::StatusOr<RoundProgress> Progress(int64_t version, absl::Time deadline);

  RefitClient& client() { return *client_; }
  DataPlaneMember& data_plane() { return *data_plane_; }
  const std::string& member_id() const { return member_id_; }
  const MemberOptions& options() const { return options_; }
  // The buffers given to Join, by name.
  const std::map<std::string, BufferRef>& buffers() const { return buffers_; }
  // This member's rank of its side's layout (RankOnly): its buffers (as
  // RankBuffers(rank_layout(), options().rank) lists them) and the records
  // that place tensors into them (what test patterns fill and check); the
  // other ranks have none.
  const MappedSide& rank_layout() const { return side_; }

 private:
  Member() = default;
  // StartRound's retries around `start` (one StartRound call).
  absl::StatusOr<int64_t> StartWithRetries(
      const std::function<absl::StatusOr<int64_t>()>& start, absl::Time deadline);

  MemberOptions options_;
  MappedSide side_;  // RankOnly(whole side, options_.rank)
  std::map<std::string, BufferRef> buffers_;
  std::unique_ptr<RefitClient> client_;
  std::unique_ptr<DataPlaneMember> data_plane_;
  std::string member_id_;
};

}  // namespace refit

#endif  // REFIT_CLIENT_MEMBER_H_
