// tools/cmd_bench_ckpt.cc — `tessera bench ckpt`: the checkpoint figures of issue 4, each beside
// the limit it should be judged against, all measured in one run:
//   disk        sequential write + fsync (and cold read-back) of a file of the state's size in
//               the same directory: the physical limit of a save (and of a cold load);
//   sync save   Checkpointer::Save with checkpoint.async: false (copy, CRC, write, fsync,
//               commit): what a save costs a trainer that waits for it;
//   async save  the training stall = time in Save plus in WaitForStateCopy when the next
//               optimizer update comes (after a simulated forward+backward of --step-ms), as a
//               percentage of the synchronous save (target <= 2 %), and the writer's throughput
//               (bytes / the manifest's write seconds) as a percentage of the disk's (target
//               >= 85 %);
//   load        CheckpointReader::Open + VerifyAll (from disk and from the page cache) and a
//               full verified LoadCheckpointInto a fresh ParamShards, checked bit for bit.
// The state is the config's model as one fp32 rank holds it under ZeRO 0 (parameters from
// InitParameterRange, both AdamW moments filled with non-trivial values): no model is built and
// nothing is trained. The disk probe and both saves run in turn in every repeat, so all see the
// same disk and load on a shared machine; the first save of each Checkpointer (which allocates
// and faults in its staging buffer) is reported on its own and kept out of the figures.
// Between repeats every committed checkpoint is removed, outside the timings, so at most one
// state is on disk at a time (retention is set so that a save never deletes while timed).
// Owns one scratch directory (made fresh, removed at the end). Thread-safety: main thread only
// (the Checkpointer runs its own writer thread).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/commit.h"
#include "checkpoint/shard_file.h"
#include "models/param_layout.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/memory.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/train/checkpointer.h"
#include "runtime/train/config.h"
#include "runtime/train/param_shards.h"
#include "tools/args.h"
#include "tools/cmd_bench.h"

namespace tessera::cli {
namespace {

constexpr int kDefaultRepeats = 3;
constexpr int kMaxRepeats = 100;
constexpr int64_t kDefaultStepMs = 1000;
constexpr int64_t kMaxStepMs = 600000;
constexpr size_t kDiskChunkBytes = size_t{8} << 20;  // 8 MiB writes and reads
constexpr int64_t kAdamWStep = 1000;                  // the saved optimizer step counter

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// A hashed value in [-1000, 1000] for flat element i (distinct neighbours, no pattern a
// disk or file system could exploit).
inline float Hashed(int64_t i, uint64_t salt) {
  uint64_t x = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + salt;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<float>(static_cast<int64_t>(x % 2001) - 1000);
}

// One disk probe: writes `bytes` to a new file in `dir` in 8 MiB chunks, fsyncs and closes it
// (timed: the write bandwidth), drops the file's pages from the page cache and reads it back
// (timed: the cold read bandwidth), then unlinks it.
struct DiskSample {
  double write_s = 0, read_s = 0;
};

Result<DiskSample> ProbeDisk(const std::string& dir, uint64_t bytes, const std::vector<char>& chunk) {
  const std::string path = dir + "/disk_probe.bin";
  DiskSample s;
  auto t = BenchClock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(Errno("cannot create", path));
  for (uint64_t done = 0; done < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), bytes - done));
    size_t off = 0;
    while (off < n) {
      const ssize_t w = ::write(fd, chunk.data() + off, n - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        Status st = IoError(Errno("cannot write", path));
        ::close(fd);
        ::unlink(path.c_str());
        return st;
      }
      off += static_cast<size_t>(w);
    }
    done += n;
  }
  if (::fsync(fd) != 0) {
    Status st = IoError(Errno("cannot fsync", path));
    ::close(fd);
    ::unlink(path.c_str());
    return st;
  }
  ::close(fd);
  s.write_s = Since(t);

  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError(Errno("cannot open", path));
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // clean after fsync: really dropped
  std::vector<char> in(chunk.size());
  t = BenchClock::now();
  for (uint64_t done = 0; done < bytes;) {
    const ssize_t r = ::read(fd, in.data(), in.size());
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      Status st = IoError(Errno("cannot read", path));
      ::close(fd);
      ::unlink(path.c_str());
      return st;
    }
    done += static_cast<uint64_t>(r);
  }
  s.read_s = Since(t);
  ::close(fd);
  ::unlink(path.c_str());
  return s;
}

