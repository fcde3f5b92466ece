// Command-line parsing for refit's programs, over Abseil flags: one
// spelling (--snake_case, "--name=value" or "--name value"; a name written
// with dashes, --token-file, is read as --token_file), --flagfile for a
// config file, and a help text generated from the flags' own definitions.
// A program (or a subcommand) names the flags it accepts; any other flag is
// a usage error, so programs with subcommands can keep their flags apart.
#ifndef REFIT_COMMON_COMMAND_LINE_H_
#define REFIT_COMMON_COMMAND_LINE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace refit {

// What ParseCommandLine did.
enum class CommandLineResult {
  kRun,       // flags set; the program goes on
  kHelpShown  // -h / --help / help: the help was printed on stdout
};

// Returns the help of the named flags, one entry each:
//   "  --name (default: D)\n      help text\n".
// Names that are not defined flags are skipped.
std::string FlagsHelp(absl::Span<const std::string> names);

// Parses `args` (the arguments after the program or subcommand word) into
// the Abseil flags among `accepted` (plus --flagfile). On -h, --help or a
// lone "help" prints `usage` followed by FlagsHelp(accepted) on stdout and
// returns kHelpShown. Fails with INVALID_ARGUMENT (naming the argument) on
// an unknown flag (suggesting the nearest accepted one), a positional
// argument, a flag missing its value, or a value not of the flag's type
// (--delta=2%, --lanes=two);
// a --flagfile that names itself, directly or through others (a -> b -> a),
// or nests more than 32 deep (the chain is named; Abseil would loop);
// a value of the wrong type inside a --flagfile, or an unreadable
// --flagfile, is reported by Abseil, which exits the process with code 1.
// `program` is what Abseil's messages call the program.
absl::StatusOr<CommandLineResult> ParseCommandLine(
    const std::string& program, const std::vector<std::string>& args,
    absl::Span<const std::string> accepted, const std::string& usage);

// Returns the names of every flag defined in source files whose path ends
// with `file_suffix` (for example "server/refitd_main.cc"), sorted.
std::vector<std::string> FlagsDefinedIn(const std::string& file_suffix);

}  // namespace refit

#endif  // REFIT_COMMON_COMMAND_LINE_H_
