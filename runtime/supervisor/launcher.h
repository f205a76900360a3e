// runtime/supervisor/launcher.h — the mpirun (or srun) command line for one incarnation of a job.
//
// Owns: MpirunSpec (what the supervisor wants launched), ParseHostfile (an Open MPI hostfile,
// checked before launch) and BuildMpirunCommand (spec -> argv + environment additions). Pure:
// nothing here starts a process; ProcessSession (process_session.h) runs the result.
//
// The argv is
//   <mpirun> -np N [--hostfile F] --mca pml ob1 --mca btl self,vader
//            --mca odls_base_sigkill_timeout 0 --output-filename LOG_DIR <program> <args...>
// and with a hostfile (ranks on other hosts) `--mca btl self,vader,tcp` (TCP between hosts,
// shared memory within one) and `-x NAME` for every variable of the environment additions,
// so remote ranks get them too (interfaces: Open MPI's btl_tcp_if_include /
// oob_tcp_if_include, e.g. OMPI_MCA_btl_tcp_if_include=eth0 in the caller's environment),
// and the environment additions are the ones Open MPI needs on such a machine: run as root,
// oversubscription and yield_when_idle always; OPENBLAS_NUM_THREADS=1 when there is more than
// one rank; OMP_NUM_THREADS=1 when ranks outnumber the cores. Then MpirunSpec::extra_env
// (names non-empty, without '='), which may override any of them. Why each flag:
// odls_base_sigkill_timeout 0 makes mpirun kill the surviving ranks in ~0.06 s when one dies
// (else ~1 s); --output-filename keeps per-rank logs even when mpirun itself is SIGKILLed.
//
// Inside a Slurm allocation the engine may be srun instead:
//   <srun> --mpi=pmix --kill-on-bad-exit=1 --distribution=arbitrary -n N <program> <args...>
// with SLURM_HOSTFILE naming a file of one host per rank (MpirunCommand::task_hosts, placed
// by slot exactly as mpirun places them, so a rank lands on the same host either way), the
// transport as OMPI_MCA_pml / OMPI_MCA_btl variables (no mpirun to take --mca), and srun's
// default --export=ALL carrying every variable to every host. srun has no per-rank files:
// the ranks' output is srun's own (rank 0's progress lines, every rank's errors).
//
// Invariants: a command is only built from a spec that validates — num_ranks >= 1, program
// and log_dir non-empty, and a hostfile (when given) that exists, parses, and offers at least
// num_ranks slots. "A hostfile that cannot work fails before launch": errors name file:line.
// Thread-safety: free functions over values; safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/core/status.h"

namespace tessera {

using EnvList = std::vector<std::pair<std::string, std::string>>;  // (name, value), in order

enum class LaunchEngine { kMpirun, kSrun };

struct MpirunSpec {
  // Number of ranks (mpirun -np). Range: >= 1.
  int num_ranks = 1;
  // Open MPI hostfile ("host slots=K" lines); empty: every rank on this machine.
  std::string hostfile;
  // Directory for per-rank logs (--output-filename); mpirun writes
  // LOG_DIR/1/rank.<r>/{stdout,stderr}. Required.
  std::string log_dir;
  // The rank program and its arguments. Required (program).
  std::string program;
  std::vector<std::string> program_args;
  // Environment entries added after the platform ones (the supervisor's control address and
  // per-run secret, for instance); a name given here wins over a platform default.
  EnvList extra_env;
  // Cores available to the ranks on one machine; decides whether ranks share cores.
  // 0 (default): std::thread::hardware_concurrency().
  int cores = 0;
  // The launcher binary; looked up in PATH when it has no '/'. Default "mpirun".
  std::string mpirun = "mpirun";
  // srun instead (inside a Slurm allocation; needs a hostfile: the allocation's hosts).
  LaunchEngine engine = LaunchEngine::kMpirun;
  std::string srun = "srun";
};

struct MpirunCommand {
  std::vector<std::string> argv;  // argv[0] is spec.mpirun (or spec.srun)
  EnvList env;                    // additions to the supervisor's own environment
  // With a hostfile: the host of each rank, one per line (by slot, Open MPI's default
  // mapping), for LOG_DIR/tasks. srun needs that file (SLURM_HOSTFILE in env names it): the
  // caller writes it before starting the command. Empty without a hostfile.
  std::string task_hosts;
};

struct HostfileEntry {
  std::string host;
  int slots = 0;       // >= 1
  int line = 0;        // 1-based line in the file, for messages
};

// Parses an Open MPI hostfile restricted to what Tessera can check: one "HOST slots=K" per
// line (K >= 1, optional "max_slots=M" with M >= K), '#' comments and blank lines ignored.
// kNotFound: missing file; kIoError: unreadable; kInvalidArgument "FILE:LINE: why" for a line
// that does not parse, a duplicate host, or a file with no host at all.
Result<std::vector<HostfileEntry>> ParseHostfile(const std::string& path);
// The same rules over a hostfile's text already in memory; `path` names it in messages.
Result<std::vector<HostfileEntry>> ParseHostfileText(std::string_view text,
                                                     const std::string& path);

// Validates `spec` (see the contract above) and builds the command. kInvalidArgument for a
// bad spec or a hostfile with fewer slots than ranks ("FILE: 3 slots for 4 ranks"), plus the
// errors of ParseHostfile.
// srun: kInvalidArgument without a hostfile.
Result<MpirunCommand> BuildMpirunCommand(const MpirunSpec& spec);

// The hosts of a Slurm allocation as hostfile entries, from the environment Slurm gives a job:
// SLURM_JOB_NODELIST expanded (`tess[01-03,7]` -> tess01 tess02 tess03 tess7) and slots from
// SLURM_TASKS_PER_NODE (`2(x3),1`). kNotFound outside an allocation; kInvalidArgument for a
// list that does not parse or whose counts disagree.
Result<std::vector<HostfileEntry>> SlurmAllocationHosts(std::string_view nodelist,
                                                        std::string_view tasks_per_node);
// An Open MPI hostfile's text for `hosts`.
std::string HostfileText(const std::vector<HostfileEntry>& hosts);

}  // namespace tessera