// Drops the pages of every file in checkpoint directory `dir` from the page cache, so the next
// read comes from the disk (the files are fsynced, so their pages are clean and droppable).
void DropFromPageCache(const std::string& dir) {
  std::error_code ec;  // the non-throwing overloads: a listing error just leaves pages cached
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// The state one fp32 rank holds under ZeRO 0 for `model`: parameters as the trainer
// initialises them, moments of a trained-looking size (|m| <= 1e-3, 0 < v <= 1e-6).
Result<std::unique_ptr<ParamShards>> MakeState(const Config& config, bool fill) {
  ParamShardsOptions o;  // zero 0, fp32, one rank
  std::vector<ParamRange> ranges;
  int64_t offset = 0;
  for (const ParamDecl& d : DeclareParameters(config.model)) {
    // Weight decay does not matter here: no optimizer step is taken.
    ranges.push_back({offset, d.shape.numel(), true, d.name});
    offset += d.shape.numel();
  }
  ASSIGN_OR_RETURN(auto shards, ParamShards::Create(o, config.optimizer, UnitBounds(config.model),
                                                    ranges, nullptr, nullptr));
  if (fill) {
    RETURN_IF_ERROR(shards->Load([&](int64_t b, int64_t e, float* out) {
      InitParameterRange(config.model, config.train.seed, b, e, out);
    }));
    auto moment = [](uint64_t salt, float scale, float shift) {
      return [=](int64_t b, int64_t e, float* out) {
#pragma omp parallel for schedule(static)
        for (int64_t i = b; i < e; ++i) out[i - b] = scale * (Hashed(i, salt) + shift);
      };
    };
    RETURN_IF_ERROR(shards->LoadMoments(moment(1, 1e-6f, 0.0f), moment(2, 5e-10f, 1001.0f), kAdamWStep));
  }
  return shards;
}

// Whether two states hold the same bits (parameters, both moments, step counter).
bool SameState(const ParamShards& a, const ParamShards& b) {
  const auto sa = a.SaveSpans(), sb = b.SaveSpans();
  if (sa.size() != sb.size() || a.adamw_step() != b.adamw_step()) return false;
  for (size_t i = 0; i < sa.size(); ++i) {
    if (sa[i].begin != sb[i].begin || sa[i].end != sb[i].end) return false;
    const size_t bytes = static_cast<size_t>(sa[i].end - sa[i].begin) * sizeof(float);
    if (std::memcmp(sa[i].values, sb[i].values, bytes) != 0 ||
        std::memcmp(sa[i].exp_avg, sb[i].exp_avg, bytes) != 0 ||
        std::memcmp(sa[i].exp_avg_sq, sb[i].exp_avg_sq, bytes) != 0) {
      return false;
    }
  }
  return true;
}

// The simulated forward+backward of the step after a save: sleeping, or (busy) streaming
// memory on every thread the way training competes with the staging copy.
void SimulateStep(double seconds, UpdateBandwidthProbe* busy) {
  const auto t = BenchClock::now();
  if (busy == nullptr) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return;
  }
  while (Since(t) < seconds) busy->PassGbps();
}

struct AsyncSample {
  double in_save_s = 0, in_wait_s = 0, write_s = 0, committed_after_s = 0;
  uint64_t bytes = 0;
  double stall() const { return in_save_s + in_wait_s; }
};

// The benchmark proper; errors are Status (printed by the caller).
class CkptBench {
 public:
  CkptBench(Config sync_config, Config async_config, std::string dir, int repeats,
            double step_s, bool busy)
      : sync_config_(std::move(sync_config)), async_config_(std::move(async_config)),
        dir_(std::move(dir)), repeats_(repeats), step_s_(step_s), busy_(busy) {}

