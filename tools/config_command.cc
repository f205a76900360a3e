// tools/config_command.cc — the helpers of config_command.h.
#include "tools/config_command.h"

#include <cstdio>
#include <cstdlib>

#include "runtime/supervisor/rank_env.h"

namespace tessera::cli {

// The phase decides the exit code (exit_codes.h, ExitPhase): a rejected config or input is
// final (do not restart), an I/O failure while running may not be.
int Fail(const std::string& command, const Status& s, ExitPhase phase) {
  std::fprintf(stderr, "tessera %s: %s\n", command.c_str(), s.ToString().c_str());
  return ExitCodeFor(s, phase);
}

int FailUsage(const std::string& command, const Status& s) {
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  return kExitUsage;
}

std::optional<Status> PositionalError(const ParsedArgs& p, const std::string& command) {
  if (p.positional.size() == 1) return std::nullopt;
  return InvalidArgument("tessera " + command + ": expected exactly one CONFIG file, got " +
                         std::to_string(p.positional.size()) + " (see tessera " + command +
                         " --help)");
}

// Loads the config named by the single positional argument, with --set overrides.
// Under tessera launch, after a failure, the supervisor's MTBF measurement comes along for
// checkpoint.interval: auto, and its control address for the memory tier (the address the
// other hosts reach this one at is the one that routes there).
Result<Config> LoadFromArgs(const ParsedArgs& p) {
  std::vector<std::string> sets = p.All("--set");
  if (p.Has("--strict-env")) sets.push_back("train.strict_env=true");
  ASSIGN_OR_RETURN(Config config, LoadConfig(p.positional[0], sets));
  if (const char* v = std::getenv(kEnvMeasuredMtbf)) config.checkpoint.measured_mtbf_s = std::atof(v);
  if (const char* v = std::getenv(kEnvControlAddress)) config.checkpoint.route_toward = v;
  return config;
}

}  // namespace tessera::cli
