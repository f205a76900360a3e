// tools/cmd_bench_offload.cc — `tessera bench offload`: the NVMe optimizer-offload tier
// (optimizer.offload: nvme) beside the disk it runs on, all measured in one run:
//   disk     O_DIRECT sequential write (+ fdatasync) and read of a file in the same directory,
//            aligned 8 MiB transfers, min(1 GiB, 4x the fp32 state): the physical limit;
//   AdamW    one rank's ShardedAdamW over --params elements with its state on disk
//            (CreateOnDisk) and in memory: fp32 (m, v: 8 bytes read + 8 written per parameter)
//            and bf16 + fp32 master (m, v, master: 12 + 12), parameters/s beside the bound
//            the disk implies: bandwidth / bytes moved, 1 / (B/read_bw + B/write_bw), with the
//            bandwidths of a read-alone and a write-alone pass of the step's own pipeline
//            over a file of the same size and chunks (every transfer the pool allows in
//            flight; target >= 80 % of it, i.e. the update hidden behind the transfers); and
//            the same pass with the AdamW update taken out (reads ahead and writes back in
//            flight together, as in the step). The one-at-a-time probe's serial figure,
//            1 / (B/read_bw + B/write_bw), is printed beside it: a disk that serves several
//            transfers in flight (or acknowledges O_DIRECT writes from its volatile cache,
//            which neither pass flushes) beats it. The share of the step spent waiting on the
//            disk is OffloadFile::stats().wait_seconds.
//   training `tessera train` of --config (GPT-2 124M) spawned twice, optimizer.offload none and
//            nvme: step time (metrics.jsonl) and peak RSS (wait4's ru_maxrss) of each child.
// Order: the training children run first, while this process is still small: a child's
// ru_maxrss starts from its parent's high-water RSS at the exec (the kernel carries the old
// address space's peak over), so spawning after the AdamW buffers would inflate both figures.
// The disk probe and the four steps then run in turn in every repeat, so the bound and the
// steps see the same disk and load on a shared machine; a warm-up step of each is not counted.
// Owns one scratch directory under --dir (made fresh, removed at the end with every file in
// it: the probe file, both offload files, the children's outputs). Thread-safety: main thread
// only (the steps run OpenMP loops; the offload files their own io_uring).
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/param_layout.h"
#include "optimizer/zero.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/file_util.h"
#include "runtime/core/json.h"
#include "runtime/kernels/cpu/convert.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/train/config.h"
#include "tools/args.h"
#include "tools/cmd_bench.h"

extern char** environ;

namespace tessera::cli {
namespace {

constexpr int64_t kDefaultParams = int64_t{64} << 20;
constexpr int64_t kMaxParams = int64_t{1} << 30;
constexpr int kDefaultRepeats = 3;
constexpr int kMaxRepeats = 100;
constexpr int64_t kDefaultPoolMb = 64;
constexpr int64_t kMaxPoolMb = 65536;  // optimizer.offload_buffer_mb's range
// GPT-2 124M's 4 x 256 tokens take about 5 s a step on 2 cores; 1 x 64 keeps both runs near a
// minute while the optimizer step (the part offload changes) stays the full model's.
constexpr int64_t kDefaultTrainSteps = 4, kDefaultTrainSeq = 64, kDefaultTrainBatch = 1;
constexpr size_t kProbeChunkBytes = size_t{8} << 20;
constexpr size_t kDirectAlign = 4096;  // O_DIRECT's buffer, offset and length alignment
constexpr uint64_t kMaxProbeBytes = uint64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "tessera bench offload: %s\n", message.c_str());
  return code;
}

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// pread/pwrite of exactly n bytes at off, retrying short transfers and EINTR.
Status TransferExactly(int fd, bool write, char* buf, size_t n, uint64_t off, const std::string& path) {
  for (size_t done = 0; done < n;) {
    const ssize_t r = write ? ::pwrite(fd, buf + done, n - done, static_cast<off_t>(off + done))
                            : ::pread(fd, buf + done, n - done, static_cast<off_t>(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return IoError(Errno(write ? "cannot write" : "cannot read", path));
    done += static_cast<size_t>(r);
  }
  return Status::Ok();
}

// The disk's sequential bandwidth with the transfers the offload file makes: O_DIRECT (so no
// read is served by the page cache), aligned buffers, large requests. The file is written once
// at Create, untimed, so the timed writes overwrite allocated blocks as the offload passes do
// (a first write to fresh blocks also pays for their allocation: a lower, flattering bound).
class DiskProbe {
 public:
  static Result<std::unique_ptr<DiskProbe>> Create(const std::string& dir, uint64_t bytes) {
    std::unique_ptr<DiskProbe> p(new DiskProbe(dir + "/disk_probe.bin", bytes));
    p->buf_ = static_cast<char*>(std::aligned_alloc(kDirectAlign, kProbeChunkBytes));
    if (p->buf_ == nullptr) return IoError("cannot allocate the probe's buffer");
    // Distinct non-zero bytes: nothing a disk or file system could compress or skip.
    for (size_t i = 0; i < kProbeChunkBytes; ++i) p->buf_[i] = static_cast<char>((i * 2654435761u) >> 13);
    p->fd_ = ::open(p->path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0600);
    if (p->fd_ < 0 && errno == EINVAL) {  // a file system without O_DIRECT (tmpfs)
      p->direct_ = false;
      p->fd_ = ::open(p->path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    }
    if (p->fd_ < 0) return IoError(Errno("cannot create", p->path_));
    RETURN_IF_ERROR(p->Pass(/*write=*/true));
    return p;
  }
  ~DiskProbe() {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(path_.c_str());
    std::free(buf_);
  }

  // Seconds to overwrite the file and fdatasync it (the data is on the device after).
  Result<double> TimeWrite() {
    const auto t = BenchClock::now();
    RETURN_IF_ERROR(Pass(/*write=*/true));
    return Since(t);
  }
  // Seconds to read it back from the device.
  Result<double> TimeRead() {
    // Buffered I/O only: drop the file's pages (clean after the fdatasync, so really dropped).
    if (!direct_) (void)::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
    const auto t = BenchClock::now();
    RETURN_IF_ERROR(Pass(/*write=*/false));
    return Since(t);
  }
  bool direct() const { return direct_; }
  uint64_t bytes() const { return bytes_; }

 private:
  DiskProbe(std::string path, uint64_t bytes) : path_(std::move(path)), bytes_(bytes) {}
  Status Pass(bool write) {
    for (uint64_t off = 0; off < bytes_; off += kProbeChunkBytes) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kProbeChunkBytes, bytes_ - off));
      RETURN_IF_ERROR(TransferExactly(fd_, write, buf_, n, off, path_));
    }
    if (write && ::fdatasync(fd_) != 0) return IoError(Errno("cannot fdatasync", path_));
    return Status::Ok();
  }

  std::string path_;
  uint64_t bytes_;
  int fd_ = -1;
  bool direct_ = true;
  char* buf_ = nullptr;
};