  Status Run() {
    ASSIGN_OR_RETURN(source_, MakeState(sync_config_, /*fill=*/true));
    int64_t n = 0;
    for (const auto& span : source_->SaveSpans()) n += span.end - span.begin;
    state_bytes_ = static_cast<uint64_t>(n) * 3 * sizeof(float);
    std::printf("tessera bench ckpt: %s, %.1fM parameters x (param, exp_avg, exp_avg_sq) fp32 = "
                "%.2f GB (%s), one rank, ZeRO 0\n",
                sync_config_.path.c_str(), n / 1e6, state_bytes_ / 1e9,
                FormatBytes(state_bytes_).c_str());
    std::printf("directory %s; %d repeat%s, each in turn: disk probe, synchronous save, "
                "asynchronous save\n", dir_.c_str(), repeats_, repeats_ == 1 ? "" : "s");
    std::printf("simulated forward+backward after an asynchronous save: %.0f ms %s\n",
                step_s_ * 1e3, busy_ ? "streaming memory on every thread (--busy)" : "asleep");

    std::vector<char> chunk(kDiskChunkBytes);
    for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<char>(Hashed(static_cast<int64_t>(i), 3));
    std::unique_ptr<UpdateBandwidthProbe> probe;
    if (busy_) probe = std::make_unique<UpdateBandwidthProbe>();

    const std::string sync_root = dir_ + "/sync", async_root = dir_ + "/async";
    sync_config_.checkpoint.dir = sync_root;
    async_config_.checkpoint.dir = async_root;
    ASSIGN_OR_RETURN(auto sync_ckpt, Checkpointer::Create(sync_config_, nullptr, nullptr));
    ASSIGN_OR_RETURN(auto async_ckpt, Checkpointer::Create(async_config_, nullptr, nullptr));

    // First saves: each Checkpointer allocates (and the kernel faults in) its staging buffer.
    int64_t step = 1;
    auto t = BenchClock::now();
    RETURN_IF_ERROR(SyncSave(*sync_ckpt, step));
    const double first_sync = Since(t);
    ASSIGN_OR_RETURN(AsyncSample first_async, AsyncSave(*async_ckpt, step, probe.get()));
    std::printf("first saves (allocate and fault in the staging buffer; not in the figures): "
                "synchronous %.2f s, asynchronous stall %.0f ms\n",
                first_sync, first_async.stall() * 1e3);
    std::fflush(stdout);

    std::vector<double> disk_w, disk_r, sync_s, stall_s, in_save_s, in_wait_s, write_s, committed_s;
    for (int r = 0; r < repeats_; ++r) {
      ++step;
      // One state on disk at a time: what the previous repeat left goes first (untimed).
      RETURN_IF_ERROR(RemoveCommitted(sync_root));
      RETURN_IF_ERROR(RemoveCommitted(async_root));
      ASSIGN_OR_RETURN(DiskSample d, ProbeDisk(dir_, state_bytes_, chunk));
      disk_w.push_back(d.write_s);
      disk_r.push_back(d.read_s);
      t = BenchClock::now();
      RETURN_IF_ERROR(SyncSave(*sync_ckpt, step));
      sync_s.push_back(Since(t));
      RETURN_IF_ERROR(RemoveCommitted(sync_root));
      ASSIGN_OR_RETURN(AsyncSample a, AsyncSave(*async_ckpt, step, probe.get()));
      stall_s.push_back(a.stall());
      in_save_s.push_back(a.in_save_s);
      in_wait_s.push_back(a.in_wait_s);
      write_s.push_back(a.write_s);
      committed_s.push_back(a.committed_after_s);
    }
    sync_ckpt.reset();
    async_ckpt.reset();  // frees the staging buffers before the load's state is reserved

    const Stats dw = Summarise(disk_w), dr = Summarise(disk_r), sy = Summarise(sync_s),
                st = Summarise(stall_s), ss = Summarise(in_save_s), sw = Summarise(in_wait_s),
                wr = Summarise(write_s), ca = Summarise(committed_s);
    const double gb = state_bytes_ / 1e9;
    std::printf("\n%-46s %10s %10s\n", "", "min", "median");
    std::printf("disk, %s (the limit)\n", FormatBytes(state_bytes_).c_str());
    PrintTime("  write in 8 MiB chunks + fsync", dw, gb);
    PrintTime("  read back, cold (pages dropped)", dr, gb);
    std::printf("synchronous save\n");
    PrintTime("  Save: copy, CRC, write, fsync, commit", sy, gb);
    std::printf("asynchronous save\n");
    std::printf("%-46s %8.1f ms %7.1f ms   = %.2f%% (min/min), %.2f%% (median/median) of the "
                "synchronous save; target <= 2%%\n",
                "  training stall", st.min * 1e3, st.median * 1e3, 100.0 * st.min / sy.min,
                100.0 * st.median / sy.median);
    std::printf("%-46s %8.1f ms %7.1f ms\n", "    in Save", ss.min * 1e3, ss.median * 1e3);
    std::printf("%-46s %8.1f ms %7.1f ms\n", "    in WaitForStateCopy", sw.min * 1e3, sw.median * 1e3);
    PrintTime("  write: copy, CRC, write, fsync (writer)", wr, gb);
    std::printf("%-46s %9.0f%% %9.0f%%   of the disk's write bandwidth (best/best, "
                "median/median); target >= 85%%\n",
                "    write throughput", 100.0 * dw.min / wr.min, 100.0 * dw.median / wr.median);
    std::printf("%-46s %8.2f s %8.2f s\n", "  committed, after Save began", ca.min, ca.median);
    std::fflush(stdout);

    return Load(async_root, step, gb, dr);
  }

