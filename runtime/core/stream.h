// runtime/core/stream.h — handles of a device's ordered queues of work (streams) and of points
// in them (events), shared by the compute backends (runtime/kernels/backend.h) and the
// communicators' Work (comm/communicator.h), so that a device backend can overlap copies,
// compute and communication: a copy or a collective runs on its own stream, and the stream
// that consumes its result waits on an event recorded after it, not on the host.
//
// A handle is a plain value: what it names belongs to the backend that made it, which alone
// interprets it. The CPU runs every operation to completion on the calling thread, so its
// streams and events are the null handle and every wait is already satisfied.
// Thread-safety: values; see the owning backend for what may be called from which thread.
#pragma once

#include <cstdint>

namespace tessera {

// An ordered queue of work on one device. The null stream is the device's default queue
// (on CPU: the calling thread, the only one there is).
struct Stream {
  uintptr_t handle = 0;
  bool is_default() const { return handle == 0; }
  bool operator==(const Stream&) const = default;
};

// A point in a stream: everything enqueued on it before the event was recorded. The null
// event is complete from the start (what a CPU backend records).
struct Event {
  uintptr_t handle = 0;
  bool is_null() const { return handle == 0; }
  bool operator==(const Event&) const = default;
};

}  // namespace tessera
