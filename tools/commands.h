// tools/commands.h — the subcommands of the `tessera` CLI. Each takes the arguments after its
// own name and returns the process exit code (runtime/core/exit_codes.h). Each prints its own
// --help. Only tools/ parses argv; everything below it takes typed values.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/status.h"

namespace tessera::cli {

using Args = std::vector<std::string>;

int RunTrain(const Args& args);
int RunLaunch(const Args& args);
int RunChaos(const Args& args);
int RunEval(const Args& args);
int RunExport(const Args& args);
int RunData(const Args& args);
int RunCkpt(const Args& args);
int RunBench(const Args& args);
int RunEnv(const Args& args);
int RunInspect(const Args& args);
int RunValidate(const Args& args);
int RunPlan(const Args& args);

// True if args contain -h or --help.
bool WantsHelp(const Args& args);

// This tessera binary's path (/proc/self/exe), for commands that start more of it (launch,
// chaos, bench offload); `command` names the caller in the error.
Result<std::string> SelfPath(const std::string& command);

}  // namespace tessera::cli