 private:
  static JsonValue Layout() {
    return JsonValue::Object({{"dp", JsonValue::Integer(1)},
                              {"tp", JsonValue::Integer(1)},
                              {"pp", JsonValue::Integer(1)},
                              {"ep", JsonValue::Integer(1)},
                              {"zero", JsonValue::Integer(0)},
                              {"precision", JsonValue::String("fp32")}});
  }
  JsonValue State(int64_t step) const {
    return JsonValue::Object({{"step", JsonValue::Integer(step)},
                              {"data_epoch", JsonValue::Integer(0)},
                              {"data_index", JsonValue::Integer(step)},
                              {"adamw_step", JsonValue::Integer(source_->adamw_step())},
                              {"seed", JsonValue::Integer(static_cast<int64_t>(sync_config_.train.seed))}});
  }

  // A save that must have committed (a failed save is accounted, not returned, by Checkpointer).
  Status Committed(const Checkpointer& c, int64_t committed_before, int64_t step) {
    if (c.stats().committed != committed_before + 1) {
      return IoError("the save of step " + std::to_string(step) +
                     " did not commit (see the messages above)");
    }
    return Status::Ok();
  }

  Status SyncSave(Checkpointer& c, int64_t step) {
    const int64_t before = c.stats().committed;
    RETURN_IF_ERROR(c.Save(step, *source_, State(step), Layout()));
    return Committed(c, before, step);
  }

  // What the trainer does: Save at the end of step N, the next step's forward+backward, then
  // WaitForStateCopy before its optimizer update; the write completes in the background
  // (here: waited for, outside the stall, so the next repeat starts clean).
  Result<AsyncSample> AsyncSave(Checkpointer& c, int64_t step, UpdateBandwidthProbe* busy) {
    const int64_t before = c.stats().committed;
    AsyncSample s;
    const auto t0 = BenchClock::now();
    RETURN_IF_ERROR(c.Save(step, *source_, State(step), Layout()));
    s.in_save_s = Since(t0);
    SimulateStep(step_s_, busy);
    const auto t1 = BenchClock::now();
    c.WaitForStateCopy();
    s.in_wait_s = Since(t1);
    RETURN_IF_ERROR(c.Poll(/*block=*/true));
    s.committed_after_s = Since(t0);
    RETURN_IF_ERROR(Committed(c, before, step));
    s.write_s = c.stats().last_write_seconds;
    s.bytes = c.stats().last_bytes;
    return s;
  }

  // Removes every committed checkpoint of `root` (untimed), so the saves always find the
  // same free space and at most one state is on disk at a time.
  static Status RemoveCommitted(const std::string& root) {
    ASSIGN_OR_RETURN(std::vector<int64_t> steps, CommittedSteps(root));
    for (int64_t s : steps) RETURN_IF_ERROR(DefaultFileSystem().RemoveTree(root + "/" + StepDirName(s)));
    return Status::Ok();
  }

  // "label   min s   median s   = best MB/s, median MB/s" for `gb` gigabytes moved.
  static void PrintTime(const char* label, Stats s, double gb) {
    std::printf("%-46s %8.3f s %8.3f s   = %5.0f MB/s best, %5.0f MB/s median\n", label, s.min,
                s.median, gb * 1e3 / s.min, gb * 1e3 / s.median);
  }

