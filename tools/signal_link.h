// tools/signal_link.h — a standalone `tessera train`'s RunLink (runtime/train/run_link.h):
// preemption by signal, as Slurm, Kubernetes and a user's Ctrl-C deliver it, without a
// supervisor.
//
//   SIGTERM, SIGINT  stop: at the next step boundary the ranks agree, save a checkpoint (when
//                    checkpoint.dir is set), wait for its commit and exit 7 (kExitStopped).
//   a second one     stop at once: the default action of that signal (the process ends
//                    by it, nothing more is written; the newest committed checkpoint stands).
//   SIGUSR1          checkpoint now, at the next step boundary, and go on training.
// Under mpirun every rank installs the handlers; the trainer's agreement (a max-reduction of
// the request flags at each step boundary) makes one rank's signal every rank's. Under
// `tessera launch` this link is not used: the supervisor owns preemption (it sends stop over
// the control plane, and SIGTERM keeps its default meaning for the ranks it tears down).
// Thread-safety: the handlers only touch lock-free atomics (async-signal-safe); the RunLink
// calls come from the training thread. One SignalLink at a time per process.
#pragma once

#include <memory>
#include <string>

#include "runtime/train/run_link.h"

namespace tessera {

class SignalLink final : public RunLink {
 public:
  // Installs the handlers; the destructor restores the previous dispositions.
  static std::unique_ptr<SignalLink> Install();
  ~SignalLink() override;
  SignalLink(const SignalLink&) = delete;
  SignalLink& operator=(const SignalLink&) = delete;

  void SetStep(int64_t) override {}
  void SetPhase(TrainPhase) override {}
  bool TakeCheckpointRequest() override;  // a SIGUSR1 arrived since the last call
  bool StopRequested() override;          // a SIGTERM or SIGINT arrived (sticky)
  CatalogSink* catalog() override { return nullptr; }  // the coordinator writes its own
  // "SIGTERM" / "SIGINT" / "SIGUSR1", or "another rank's signal" when only a peer got one.
  std::string RequestSource() const override;

 private:
  SignalLink() = default;
};

}  // namespace tessera
