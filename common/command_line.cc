#include "common/command_line.h"

#include <climits>
#include <cstdlib>
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"

namespace refit {
namespace {

bool Accepted(absl::Span<const std::string> accepted, absl::string_view name) {
  return name == "flagfile" ||
         std::find(accepted.begin(), accepted.end(), name) != accepted.end();
}

// Flag files nest at most this deep (a longer chain is refused like a
// cycle: Abseil would follow it without end).
constexpr int kMaxFlagfileDepth = 32;
// Bytes of a flag file read to look for nested --flagfile lines.
constexpr std::streamsize kMaxFlagfileBytes = 1 << 20;

// Returns the values of "--flagfile=a,b" words in `line`s of a flag file.
std::vector<std::string> NestedFlagfiles(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  std::string line;
  std::streamsize read = 0;
  while (read < kMaxFlagfileBytes && std::getline(in, line)) {
    read += static_cast<std::streamsize>(line.size()) + 1;
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&l, "--flagfile=") && !absl::ConsumePrefix(&l, "-flagfile=")) {
      continue;
    }
    for (absl::string_view v : absl::StrSplit(l, ',', absl::SkipEmpty())) {
      out.emplace_back(v);
    }
  }
  return out;
}

// Follows the flag files named by `path` (depth first); INVALID_ARGUMENT
// naming the chain when one names itself or an ancestor, or the chain is
// deeper than kMaxFlagfileDepth. Unreadable files are left to Abseil.
absl::Status CheckFlagfile(const std::string& path, std::vector<std::string>* chain) {
  char resolved[PATH_MAX];
  const std::string key = realpath(path.c_str(), resolved) != nullptr ? resolved : path;
  chain->push_back(path);
  for (size_t i = 0; i + 1 < chain->size(); ++i) {
    char r[PATH_MAX];
    const std::string k = realpath((*chain)[i].c_str(), r) != nullptr ? r : (*chain)[i];
    if (k == key) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--flagfile: ", path, " includes itself (", absl::StrJoin(*chain, " -> "), ")"));
    }
  }
  if (static_cast<int>(chain->size()) > kMaxFlagfileDepth) {
    return absl::InvalidArgumentError(absl::StrCat("--flagfile: nested more than ",
                                                   kMaxFlagfileDepth, " deep (",
                                                   absl::StrJoin(*chain, " -> "), ")"));
  }
  for (const std::string& nested : NestedFlagfiles(path)) {
    if (absl::Status s = CheckFlagfile(nested, chain); !s.ok()) return s;
  }
  chain->pop_back();
  return absl::OkStatus();
}

// The edit distance between `a` and `b`: insertions, deletions,
// substitutions and swaps of two neighbouring letters ("delat" is one swap
// from "delta"), each costing one (optimal string alignment).
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] != b[j - 1] ? 1 : 0)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// " (did you mean --x?)" for the accepted flag nearest to `name` (a third
// of its letters or fewer changed, or one holding the other); "" when none
// is that near.
std::string DidYouMean(absl::Span<const std::string> accepted, absl::string_view name) {
  std::string best;
  size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
  for (const std::string& a : accepted) {
    size_t d = EditDistance(name, a);
    if (name.size() >= 3 && (absl::StrContains(a, name) || absl::StrContains(name, a))) {
      d = std::min<size_t>(d, 1);
    }
    if (d < best_d) {
      best_d = d;
      best = a;
    }
  }
  return best.empty() ? "" : absl::StrCat(" (did you mean --", best, "?)");
}

// INVALID_ARGUMENT naming the flag when `value` is not one of its type (a
// number for a numeric flag, true/false for a boolean): Abseil would exit
// the process with code 1 instead. Sets the flag when it is.
absl::Status CheckValue(absl::string_view name, absl::string_view value) {
  absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
  if (f == nullptr || name == "flagfile") return absl::OkStatus();
  std::string error;
  if (f->ParseFrom(value, &error)) return absl::OkStatus();
  const char* want = f->IsOfType<bool>()                                   ? "true or false"
                     : f->IsOfType<double>() || f->IsOfType<float>()      ? "a number"
                     : f->IsOfType<std::string>()                         ? "a string"
                                                                          : "an integer";
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, "=", value, ": not ", want, " (", error, ")"));
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
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name,
                                                     DidYouMean(accepted, name), " (",
                                                     program, " --help lists the flags)"));
    }
    if (!has_value && !IsBool(name)) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " needs a value"));
      }
      ++i;
      if (absl::Status s = CheckValue(name, args[i]); !s.ok()) return s;
    } else if (has_value) {
      if (absl::Status s = CheckValue(name, a.substr(eq + 1)); !s.ok()) return s;
    }
    if (name == "flagfile") {
      const std::string value = has_value ? std::string(a.substr(eq + 1)) : args[i];
      for (absl::string_view f : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        std::vector<std::string> chain;
        if (absl::Status s = CheckFlagfile(std::string(f), &chain); !s.ok()) return s;
      }
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
