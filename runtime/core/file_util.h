// runtime/core/file_util.h — the one place for file I/O helpers, behind a file-system seam.
//
// Owns: FileSystem (the seam: every disk operation a writer or whole-file reader performs),
// DefaultFileSystem() (POSIX), AtomicFileWriter (write-temp-then-rename commits), and the small
// helpers built on them. Code that writes files takes a FileSystem& (default: the POSIX one)
// so a fault-injecting FileSystem in a test can fail the N-th write or fsync (ENOSPC, EIO) and
// prove that the previous file survives.
//
// Commit protocol (AtomicFileWriter, WriteFileAtomic): bytes go to "<path>.tmp", which is
// fsynced, closed, renamed over <path>; then the parent directory is fsynced so the rename is
// durable. <path> is therefore either the previous file or the complete new one, never a mix.
// Any failure before the rename removes the .tmp; a writer destroyed before Commit does too.
// Errors are Status values naming the path, with strerror text for OS failures: kNotFound for
// a missing file, kIoError when the OS refuses, kDataLoss for short reads / oversize files.
// Reading never hangs or grows without bound: every open for reading is non-blocking and
// refuses anything but a regular file (a FIFO planted where a file should be, a device such
// as /dev/zero, a directory) before a byte is read, and whole-file reads check the size
// first (OpenRegularFileForRead).
// Thread-safety: DefaultFileSystem() is stateless and safe from any thread; an AtomicFileWriter
// is single-owner. A FileSystem implementation must be safe to call from the threads using it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/core/status.h"

namespace tessera {

// The seam. Paths are passed along so every error can name the file. Write/WriteAt write all
// bytes or fail (they retry short writes and EINTR).
enum class FileKind { kMissing, kRegular, kDirectory, kSymlink, kOther };
const char* FileKindName(FileKind kind);  // "missing" | "a regular file" | "a directory" | ...

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // Creates or truncates `path` for writing (mode 0644); returns the descriptor.
  virtual Result<int> OpenForWrite(const std::string& path) = 0;
  // Appends n bytes at the file position.
  virtual Status Write(int fd, const void* data, size_t n, const std::string& path) = 0;
  // Writes n bytes at `offset` without moving the file position.
  virtual Status WriteAt(int fd, const void* data, size_t n, uint64_t offset,
                         const std::string& path) = 0;
  virtual Status Sync(int fd, const std::string& path) = 0;   // fsync
  virtual Status Close(int fd, const std::string& path) = 0;  // the fd is gone even on error
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Removes a file; OK if it does not exist.
  virtual Status Remove(const std::string& path) = 0;
  // fsyncs a directory, making renames and removals inside it durable.
  virtual Status SyncDir(const std::string& dir) = 0;
  // The whole file. kNotFound naming `path` if missing; kDataLoss if it is not a regular file
  // or larger than max_bytes (checked before reading).
  virtual Result<std::string> ReadFile(const std::string& path, uint64_t max_bytes) = 0;

  // Directories and positional reads (checkpoint/ uses these).
  // Creates one directory (mode 0755); OK if it already exists as a directory.
  // kInvalidArgument when the path can never be one (a file in the way, a component that is a
  // file, no permission, read-only): a bad path, not a failure a restart may cure.
  virtual Status MakeDir(const std::string& path) = 0;
  // Removes `path` and everything below it (no symlink is followed); OK if missing.
  virtual Status RemoveTree(const std::string& path) = 0;
  // Names in a directory, sorted, without "." and "..". kNotFound if missing.
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;
  // Opens for reading; kNotFound if missing, kDataLoss if not a regular file.
  virtual Result<int> OpenForRead(const std::string& path) = 0;
  // Exactly n bytes at `offset`; kDataLoss naming path and offset if the file ends first.
  virtual Status ReadAt(int fd, void* data, size_t n, uint64_t offset, const std::string& path) = 0;
  // Size in bytes of an open file.
  virtual Result<uint64_t> FileSize(int fd, const std::string& path) = 0;
  // What `path` itself is, without following a final symlink (lstat). Has a POSIX default so
  // wrapping file systems need not forward it; kIoError only when the OS refuses to say.
  virtual Result<FileKind> Kind(const std::string& path);
};

