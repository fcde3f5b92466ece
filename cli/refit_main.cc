// The `refit` command-line tool: its flags (Abseil flags, one spelling:
// --snake_case) and subcommand dispatch. Subcommands live in libraries
// beside this file (plan_command.h); each accepts only the flags it lists.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <new>
#include <optional>
#include <unistd.h>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "common/huge_pages.h"
#include "job/job_plan.h"
#include "job/planner_flags.h"
#include "mapping/model_config.h"
#include "proto/protocol_version.h"
#include "cli/buffers_command.h"
#include "cli/health_command.h"
#include "cli/plan_command.h"
#include "cli/simulate_command.h"
#include "cli/staged_prediction.h"
#include "cli/status_command.h"

// Flags of several commands.
ABSL_FLAG(std::string, model, "",
          "built-in model (`refit models` lists them all) or an HF config.json.\n"
          "e.g. --model deepseek-v3");
ABSL_FLAG(std::string, trainer, "",
          "trainer layout, e.g. megatron:tp=8,pp=16,ep=16,etp=1,dp=2 (optional\n"
          "first=N,last=M: first/last PP stage layer counts; without them layers\n"
          "are split evenly, earlier stages take the extra layer; gtp=,egtp=,\n"
          "weights=mxfp8|nvfp4: GTP row slices of TE's native tensors,\n"
          "docs/kernel-layouts.md) or fsdp:dp=64");
ABSL_FLAG(std::string, engine, "",
          "engine layout, e.g. vllm:tp=32,dp=8 or vllm:tp=8,dp=2,ep=16 (ep must\n"
          "equal tp*dp; engine rank = dp_rank*TP + tp_rank)");
ABSL_FLAG(std::string, dtype, "",
          "weight dtype bf16|fp8|fp8-tensor (fp8 = e4m3 + weight_scale_inv\n"
          "blocks, fp8-tensor: one scale per tensor); empty: plan: bf16,\n"
          "simulate: the config's own");
ABSL_FLAG(bool, json, false, "print the result as one JSON document");
ABSL_FLAG(double, delta, -1,
          "refit plan: also predict a delta round with this fraction of the elements "
          "changed, e.g. 0.02 (docs/delta.md)");
ABSL_FLAG(std::string, engine_staging, "",
          "refit plan: the engines are staged (docs/engines.md) with this device\n"
          "staging budget per engine rank: bytes (e.g. 8GiB) or a share of the\n"
          "rank's weight bytes (e.g. 0.5 or 50%); prints each engine rank's bytes\n"
          "staged on the device, in host overflow, and its pause");
ABSL_FLAG(int64_t, max_snapshot_mib, 0,
          "refit plan: refuse a plan whose trainer rank needs a larger delta snapshot "
          "(MiB; 0: no bound)");
ABSL_FLAG(double, timeout_s, 0,
          "deadline in seconds; 0: the command's default (simulate: the whole\n"
          "transfer, 300; status: to connect and to answer, 10)");
// refit plan
ABSL_FLAG(int32_t, gpus_per_host, 8, "GPUs per host");
ABSL_FLAG(std::string, hosts, "",
          "each rank's host and optionally its GPU, one line per rank:\n"
          "\"trainer RANK HOST [GPU]\" or \"engine RANK HOST [GPU]\" (# comments;\n"
          "GPU: any name within its host, e.g. the CUDA device UUID refitd gets\n"
          "from GPU members; ranks with equal HOST and GPU share one GPU);\n"
          "replaces --gpus_per_host and --colocated. refitd, given members on\n"
          "those hosts and GPUs, builds the same plan (same fingerprint)");
ABSL_FLAG(bool, colocated, false,
          "engine rank r shares trainer rank r's GPU: GPU r%N of host r/N\n"
          "(default: separate hosts: trainer ranks on hosts 0..ceil(T/N)-1,\n"
          "engine ranks on the hosts after them)");
ABSL_FLAG(std::string, link, "",
          "per-GPU bandwidth in GB/s of each link class: within one GPU (a\n"
          "device-local copy), between GPUs of one host (NVLink) and between\n"
          "hosts (network), e.g. gpu=1900,nvlink=370,net=50 (the default);\n"
          "host=25: pinned host memory to its GPU (a staged engine's overflow)");
