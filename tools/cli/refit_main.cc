// The `refit` command-line tool: flag parsing and subcommand dispatch only.
// Subcommands live in libraries beside this file (plan_command.h).
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/huge_pages.h"
#include "mapping/model_config.h"
#include "tools/cli/buffers_command.h"
#include "tools/cli/plan_command.h"
#include "tools/cli/simulate_command.h"
#include "tools/cli/status_command.h"

namespace {

constexpr char kTopHelp[] =
    R"HELP(refit: plan and inspect weight resharding from an RL trainer to an inference engine.

usage: refit <command> [flags]

commands:
  plan       dry-run: build the transfer plan and print what it moves
  simulate   run a whole refit in one process from a safetensors checkpoint
             and write every trainer and engine rank's buffers
  status     members, plan fingerprint and last rounds of a running refitd
  buffers    the buffers a trainer rank or engine worker gives refit
             (names, local shapes, dtypes, bytes) under its convention
  models     the built-in models (names --model takes)
  help       this text (also: refit -h, refit --help, refit <command> --help)

example:
  refit plan --model deepseek-v3 --trainer megatron:tp=8,pp=16,ep=16,etp=1,dp=2 \
             --engine vllm:tp=32,dp=8
  refit simulate --model tiny-qwen3 --checkpoint ckpt/ \
                 --trainer megatron:tp=2,pp=2 --engine vllm:tp=2,dp=2 --out sim/
  refit status --server 127.0.0.1:50051 --token-file /etc/refit/token
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

flags:
  --model NAME|PATH      built-in model (e.g. tiny-qwen3, tiny-deepseek-v3-fp8;
                         `refit models` lists them all)
                         or an HF config.json. e.g. --model tiny-llama
  --checkpoint PATH      model.safetensors, or a directory holding
                         model.safetensors.index.json (sharded) or
                         model.safetensors. e.g. --checkpoint ./ckpt
  --trainer SPEC         as in `refit plan`, e.g. megatron:tp=2,pp=2,dp=1
  --engine SPEC          as in `refit plan`, e.g. vllm:tp=2,dp=2
  --out DIR              output directory (created). e.g. --out /tmp/sim
  --dtype bf16|fp8       override the config's weight format (default: the
                         config's own). e.g. --dtype bf16
  --staging-mib M        staging budget per rank in MiB, default 512
  --lanes L              concurrent lanes, default 2
  --timeout-s S          deadline for the whole transfer, default 300

A tensor missing from the checkpoint, or whose shape or dtype disagrees with
the config, is an error naming the tensor (exit 1); a usage error exits 2.

example:
  refit simulate --model tiny-qwen3 --checkpoint ckpt/model.safetensors \
                 --trainer megatron:tp=2,pp=2,dp=1 --engine vllm:tp=2,dp=2 \
                 --out /tmp/sim
)HELP";

constexpr char kStatusHelp[] =
    R"HELP(refit status: show what a running refitd knows.

usage: refit status --server HOST:PORT [flags]

Prints the registered members (id, side, job, engine, rank/world, host,
device, parallel coordinates, buffers, heartbeat age), the membership epoch,
the current plan fingerprint (or "(no plan)") and plan error if any, and the
last rounds with their outcome, bytes, seconds and GB/s (GB = 1e9 bytes).

flags:
  --server HOST:PORT     refitd's address, e.g. --server 127.0.0.1:50051
  --token-file FILE      file holding the bearer token refitd requires
                         (refitd --token_file), e.g. --token-file /etc/refit/token
  --timeout-s S          seconds to connect and to answer, default 10.
                         e.g. --timeout-s 3
  --rounds N             newest rounds shown, default 10. e.g. --rounds 50
  --json                 print the status as one JSON document

exit codes: 0 ok, 1 failure (unreachable server, wrong token), 2 usage error.

example:
  refit status --server 127.0.0.1:50051 --token-file token.txt --json
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

