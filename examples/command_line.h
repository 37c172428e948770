// An example's command line: absl flags, with a --help that lists every flag the example has
// (also those its shared headers under examples/ define, which absl's own --help hides under
// --helpfull) and exits 0, as a help request should. It also makes stdout line-buffered: under a
// launcher stdout is a pipe, and a block-buffered line would appear seconds after it was printed.
//
//   int main(int argc, char** argv) {
//     examples::parse_command_line(argc, argv, "distributed MAML on sinusoid regression");
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"

namespace examples {

// Prints `usage` and the flags defined under examples/, by name, with their help and default.
inline void print_help(const char* usage) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->Filename().find("examples/") != std::string::npos) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(), [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  std::printf("%s\n\nflags:\n", usage);
  for (const absl::CommandLineFlag* flag : flags) {
    std::printf("  --%s  %s (default: %s)\n", std::string(flag->Name()).c_str(), flag->Help().c_str(),
                flag->DefaultValue().c_str());
  }
  std::printf("\n--helpfull lists the flags of the libraries too.\n");
}

// Makes stdout line-buffered, then parses the flags in argv (absl::ParseCommandLine); --help,
// -help or -h prints print_help()'s list and exits 0. Call it first in main, before any output.
inline void parse_command_line(int argc, char** argv, const char* usage) {
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  absl::SetProgramUsageMessage(usage);
  for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i) {
    const std::string_view argument = argv[i];
    if (argument == "--help" || argument == "-help" || argument == "-h") {
      print_help(usage);
      std::exit(0);
    }
  }
  absl::ParseCommandLine(argc, argv);
}

}  // namespace examples