  Status Load(const std::string& root, int64_t step, double gb, Stats disk_read) {
    const std::string dir = root + "/" + StepDirName(step);
    ASSIGN_OR_RETURN(auto target, MakeState(sync_config_, /*fill=*/false));
    std::vector<double> cold, warm, load;
    uint64_t verified = 0;
    for (int r = 0; r < repeats_; ++r) {
      DropFromPageCache(dir);
      auto t = BenchClock::now();
      ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(dir));
      ASSIGN_OR_RETURN(verified, reader->VerifyAll());
      cold.push_back(Since(t));
      t = BenchClock::now();
      ASSIGN_OR_RETURN(auto again, CheckpointReader::Open(dir));
      ASSIGN_OR_RETURN(verified, again->VerifyAll());
      warm.push_back(Since(t));
      DropFromPageCache(dir);
      t = BenchClock::now();
      ASSIGN_OR_RETURN(auto loader, CheckpointReader::Open(dir));
      RETURN_IF_ERROR(LoadCheckpointInto(*loader, sync_config_.model, *target, /*with_optimizer=*/true));
      load.push_back(Since(t));
    }
    if (verified != state_bytes_) {
      return Internal("VerifyAll verified " + std::to_string(verified) + " bytes, the state has " +
                      std::to_string(state_bytes_));
    }
    const bool same = SameState(*source_, *target);
    const Stats c = Summarise(cold), w = Summarise(warm), l = Summarise(load);
    std::printf("load (the last asynchronous checkpoint)\n");
    PrintTime("  Open + VerifyAll, cold (pages dropped)", c, gb);
    std::printf("%-46s %9.0f%% %9.0f%%   of the disk's cold read bandwidth\n", "    verify throughput",
                100.0 * disk_read.min / c.min, 100.0 * disk_read.median / c.median);
    PrintTime("  Open + VerifyAll, from the page cache", w, gb);
    PrintTime("  LoadCheckpointInto a fresh state, cold", l, gb);
    std::printf("%-46s %s\n", "    loaded state",
                same ? "bit-identical to the saved one (params, moments, step)"
                     : "DIFFERS from the saved one");
    std::fflush(stdout);
    if (!same) return Internal("the loaded state differs from the saved one");
    return Status::Ok();
  }

  Config sync_config_, async_config_;  // outlive the Checkpointers that reference them
  std::string dir_;
  int repeats_;
  double step_s_;
  bool busy_;
  std::unique_ptr<ParamShards> source_;
  uint64_t state_bytes_ = 0;
};

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "tessera bench ckpt: %s\n", message.c_str());
  return code;
}

}  // namespace