flags:
  --model NAME|PATH      built-in model (`refit models` lists them) or an HF
                         config.json, e.g. --model qwen3-8b
  --trainer SPEC         a trainer convention, e.g. megatron:tp=2,pp=2
  --engine SPEC          an engine convention, e.g. vllm:tp=2,dp=1
  --rank R               only rank R (engine: within the replica), default all
  --json                 one JSON array of {rank, buffers: [{name, shape,
                         dtype, bytes}]}

exit codes: 0 ok, 1 failure (unknown model, bad convention, rank outside
the world), 2 usage error.

example:
  refit buffers --model qwen3-8b --engine vllm:tp=2 --rank 1
  refit buffers --model tiny-qwen3-moe --trainer megatron:tp=2,ep=2,etp=1 --json
)HELP";

constexpr char kPlanHelp[] =
    R"HELP(refit plan: build the static transfer plan for one refit and summarize it.

usage: refit plan --model NAME|config.json --trainer SPEC --engine SPEC [flags]

flags:
  --model NAME|PATH      built-in model (`refit models` lists them all) or an HF
                         config.json. e.g. --model deepseek-v3
  --trainer SPEC         trainer layout, e.g. megatron:tp=8,pp=16,ep=16,etp=1,dp=2
                         (optional first=N,last=M: first/last PP stage layer counts;
                         without them layers are split evenly, earlier stages take
                         the extra layer) or fsdp:dp=64
  --engine SPEC          engine layout, e.g. vllm:tp=32,dp=8 or vllm:tp=8,dp=2,ep=16
                         (ep must equal tp*dp; engine rank = dp_rank*TP + tp_rank)
  --dtype bf16|fp8       weight dtype (fp8 = e4m3 + weight_scale_inv blocks),
                         default bf16. e.g. --dtype fp8
  --gpus-per-host N      GPUs per host, default 8. e.g. --gpus-per-host 4
  --colocated            trainer rank r and engine rank r share host r/N (default:
                         separate hosts: trainer ranks on hosts 0..ceil(T/N)-1,
                         engine ranks on the hosts after them)
  --hosts FILE           each rank's host, one line per rank: "trainer RANK HOST"
                         or "engine RANK HOST" (# comments); replaces the two
                         flags above. refitd, given members on those hosts,
                         builds the same plan (same fingerprint)
  --link nvlink=G,net=G  per-GPU bandwidth in GB/s of intra-host (NVLink) and
                         inter-host (network) links, default nvlink=370,net=50
  --staging-mib M        staging budget per rank in MiB, default 512
  --lanes L              concurrent lanes (rounds in flight), default 2
  --json                 print the summary as one JSON document
  --timings              print each step's wall time (config, trainer layout,
                         engine layout, planner and each planner phase,
                         summary) on stderr
  --heatmap FILE.svg     also write an SVG heat map of bytes from trainer hosts
                         to engine hosts, intra-host cells outlined. e.g. --heatmap plan.svg

The plan is placed: for every destination region the planner picks the trainer
replica that keeps the predicted refit time lowest. The predicted refit time is
the slowest rank's time, each message's bytes going over the link class it uses
(a rank's sends, or receives, one after another); the lower bound is what no
choice of replicas beats (each rank's bytes over the best link it could use). An invalid layout or plan prints every error
(tensor, ranks) and exits 1; a usage error exits 2.

example:
  refit plan --model kimi-k2 --trainer megatron:tp=8,pp=16,ep=16,etp=1,dp=2 \
             --engine vllm:tp=16,dp=8 --json
)HELP";

// Parses "--name value", "--name=value" and boolean "--name". Returns false
// (with a message in *err) on an unknown flag or a missing value.
bool ParseFlags(const std::vector<std::string>& args,
                const std::map<std::string, bool>& known,  // name -> takes value
                std::map<std::string, std::string>* out, std::string* err) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i] == "-h" ? std::string("--help") : args[i];
    if (a.rfind("--", 0) != 0) {
      *err = absl::StrCat("unexpected argument '", a, "'");
      return false;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = known.find(name);
    if (it == known.end()) {
      *err = absl::StrCat("unknown flag --", name);
      return false;
    }
    if (it->second && !has_value) {
      if (i + 1 >= args.size()) {
        *err = absl::StrCat("flag --", name, " needs a value");
        return false;
      }
      value = args[++i];
    } else if (!it->second && has_value) {
      *err = absl::StrCat("flag --", name, " takes no value");
      return false;
    }
    (*out)[name] = value;
  }
  return true;
}

