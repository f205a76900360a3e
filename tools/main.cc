// tools/main.cc — `tessera`: dispatches to the subcommands in tools/cmd_*.cc.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "comm/mpi.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/float_mode.h"
#include "tools/commands.h"

namespace tessera::cli {
namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const Args&);
};

const Command kCommands[] = {
    {"train", "train a model from a YAML config (tessera train configs/tiny.yaml)", RunTrain},
    {"launch", "train under the supervisor: restarts failed ranks from the last checkpoint",
     RunLaunch},
    {"chaos", "inject faults into a supervised run and check it against a fault-free one",
     RunChaos},
    {"eval", "print the mean loss of weights on held-out data", RunEval},
    {"export", "write weights with Hugging Face names: one safetensors file or a model directory",
     RunExport},
    {"data",
     "prepare data: 'tessera data tokenize --input FILE... --out DIR', 'tessera data index DIR'",
     RunData},
    {"ckpt", "inspect checkpoints: 'tessera ckpt ls|verify|export|gc DIR'", RunCkpt},
    {"bench", "measure step time, tokens/s and MFU against this machine's sgemm peak", RunBench},
    {"inspect", "what Tessera makes of a Hugging Face model directory (config.json, weights)",
     RunInspect},
    {"validate", "every layer's output on a fixed input, compared with an independent implementation",
     RunValidate},
    {"plan", "the fastest layout of a model on a cluster that fits, with memory by kind and step time",
     RunPlan},
    {"env", "print the environment fingerprint (compiler, libraries, CPU, git commit)", RunEnv},
};

void PrintUsage(FILE* out) {
  std::fprintf(out,
               "tessera — a training runtime for transformer models that keeps training through "
               "failures\n\nusage: tessera <command> [args...]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\nRun 'tessera <command> --help' for the command's own options.\n");
}

}  // namespace

bool WantsHelp(const Args& args) {
  for (const auto& a : args) {
    if (a == "-h" || a == "--help") return true;
  }
  return false;
}

Result<std::string> SelfPath(const std::string& command) {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return IoError(command + ": cannot find the tessera binary (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace tessera::cli

int main(int argc, char** argv) {
  using namespace tessera::cli;
  // Before any thread exists, so that every thread of the process starts in this mode (a new
  // thread copies its creator's): the OpenMP pool, the communicators' progress threads, the
  // checkpoint writer. Kernels would also get it from cpu::SetNumThreads; the communicators'
  // reductions only get it here. See runtime/core/float_mode.h.
  tessera::SetFlushSubnormals(true);
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? tessera::kExitUsage : tessera::kExitOk;
  }
  Args args(argv + 2, argv + argc);
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    // Expected failures are Status values; this catches what slips through from the standard
    // library (bad_alloc on a huge input, filesystem errors) so no input ends in a core dump.
    try {
      return c.run(args);
    } catch (const std::exception& e) {
      // Through AbortJob: in a multi-rank job one rank must not leave its peers waiting in a
      // collective until their timeout; without MPI it simply exits with the code.
      tessera::AbortJob(tessera::Internal(std::string("tessera ") + c.name + ": " + e.what()),
                        tessera::kExitRestartable);
    }
  }
  std::fprintf(stderr, "tessera: unknown command '%s'\n\n", argv[1]);
  PrintUsage(stderr);
  return tessera::kExitUsage;
}
