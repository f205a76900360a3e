// tests/e2e/cli_util.h — run the real `tessera` binary (or any command) and capture what it
// printed, for end-to-end tests. Each test works in its own fresh temporary directory.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/testing/temp_dir.h"

namespace tessera::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr interleaved
};

inline CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// `tessera <args>` with the binary under test.
inline CommandResult Tessera(const std::string& args) {
  return RunCommand(std::string(TESSERA_BINARY) + " " + args);
}

inline std::string Repo(const std::string& rel) { return std::string(TESSERA_SOURCE_DIR) + "/" + rel; }

// Each test works in a fresh directory: TempDir dir("tag"); dir / "file".
using TempDir = ScopedTempDir;

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A `tessera train` started in the background (stdout and stderr to a log file), so the test
// can damage its data mid-run. The destructor kills a job that is still running.
class BackgroundRun {
 public:
  BackgroundRun(const std::string& args, const std::string& log) : log_(log) {
    pid_ = fork();
    if (pid_ == 0) {
      const std::string cmd = "exec " + std::string(TESSERA_BINARY) + " " + args + " >" + log +
                              " 2>&1";
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~BackgroundRun() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // Sends `signo` to the job.
  bool Signal(int signo) { return kill(pid_, signo) == 0; }
  // Pauses the job (every thread) so the test's damage lands between two of its reads.
  bool Stop() {
    if (kill(pid_, SIGSTOP) != 0) return false;
    int status = 0;
    return waitpid(pid_, &status, WUNTRACED) == pid_ && WIFSTOPPED(status);
  }
  void Continue() { kill(pid_, SIGCONT); }
  // The exit code (128 + signal for a signal), or -1 when it still runs after `limit`.
  int Wait(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  bool Running() {
    int status = 0;
    if (reaped_ || waitpid(pid_, &status, WNOHANG) != 0) {
      reaped_ = true;
      return false;
    }
    return true;
  }
  std::string Output() const { return ReadFile(log_); }

 private:
  std::string log_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

}  // namespace tessera::testing