// One way of holding a rank's AdamW state, on disk and in memory, over the same buffers.
// fp32: the moments (2 streams); the model's fp32 values are stepped in place.
// master: moments + fp32 master weights (3 streams), rounded into bf16 values after the step.
struct Variant {
  std::string label, short_label;  // the section's and the summary's
  bool master = false;
  std::unique_ptr<ShardedAdamW> disk, memory;
  std::unique_ptr<OffloadFile> ceiling;  // the disk step's file and chunks, passed without AdamW
  std::vector<double> disk_s, wait_s, memory_s, ceiling_s;
  // The same file read alone and written alone through the pipeline (every transfer the pool
  // allows in flight): the disk's sequential bandwidths as the step can use them.
  std::vector<double> read_only_s, write_only_s;
  uint64_t read_bytes = 0, written_bytes = 0;  // by the disk's last step

  int streams() const { return master ? 3 : 2; }
  double bytes_each_way() const { return 4.0 * streams(); }  // per parameter
};

// The buffers every variant steps: fp32 values and gradients of a trained model's size
// (|p| <= 0.02, |g| <= 1e-3, none subnormal), and the bf16 values the master variant rounds into.
struct StepBuffers {
  explicit StepBuffers(int64_t n) : params(n), grads(n), bf16(n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float u = static_cast<float>(static_cast<int64_t>((static_cast<uint64_t>(i) * 2654435761u) % 2001) - 1000);
      params[i] = 2e-5f * u;
      grads[i] = 1e-6f * u;
    }
  }
  std::vector<float> params, grads;
  std::vector<uint16_t> bf16;
};

Status MakeVariant(Variant& v, int64_t n, const std::string& dir, int64_t pool_bytes, StepBuffers& b) {
  const ShardLayout layout({0, n}, /*ranks=*/1, /*align=*/1);
  const std::vector<ParamRange> ranges{ParamRange{0, n, true, "all"}};
  ShardedAdamWDisk disk;
  disk.path = dir + "/offload-" + (v.master ? "master" : "fp32") + ".bin";
  disk.run = "tessera bench offload";
  disk.pool_bytes = pool_bytes;
  ASSIGN_OR_RETURN(v.disk, ShardedAdamW::CreateOnDisk(AdamWConfig{}, layout, 0, ranges, v.master,
                                                      nullptr, disk));
  v.memory = std::make_unique<ShardedAdamW>(AdamWConfig{}, layout, 0, ranges, v.master, nullptr);
  OffloadFileOptions c;
  c.path = dir + "/ceiling-" + (v.master ? "master" : "fp32") + ".bin";
  c.run = disk.run;
  c.streams = v.streams();
  c.elems = n;
  c.chunk_elems = v.disk->disk()->chunk_elems();
  ASSIGN_OR_RETURN(v.ceiling, OffloadFile::Create(c));
  if (v.master) {
    const float* p = b.params.data();
    RETURN_IF_ERROR(v.disk->Load(ShardedAdamW::kMaster, [p](int, int64_t off, int64_t k, float* out) {
      std::memcpy(out, p + off, static_cast<size_t>(k) * sizeof(float));
    }));
    v.memory->LoadMaster(p);
  }
  return Status::Ok();
}