ABSL_FLAG(bool, timings, false,
          "print each step's wall time (config, trainer layout, engine layout,\n"
          "planner and each planner phase, summary) on stderr");
ABSL_FLAG(std::string, heatmap, "",
          "also write an SVG heat map of bytes from trainer hosts (or PP stages)\n"
          "to engine hosts. e.g. --heatmap plan.svg");
// refit simulate
ABSL_FLAG(std::string, checkpoint, "",
          "model.safetensors, or a directory holding\n"
          "model.safetensors.index.json (sharded) or model.safetensors");
ABSL_FLAG(std::string, out, "", "output directory (created). e.g. --out /tmp/sim");
// refit status, refit health
ABSL_FLAG(std::string, server, refit::kDefaultRefitdAddress,
          "refitd's address HOST:PORT (default: refitd's own default address)");
ABSL_FLAG(std::string, token_file, "",
          "file holding the bearer token refitd requires (refitd --token_file)");
ABSL_FLAG(std::string, tls_ca_file, "",
          "CA certificate (PEM) that signed refitd's certificate: speak TLS to refitd");
ABSL_FLAG(std::string, tls_cert_file, "", "client certificate (PEM), for mutual TLS");
ABSL_FLAG(std::string, tls_key_file, "", "its private key (PEM)");
ABSL_FLAG(std::string, tls_server_name, "",
          "name to check in refitd's certificate (default: the --server host)");
ABSL_FLAG(int32_t, rounds, 10, "newest rounds shown");
ABSL_FLAG(bool, watch, false,
          "show the round in flight (which members reported, the bytes of\n"
          "those still moving against their plan), refreshing every --interval_ms, until a round ends (exit 0\n"
          "when it committed, 1 when it aborted); --timeout_s bounds the whole\n"
          "watch (default 600)");
ABSL_FLAG(int32_t, interval_ms, 500, "--watch refresh period");
ABSL_FLAG(bool, follow, false,
          "with --watch: keep watching round after round (each one's members,\n"
          "bytes and final line) until --timeout_s; exit 0 then");
// refit buffers
ABSL_FLAG(int32_t, rank, -1,
          "only rank R (engine: within the replica); -1: every rank");

namespace {

constexpr char kTopHelp[] =
    R"HELP(refit: plan and inspect weight resharding from an RL trainer to an inference engine.

usage: refit <command> [flags]

commands:
  plan       dry-run: build the transfer plan and print what it moves
  simulate   run a whole refit in one process from a safetensors checkpoint
             and write every trainer and engine rank's buffers
  status     members, plan fingerprint and last rounds of a running refitd
  health     whether refitd serves (grpc.health.v1): exit 0 when it does
  buffers    the buffers a trainer rank or engine worker gives refit
             (names, local shapes, dtypes, bytes) under its convention
  models     the built-in models (names --model takes)
  help       this text (also: refit -h, refit --help, refit <command> --help)

example:
  refit plan --model deepseek-v3 --trainer megatron:tp=8,pp=16,ep=16,etp=1,dp=2 \
             --engine vllm:tp=32,dp=8
  refit simulate --model tiny-qwen3 --checkpoint ckpt/ \
                 --trainer megatron:tp=2,pp=2 --engine vllm:tp=2,dp=2 --out sim/
  refit status --server 127.0.0.1:50051 --token_file /etc/refit/token
  refit health
  refit buffers --model qwen3-8b --engine vllm:tp=2 --rank 1

exit codes: 0 ok, 1 failure, 2 usage error.
)HELP";

constexpr char kSimulateHelp[] =
    R"HELP(refit simulate: run one refit in this process from an HF checkpoint.

usage: refit simulate --model NAME|config.json --checkpoint PATH
                      --trainer SPEC --engine SPEC --out DIR [flags]

Reads the checkpoint (memory-mapped), fills every trainer rank's buffers by
the trainer convention, runs the plan through the executor over the
in-process transport (one thread per rank) and writes
  DIR/trainer/rank<k>.safetensors   Megatron rank k = (pp*DP + dp)*TP + tp,
                                    FSDP rank k = replica*S + shard
  DIR/engine/rank<k>.safetensors    engine rank k = dp_rank*TP + tp_rank
