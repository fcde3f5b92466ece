// The flags of the netns tools (testing/netns/*_main.cc): every argument
// of the form --name=value or --name, by name.
#ifndef REFIT_TESTING_NETNS_DASH_FLAGS_H_
#define REFIT_TESTING_NETNS_DASH_FLAGS_H_

#include <map>
#include <string>

namespace refit {

// Returns argv[1..argc)'s --name=value arguments as name -> value ("" for
// a bare --name; the last one wins); other arguments are skipped. Never
// fails.
std::map<std::string, std::string> DashFlags(int argc, char** argv);

}  // namespace refit

#endif  // REFIT_TESTING_NETNS_DASH_FLAGS_H_