// One step of `a`; seconds.
Result<double> TimeStep(Variant& v, ShardedAdamW& a, StepBuffers& b) {
  float* pieces[1] = {b.params.data()};
  uint16_t* bf16 = b.bf16.data();
  const auto t = BenchClock::now();
  if (v.master) {
    RETURN_IF_ERROR(a.Step({}, b.grads.data(), 1e-4f, 1.0f,
                           [bf16](int, int64_t off, int64_t k, const float* values) {
                             cpu::ConvertFromF32(DType::kBF16, values, bf16 + off, k);
                           }));
  } else {
    RETURN_IF_ERROR(a.Step(pieces, b.grads.data(), 1e-4f));
  }
  return Since(t);
}

// One repeat of a variant: its disk step (with the time it waited on the disk) and its
// in-memory step. `count` false: the warm-up.
Status RunVariant(Variant& v, StepBuffers& b, bool count) {
  const OffloadIoStats before = v.disk->disk()->stats();
  ASSIGN_OR_RETURN(double disk_s, TimeStep(v, *v.disk, b));
  const OffloadIoStats after = v.disk->disk()->stats();
  ASSIGN_OR_RETURN(double memory_s, TimeStep(v, *v.memory, b));
  const auto t = BenchClock::now();
  RETURN_IF_ERROR(v.ceiling->Run(OffloadFile::Pass::kUpdate, 0, [](int64_t, int64_t, float* const*) {}));
  const double ceiling_s = Since(t);
  const auto t_read = BenchClock::now();
  RETURN_IF_ERROR(v.ceiling->Run(OffloadFile::Pass::kRead, 0, [](int64_t, int64_t, float* const*) {}));
  const double read_only_s = Since(t_read);
  const auto t_write = BenchClock::now();
  RETURN_IF_ERROR(v.ceiling->Run(OffloadFile::Pass::kWrite, 0, [](int64_t, int64_t, float* const*) {}));
  const double write_only_s = Since(t_write);
  if (!count) return Status::Ok();
  v.ceiling_s.push_back(ceiling_s);
  v.read_only_s.push_back(read_only_s);
  v.write_only_s.push_back(write_only_s);
  v.disk_s.push_back(disk_s);
  v.wait_s.push_back(after.wait_seconds - before.wait_seconds);
  v.memory_s.push_back(memory_s);
  v.read_bytes = after.bytes_read - before.bytes_read;
  v.written_bytes = after.bytes_written - before.bytes_written;
  return Status::Ok();
}

struct DiskFigures {
  Stats write_bw, read_bw;  // bytes/s; "min" holds the best (the largest)
};

// Bandwidths are negated into Summarise and back, so its "min" is the best rate.
Stats BestRates(const std::vector<double>& seconds, double bytes) {
  std::vector<double> neg;
  for (double s : seconds) neg.push_back(-bytes / s);
  Stats s = Summarise(neg);
  return {-s.min, -s.median};
}

// The block device's write-cache mode under `dir` ("write back", "write through"), or "" when
// unknown: with "write back" an O_DIRECT write completes once in the device's volatile cache.
std::string WriteCacheMode(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return "";
  const std::string dev = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" +
                          std::to_string(minor(st.st_dev));
  for (const char* queue : {"/queue/write_cache", "/../queue/write_cache"}) {  // disk, partition
    std::ifstream in(dev + queue);  // sysfs: a size of 4096 whatever the text, so no size check
    std::string mode;
    if (std::getline(in, mode)) return mode;
  }
  return "";
}

// params/s the disk allows a step moving `b` bytes per parameter each way: reads and writes
// share the device, so their times add.
double Bound(double b, double read_bw, double write_bw) { return 1.0 / (b / read_bw + b / write_bw); }

void PrintDisk(const DiskProbe& probe, const std::vector<double>& w, const std::vector<double>& r,
               const DiskFigures& d) {
  const Stats ws = Summarise(w), rs = Summarise(r);
  std::printf("\ndisk: %s file, %s, 8 MiB transfers one at a time, measured in turn\n"
              "with the steps\n",
              FormatBytes(probe.bytes()).c_str(),
              probe.direct() ? "O_DIRECT (no page cache)" : "buffered: O_DIRECT refused here, "
                                                            "pages dropped before each read");
  std::printf("%-40s %10s %10s\n", "", "min", "median");
  std::printf("%-40s %8.3f s %8.3f s   = %5.0f MB/s best, %5.0f MB/s median\n",
              "  sequential write + fdatasync", ws.min, ws.median, d.write_bw.min / 1e6, d.write_bw.median / 1e6);
  std::printf("%-40s %8.3f s %8.3f s   = %5.0f MB/s best, %5.0f MB/s median\n",
              "  sequential read", rs.min, rs.median, d.read_bw.min / 1e6, d.read_bw.median / 1e6);
}