each holding that rank's buffers under the convention's own names and local
shapes (fused buffers such as qkv_proj / gate_up_proj; vocabulary padding
rows are zeros). FP8 checkpoints (e4m3 weights + weight_scale_inv) pass
through unchanged. Every rank's buffers are held in memory: use small models.

A tensor missing from the checkpoint, or whose shape or dtype disagrees with
the config, is an error naming the tensor (exit 1); a usage error exits 2.

example:
  refit simulate --model tiny-qwen3 --checkpoint ckpt/model.safetensors \
                 --trainer megatron:tp=2,pp=2,dp=1 --engine vllm:tp=2,dp=2 \
                 --out /tmp/sim
)HELP";

constexpr char kStatusHelp[] =
    R"HELP(refit status: show what a running refitd knows.

usage: refit status [--server HOST:PORT] [flags]

Prints the registered members (id, side, job, engine, rank/world, host,
device, parallel coordinates, buffers, heartbeat age), the membership epoch,
the current plan fingerprint (or "(no plan)") and plan error if any, and the
last rounds with their outcome, bytes, seconds and GB/s: bytes are what one
engine rank received, seconds the slowest member's data-plane time, GB/s =
bytes / seconds (GB = 1e9 bytes). --server defaults to refitd's own default
address, 127.0.0.1:50051. With --watch it follows the round in flight
instead, until it ends (each member reported with its bytes, seconds and
peak staging, or still moving with its bytes so far of its plan's); with --follow it keeps watching round
after round until --timeout_s. To a refitd with TLS (--tls_cert), give the CA
that signed its certificate with --tls_ca_file (and --tls_cert_file,
--tls_key_file when it requires client certificates).

exit codes: 0 ok, 1 failure (unreachable server, wrong token), 2 usage error.

example:
  refit status --server 127.0.0.1:50051 --token_file token.txt --json
  refit status --server 127.0.0.1:50051 --watch --timeout_s 3600
  refit status --server 127.0.0.1:50051 --follow --timeout_s 86400
)HELP";

constexpr char kHealthHelp[] =
    R"HELP(refit health: whether refitd serves.

usage: refit health [--server HOST:PORT] [--timeout_s S] [--tls_ca_file FILE]

Asks refitd's grpc.health.v1 service (no token needed) and prints
"refitd HOST:PORT: SERVING". --server defaults to refitd's own default
address, 127.0.0.1:50051; --timeout_s (5) bounds the call. TLS flags as
for `refit status`.

exit codes: 0 serving; 1 not serving (NOT_SERVING while refitd drains on
SIGTERM) or not reachable, with the reason; 2 usage error.

example:
  refit health --server 10.0.0.5:50051 --timeout_s 2
)HELP";

constexpr char kBuffersHelp[] =
    R"HELP(refit buffers: the buffers a member gives refit under its convention.

usage: refit buffers --model NAME|config.json (--trainer SPEC | --engine SPEC)
                     [--rank R] [--json]

Lists, per rank, every buffer the member registers (what refit.Member's
`buffers` must hold, and what refit.expected_buffers returns): its name,
local shape, dtype and bytes. Engine names are the engine's own parameter
names (vLLM: model.layers.0.self_attn.qkv_proj.weight, fused), so an
integration can check its named_parameters() against them.

exit codes: 0 ok, 1 failure (unknown model, bad convention, rank outside
the world), 2 usage error.

example:
  refit buffers --model qwen3-8b --engine vllm:tp=2 --rank 1
  refit buffers --model tiny-qwen3-moe --trainer megatron:tp=2,ep=2,etp=1 --json
)HELP";

constexpr char kPlanHelp[] =
    R"HELP(refit plan: build the static transfer plan for one refit and summarize it.

usage: refit plan --model NAME|config.json --trainer SPEC --engine SPEC [flags]

