// tools/cli_util.h — small helpers shared by the `switchml` subcommands and the benchmark
// tools: size parsing, human-readable numbers, nccl-tests style tables, child processes with
// deadlines.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "switchml/status.h"

namespace CLI {
class App;
}

namespace switchml::tools {

// `--config FILE` for a long-running command (`switchml switch`, `switchml controller`): its
// long options read from a TOML file, one `name = value` per line with the option's name
// without the dashes (`io-threads = 4`, `bind = "10.0.0.254"`, `late-duplicate-guard = true`,
// a repeatable option as an array: `switch = ["h1:50099", "h2:50099"]`); options given on the
// command line win (docs/operations.md "Configuration files"). AddConfigFileOption declares the
// option (for --help and parsing); ExpandConfigFile, run on the command's arguments (after its
// name) before parsing, puts the file's options in front of them, leaving out those the
// command line gives. The file is read with CLI11's TOML parser. Errors name the file and the
// problem: unreadable, a [section], a key that names no option of `command`.
void AddConfigFileOption(CLI::App& app);
StatusOr<std::vector<std::string>> ExpandConfigFile(const CLI::App& command,
                                                    const std::vector<std::string>& args);

// "64MiB", "1M", "4096", "10e6"? — accepts an integer with an optional K/M/G (powers of 1000)
// or KiB/MiB/GiB (powers of 1024) suffix; names the problem on error.
StatusOr<uint64_t> ParseSize(const std::string& text);
std::string FormatBytes(uint64_t bytes);  // "64 MiB"

// The next two are inline so that tools which do not link cli_util.cc (dnn_bench) can use them.

// printf into a std::string.
__attribute__((format(printf, 1, 2))) inline std::string StrPrintf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string out(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, args);
  va_end(args);
  return out;
}

// One line (without the newline) of an nccl-tests style table: cell i right-aligned in
// widths[i] characters (wider cells overflow), cells separated by one space; fewer cells than
// widths end the line early. A `lead` character ('#' on header lines, ' ' on value lines, so
// that scripts can skip the header as comments) takes the first character of the first column.
inline std::string TableLine(std::span<const int> widths, const std::vector<std::string>& cells,
                             char lead = '\0') {
  std::string line;
  if (lead != '\0') line += lead;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i > 0) line += ' ';
    const int width = i < widths.size() ? widths[i] - (i == 0 && lead != '\0' ? 1 : 0) : 0;
    if (int(cells[i].size()) < width) line.append(size_t(width) - cells[i].size(), ' ');
    line += cells[i];
  }
  return line;
}

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