void PrintVariant(const Variant& v, int64_t n, const DiskFigures& d, int64_t pool_bytes,
                  const std::string& write_cache) {
  const double b = v.bytes_each_way();
  const Stats cs = Summarise(v.ceiling_s);
  const double bound_best = n / cs.min, bound_median = n / cs.median;
  const double serial_best = Bound(b, d.read_bw.min, d.write_bw.min);
  const Stats ds = Summarise(v.disk_s), ws = Summarise(v.wait_s), ms = Summarise(v.memory_s);
  std::vector<double> wait_share;
  for (size_t i = 0; i < v.disk_s.size(); ++i) wait_share.push_back(v.wait_s[i] / v.disk_s[i]);
  const Stats share = Summarise(wait_share);
  std::printf("\nAdamW step, %s: %.0f bytes read + %.0f written per parameter on disk "
              "(this step moved %s + %s)\n", v.label.c_str(), b, b,
              FormatBytes(v.read_bytes).c_str(), FormatBytes(v.written_bytes).c_str());
  std::printf("  %-28s best %7.1f M params/s   median %7.1f M params/s   (the same pass without AdamW:\n"
              "  %-28s the disk through the step's pipeline, %.0f MB/s read + written at best)\n",
              "bound (disk)", bound_best / 1e6, bound_median / 1e6, "", 2 * b * bound_best / 1e6);
  std::printf("  %-28s best %7.1f M params/s (%6.3f s)   median %7.1f M params/s (%6.3f s)\n",
              "on disk", n / ds.min / 1e6, ds.min, n / ds.median / 1e6, ds.median);
  std::printf("  %-28s best %.0f%% of the best bound, median %.0f%% of the median bound; target >= 80%%\n",
              "", 100.0 * n / ds.min / bound_best, 100.0 * n / ds.median / bound_median);
  // The bound: bandwidth / bytes moved per parameter, from the pipelined read-alone
  // and write-alone passes (reads and writes share the device, so their times add).
  const Stats ro = Summarise(v.read_only_s), wo = Summarise(v.write_only_s);
  const double read_bw = b * n / ro.min, write_bw = b * n / wo.min;
  const double bw_bound = Bound(b, read_bw, write_bw);
  std::printf("  %-28s %.1f M params/s = 1 / (%.0f B / read + %.0f B / write) at the pipelined\n"
              "  %-28s read-alone %.0f MB/s and write-alone %.0f MB/s (best); on disk: %.0f%% of it, "
              "target >= 80%%\n",
              "bandwidth bound", bw_bound / 1e6, b, b, "", read_bw / 1e6, write_bw / 1e6,
              100.0 * n / ds.min / bw_bound);
  std::printf("  %-28s %.1f M params/s = 1 / (%.0f B / read + %.0f B / write) at the best one-at-a-time\n"
              "  %-28s probe bandwidths; the pipelined pass does %.1fx that%s\n",
              "serial probe figure", serial_best / 1e6, b, b, "", bound_best / serial_best,
              write_cache.empty() ? "" : (" (write cache: " + write_cache + ")").c_str());
  std::printf("  %-28s min %6.3f s (%.0f%% of the step)   median %6.3f s (%.0f%%)\n",
              "waiting on the disk", ws.min, 100.0 * share.min, ws.median, 100.0 * share.median);
  std::printf("  %-28s best %7.1f M params/s (%6.3f s)   median %7.1f M params/s (%6.3f s)   = %.1fx as fast as on disk (medians)\n",
              "in memory", n / ms.min / 1e6, ms.min, n / ms.median / 1e6, ms.median, ds.median / ms.median);
  std::printf("  %-28s %s (the buffer pool, --pool-mb %lld) vs %s in memory\n", "resident state",
              FormatBytes(v.disk->disk()->resident_bytes()).c_str(),
              static_cast<long long>(pool_bytes / kMiB), FormatBytes(static_cast<size_t>(n) * 4 * v.streams()).c_str());
  for (const std::string& note : v.disk->disk()->notes()) std::printf("  note: %s\n", note.c_str());
}

// ---- the training children ----

struct TrainRun {
  std::vector<double> step_s;  // steps after the first
  int64_t max_rss_bytes = 0;
};

// The trained model's optimizer state, from its config.
struct TrainModel {
  int64_t params = 0;
  int streams = 2;  // m, v; + the fp32 master weights when precision is not fp32
  std::string precision = "fp32";
};

struct TrainPlan {
  std::string self, config, scratch;
  int64_t steps = 0, seq = 0, batch = 0, pool_mb = 0;
  TrainModel model;
};

// The last lines of a child's log, for its failure message.
std::string Tail(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return "(no log: " + text.status().ToString() + ")";
  size_t at = text->size();
  for (int lines = 0; lines <= 12 && at > 0; ++lines) {
    const size_t nl = text->rfind('\n', at - 1);
    if (nl == std::string::npos) return *text;
    at = nl;
  }
  return text->substr(at + 1);
}

// Spawns `args`, output to `log`, and waits; its exit code and peak RSS.
Status SpawnAndWait(const std::vector<std::string>& args, const std::string& log, int* code, int64_t* rss) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(Errno("cannot create", log));
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fd, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  const int r = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fd);
  if (r != 0) return IoError("cannot start " + args[0] + ": " + std::strerror(r));
  int status = 0;
  struct rusage usage {};
  while (::wait4(pid, &status, 0, &usage) < 0) {
    if (errno != EINTR) return IoError(std::string("wait4: ") + std::strerror(errno));
  }
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  *rss = static_cast<int64_t>(usage.ru_maxrss) * 1024;  // KiB on Linux
  return Status::Ok();
}