The plan is placed: for every destination region the planner picks the trainer
replica that keeps the predicted refit time lowest. The predicted refit time is
the slowest rank's time, each message's bytes going over the link class it uses
(same GPU, same host, across hosts; a rank's sends, or receives, one after
another); the lower bound is what no choice of replicas beats (each rank's
bytes over the best link it could use). The placement comes from --hosts, else
from --gpus_per_host and --colocated: it is what refitd plans with when its
members report those hosts and GPUs.
--relay=on lets engine ranks forward bytes they received to other engine
ranks (each engine rank's received and forwarded bytes counted apart, full
duplex): the summary then gives the bytes each engine rank forwards, the relay
depth, and the lower bound with relays beside the one with trainer ranks as the
only senders. refitd takes the same flag and builds the same plan.
Several engines of one model (replicas of different layouts) are one --engine
joined by ';', e.g. 'vllm:tp=8;vllm:tp=4,dp=4': their ranks are numbered one
engine after the other, and with --relay=on a region one replica received may
feed the same region of a replica of another layout.
An invalid layout or plan prints every error (tensor, ranks) and exits 1; a
usage error exits 2.

--delta=F adds the delta round's prediction (F of the elements changed, wire
bytes by the codec's size formula) and each trainer rank's snapshot bytes;
--max_snapshot_mib refuses a plan whose snapshot is over it (docs/delta.md).
It also says whether refitd --delta runs delta or dense rounds for members on
host memory (Gloo), whose links --host_link_gbps gives (0: Gloo's TCP speeds)
and whose delta codec --host_codec_gbps rates, as refitd reads them.

--engine_staging=BYTES|SHARE plans staged engines (docs/engines.md): each
engine rank stages its buffers on the device up to the budget, the rest in
pinned host memory, and pauses to copy them into its live buffers; it prints
each engine rank's device and overflow bytes and its pause (the device part at
--link gpu=, the overflow at --link host=).

example:
  refit plan --model kimi-k2 --trainer megatron:tp=8,pp=16,ep=16,etp=1,dp=2 \
             --engine vllm:tp=16,dp=8 --json
)HELP";

// --lanes as the planner options hold it (int32); a value past int32 stays
// past the planner's range of 1..64, which the commands check and name.
int32_t LanesFlag() {
  return static_cast<int32_t>(std::min<int64_t>(absl::GetFlag(FLAGS_lanes),
                                                std::numeric_limits<int32_t>::max()));
}

int Usage(const std::string& err, const char* help) {
  std::cerr << "refit: " << err << "\n\n" << help;
  return 2;
}

// Parses a subcommand's flags. Returns -1 to go on, else the exit code.
int ParseSubcommand(const char* name, const std::vector<std::string>& args,
                    const std::vector<std::string>& accepted, const char* help) {
  absl::StatusOr<refit::CommandLineResult> r = refit::ParseCommandLine(
      absl::StrCat("refit ", name), args, accepted, help);
  if (!r.ok()) return Usage(std::string(r.status().message()), help);
  return *r == refit::CommandLineResult::kHelpShown ? 0 : -1;
}

// Returns why --dtype's value is not one a model takes (the model config's
// own check, mapping/model_config.h); "" when it is, or when it is empty.
std::string DtypeError(const std::string& dtype) {
  if (dtype.empty()) return "";
  refit::ModelConfig probe;
  absl::Status s = refit::SetWeightDType(&probe, dtype);
  return s.ok() ? "" : absl::StrCat("--dtype: ", s.message());
}

// Returns the --tls_* flags.
refit::ClientTlsFiles TlsFlags() {
  return {absl::GetFlag(FLAGS_tls_ca_file), absl::GetFlag(FLAGS_tls_cert_file),
          absl::GetFlag(FLAGS_tls_key_file), absl::GetFlag(FLAGS_tls_server_name)};
}

// Returns the --timeout_s flag, or `def` when it is 0; nullopt when negative.
std::optional<absl::Duration> Timeout(absl::Duration def) {
  const double s = absl::GetFlag(FLAGS_timeout_s);
  if (!(s >= 0)) return std::nullopt;
  return s == 0 ? def : absl::Seconds(s);
}