int RunBenchCkpt(const Args& args) {
  if (WantsHelp(args)) {
    std::printf(
        "usage: tessera bench ckpt [--config FILE] [--dir DIR] [--repeats R] [--step-ms MS] [--busy]\n\n"
        "Checkpoint save and load speed for the state of FILE's model as one fp32 rank holds it\n"
        "(parameters + AdamW exp_avg + exp_avg_sq: 12 bytes per parameter, about 1.49 GB for\n"
        "GPT-2 124M), each figure beside the limit it should be judged against, measured in the\n"
        "same run. Each repeat runs, in turn:\n"
        "  disk probe   write a file of the state's size in 8 MiB chunks, fsync (the write\n"
        "               bandwidth: the limit of a save), drop it from the page cache and read\n"
        "               it back (the cold read bandwidth), unlink it;\n"
        "  sync save    Checkpointer::Save with checkpoint.async: false: copy, CRC-32C, write,\n"
        "               fsync and commit, all while training waits;\n"
        "  async save   Save, then the next step's forward+backward (simulated: --step-ms),\n"
        "               then WaitForStateCopy before its optimizer update. The training stall\n"
        "               is the time spent in those two calls, printed as %% of the synchronous\n"
        "               save (target <= 2%%); the write throughput is the state's bytes over the\n"
        "               writer's time (copy, CRC, write, fsync; the manifest's write_seconds),\n"
        "               as %% of the disk's (target >= 85%%).\n"
        "Then, on the last asynchronous checkpoint: Open + VerifyAll with the files' pages\n"
        "dropped from the page cache and from the page cache, and a full verified load into a\n"
        "fresh state (LoadCheckpointInto), checked bit for bit against what was saved.\n"
        "Figures are min and median over the repeats; the first save of each kind (which\n"
        "allocates the staging buffer) is printed apart. Needs about 2x the state on disk\n"
        "and 3.5x in memory. No model is built and nothing is trained.\n\n"
        "  --config FILE  the model whose state is saved (default configs/gpt2-124m.yaml);\n"
        "                 its parallel, precision and checkpoint keys are not used\n"
        "  --set k=v      override keys of --config (e.g. --set model.num_layers=6)\n"
        "  --dir DIR      where to write: a fresh subdirectory of DIR, removed at the end\n"
        "                 (default /tmp); put it on the file system checkpoints will use\n"
        "  --repeats R    timed repeats (default %d, 1 to %d)\n"
        "  --step-ms MS   the simulated forward+backward after an asynchronous save (default\n"
        "                 %lld: about one GPT-2 124M step at batch 4 x 64 on this machine's\n"
        "                 CPUs; use your real step time). The staging copy must fit in it for\n"
        "                 the stall to be small; 0 shows the whole copy as stall.\n"
        "  --busy         stream memory on every thread during the simulated step instead of\n"
        "                 sleeping, so the staging copy competes for cores and memory\n"
        "                 bandwidth as it does beside a real forward+backward\n",
        kDefaultRepeats, kMaxRepeats, static_cast<long long>(kDefaultStepMs));
    return kExitOk;
  }
  auto parsed = ParseArgs(args, "bench ckpt", {"--config", "--set", "--dir", "--repeats", "--step-ms"}, {"--busy"});
  if (!parsed.ok()) return Fail(parsed.status().ToString(), kExitUsage);
  if (!parsed->positional.empty()) {
    return Fail("unexpected argument '" + parsed->positional[0] + "' (see tessera bench ckpt --help)", kExitUsage);
  }
  auto repeats = ParseIntFlag("--repeats", parsed->Get("--repeats", std::to_string(kDefaultRepeats)));
  auto step_ms = ParseIntFlag("--step-ms", parsed->Get("--step-ms", std::to_string(kDefaultStepMs)));
  for (const auto* r : {&repeats, &step_ms}) {
    if (!r->ok()) return Fail(r->status().ToString(), kExitUsage);
  }
  if (*repeats < 1 || *repeats > kMaxRepeats) {
    return Fail("--repeats must be between 1 and " + std::to_string(kMaxRepeats) + ", got " +
                std::to_string(*repeats), kExitUsage);
  }
  if (*step_ms > kMaxStepMs) {
    return Fail("--step-ms must be at most " + std::to_string(kMaxStepMs) + ", got " + std::to_string(*step_ms), kExitUsage);
  }
  auto config = LoadConfig(parsed->Get("--config", "configs/gpt2-124m.yaml"), parsed->All("--set"));
  if (!config.ok()) return Fail(config.status().ToString(), ExitCodeFor(config.status()));

  // The state's size, for the memory and disk checks before anything is allocated.
  int64_t n = 0;
  for (const ParamDecl& d : DeclareParameters(config->model)) n += d.shape.numel();
  const uint64_t state_bytes = static_cast<uint64_t>(n) * 12;
  // Source state (params, grads, 2 moments: 16 B/param) + two staging buffers (2 x 12), and
  // later the load's state (16) after the staging buffers are gone.
  const int64_t need_memory = n * 40 + (int64_t{256} << 20);
  const int64_t available = MemAvailableBytes();
  if (available >= 0 && need_memory > available) {
    return Fail("needs " + FormatBytes(need_memory) + " of memory, " + FormatBytes(available) +
                " is available", kExitUsage);
  }

  const std::string parent = parsed->Get("--dir", "/tmp");
  std::string templ = parent + "/tessera-bench-ckpt-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    return Fail("cannot create a scratch directory under " + parent + ": " + std::strerror(errno), kExitUsage);
  }
  const std::string dir = templ;
  struct statvfs fs_info;
  if (statvfs(dir.c_str(), &fs_info) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(fs_info.f_bavail) * fs_info.f_frsize;
    const uint64_t need_disk = state_bytes * 2 + (uint64_t{256} << 20);
    if (free_bytes < need_disk) {
      (void)DefaultFileSystem().RemoveTree(dir);
      return Fail("needs " + FormatBytes(need_disk) + " free under " + parent + ", " +
                  FormatBytes(free_bytes) + " is", kExitUsage);
    }
  }

  Config sync_config = *config, async_config = *config;
  for (Config* c : {&sync_config, &async_config}) {
    c->checkpoint.interval_steps = 1;
    c->checkpoint.at_end = false;
    c->checkpoint.keep_last = 1000000;  // retention never deletes inside a timed save
    c->checkpoint.keep_every = 0;
    c->checkpoint.on_busy = CheckpointOnBusy::kWait;
    c->checkpoint.max_failures = 1;
  }
  sync_config.checkpoint.async = false;
  async_config.checkpoint.async = true;
  Status st = Status::Ok();
  {
    CkptBench bench(std::move(sync_config), std::move(async_config), dir, static_cast<int>(*repeats),
                    static_cast<double>(*step_ms) / 1e3, parsed->Has("--busy"));
    st = bench.Run();
  }
  if (Status rm = DefaultFileSystem().RemoveTree(dir); !rm.ok()) {
    std::fprintf(stderr, "tessera bench ckpt: cannot remove %s: %s\n", dir.c_str(), rm.ToString().c_str());
  }
  if (!st.ok()) return Fail(st.ToString(), ExitCodeFor(st));
  return kExitOk;
}

}  // namespace tessera::cli