// step_s of every line of a metrics.jsonl, the first step (warm-up) left out when there are more.
Result<std::vector<double>> StepSeconds(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  std::vector<double> out;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    auto v = ParseJson(std::string_view(text).substr(begin, end - begin), 256);
    begin = end + 1;
    const JsonValue* s = v.ok() ? v->Find("step_s") : nullptr;
    if (s != nullptr && s->is_number()) out.push_back(s->as_double());
  }
  if (out.empty()) return DataLoss(path + ": no step_s in any line");
  if (out.size() > 1) out.erase(out.begin());
  return out;
}

// `tessera train` with the state in memory (offload none) or on disk (nvme); its output,
// offload file and weights are removed once read, so the two runs never share the disk space.
Result<TrainRun> Train(const TrainPlan& p, bool nvme, int* child_code) {
  const std::string tag = nvme ? "nvme" : "none";
  const std::string out_dir = p.scratch + "/train-" + tag, offload_dir = p.scratch + "/train-offload";
  RETURN_IF_ERROR(MakeDirs(offload_dir));
  std::vector<std::string> args = {p.self, "train", p.config};
  for (const std::string& s : std::vector<std::string>{
           "train.steps=" + std::to_string(p.steps), "train.seq_len=" + std::to_string(p.seq),
           "train.micro_batch_size=" + std::to_string(p.batch), "train.grad_accum_steps=1",
           "train.log_interval=1", "train.eval_interval=0", "train.eval_batches=1",
           "train.out_dir=" + out_dir, "checkpoint.dir=", "resume=none", "optimizer.offload=" + tag,
           // offload_dir set beside offload none is a config error: cleared for that run
           "optimizer.offload_dir=" + (nvme ? offload_dir : std::string()),
           "optimizer.offload_buffer_mb=" + std::to_string(p.pool_mb)}) {
    args.insert(args.end(), {"--set", s});
  }
  const std::string log = p.scratch + "/train-" + tag + ".log";
  std::printf("  optimizer.offload %-4s ... ", tag.c_str());
  std::fflush(stdout);
  const auto t = BenchClock::now();
  TrainRun run;
  RETURN_IF_ERROR(SpawnAndWait(args, log, child_code, &run.max_rss_bytes));
  if (*child_code != 0) {
    std::printf("failed\n");
    return Internal("tessera train (offload " + tag + ") exited with " + std::to_string(*child_code) +
                    "; the end of its output:\n" + Tail(log));
  }
  ASSIGN_OR_RETURN(run.step_s, StepSeconds(out_dir + "/metrics.jsonl"));
  std::printf("done in %.1f s\n", Since(t));
  RETURN_IF_ERROR(DefaultFileSystem().RemoveTree(out_dir));
  RETURN_IF_ERROR(DefaultFileSystem().RemoveTree(offload_dir));
  return run;
}

void PrintTrain(const TrainPlan& p, const TrainRun& mem, const TrainRun& disk, const DiskFigures& d,
                int64_t spawn_rss) {
  const Stats m = Summarise(mem.step_s), o = Summarise(disk.step_s);
  const double n = static_cast<double>(p.model.params), b = 4.0 * p.model.streams;
  const int64_t saved = std::max<int64_t>(mem.max_rss_bytes - disk.max_rss_bytes, 0);
  std::printf("\ntraining: %s (%.2fM parameters, %s), micro-batch %lld x seq %lld (reduced to keep\n"
              "both runs near a minute; the optimizer step is the full model's either way),\n"
              "steps 2..%lld of %lld timed (the first warms up), from metrics.jsonl\n",
              p.config.c_str(), n / 1e6, p.model.precision.c_str(), static_cast<long long>(p.batch),
              static_cast<long long>(p.seq), static_cast<long long>(p.steps), static_cast<long long>(p.steps));
  std::printf("%-40s %10s %10s %12s\n", "", "min", "median", "peak RSS");
  std::printf("%-40s %8.3f s %8.3f s %12s\n", "  state in memory (offload none)", m.min, m.median,
              FormatBytes(mem.max_rss_bytes).c_str());
  std::printf("%-40s %8.3f s %8.3f s %12s\n", "  state on disk (offload nvme)", o.min, o.median,
              FormatBytes(disk.max_rss_bytes).c_str());
  std::printf("  offloaded step: +%.3f s (median - median); the disk's serial bound for its state\n"
              "  (%.0f B read + %.0f B written per parameter, median bandwidths) is %.3f s\n",
              o.median - m.median, b, b, b * n / d.read_bw.median + b * n / d.write_bw.median);
  std::printf("  peak RSS saved: %s (%.0f%% of the in-memory run's; its state is %s, the pool %lld MiB)\n",
              FormatBytes(saved).c_str(), 100.0 * saved / std::max<int64_t>(mem.max_rss_bytes, 1),
              FormatBytes(static_cast<size_t>(b * n)).c_str(), static_cast<long long>(p.pool_mb));
  std::printf("  (a child's peak RSS is at least this process's peak at the spawn: %s)\n",
              FormatBytes(spawn_rss).c_str());
}