int Usage(const std::string& err, const char* help) {
  std::cerr << "refit: " << err << "\n\n" << help;
  return 2;
}

int RunPlan(const std::vector<std::string>& args) {
  std::map<std::string, std::string> f;
  std::string err;
  const std::map<std::string, bool> known = {
      {"model", true},      {"trainer", true},     {"engine", true},
      {"dtype", true},      {"gpus-per-host", true}, {"colocated", false},
      {"link", true},       {"staging-mib", true}, {"lanes", true},
      {"json", false},      {"heatmap", true},     {"help", false},
      {"timings", false},   {"hosts", true}};
  if (!ParseFlags(args, known, &f, &err)) return Usage(err, kPlanHelp);
  if (f.count("help")) {
    std::cout << kPlanHelp;
    return 0;
  }
  refit::PlanCommandOptions opt;
  opt.model = f["model"];
  opt.trainer = f["trainer"];
  opt.engine = f["engine"];
  if (opt.model.empty() || opt.trainer.empty() || opt.engine.empty()) {
    return Usage("--model, --trainer and --engine are required", kPlanHelp);
  }
  if (f.count("dtype")) opt.dtype = f["dtype"];
  if (f.count("gpus-per-host") &&
      (!absl::SimpleAtoi(f["gpus-per-host"], &opt.link.gpus_per_host) ||
       opt.link.gpus_per_host < 1)) {
    return Usage("--gpus-per-host needs a positive integer", kPlanHelp);
  }
  opt.link.colocated = f.count("colocated") > 0;
  opt.hosts_file = f["hosts"];
  if (f.count("link")) {
    absl::Status st = refit::ParseLinkSpec(f["link"], &opt.link);
    if (!st.ok()) return Usage(std::string(st.message()), kPlanHelp);
  }
  if (f.count("staging-mib") &&
      (!absl::SimpleAtoi(f["staging-mib"], &opt.staging_mib) ||
       opt.staging_mib < 1)) {
    return Usage("--staging-mib needs a positive integer", kPlanHelp);
  }
  if (f.count("lanes") &&
      (!absl::SimpleAtoi(f["lanes"], &opt.lanes) || opt.lanes < 1)) {
    return Usage("--lanes needs a positive integer", kPlanHelp);
  }
  opt.json = f.count("json") > 0;
  opt.timings = f.count("timings") > 0;
  opt.heatmap = f["heatmap"];
  absl::StatusOr<std::string> out = refit::RunPlanCommand(opt);
  if (!out.ok()) {
    std::cerr << "refit plan: error: " << out.status().message() << "\n";
    return 1;
  }
  std::cout << *out;
  return 0;
}

