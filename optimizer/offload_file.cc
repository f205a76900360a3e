// optimizer/offload_file.cc — the streamed disk tier of optimizer state (see offload_file.h).
#include "optimizer/offload_file.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "runtime/core/crc32c.h"

namespace tessera {
namespace {

constexpr size_t kBlock = 4096;  // O_DIRECT alignment of offsets, sizes and buffers
constexpr char kMagic[] = "TESSERA-OFFLOAD 1";

std::string Errno(int e) { return std::strerror(e); }

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// pread/pwrite all of n bytes (the rare short transfer of a ring completion is finished here).
Status TransferAll(int fd, bool write, char* data, size_t n, uint64_t offset,
                   const std::string& path) {
  while (n > 0) {
    const ssize_t r = write ? ::pwrite(fd, data, n, static_cast<off_t>(offset))
                            : ::pread(fd, data, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return IoError(path + ": " + (write ? "write" : "read") + " at offset " +
                     std::to_string(offset) + " failed: " +
                     (r < 0 ? Errno(errno) : std::string("unexpected end of file")));
    }
    data += r, n -= static_cast<size_t>(r), offset += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

}  // namespace

struct OffloadFile::Ring {
  io_uring ring{};
  bool ok = false;
  ~Ring() {
    if (ok) io_uring_queue_exit(&ring);
  }
};

// One chunk set of the pool: a buffer per stream and the transfers it has in flight.
struct OffloadFile::Slot {
  std::vector<float*> buf;  // per stream, chunk_bytes_ each
  int64_t chunk = -1;       // the chunk it holds or transfers
  int pending = 0;          // transfers in flight
  Status error = Status::Ok();
};

uint64_t OffloadFile::FileBytes(int streams, int64_t elems, int64_t chunk_elems) {
  const int64_t chunks = (elems + chunk_elems - 1) / chunk_elems;
  return kBlock + static_cast<uint64_t>(streams) * static_cast<uint64_t>(chunks) *
                      static_cast<uint64_t>(chunk_elems) * sizeof(float);
}

OffloadFile::OffloadFile(const OffloadFileOptions& options) : options_(options) {
  chunks_ = (options.elems + options.chunk_elems - 1) / options.chunk_elems;
  chunk_bytes_ = static_cast<size_t>(options.chunk_elems) * sizeof(float);
}

OffloadFile::~OffloadFile() {
  Drain();
  ring_.reset();
  // Scratch: the file goes with the object that locked it (a crash leaves it, and the next
  // Create replaces it). Only while the path still names the locked file, and before the lock
  // is released: no other process's file is ever removed.
  if (locked_ && SamePathAsFd()) ::unlink(options_.path.c_str());
  if (fd_ >= 0) ::close(fd_);  // also releases the flock
  if (read_fd_ >= 0) ::close(read_fd_);
  if (!slots_.empty() && !slots_[0].buf.empty()) std::free(slots_[0].buf[0]);  // one block
  if (options_.tracker != nullptr) {
    options_.tracker->OnReserve(MemoryKind::kOptimizerState, -static_cast<int64_t>(resident_bytes()));
    options_.tracker->OnReserve(MemoryKind::kOffloaded, -static_cast<int64_t>(file_bytes()));
  }
}

uint64_t OffloadFile::file_bytes() const {
  return FileBytes(options_.streams, options_.elems, options_.chunk_elems);
}

OffloadIoStats OffloadFile::stats() const {
  OffloadIoStats s = stats_;
  s.reader_bytes = reader_bytes_.load();
  return s;
}

uint64_t OffloadFile::resident_bytes() const { return ResidentBytes(options_); }

uint64_t OffloadFile::ResidentBytes(const OffloadFileOptions& o) {
  return static_cast<uint64_t>(o.depth + 1) * o.streams * static_cast<uint64_t>(o.chunk_elems) *
         sizeof(float);
}

Result<std::unique_ptr<OffloadFile>> OffloadFile::Create(const OffloadFileOptions& o) {
  if (o.streams < 1 || o.streams > 4 || o.elems < 0 || o.depth < 3 || o.chunk_elems <= 0 ||
      o.chunk_elems % kOffloadAlignElems != 0) {
    return InvalidArgument("offload file " + o.path + ": bad dimensions (streams " +
                           std::to_string(o.streams) + ", chunk " + std::to_string(o.chunk_elems) +
                           " elements, depth " + std::to_string(o.depth) + ")");
  }
  std::unique_ptr<OffloadFile> f(new OffloadFile(o));
  RETURN_IF_ERROR(f->Open());
  // The pool and the reader buffers: one aligned block, carved per slot and stream.
  const int sets = o.depth + 1;
  char* block = static_cast<char*>(std::aligned_alloc(kBlock, f->resident_bytes()));
  if (block == nullptr) return IoError("offload file " + o.path + ": cannot reserve the buffer pool");
  std::memset(block, 0, f->resident_bytes());
  f->slots_.resize(static_cast<size_t>(o.depth));
  for (int k = 0; k < sets; ++k) {
    for (int s = 0; s < o.streams; ++s) {
      float* b = reinterpret_cast<float*>(block + (static_cast<size_t>(k) * o.streams + s) * f->chunk_bytes_);
      if (k < o.depth) f->slots_[k].buf.push_back(b);
      else f->reader_.push_back(b);
    }
  }
  f->reader_chunk_.assign(static_cast<size_t>(o.streams), -1);
  if (o.tracker != nullptr) {
    o.tracker->OnReserve(MemoryKind::kOptimizerState, static_cast<int64_t>(f->resident_bytes()));
    o.tracker->OnUse(MemoryKind::kOptimizerState, static_cast<int64_t>(f->resident_bytes()));
    o.tracker->OnReserve(MemoryKind::kOffloaded, static_cast<int64_t>(f->file_bytes()));
    o.tracker->OnUse(MemoryKind::kOffloaded, static_cast<int64_t>(f->file_bytes()));
  }
  f->ring_ = std::make_unique<Ring>();
  const unsigned entries = static_cast<unsigned>(std::max(8, 2 * o.depth * o.streams));
  if (!o.io_uring) {
    f->notes_.push_back("offload file " + o.path + ": synchronous I/O (io_uring off)");
  } else if (int r = io_uring_queue_init(entries, &f->ring_->ring, 0); r < 0) {
    // A kernel without io_uring, or a container whose seccomp profile refuses it: the same
    // passes with blocking transfers (correct, but the disk no longer overlaps the update).
    f->notes_.push_back("io_uring is not available here (" + Errno(-r) + "): the offload file "
                        "is read and written synchronously, without overlap");
  } else {
    f->ring_->ok = true;
  }
  // Every chunk starts as zeros with a known checksum: nothing of an earlier file survives.
  f->crc_.assign(static_cast<size_t>(o.streams * f->chunks_), 0);
  Status zeroed = f->Run(Pass::kWrite, 0, [](int64_t, int64_t, float* const*) {});
  if (!zeroed.ok() && zeroed.message().find(std::strerror(ENOSPC)) != std::string::npos) {
    return f->NoSpace("could not write", f->avail_before_);
  }
  RETURN_IF_ERROR(zeroed);
  return f;
}

// The directory's checks, the lock, the note about a leftover file, the space check and
// reservation, the header, and the choice between O_DIRECT and buffered I/O.
Status OffloadFile::Open() {
  const std::string& path = options_.path;
  const std::string dir = DirOf(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return InvalidArgument("optimizer.offload_dir " + dir + ": " +
                           (errno == ENOENT ? std::string("does not exist") : Errno(errno)));
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("optimizer.offload_dir " + dir + ": is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return InvalidArgument("optimizer.offload_dir " + dir + ": is not writable (" + Errno(errno) + ")");
  }
  uint64_t old_bytes = 0;
  const bool existed = ::lstat(path.c_str(), &st) == 0;
  if (existed) {
    if (!S_ISREG(st.st_mode)) return InvalidArgument("offload file " + path + ": exists and is not a regular file");
    old_bytes = static_cast<uint64_t>(st.st_size);
  }
  Status opened = OpenChecked(old_bytes);
  // A refusal leaves no empty file behind (it did not exist before this call). Not after a
  // failed lock: the file is another process's.
  if (!opened.ok() && !existed && fd_ >= 0 && !lock_refused_ && SamePathAsFd()) {
    ::unlink(path.c_str());
    locked_ = false;  // removed: nothing for the destructor to do
  }
  return opened;
}

bool OffloadFile::SamePathAsFd() const {
  struct stat by_fd {}, by_path {};
  return fd_ >= 0 && ::fstat(fd_, &by_fd) == 0 && ::lstat(options_.path.c_str(), &by_path) == 0 &&
         by_fd.st_dev == by_path.st_dev && by_fd.st_ino == by_path.st_ino;
}

std::optional<uint64_t> OffloadFile::AvailableBytes() const {
  struct statvfs vfs {};
  if (::fstatvfs(fd_, &vfs) != 0) return std::nullopt;  // unknown: the reservation decides
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

// "optimizer.offload_dir D: this rank's optimizer state <verb> N bytes (G GiB) on disk but
// only A bytes (G GiB) were available there", with what the host's ranks need together.
// `avail` is measured before this file took any space.
Status OffloadFile::NoSpace(const char* verb, uint64_t avail) const {
  const uint64_t need = file_bytes();
  auto gib = [](double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / 1073741824.0);
    return std::string(buf);
  };
  const std::string free_text = avail == ~uint64_t{0}
                                    ? "the free space could not be read (statvfs failed)"
                                    : "only " + std::to_string(avail) + " bytes (" +
                                          gib(double(avail)) + ") were available there";
  std::string msg = "optimizer.offload_dir " + DirOf(options_.path) + ": this rank's optimizer state " +
                    verb + " " + std::to_string(need) + " bytes (" + gib(double(need)) +
                    ") on disk but " + free_text;
  if (options_.host_ranks > 1) {
    msg += "; the " + std::to_string(options_.host_ranks) + " ranks of this host offload there, about " +
           gib(double(need) * options_.host_ranks) + " together";
  }
  return InvalidArgument(msg + " (free space, or set optimizer.offload_dir to a larger disk)");
}

// Open's part once the path is known to be free or a regular file of old_bytes.
Status OffloadFile::OpenChecked(uint64_t old_bytes) {
  const std::string& path = options_.path;
  const std::string dir = DirOf(path);
  direct_ = options_.direct;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | (direct_ ? O_DIRECT : 0), 0600);
  if (fd_ < 0 && errno == EINVAL && direct_) {
    direct_ = false;
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  }
  if (fd_ < 0) return InvalidArgument("offload file " + path + ": cannot open: " + Errno(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    lock_refused_ = true;
    return InvalidArgument("offload file " + path + " is in use by another live process: two ranks "
                           "or jobs share optimizer.offload_dir files (give each job its own "
                           "offload_dir)");
  }
  // The lock is on the file opened; a process that removed its file between our open and our
  // lock leaves us holding a file without a name. Only a file the path still names is ours.
  if (!SamePathAsFd()) {
    return IoError("offload file " + path + " was removed or replaced while it was being opened "
                   "(another process left the directory at the same moment): try again");
  }
  locked_ = true;
  char* header = static_cast<char*>(std::aligned_alloc(kBlock, kBlock));
  std::unique_ptr<char, decltype(&std::free)> header_owner(header, &std::free);
  std::memset(header, 0, kBlock);
  if (old_bytes > 0) {
    std::string was = "bytes that are not an offload file";
    if (TransferAll(fd_, false, header, kBlock, 0, path).ok() &&
        std::strncmp(header, kMagic, sizeof kMagic - 1) == 0) {
      header[kBlock - 1] = '\0';
      const char* run = std::strstr(header, "\nrun ");
      const char* end = run != nullptr ? std::strchr(run + 5, '\n') : nullptr;
      was = "state written by " + (end != nullptr ? std::string(run + 5, end) : std::string("an unknown run"));
    }
    notes_.push_back("offload file " + path + " held " + was +
                     ": not trusted, replaced (this run's state comes from its checkpoint or "
                     "its initial weights)");
  }
  const uint64_t need = file_bytes();
  // What this file may take: the free space plus what a leftover file of ours gives back.
  const std::optional<uint64_t> free_now = AvailableBytes();
  const uint64_t avail = free_now ? *free_now + old_bytes : ~uint64_t{0};
  if (need > avail) return NoSpace("needs", avail);
  avail_before_ = avail;
  if (::ftruncate(fd_, 0) != 0) return IoError("offload file " + path + ": truncate failed: " + Errno(errno));
  // Reserved now, so a full disk is a refusal at start, never a failed step. A file system
  // without fallocate gets a sized file whose blocks Create's first pass writes (zeros).
  if (int r = ::posix_fallocate(fd_, 0, static_cast<off_t>(need)); r != 0) {
    if (r == ENOSPC) return NoSpace("could not reserve", avail_before_);
    if (::ftruncate(fd_, static_cast<off_t>(need)) != 0) {
      return IoError("offload file " + path + ": cannot size it: " + Errno(errno));
    }
  }
  std::snprintf(header, kBlock, "%s\nrun %s\nstreams %d\nelements %lld\nchunk %lld\ncreated %lld\npid %d\n",
                kMagic, options_.run.c_str(), options_.streams,
                static_cast<long long>(options_.elems), static_cast<long long>(options_.chunk_elems),
                static_cast<long long>(std::time(nullptr)), static_cast<int>(::getpid()));
  Status wrote = TransferAll(fd_, true, header, kBlock, 0, path);
  if (!wrote.ok() && direct_) {  // the file system opened with O_DIRECT but refuses the transfer
    direct_ = false;
    (void)::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_DIRECT);
    wrote = TransferAll(fd_, true, header, kBlock, 0, path);
  }
  RETURN_IF_ERROR(wrote);
  if (!direct_) {
    notes_.push_back("optimizer.offload_dir " + dir +
                     (options_.direct ? " does not support O_DIRECT" : ": O_DIRECT off") +
                     ": buffered I/O with fdatasync after every pass");
  }
  read_fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct_ ? O_DIRECT : 0));
  if (read_fd_ < 0) return IoError("offload file " + path + ": cannot open for reading: " + Errno(errno));
  return Status::Ok();
}

uint64_t OffloadFile::Offset(int stream, int64_t chunk) const {
  return kBlock + (static_cast<uint64_t>(stream) * chunks_ + chunk) * chunk_bytes_;
}

Status OffloadFile::Fail(Status s) {
  Drain();
  failed_ = s;
  return s;
}

Status OffloadFile::Run(Pass pass, unsigned mask, const ChunkFn& fn) {
  RETURN_IF_ERROR(failed_);
  if (mask == 0) mask = (1u << options_.streams) - 1;
  pass_name_ = pass == Pass::kRead ? "read" : pass == Pass::kWrite ? "write" : "update";
  if (pass != Pass::kRead) {  // the reader's cached chunks are about to change
    std::lock_guard<std::mutex> lock(reader_mu_);
    std::fill(reader_chunk_.begin(), reader_chunk_.end(), -1);
  }
  if (Status s = RunChunks(pass, mask, fn); !s.ok()) return Fail(s);
  ++stats_.passes;
  return Status::Ok();
}

// Reads run up to depth - 1 chunks ahead of the one being computed, but never wait for a slot's
// write-back while an earlier chunk could be computed: chunk c - 1's write overlaps chunk c.
Status OffloadFile::RunChunks(Pass pass, unsigned mask, const ChunkFn& fn) {
  const bool reads = pass != Pass::kWrite, writes = pass != Pass::kRead;
  const int64_t depth = static_cast<int64_t>(slots_.size());
  std::vector<float*> ptrs(static_cast<size_t>(options_.streams), nullptr);
  int64_t next = 0;
  for (int64_t c = 0; c < chunks_; ++c) {
    computed_ = c;  // for the fault hooks: chunks before c are done
    while (inflight_ > 0) {  // collect what has completed, without blocking
      bool any = false;
      RETURN_IF_ERROR(Reap(false, &any));
      if (!any) break;
    }
    while (next < chunks_ && next < c + depth) {
      Slot& s = slots_[static_cast<size_t>(next % depth)];
      if (next > c && s.pending > 0) break;  // its write-back: issue later
      RETURN_IF_ERROR(Await(s));
      s.chunk = next++;
      if (reads) RETURN_IF_ERROR(Issue(s, false, mask));
    }
    Slot& s = slots_[static_cast<size_t>(c % depth)];
    RETURN_IF_ERROR(Await(s));
    const int64_t begin = c * options_.chunk_elems;
    const int64_t end = std::min(options_.elems, begin + options_.chunk_elems);
    for (int k = 0; k < options_.streams; ++k) {
      ptrs[k] = (mask >> k & 1u) ? s.buf[k] : nullptr;
      if (ptrs[k] == nullptr) continue;
      if (reads) {
        RETURN_IF_ERROR(Verify(k, c, ptrs[k]));
      } else {
        std::memset(ptrs[k], 0, chunk_bytes_);
      }
    }
    fn(begin, end, ptrs.data());
    if (!writes) continue;
    for (int k = 0; k < options_.streams; ++k) {
      if (ptrs[k] != nullptr) crc_[static_cast<size_t>(k * chunks_ + c)] = Crc32c(ptrs[k], chunk_bytes_);
    }
    RETURN_IF_ERROR(Issue(s, true, mask));
  }
  for (Slot& s : slots_) RETURN_IF_ERROR(Await(s));
  if (writes && !direct_) {
    const auto t0 = std::chrono::steady_clock::now();
    if (::fdatasync(fd_) != 0) return IoError("offload file " + options_.path + ": fdatasync failed: " + Errno(errno));
    stats_.wait_seconds += Since(t0);
  }
  return Status::Ok();
}

Status OffloadFile::Issue(Slot& slot, bool write, unsigned mask) {
  for (int k = 0; k < options_.streams; ++k) {
    if (!(mask >> k & 1u)) continue;
    if (options_.faults != nullptr) {
      RETURN_IF_ERROR(options_.faults->Before(write ? "write" : "read", pass_name_, options_.path,
                                              slot.chunk, write ? slot.chunk + 1 : computed_));
    }
    if (!ring_->ok) {  // no io_uring: done before this returns (Create's note)
      const auto t0 = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(TransferAll(fd_, write, reinterpret_cast<char*>(slot.buf[k]), chunk_bytes_,
                                  Offset(k, slot.chunk), options_.path));
      stats_.wait_seconds += Since(t0);
      (write ? stats_.bytes_written : stats_.bytes_read) += chunk_bytes_;
      continue;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
    if (sqe == nullptr) {  // the submission queue is full: hand it to the kernel first
      io_uring_submit(&ring_->ring);
      sqe = io_uring_get_sqe(&ring_->ring);
      if (sqe == nullptr) return IoError("offload file " + options_.path + ": io_uring queue full");
    }
    const uint64_t off = Offset(k, slot.chunk);
    if (write) {
      io_uring_prep_write(sqe, fd_, slot.buf[k], static_cast<unsigned>(chunk_bytes_), off);
      stats_.bytes_written += chunk_bytes_;
    } else {
      io_uring_prep_read(sqe, fd_, slot.buf[k], static_cast<unsigned>(chunk_bytes_), off);
      stats_.bytes_read += chunk_bytes_;
    }
    const size_t index = static_cast<size_t>(&slot - slots_.data());
    io_uring_sqe_set_data64(sqe, (index << 8) | (static_cast<uint64_t>(k) << 1) | (write ? 1u : 0u));
    ++slot.pending;
    ++inflight_;
  }
  if (!ring_->ok) return Status::Ok();
  if (int r = io_uring_submit(&ring_->ring); r < 0) {
    return IoError("offload file " + options_.path + ": io_uring_submit failed: " + Errno(-r));
  }
  return Status::Ok();
}

Status OffloadFile::Reap(bool block, bool* any) {
  io_uring_cqe* cqe = nullptr;
  int r;
  do {
    r = block ? io_uring_wait_cqe(&ring_->ring, &cqe) : io_uring_peek_cqe(&ring_->ring, &cqe);
  } while (r == -EINTR);
  if (r == -EAGAIN && !block) return Status::Ok();
  if (r < 0) return IoError("offload file " + options_.path + ": io_uring wait failed: " + Errno(-r));
  const uint64_t tag = io_uring_cqe_get_data64(cqe);
  const int res = cqe->res;
  io_uring_cqe_seen(&ring_->ring, cqe);
  if (any != nullptr) *any = true;
  Slot& slot = slots_[tag >> 8];
  const int stream = static_cast<int>(tag >> 1 & 0x7f);
  const bool write = (tag & 1u) != 0;
  --slot.pending;
  --inflight_;
  const uint64_t off = Offset(stream, slot.chunk);
  if (res < 0) {
    if (slot.error.ok()) {
      slot.error = IoError("offload file " + options_.path + ": " + (write ? "write" : "read") +
                           " of stream " + std::to_string(stream) + " chunk " +
                           std::to_string(slot.chunk) + " at offset " + std::to_string(off) +
                           " failed: " + Errno(-res));
    }
  } else if (static_cast<size_t>(res) < chunk_bytes_ && slot.error.ok()) {
    slot.error = TransferAll(fd_, write, reinterpret_cast<char*>(slot.buf[stream]) + res,
                             chunk_bytes_ - static_cast<size_t>(res), off + static_cast<uint64_t>(res),
                             options_.path);
  }
  return Status::Ok();
}

Status OffloadFile::Await(Slot& slot) {
  if (slot.pending > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    while (slot.pending > 0) RETURN_IF_ERROR(Reap(true, nullptr));
    stats_.wait_seconds += Since(t0);
  }
  Status e = slot.error;
  slot.error = Status::Ok();
  return e;
}

void OffloadFile::Drain() {
  if (!ring_ || !ring_->ok) return;
  while (inflight_ > 0) {
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring_->ring, &cqe) == -EINTR) continue;
    if (cqe == nullptr) break;
    Slot& slot = slots_[io_uring_cqe_get_data64(cqe) >> 8];
    io_uring_cqe_seen(&ring_->ring, cqe);
    --slot.pending;
    --inflight_;
  }
  for (Slot& s : slots_) s.error = Status::Ok();
}