struct Options {
  std::string parent, config;
  int64_t params = kDefaultParams, pool_mb = kDefaultPoolMb;
  int repeats = kDefaultRepeats;
  bool train = true;
  int64_t train_steps = kDefaultTrainSteps, train_seq = kDefaultTrainSeq, train_batch = kDefaultTrainBatch;
};

void PrintHelp() {
  std::printf(
      "usage: tessera bench offload [--dir DIR] [--params N] [--pool-mb M] [--repeats R]\n"
      "                             [--no-train] [--config FILE] [--train-steps K]\n"
      "                             [--train-seq L] [--train-batch B]\n\n"
      "The NVMe optimizer-offload tier (optimizer.offload: nvme) beside the disk it runs on,\n"
      "all measured in one run, min and median over R repeats:\n"
      "  disk      O_DIRECT sequential write (+ fdatasync) and read in DIR, aligned 8 MiB\n"
      "            transfers one at a time, a file of min(1 GiB, 4x the fp32 state);\n"
      "  AdamW     one rank's AdamW step over N parameters with the state on disk and in\n"
      "            memory: fp32 (m, v: 8 bytes read + 8 written per parameter) and bf16 +\n"
      "            fp32 master (m, v, master: 12 + 12). Parameters/s beside the bandwidth\n"
      "            bound, 1 / (B/read + B/write) at the read-alone and write-alone passes of\n"
      "            the step's own pipeline over a same-sized file (target >= 80%% of it), the\n"
      "            pass without the update (reads ahead and writes back in flight together,\n"
      "            as in the step), and the one-at-a-time probe's 1 / (B/read + B/write); the\n"
      "            share of the step spent waiting on the disk; the resident state (the pool).\n"
      "  training  `tessera train FILE` twice, optimizer.offload none and nvme: step time\n"
      "            (metrics.jsonl, the first step left out) and each run's peak RSS (wait4).\n"
      "The disk probe and the steps run in turn in every repeat, so all see the same load.\n"
      "Needs about 30 bytes of memory and 40 bytes of disk per parameter, plus the probe file.\n\n"
      "  --dir DIR         where to write: a fresh subdirectory of DIR, removed at the end\n"
      "                    (default $TMPDIR or /tmp); put it on the disk offload_dir will use\n"
      "  --params N        AdamW parameters (default %lld = 64 Mi; 1 to %lld)\n"
      "  --pool-mb M       the offload buffer pool, MiB (optimizer.offload_buffer_mb; default\n"
      "                    %lld, 1 to %lld)\n"
      "  --repeats R       timed repeats after one warm-up step (default %d, 1 to %d)\n"
      "  --no-train        skip the training runs\n"
      "  --config FILE     the model trained (default configs/gpt2-124m.yaml)\n"
      "  --train-steps K   steps per training run (default %lld, 2 to 100)\n"
      "  --train-seq L     train.seq_len (default %lld: GPT-2's 256 takes ~5 s a step on 2 cores)\n"
      "  --train-batch B   train.micro_batch_size (default %lld)\n",
      static_cast<long long>(kDefaultParams), static_cast<long long>(kMaxParams),
      static_cast<long long>(kDefaultPoolMb), static_cast<long long>(kMaxPoolMb), kDefaultRepeats,
      kMaxRepeats, static_cast<long long>(kDefaultTrainSteps), static_cast<long long>(kDefaultTrainSeq),
      static_cast<long long>(kDefaultTrainBatch));
}

// An integer flag in [lo, hi], or the usage error that names it (and the command, as
// ParseArgs' errors do).
Status IntIn(const ParsedArgs& a, const std::string& flag, int64_t lo, int64_t hi, int64_t* out) {
  auto v = ParseIntFlag(flag, a.Get(flag, std::to_string(*out)));
  if (!v.ok()) return InvalidArgument("tessera bench offload: " + v.status().message());
  if (*v < lo || *v > hi) {
    return InvalidArgument("tessera bench offload: " + flag + " must be between " + std::to_string(lo) +
                           " and " + std::to_string(hi) + ", got " + std::to_string(*v));
  }
  *out = *v;
  return Status::Ok();
}

Result<Options> ParseOptions(const Args& args) {
  ASSIGN_OR_RETURN(ParsedArgs a, ParseArgs(args, "bench offload",
                                           {"--dir", "--params", "--pool-mb", "--repeats", "--config",
                                            "--train-steps", "--train-seq", "--train-batch"},
                                           {"--no-train"}));
  if (!a.positional.empty()) {
    return InvalidArgument("tessera bench offload: unexpected argument '" + a.positional[0] + "' (see tessera bench offload --help)");
  }
  Options o;
  const char* tmp = std::getenv("TMPDIR");
  o.parent = a.Get("--dir", tmp != nullptr && *tmp != '\0' ? tmp : "/tmp");
  o.config = a.Get("--config", "configs/gpt2-124m.yaml");
  o.train = !a.Has("--no-train");
  int64_t repeats = kDefaultRepeats;
  RETURN_IF_ERROR(IntIn(a, "--params", 1, kMaxParams, &o.params));
  RETURN_IF_ERROR(IntIn(a, "--pool-mb", 1, kMaxPoolMb, &o.pool_mb));
  RETURN_IF_ERROR(IntIn(a, "--repeats", 1, kMaxRepeats, &repeats));
  RETURN_IF_ERROR(IntIn(a, "--train-steps", 2, 100, &o.train_steps));
  RETURN_IF_ERROR(IntIn(a, "--train-seq", 1, 1 << 20, &o.train_seq));
  RETURN_IF_ERROR(IntIn(a, "--train-batch", 1, 1 << 20, &o.train_batch));
  o.repeats = static_cast<int>(repeats);
  return o;
}