int RunSimulate(const std::vector<std::string>& args) {
  std::map<std::string, std::string> f;
  std::string err;
  const std::map<std::string, bool> known = {
      {"model", true},       {"checkpoint", true},  {"trainer", true},
      {"engine", true},      {"out", true},         {"dtype", true},
      {"staging-mib", true}, {"lanes", true},       {"timeout-s", true},
      {"help", false}};
  if (!ParseFlags(args, known, &f, &err)) return Usage(err, kSimulateHelp);
  if (f.count("help")) {
    std::cout << kSimulateHelp;
    return 0;
  }
  refit::SimulateCommandOptions opt;
  opt.model = f["model"];
  opt.checkpoint = f["checkpoint"];
  opt.trainer = f["trainer"];
  opt.engine = f["engine"];
  opt.out = f["out"];
  opt.dtype = f["dtype"];
  if (opt.model.empty() || opt.checkpoint.empty() || opt.trainer.empty() ||
      opt.engine.empty() || opt.out.empty()) {
    return Usage(
        "--model, --checkpoint, --trainer, --engine and --out are required",
        kSimulateHelp);
  }
  if (f.count("staging-mib") &&
      (!absl::SimpleAtoi(f["staging-mib"], &opt.staging_mib) ||
       opt.staging_mib < 1)) {
    return Usage("--staging-mib needs a positive integer", kSimulateHelp);
  }
  if (f.count("lanes") &&
      (!absl::SimpleAtoi(f["lanes"], &opt.lanes) || opt.lanes < 1)) {
    return Usage("--lanes needs a positive integer", kSimulateHelp);
  }
  if (f.count("timeout-s")) {
    double s = 0;
    if (!absl::SimpleAtod(f["timeout-s"], &s) || !(s > 0)) {
      return Usage("--timeout-s needs a positive number", kSimulateHelp);
    }
    opt.timeout = absl::Seconds(s);
  }
  absl::StatusOr<std::string> out = refit::RunSimulateCommand(opt);
  if (!out.ok()) {
    std::cerr << "refit simulate: error: " << out.status().message() << "\n";
    return 1;
  }
  std::cout << *out;
  return 0;
}

int RunStatus(const std::vector<std::string>& args) {
  std::map<std::string, std::string> f;
  std::string err;
  const std::map<std::string, bool> known = {
      {"server", true}, {"token-file", true}, {"timeout-s", true},
      {"rounds", true}, {"json", false},      {"help", false}};
  if (!ParseFlags(args, known, &f, &err)) return Usage(err, kStatusHelp);
  if (f.count("help")) {
    std::cout << kStatusHelp;
    return 0;
  }
  refit::StatusCommandOptions opt;
  opt.server = f["server"];
  if (opt.server.empty()) return Usage("--server is required", kStatusHelp);
  opt.token_file = f["token-file"];
  if (f.count("timeout-s")) {
    double s = 0;
    if (!absl::SimpleAtod(f["timeout-s"], &s) || !(s > 0)) {
      return Usage("--timeout-s needs a positive number", kStatusHelp);
    }
    opt.timeout = absl::Seconds(s);
  }
  if (f.count("rounds") &&
      (!absl::SimpleAtoi(f["rounds"], &opt.rounds) || opt.rounds < 0)) {
    return Usage("--rounds needs a non-negative integer", kStatusHelp);
  }
  opt.json = f.count("json") > 0;
  absl::StatusOr<std::string> out = refit::RunStatusCommand(opt);
  if (!out.ok()) {
    std::cerr << "refit status: error: " << out.status().ToString() << "\n";
    return 1;
  }
  std::cout << *out;
  return 0;
}

int RunBuffers(const std::vector<std::string>& args) {
  std::map<std::string, std::string> f;
  std::string err;
  const std::map<std::string, bool> known = {
      {"model", true}, {"trainer", true}, {"engine", true},
      {"rank", true},  {"json", false},   {"help", false}};
  if (!ParseFlags(args, known, &f, &err)) return Usage(err, kBuffersHelp);
  if (f.count("help")) {
    std::cout << kBuffersHelp;
    return 0;
  }
  refit::BuffersCommandOptions opt;
  opt.model = f["model"];
  opt.trainer = f["trainer"];
  opt.engine = f["engine"];
  if (opt.model.empty() || opt.trainer.empty() == opt.engine.empty()) {
    return Usage("--model and one of --trainer / --engine are required",
                 kBuffersHelp);
  }
  if (f.count("rank") && (!absl::SimpleAtoi(f["rank"], &opt.rank) || opt.rank < 0)) {
    return Usage("--rank needs a non-negative integer", kBuffersHelp);
  }
  opt.json = f.count("json") > 0;
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
  if (cmd == "simulate") return RunSimulate(args);
  if (cmd == "buffers") return RunBuffers(args);
  if (cmd == "models") return RunModels(args);
  return Usage(absl::StrCat("unknown command '", cmd, "'"), kTopHelp);
}