Status OffloadFile::Verify(int stream, int64_t chunk, const float* data) const {
  const uint32_t want = crc_[static_cast<size_t>(stream * chunks_ + chunk)];
  const uint32_t got = Crc32c(data, chunk_bytes_);
  if (got == want) return Status::Ok();
  char buf[400];
  const uint64_t off = Offset(stream, chunk);
  std::snprintf(buf, sizeof buf,
                "offload file %s: stream %d chunk %lld (bytes %llu..%llu) reads back other bytes "
                "than were written (CRC-32C %08x, expected %08x): the file was changed under "
                "this run or the disk returned bad data",
                options_.path.c_str(), stream, static_cast<long long>(chunk),
                static_cast<unsigned long long>(off),
                static_cast<unsigned long long>(off + chunk_bytes_), got, want);
  return IoError(buf);
}

Status OffloadFile::Read(int stream, int64_t begin, int64_t n, float* out) {
  std::lock_guard<std::mutex> lock(reader_mu_);
  RETURN_IF_ERROR(failed_);
  if (stream < 0 || stream >= options_.streams || begin < 0 || n < 0 || begin + n > options_.elems) {
    return InvalidArgument("offload file " + options_.path + ": read outside the streams");
  }
  const int64_t ce = options_.chunk_elems;
  for (int64_t pos = begin; pos < begin + n;) {
    const int64_t c = pos / ce;
    float* buf = reader_[stream];
    if (reader_chunk_[stream] != c) {
      reader_chunk_[stream] = -1;
      if (options_.faults != nullptr) {
        RETURN_IF_ERROR(options_.faults->Before("read", "checkpoint", options_.path, c, c));
      }
      RETURN_IF_ERROR(TransferAll(read_fd_, false, reinterpret_cast<char*>(buf), chunk_bytes_,
                                  Offset(stream, c), options_.path));
      reader_bytes_ += chunk_bytes_;
      RETURN_IF_ERROR(Verify(stream, c, buf));
      reader_chunk_[stream] = c;
    }
    const int64_t stop = std::min(begin + n, (c + 1) * ce);
    std::memcpy(out + (pos - begin), buf + (pos - c * ce), static_cast<size_t>(stop - pos) * sizeof(float));
    pos = stop;
  }
  return Status::Ok();
}

}  // namespace tessera