// The space the run needs where it writes, or the usage error that says how much is missing.
Status CheckResources(const Options& o, const std::string& dir, uint64_t probe_bytes, int64_t train_params) {
  const int64_t n = o.params;
  // params, grads (fp32), bf16 values, fp32 moments, master moments + master weights.
  const int64_t need_memory = n * 30 + 256 * kMiB;
  const int64_t available = MemAvailableBytes();
  if (available >= 0 && need_memory > available) {
    return InvalidArgument("--params " + std::to_string(n) + " needs " + FormatBytes(need_memory) +
                           " of memory, " + FormatBytes(available) + " is available");
  }
  // Both offload files and their bound's twins, the probe file, and one training run's offload
  // file and weights.
  const uint64_t need_disk = static_cast<uint64_t>(n) * 40 + probe_bytes +
                             static_cast<uint64_t>(train_params) * 12 + (uint64_t{256} << 20);
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    if (free_bytes < need_disk) {
      return InvalidArgument("needs " + FormatBytes(need_disk) + " free under " + o.parent + ", " +
                             FormatBytes(free_bytes) + " is");
    }
  }
  return Status::Ok();
}

// Every repeat: the disk probe, then each variant's disk and memory steps. Round 0 warms up.
Status Measure(const Options& o, DiskProbe& probe, std::vector<Variant>& variants, StepBuffers& b,
               std::vector<double>* write_s, std::vector<double>* read_s) {
  for (int r = 0; r <= o.repeats; ++r) {
    if (r > 0) {
      ASSIGN_OR_RETURN(double w, probe.TimeWrite());
      ASSIGN_OR_RETURN(double rd, probe.TimeRead());
      write_s->push_back(w);
      read_s->push_back(rd);
    }
    for (Variant& v : variants) RETURN_IF_ERROR(RunVariant(v, b, /*count=*/r > 0));
  }
  return Status::Ok();
}

void PrintSummary(const Options& o, const DiskFigures& d, const std::vector<Variant>& variants,
                  const TrainModel& model, const TrainRun* mem, const TrainRun* disk) {
  const int64_t n = o.params;
  std::printf("\nsummary (%lld AdamW parameters; bound: the same disk pass without AdamW, this run)\n",
              static_cast<long long>(n));
  std::printf("  %-34s %18s %18s   %s\n", "", "best / min", "median", "limit");
  std::printf("  %-34s %13.0f MB/s %13.0f MB/s\n", "disk write + fdatasync", d.write_bw.min / 1e6, d.write_bw.median / 1e6);
  std::printf("  %-34s %13.0f MB/s %13.0f MB/s\n", "disk read", d.read_bw.min / 1e6, d.read_bw.median / 1e6);
  for (const Variant& v : variants) {
    const Stats ds = Summarise(v.disk_s), ms = Summarise(v.memory_s);
    const Stats cs = Summarise(v.ceiling_s);
    const double bb = n / cs.min, bm = n / cs.median;
    std::printf("  %-34s %6.1f Mp/s (%3.0f%%) %6.1f Mp/s (%3.0f%%)   bound %.1f / %.1f Mp/s\n",
                ("AdamW " + v.short_label + ", on disk").c_str(), n / ds.min / 1e6, 100.0 * n / ds.min / bb,
                n / ds.median / 1e6, 100.0 * n / ds.median / bm, bb / 1e6, bm / 1e6);
    const double b = v.bytes_each_way();
    const double bw_bound = Bound(b, b * n / Summarise(v.read_only_s).min, b * n / Summarise(v.write_only_s).min);
    std::printf("  %-34s %6.1f Mp/s (%3.0f%%)                      bandwidth bound %.1f Mp/s\n",
                ("AdamW " + v.short_label + ", vs bandwidth").c_str(), n / ds.min / 1e6,
                100.0 * n / ds.min / bw_bound, bw_bound / 1e6);
    std::printf("  %-34s %11.1f Mp/s %13.1f Mp/s\n", ("AdamW " + v.short_label + ", in memory").c_str(),
                n / ms.min / 1e6, n / ms.median / 1e6);
  }
  if (mem != nullptr && disk != nullptr) {
    const Stats m = Summarise(mem->step_s), k = Summarise(disk->step_s);
    const double b = 4.0 * model.streams * static_cast<double>(model.params);
    const double train_disk_s = b / d.read_bw.median + b / d.write_bw.median;
    std::printf("  %-34s %13.3f s %15.3f s\n", "training step, offload none", m.min, m.median);
    std::printf("  %-34s %13.3f s %15.3f s   none + %.3f s (disk, serial)\n", "training step, offload nvme",
                k.min, k.median, train_disk_s);
    std::printf("  %-34s %s none, %s nvme, %s saved\n", "peak RSS", FormatBytes(mem->max_rss_bytes).c_str(),
                FormatBytes(disk->max_rss_bytes).c_str(),
                FormatBytes(std::max<int64_t>(mem->max_rss_bytes - disk->max_rss_bytes, 0)).c_str());
  }
  std::fflush(stdout);
}

