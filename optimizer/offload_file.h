// optimizer/offload_file.h — the disk ("NVMe") tier of an optimizer's state: a few fp32 streams
// of equal length (AdamW's m and v, the fp32 master weights under mixed precision) in one
// per-rank file, streamed through a small pool of aligned buffers with io_uring.
//
// Owns: the file (created or replaced, never reused: see Scratch; removed by the destructor,
// left only by a crash), its two descriptors (the
// pass's, the checkpoint reader's), an io_uring, the buffer pool (`depth` chunk sets of
// `streams` buffers of chunk_elems floats, accounted as kOptimizerState: the state's resident
// memory, whatever the model size), one reader buffer per stream, and the CRC-32C of every
// chunk of every stream as last written.
// File: a 4 KiB header block (text: magic, run, rank name, streams, elements, chunk size,
// creation time, pid; for people and for the next start's message), then stream s's chunk c at
// 4096 + (s * chunks + c) * chunk_bytes. Whole chunks only (the last chunk's tail is zeros), so
// every transfer is aligned for O_DIRECT.
// Passes (Run): chunk c+1.. are read ahead and chunk c-1 written back while the caller's
// function updates chunk c in place, so a pass runs at disk bandwidth, not disk latency; the
// deepest read-ahead is depth - 2 chunks (one set is being computed, one is being written).
// Integrity: every chunk read (passes and Read) is checked against the CRC recorded when it was
// written; a mismatch is kIoError naming file, stream, chunk and byte range. Scratch: the file
// is the committed checkpoint's (or the initial weights') copy for this incarnation only; at
// Create an existing file (a crash's leftover, another run's) is never trusted: it is named in
// notes() and replaced, and every chunk starts as zeros with known CRCs.
// Without O_DIRECT (the file system refuses it): buffered I/O with an fdatasync at the end of
// every writing pass, said once in notes().
// Failures: an I/O error, short transfer, ENOSPC or checksum mismatch ends the pass with
// kIoError (a restart, which rebuilds the file from the last checkpoint, may cure it) after
// every transfer in flight has completed; the object then refuses further passes with the same
// error (the state is half-updated). kInvalidArgument at Create for a directory that is missing
// or unwritable, too small (bytes needed and available), or a file another live process holds
// (flock): two ranks or jobs sharing files.
// Thread-safety: one thread runs passes. Read may run on another thread while no pass runs
// (the trainer orders them: the checkpoint copy finishes before the next optimizer step).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/memory.h"
#include "runtime/core/status.h"

namespace tessera {

// Fault injection at the offload file's I/O (tests and `tessera chaos` only; null in
// production): consulted before every read and write is issued. A non-OK Status fails that
// transfer with it; an implementation may also end the process there (kill -9 mid-step).
class OffloadFaults {
 public:
  virtual ~OffloadFaults() = default;
  // op: "read" | "write"; pass: what it is part of — "read" | "write" | "update" (a Run of
  // that Pass: "update" is the optimizer step) or "checkpoint" (Read); chunk: its index;
  // done: chunks of the pass already computed (and, in a writing pass, written or in flight)
  // when it is issued — a read-ahead is issued chunks before its own turn.
  virtual Status Before(const char* op, const char* pass, const std::string& path,
                        int64_t chunk, int64_t done) = 0;
};

// Elements of a chunk are a multiple of this (4 KiB of floats: O_DIRECT's alignment).
inline constexpr int64_t kOffloadAlignElems = 1024;

struct OffloadFileOptions {
  std::string path;          // the file; its directory must exist and be writable
  std::string run;           // who writes it, for the header and messages ("run X rank 3")
  int streams = 2;           // fp32 streams of `elems` each, 1..4
  int64_t elems = 0;         // elements per stream, >= 0
  int64_t chunk_elems = kOffloadAlignElems;  // per transfer, a multiple of kOffloadAlignElems
  int depth = 4;             // chunk sets in the pool, >= 3
  OffloadFaults* faults = nullptr;
  int host_ranks = 1;        // ranks of this host offloading there (for the space message)
  MemoryTracker* tracker = nullptr;  // pool + reader buffers: kOptimizerState; file: kOffloaded
  // false: blocking pread/pwrite instead of io_uring — what a kernel or container without
  // io_uring gets (said in notes()); tests run both paths.
  bool io_uring = true;
  // false: buffered I/O as on a file system that refuses O_DIRECT (said in notes()); tests
  // run both paths.
  bool direct = true;
};

struct OffloadIoStats {
  uint64_t bytes_read = 0, bytes_written = 0;  // by passes, since Create
  uint64_t reader_bytes = 0;                   // by Read (checkpoint saves), since Create
  double wait_seconds = 0;  // blocked on the disk: completions awaited, fdatasync
  int64_t passes = 0;
};

class OffloadFile {
 public:
  enum class Pass {
    kRead,    // chunks read and given to fn; nothing written
    kWrite,   // buffers zeroed and given to fn, then written; nothing read
    kUpdate,  // read, fn changes them in place, written back
  };
  // Called for every chunk in order: elements [begin, end) of each stream in the pass's mask
  // at streams[s] (streams[s][0] is element `begin`; other streams null). end - begin <=
  // chunk_elems.
  using ChunkFn = std::function<void(int64_t begin, int64_t end, float* const* streams)>;