int RunPlan(const std::vector<std::string>& args) {
  if (int rc = ParseSubcommand(
          "plan", args,
          {"model", "trainer", "engine", "dtype", "gpus_per_host", "colocated",
           "hosts", "link", "relay", "staging_mib", "lanes", "max_plan_mib", "json", "timings",
           "heatmap", "delta", "max_snapshot_mib", "engine_staging", "host_link_gbps",
           "host_codec_gbps"},
          kPlanHelp);
      rc >= 0) {
    return rc;
  }
  refit::PlanCommandOptions opt;
  opt.model = absl::GetFlag(FLAGS_model);
  opt.trainer = absl::GetFlag(FLAGS_trainer);
  opt.engine = absl::GetFlag(FLAGS_engine);
  if (opt.model.empty() || opt.trainer.empty() || opt.engine.empty()) {
    return Usage("--model, --trainer and --engine are required", kPlanHelp);
  }
  if (!absl::GetFlag(FLAGS_dtype).empty()) opt.dtype = absl::GetFlag(FLAGS_dtype);
  if (std::string e = DtypeError(absl::GetFlag(FLAGS_dtype)); !e.empty()) {
    return Usage(e, kPlanHelp);
  }
  opt.link.gpus_per_host = absl::GetFlag(FLAGS_gpus_per_host);
  if (opt.link.gpus_per_host < 1) {
    return Usage("--gpus_per_host needs a positive integer", kPlanHelp);
  }
  opt.link.colocated = absl::GetFlag(FLAGS_colocated);
  opt.hosts_file = absl::GetFlag(FLAGS_hosts);
  if (!absl::GetFlag(FLAGS_link).empty()) {
    absl::Status st = refit::ParseLinkSpec(absl::GetFlag(FLAGS_link), &opt.link);
    if (!st.ok()) return Usage(std::string(st.message()), kPlanHelp);
  }
  {
    absl::StatusOr<bool> relay = refit::ParseRelayFlag(absl::GetFlag(FLAGS_relay));
    if (!relay.ok()) return Usage(std::string(relay.status().message()), kPlanHelp);
    opt.relay = *relay;
  }
  opt.staging_mib = absl::GetFlag(FLAGS_staging_mib);
  if (opt.staging_mib < 1) return Usage("--staging_mib needs a positive integer", kPlanHelp);
  if (absl::GetFlag(FLAGS_lanes) < 1) return Usage("--lanes needs a positive integer", kPlanHelp);
  opt.lanes = LanesFlag();
  opt.max_plan_mib = absl::GetFlag(FLAGS_max_plan_mib);
  if (opt.max_plan_mib < 1) {
    return Usage("--max_plan_mib needs a positive integer", kPlanHelp);
  }
  opt.json = absl::GetFlag(FLAGS_json);
  opt.timings = absl::GetFlag(FLAGS_timings);
  opt.heatmap = absl::GetFlag(FLAGS_heatmap);
  opt.delta = absl::GetFlag(FLAGS_delta);
  // -1, the default: no delta prediction. Anything else outside [0, 1] is
  // a usage error, not silently ignored.
  if (opt.delta != -1 && !(opt.delta >= 0 && opt.delta <= 1)) {
    return Usage(absl::StrCat("--delta=", opt.delta,
                              ": the fraction of the elements changed, in [0, 1] "
                              "(e.g. --delta=0.02 for 2%)"),
                 kPlanHelp);
  }
  opt.engine_staging = absl::GetFlag(FLAGS_engine_staging);
  if (!opt.engine_staging.empty()) {
    absl::Status st = refit::ParseEngineStaging(opt.engine_staging).status();
    if (!st.ok()) return Usage(std::string(st.message()), kPlanHelp);
  }
  {
    absl::StatusOr<refit::HostDeltaModel> host_delta = refit::HostDeltaFromFlags(
        absl::GetFlag(FLAGS_host_link_gbps), absl::GetFlag(FLAGS_host_codec_gbps));
    if (!host_delta.ok()) return Usage(std::string(host_delta.status().message()), kPlanHelp);
    opt.host_delta = *host_delta;
  }
  opt.max_snapshot_mib = absl::GetFlag(FLAGS_max_snapshot_mib);
  if (opt.max_snapshot_mib < 0 || opt.max_snapshot_mib > (int64_t{1} << 30)) {
    return Usage("--max_snapshot_mib: 0 (no bound) to 2^30", kPlanHelp);
  }
  absl::StatusOr<std::string> out = absl::UnknownError("not run");
  // A plan too large for the memory there is (or the address-space limit)
  // is an error like any other, not an abort.
  try {
    out = refit::RunPlanCommand(opt);
  } catch (const std::bad_alloc&) {
    out = absl::ResourceExhaustedError(
        "out of memory while building the plan; --max_plan_mib (lower it to refuse "
        "such plans before they are built) or fewer ranks");
  }
  if (!out.ok()) {
    std::cerr << "refit plan: error: " << out.status().message() << "\n";
    return 1;
  }
  std::cout << *out;
  return 0;
}