// The POSIX implementation; lives for the whole process.
FileSystem& DefaultFileSystem();

inline constexpr uint64_t kNoSizeLimit = std::numeric_limits<uint64_t>::max();

// Creates `path` and its missing parents (each through fs.MakeDir).
Status MakeDirs(const std::string& path, FileSystem& fs = DefaultFileSystem());

// Reads the whole file (through DefaultFileSystem()). kNotFound naming the path when missing,
// kIoError (with strerror) when the OS refuses, kDataLoss when it exceeds max_bytes.
Result<std::string> ReadFileToString(const std::string& path, uint64_t max_bytes = kNoSizeLimit);

// Reads a file the user named (a config, a scenario, a hostfile) whole, for messages of the
// form "PATH: cannot read WHAT: REASON" (REASON: file not found, is a FIFO, not a regular
// file, N bytes, larger than the M bytes allowed, permission denied, ...). No such failure can
// be cured by retrying, so every one is kNotFound (bad input).
Result<std::string> ReadInputFile(const std::string& path, uint64_t max_bytes,
                                  std::string_view what);

// Streams a file into "<path>.tmp"; Commit() publishes it as <path> (protocol above).
class AtomicFileWriter {
 public:
  static Result<std::unique_ptr<AtomicFileWriter>> Create(const std::string& path,
                                                          FileSystem& fs = DefaultFileSystem());
  // Not committed (never called, or failed): closes and removes the .tmp.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  Status Append(const void* data, size_t n);
  // Overwrites bytes already appended (e.g. a header whose counts are known only at the end).
  Status WriteAt(uint64_t offset, const void* data, size_t n);
  // fsync, close, rename over <path>, fsync the directory. After any failed call the writer
  // refuses further work (kFailedPrecondition) and the .tmp is removed.
  Status Commit();

  const std::string& path() const { return path_; }
  const std::string& tmp_path() const { return tmp_path_; }
  uint64_t bytes_appended() const { return bytes_appended_; }

 private:
  AtomicFileWriter(FileSystem& fs, std::string path)
      : fs_(fs), path_(std::move(path)), tmp_path_(path_ + ".tmp") {}
  Status Usable() const;
  Status Fail(Status st);  // closes and removes the .tmp, remembers the failure, returns st

  FileSystem& fs_;
  std::string path_, tmp_path_;
  int fd_ = -1;
  bool failed_ = false;
  bool committed_ = false;
  uint64_t bytes_appended_ = 0;
};

// Writes `bytes` as <path> through AtomicFileWriter.
Status WriteFileAtomic(const std::string& path, std::string_view bytes,
                       FileSystem& fs = DefaultFileSystem());

// fsyncs `dir` through DefaultFileSystem().
Status SyncDir(const std::string& dir);

// The directory holding `path` ("." for a bare file name).
std::string ParentDir(const std::string& path);

// POSIX primitives (used by the default FileSystem and by readers holding an fd).
// Opens `path` read-only without blocking (O_NONBLOCK: a FIFO cannot hang the open) and
// refuses anything but a regular file: kNotFound if missing, kDataLoss "PATH: is a FIFO,
// not a regular file" (or a directory, device, socket), kIoError if the OS refuses. The
// caller owns the descriptor. Every reader of user-supplied files opens through this.
Result<int> OpenRegularFileForRead(const std::string& path);
// Writes all n bytes, retrying short writes and EINTR.
Status WriteAll(int fd, const void* data, size_t n, const std::string& path_for_errors);
// Reads exactly n bytes at `offset`, retrying short reads and EINTR; kDataLoss naming the
// byte offset if the file ends first (truncated).
Status PreadAll(int fd, void* out, size_t n, uint64_t offset, const std::string& path);

}  // namespace tessera