  static Result<std::unique_ptr<OffloadFile>> Create(const OffloadFileOptions& options);
  ~OffloadFile();
  OffloadFile(const OffloadFile&) = delete;
  OffloadFile& operator=(const OffloadFile&) = delete;

  // One pass over every chunk of the streams in `mask` (bit s = stream s; 0 = all).
  Status Run(Pass pass, unsigned mask, const ChunkFn& fn);
  // Elements [begin, begin + n) of stream s into out, verified, through the reader's own
  // descriptor and a one-chunk buffer per stream (sequential calls read each chunk once).
  Status Read(int stream, int64_t begin, int64_t n, float* out);

  // Lines for the run's log: a replaced leftover file, buffered I/O without O_DIRECT.
  const std::vector<std::string>& notes() const { return notes_; }
  bool direct() const { return direct_; }
  const std::string& path() const { return options_.path; }
  uint64_t file_bytes() const;
  // Pool and reader buffers: the resident bytes of the state.
  uint64_t resident_bytes() const;
  int64_t chunk_elems() const { return options_.chunk_elems; }
  OffloadIoStats stats() const;

  // The bytes a file of these dimensions takes on disk.
  static uint64_t FileBytes(int streams, int64_t elems, int64_t chunk_elems);
  // The pool and reader buffers a file of these options holds (resident_bytes()).
  static uint64_t ResidentBytes(const OffloadFileOptions& o);

 private:
  struct Ring;
  struct Slot;
  explicit OffloadFile(const OffloadFileOptions& options);
  Status Open();
  Status OpenChecked(uint64_t old_bytes);  // Open's steps after the path checks
  Status Issue(Slot& slot, bool write, unsigned mask);
  Status Await(Slot& slot);  // its transfers complete; counts the wait
  Status Reap(bool block, bool* any);  // one completion (or none, not blocking)
  void Drain();              // every transfer in flight, errors ignored (failure path)
  Status RunChunks(Pass pass, unsigned mask, const ChunkFn& fn);
  Status Verify(int stream, int64_t chunk, const float* data) const;
  uint64_t Offset(int stream, int64_t chunk) const;
  Status Fail(Status s);
  std::optional<uint64_t> AvailableBytes() const;  // free on the file's file system, if known
  Status NoSpace(const char* verb, uint64_t avail) const;  // the refusal of a disk too small
  bool SamePathAsFd() const;  // the path still names the file fd_ holds

  OffloadFileOptions options_;
  int64_t chunks_ = 0;
  size_t chunk_bytes_ = 0;
  int fd_ = -1, read_fd_ = -1;
  bool direct_ = true;
  bool lock_refused_ = false;  // another live process holds the file
  bool locked_ = false;        // this object holds it (and removes it when it goes)
  int64_t computed_ = 0;       // chunks of the running pass computed so far (fault hooks)
  uint64_t avail_before_ = ~uint64_t{0};  // free bytes before this file took any (messages)
  std::unique_ptr<Ring> ring_;
  std::vector<Slot> slots_;
  std::vector<float*> reader_;        // per stream: one chunk
  std::vector<int64_t> reader_chunk_;  // which chunk reader_[s] holds (-1: none)
  std::vector<uint32_t> crc_;          // streams x chunks
  std::vector<std::string> notes_;
  OffloadIoStats stats_;  // the pass thread's
  std::atomic<uint64_t> reader_bytes_{0};  // Read's, from any thread
  std::mutex reader_mu_;  // Read, and the invalidation of its chunks by a writing pass
  Status failed_ = Status::Ok();
  int inflight_ = 0;
  const char* pass_name_ = "";  // the Run in progress, for OffloadFaults
};

}  // namespace tessera