int RunSimulate(const std::vector<std::string>& args) {
  if (int rc = ParseSubcommand(
          "simulate", args,
          {"model", "checkpoint", "trainer", "engine", "out", "dtype",
           "staging_mib", "lanes", "timeout_s"},
          kSimulateHelp);
      rc >= 0) {
    return rc;
  }
  refit::SimulateCommandOptions opt;
  opt.model = absl::GetFlag(FLAGS_model);
  opt.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  opt.trainer = absl::GetFlag(FLAGS_trainer);
  opt.engine = absl::GetFlag(FLAGS_engine);
  opt.out = absl::GetFlag(FLAGS_out);
  opt.dtype = absl::GetFlag(FLAGS_dtype);
  if (std::string e = DtypeError(opt.dtype); !e.empty()) return Usage(e, kSimulateHelp);
  if (opt.model.empty() || opt.checkpoint.empty() || opt.trainer.empty() ||
      opt.engine.empty() || opt.out.empty()) {
    return Usage(
        "--model, --checkpoint, --trainer, --engine and --out are required",
        kSimulateHelp);
  }
  opt.staging_mib = absl::GetFlag(FLAGS_staging_mib);
  if (opt.staging_mib < 1) return Usage("--staging_mib needs a positive integer", kSimulateHelp);
  if (absl::GetFlag(FLAGS_lanes) < 1) {
    return Usage("--lanes needs a positive integer", kSimulateHelp);
  }
  opt.lanes = LanesFlag();
  std::optional<absl::Duration> timeout = Timeout(opt.timeout);
  if (!timeout) return Usage("--timeout_s needs a positive number", kSimulateHelp);
  opt.timeout = *timeout;
  absl::StatusOr<std::string> out = refit::RunSimulateCommand(opt);
  if (!out.ok()) {
    std::cerr << "refit simulate: error: " << out.status().message() << "\n";
    return 1;
  }
  std::cout << *out;
  return 0;
}

int RunStatus(const std::vector<std::string>& args) {
  if (int rc = ParseSubcommand(
          "status", args,
          {"server", "token_file", "timeout_s", "rounds", "json", "watch",
           "interval_ms", "follow", "tls_ca_file", "tls_cert_file", "tls_key_file",
           "tls_server_name"},
          kStatusHelp);
      rc >= 0) {
    return rc;
  }
  refit::StatusCommandOptions opt;
  opt.server = absl::GetFlag(FLAGS_server);
  if (opt.server.empty()) return Usage("--server needs HOST:PORT", kStatusHelp);
  opt.token_file = absl::GetFlag(FLAGS_token_file);
  opt.follow = absl::GetFlag(FLAGS_follow);
  opt.tls = TlsFlags();
  const bool watch = absl::GetFlag(FLAGS_watch) || opt.follow;
  std::optional<absl::Duration> timeout =
      Timeout(watch ? absl::Seconds(600) : opt.timeout);
  if (!timeout) return Usage("--timeout_s needs a positive number", kStatusHelp);
  opt.timeout = *timeout;
  if (watch) {
    const int32_t interval_ms = absl::GetFlag(FLAGS_interval_ms);
    if (interval_ms < 10) return Usage("--interval_ms must be at least 10", kStatusHelp);
    absl::StatusOr<refit::v1::RoundSummary> ended = refit::RunStatusWatch(
        opt, absl::Milliseconds(interval_ms), isatty(STDOUT_FILENO) != 0,
        [](const std::string& frame) {
          std::cout << frame << std::flush;
        });
    if (!ended.ok()) {
      std::cerr << "refit status: error: " << ended.status().ToString() << "\n";
      return 1;
    }
    if (opt.follow) return 0;  // watched until --timeout_s
    return ended->outcome() == "committed" ? 0 : 1;
  }
  opt.rounds = absl::GetFlag(FLAGS_rounds);
  if (opt.rounds < 0) return Usage("--rounds needs a non-negative integer", kStatusHelp);
  opt.json = absl::GetFlag(FLAGS_json);
  absl::StatusOr<std::string> out = refit::RunStatusCommand(opt);
  if (!out.ok()) {
    std::cerr << "refit status: error: " << out.status().ToString() << "\n";
    return 1;
  }
  std::cout << *out;
  return 0;
}

