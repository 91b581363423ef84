// tools/cli_util.h — small helpers shared by the `switchml` subcommands: size parsing,
// human-readable numbers, child processes with deadlines.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "switchml/status.h"

namespace switchml::tools {

// "64MiB", "1M", "4096", "10e6"? — accepts an integer with an optional K/M/G (powers of 1000)
// or KiB/MiB/GiB (powers of 1024) suffix; names the problem on error.
StatusOr<uint64_t> ParseSize(const std::string& text);
std::string FormatBytes(uint64_t bytes);  // "64 MiB"

// A child process running `argv` (argv[0] = program path) with stdout+stderr to `log_path`.
struct Child {
  pid_t pid = -1;
  std::string name;
  std::string log_path;
  int exit_code = -1;   // valid once exited
  bool exited = false;
  bool killed = false;  // killed by us after the deadline
};
StatusOr<Child> Spawn(const std::string& name, const std::vector<std::string>& argv,
                      const std::string& log_path);
// Waits for all children until `deadline`; kills (SIGKILL) those still running then.
void WaitAll(std::vector<Child*> children, std::chrono::steady_clock::time_point deadline);
// Reaps the child if it has exited (never blocks); returns true while it runs.
bool StillRunning(Child& c);
// Sends SIGTERM, waits up to `grace`, then SIGKILL. Fills exit_code.
void Terminate(Child& c, std::chrono::milliseconds grace);
// Last `lines` lines of a file (for error reports).
std::string Tail(const std::string& path, int lines);
std::string SelfExe();

}  // namespace switchml::tools
