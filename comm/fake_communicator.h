// comm/fake_communicator.h — an in-process backend: N ranks as threads sharing one FakeHub.
//
// Owns: the hub where ranks meet (collectives matched by sequence number, Send/Recv by peer pair
// and per-pair number) and a fault plan per rank that hangs or fails its N-th operation. For
// unit tests of anything that talks to a Communicator (timeouts, aborts, desync reports) without
// MPI. Results follow ReduceOrder::kRankOrder semantics for both orders (rank-order fp32
// accumulation), so they are deterministic.
// Ops complete in the thread of the last rank to arrive, under the hub's lock. A mismatch
// between ranks (different op, dtype, size, root or counts at the same sequence number) fails
// the op on every rank with kInternal naming both sides.
// Thread-safety: a hub is shared by all its ranks' threads; each Communicator follows the rules
// of communicator.h (one issuing thread per rank).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "comm/communicator.h"

namespace tessera {

struct FakeFault {
  enum class Kind : uint8_t {
    kNone,
    kHang,  // the op never joins: its Work stays pending (until Abort), peers time out
    kFail,  // the op completes at once on this rank with kInternal; peers time out
  };
  Kind kind = Kind::kNone;
  // 1-based index of the faulty operation among all ops this rank issues on the communicator
  // (collectives, Send/Recv, and the all-gather inside Split). 0 = none.
  int64_t op_index = 0;
};

class FakeHub : public std::enable_shared_from_this<FakeHub> {
 public:
  static std::shared_ptr<FakeHub> Create(int size);
  int size() const { return size_; }
  // The communicator of `rank` (each rank exactly once).
  std::unique_ptr<Communicator> Connect(int rank, CommOptions options, FakeFault fault = {});

  // One rank's side of a collective or point-to-point op (used by FakeCommunicator).
  struct Part {
    CommOp op = CommOp::kBarrier;
    ReduceOp reduce = ReduceOp::kSum;
    DType dtype = DType::kF32;
    const void* in = nullptr;
    void* out = nullptr;
    int64_t in_n = 0, out_n = 0;
    int root = 0;
    std::vector<int64_t> send_counts, recv_counts;
    std::shared_ptr<OpState> state;
  };
  void JoinCollective(int rank, uint64_t seq, Part part);
  void JoinPointToPoint(int src, int dst, uint64_t seq, bool is_send, Part part);
  // The hub of the sub-group `color` formed by the split with parent sequence number `seq`.
  std::shared_ptr<FakeHub> SubHub(uint64_t seq, int color, int size);

 private:
  explicit FakeHub(int size) : size_(size) {}
  void RunCollective(std::vector<Part>& parts);

  const int size_;
  std::mutex mu_;
  std::map<uint64_t, std::vector<Part>> collectives_;  // seq -> parts by rank (state set = joined)
  std::map<std::tuple<int, int, uint64_t>, std::pair<Part, Part>> p2p_;  // (src,dst,seq) -> send,recv
  std::map<std::pair<uint64_t, int>, std::shared_ptr<FakeHub>> subhubs_;
};

}  // namespace tessera