int RunHealth(const std::vector<std::string>& args) {
  if (int rc = ParseSubcommand("health", args,
                               {"server", "timeout_s", "tls_ca_file", "tls_cert_file",
                                "tls_key_file", "tls_server_name"},
                               kHealthHelp);
      rc >= 0) {
    return rc;
  }
  refit::HealthCommandOptions opt;
  opt.server = absl::GetFlag(FLAGS_server);
  opt.tls = TlsFlags();
  if (opt.server.empty()) return Usage("--server needs HOST:PORT", kHealthHelp);
  std::optional<absl::Duration> timeout = Timeout(opt.timeout);
  if (!timeout) return Usage("--timeout_s needs a positive number", kHealthHelp);
  opt.timeout = *timeout;
  absl::StatusOr<std::string> out = refit::RunHealthCommand(opt);
  if (!out.ok()) {
    std::cerr << "refit health: " << out.status().ToString() << "\n";
    return 1;
  }
  std::cout << *out;
  return 0;
}

int RunBuffers(const std::vector<std::string>& args) {
  if (int rc = ParseSubcommand("buffers", args,
                               {"model", "trainer", "engine", "rank", "json"},
                               kBuffersHelp);
      rc >= 0) {
    return rc;
  }
  refit::BuffersCommandOptions opt;
  opt.model = absl::GetFlag(FLAGS_model);
  opt.trainer = absl::GetFlag(FLAGS_trainer);
  opt.engine = absl::GetFlag(FLAGS_engine);
  if (opt.model.empty() || opt.trainer.empty() == opt.engine.empty()) {
    return Usage("--model and one of --trainer / --engine are required",
                 kBuffersHelp);
  }
  opt.rank = absl::GetFlag(FLAGS_rank);
  if (opt.rank < -1) return Usage("--rank needs a non-negative integer", kBuffersHelp);
  opt.json = absl::GetFlag(FLAGS_json);
  absl::StatusOr<std::string> out = refit::RunBuffersCommand(opt);
  if (!out.ok()) {
    std::cerr << "refit buffers: error: " << out.status().message() << "\n";
    return 1;
  }
  std::cout << *out;
  return 0;
}

// `refit models`: every built-in model name, one per line.
int RunModels(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] != "--help" && args[0] != "-h") {
    return Usage(absl::StrCat("refit models takes no arguments, got '", args[0], "'"),
                 kTopHelp);
  }
  for (const std::string& name : refit::BuiltinModelNames()) std::cout << name << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The commands that build layouts and plans run with huge pages (see
  // common/huge_pages.h); the others are not worth a second start-up
  // (~20 ms).
  if (argc >= 2 && (std::strcmp(argv[1], "plan") == 0 ||
                    std::strcmp(argv[1], "simulate") == 0)) {
    refit::ReexecWithHugePages(argv);
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return Usage("missing command", kTopHelp);
  const std::string cmd = args[0];
  args.erase(args.begin());
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << kTopHelp;
    return 0;
  }
  if (cmd == "plan") return RunPlan(args);
  if (cmd == "status") return RunStatus(args);
  if (cmd == "health") return RunHealth(args);
  if (cmd == "simulate") return RunSimulate(args);
  if (cmd == "buffers") return RunBuffers(args);
  if (cmd == "models") return RunModels(args);
  return Usage(absl::StrCat("unknown command '", cmd, "'"), kTopHelp);
}