int64_t OwnPeakRss() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

// Everything after the scratch directory exists; its caller removes it whatever happens.
// *child_code: a failed training run's exit code (0 otherwise), which the bench passes on.
Status RunInScratch(const Options& o, const std::string& dir, const TrainModel& model, int* child_code) {
  const int64_t n = o.params;
  const uint64_t probe_bytes =
      std::max<uint64_t>(std::min<uint64_t>(kMaxProbeBytes, static_cast<uint64_t>(n) * 8 * 4) /
                             kDirectAlign * kDirectAlign, kDirectAlign);
  RETURN_IF_ERROR(CheckResources(o, dir, probe_bytes, o.train ? model.params : 0));
  std::printf("tessera bench offload: %lld parameters, pool %lld MiB, %d timed repeats after 1 warm-up, "
              "%d threads, in %s (removed at the end)\n",
              static_cast<long long>(n), static_cast<long long>(o.pool_mb), o.repeats, cpu::NumThreads(),
              dir.c_str());
  std::optional<TrainRun> mem, disk;
  TrainPlan plan;
  const int64_t spawn_rss = OwnPeakRss();
  if (o.train) {  // first: see the file's contract (a child's peak RSS starts from ours)
    ASSIGN_OR_RETURN(std::string self, SelfPath("bench offload"));
    plan = {self, o.config, dir, o.train_steps, o.train_seq, o.train_batch, o.pool_mb, model};
    std::printf("\ntraining runs (%s, %lld steps each; figures below):\n", o.config.c_str(),
                static_cast<long long>(o.train_steps));
    ASSIGN_OR_RETURN(mem, Train(plan, /*nvme=*/false, child_code));
    ASSIGN_OR_RETURN(disk, Train(plan, /*nvme=*/true, child_code));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<DiskProbe> probe, DiskProbe::Create(dir, probe_bytes));
  StepBuffers buffers(n);
  std::vector<Variant> variants(2);
  variants[0].label = "fp32 (m, v)";
  variants[0].short_label = "fp32";
  variants[1].label = "bf16 + master (m, v, master)";
  variants[1].short_label = "bf16 + master";
  variants[1].master = true;
  for (Variant& v : variants) RETURN_IF_ERROR(MakeVariant(v, n, dir, o.pool_mb * kMiB, buffers));
  std::vector<double> write_s, read_s;
  RETURN_IF_ERROR(Measure(o, *probe, variants, buffers, &write_s, &read_s));
  const double bytes = static_cast<double>(probe->bytes());
  const DiskFigures d{BestRates(write_s, bytes), BestRates(read_s, bytes)};
  PrintDisk(*probe, write_s, read_s, d);
  const std::string write_cache = WriteCacheMode(dir);
  for (const Variant& v : variants) PrintVariant(v, n, d, o.pool_mb * kMiB, write_cache);
  if (o.train) PrintTrain(plan, *mem, *disk, d, spawn_rss);
  PrintSummary(o, d, variants, model, mem ? &*mem : nullptr, disk ? &*disk : nullptr);
  return Status::Ok();
}

}  // namespace

int RunBenchOffload(const Args& args) {
  if (WantsHelp(args)) {
    PrintHelp();
    return kExitOk;
  }
  auto options = ParseOptions(args);
  if (!options.ok()) {  // ParseArgs' messages name the command already
    std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return kExitUsage;
  }
  const Options& o = *options;
  TrainModel model;
  if (o.train) {  // the model's size, and a bad config refused before anything runs
    auto config = LoadConfig(o.config);
    if (!config.ok()) return Fail(config.status().ToString(), ExitCodeFor(config.status()));
    for (const ParamDecl& p : DeclareParameters(config->model)) model.params += p.shape.numel();
    if (config->precision != Precision::kFp32) {
      model.streams = 3;
      model.precision = config->precision == Precision::kBf16 ? "bf16" : "fp16";
    }
  }
  std::string templ = o.parent + "/tessera-bench-offload-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    return Fail("cannot create a scratch directory under " + o.parent + ": " + std::strerror(errno), kExitUsage);
  }
  int child_code = 0;
  const Status st = RunInScratch(o, templ, model, &child_code);
  if (Status rm = DefaultFileSystem().RemoveTree(templ); !rm.ok()) {
    std::fprintf(stderr, "tessera bench offload: cannot remove %s: %s\n", templ.c_str(), rm.ToString().c_str());
  }
  if (st.ok()) return kExitOk;
  // Not enough memory or disk, or an unusable --dir, is the command line's; a failed training
  // run's code is its own.
  const int code = child_code != 0 ? child_code
                   : st.code() == StatusCode::kInvalidArgument ? kExitUsage
                                                               : ExitCodeFor(st);
  return Fail(st.ToString(), code);
}

}  // namespace tessera::cli
