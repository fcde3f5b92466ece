#include "common/command_line.h"

#include <algorithm>
#include <cstdio>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace refit {
namespace {

bool Accepted(absl::Span<const std::string> accepted, absl::string_view name) {
  return name == "flagfile" ||
         std::find(accepted.begin(), accepted.end(), name) != accepted.end();
}

bool IsBool(absl::string_view name) {
  const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
  return f != nullptr && f->IsOfType<bool>();
}

}  // namespace

std::string FlagsHelp(absl::Span<const std::string> names) {
  std::string out;
  for (const std::string& name : names) {
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
    if (f == nullptr) continue;
    std::string def = f->DefaultValue();
    if (f->IsOfType<std::string>()) def = absl::StrCat("\"", def, "\"");
    absl::StrAppend(&out, "  --", name, " (default: ", def, ")\n");
    for (absl::string_view line : absl::StrSplit(f->Help(), '\n')) {
      absl::StrAppend(&out, "      ", line, "\n");
    }
  }
  return out;
}

absl::StatusOr<CommandLineResult> ParseCommandLine(
    const std::string& program, const std::vector<std::string>& args,
    absl::Span<const std::string> accepted, const std::string& usage) {
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view a = args[i];
    if (a == "-h" || a == "--help" || a == "-help" || (i == 0 && a == "help")) {
      std::fputs(usage.c_str(), stdout);
      std::fputs("\nflags:\n", stdout);
      std::fputs(FlagsHelp(accepted).c_str(), stdout);
      std::fputs("  --flagfile (default: \"\")\n"
                 "      read more flags from this file, one --name=value a "
                 "line\n",
                 stdout);
      return CommandLineResult::kHelpShown;
    }
  }
  // Abseil's view of the arguments: names spelled with dashes
  // (--token-file) become the one spelling (--token_file).
  std::vector<std::string> copy = args;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view a = args[i];
    if (!absl::ConsumePrefix(&a, "--") && !absl::ConsumePrefix(&a, "-")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", args[i], "'"));
    }
    const size_t eq = a.find('=');
    const std::string name_text = absl::StrReplaceAll(a.substr(0, eq), {{"-", "_"}});
    absl::string_view name = name_text;
    const bool has_value = eq != absl::string_view::npos;
    copy[i] = absl::StrCat("--", name, has_value ? a.substr(eq) : "");
    if (!Accepted(accepted, name)) {
      absl::string_view positive = name;
      if (!has_value && absl::ConsumePrefix(&positive, "no") &&
          Accepted(accepted, positive) && IsBool(positive)) {
        continue;  // --nojson
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag --", name, " (", program, " --help lists the flags)"));
    }
    if (!has_value && !IsBool(name)) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " needs a value"));
      }
      ++i;
    }
  }
  std::vector<char*> argv;
  std::string prog = program;
  argv.push_back(prog.data());
  for (std::string& s : copy) argv.push_back(s.data());
  argv.push_back(nullptr);
  absl::ParseCommandLine(static_cast<int>(argv.size()) - 1, argv.data());
  return CommandLineResult::kRun;
}

std::vector<std::string> FlagsDefinedIn(const std::string& file_suffix) {
  std::vector<std::string> names;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), file_suffix)) {
      names.emplace_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace refit
