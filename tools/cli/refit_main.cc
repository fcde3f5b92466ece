// The `refit` command-line tool: flag parsing and subcommand dispatch only.
// Subcommands live in libraries beside this file (plan_command.h).
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/cli/plan_command.h"

namespace {

constexpr char kTopHelp[] =
    R"(refit: plan and inspect weight resharding from an RL trainer to an inference engine.

usage: refit <command> [flags]

commands:
  plan       dry-run: build the transfer plan and print what it moves
  help       this text (also: refit --help, refit <command> --help)

example:
  refit plan --model deepseek-v3 --trainer megatron:tp=1,pp=16,ep=16,dp=1 \
             --engine vllm:tp=32,dp=8
)";

constexpr char kPlanHelp[] =
    R"(refit plan: build the static transfer plan for one refit and summarize it.

usage: refit plan --model NAME|config.json --trainer SPEC --engine SPEC [flags]

flags:
  --model NAME|PATH      built-in model (qwen3-8b, qwen3-30b-a3b, llama-3.1-70b,
                         deepseek-v3, kimi-k2, nemotron-h-8b) or an HF config.json
                         e.g. --model deepseek-v3
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
  --link nvlink=G,net=G  per-GPU bandwidth in GB/s of intra-host (NVLink) and
                         inter-host (network) links, default nvlink=370,net=50
  --staging-mib M        staging budget per rank in MiB, default 512
  --lanes L              concurrent lanes (rounds in flight), default 2
  --json                 print the summary as one JSON document
  --heatmap FILE.svg     also write an SVG heat map of bytes from trainer hosts
                         (or PP stages) to engine hosts. e.g. --heatmap plan.svg

The predicted refit time is the slowest rank's time, each message's bytes going
over the link class it uses. An invalid layout or plan prints every error
(tensor, ranks) and exits 1; a usage error exits 2.

example:
  refit plan --model kimi-k2 --trainer megatron:tp=1,pp=16,ep=16,dp=1 \
             --engine vllm:tp=16,dp=8 --json
)";

// Parses "--name value", "--name=value" and boolean "--name". Returns false
// (with a message in *err) on an unknown flag or a missing value.
bool ParseFlags(const std::vector<std::string>& args,
                const std::map<std::string, bool>& known,  // name -> takes value
                std::map<std::string, std::string>* out, std::string* err) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
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
      {"json", false},      {"heatmap", true},     {"help", false}};
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
  opt.heatmap = f["heatmap"];
  absl::StatusOr<std::string> out = refit::RunPlanCommand(opt);
  if (!out.ok()) {
    std::cerr << "refit plan: error: " << out.status().message() << "\n";
    return 1;
  }
  std::cout << *out;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return Usage("missing command", kTopHelp);
  const std::string cmd = args[0];
  args.erase(args.begin());
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << kTopHelp;
    return 0;
  }
  if (cmd == "plan") return RunPlan(args);
  return Usage(absl::StrCat("unknown command '", cmd, "'"), kTopHelp);
}
