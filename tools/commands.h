// tools/commands.h — the subcommands of the `tessera` CLI. Each takes the arguments after its
// own name and returns the process exit code (runtime/core/exit_codes.h). Each prints its own
// --help. Only tools/ parses argv; everything below it takes typed values.
#pragma once

#include <string>
#include <vector>

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

// True if args contain -h or --help.
bool WantsHelp(const Args& args);

}  // namespace tessera::cli
