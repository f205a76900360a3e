// tools/config_command.h — what the commands that take a CONFIG (train, eval, export,
// validate) share: loading it with --set overrides, and printing a failure with the exit code
// its phase gives (runtime/core/exit_codes.h).
#pragma once

#include <optional>
#include <string>

#include "runtime/core/exit_codes.h"
#include "runtime/train/config.h"
#include "tools/args.h"

namespace tessera::cli {

// Prints "tessera COMMAND: STATUS" to stderr; returns ExitCodeFor(s, phase).
int Fail(const std::string& command, const Status& s, ExitPhase phase);
// Prints the status to stderr; returns kExitUsage.
int FailUsage(const std::string& command, const Status& s);
// A command line that does not name exactly one CONFIG: a usage error (exit 2), not a config.
std::optional<Status> PositionalError(const ParsedArgs& p, const std::string& command);
// Loads the config named by the single positional argument, with --set overrides (and
// --strict-env); under tessera launch, with what the supervisor passes in the environment.
Result<Config> LoadFromArgs(const ParsedArgs& p);

}  // namespace tessera::cli
