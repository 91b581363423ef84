#include "cli_util.h"

#include "common/small_file.h"

#include <CLI/CLI.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <deque>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace switchml::tools {

StatusOr<uint64_t> ParseSize(const std::string& text) {
  if (text.empty()) return InvalidArgumentError("size is empty");
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    const uint64_t d = uint64_t(text[i] - '0');
    if (value > (UINT64_MAX - d) / 10) return InvalidArgumentError("size '" + text + "' is too large");
    value = value * 10 + d;
    ++i;
  }
  if (i == 0) return InvalidArgumentError("size '" + text + "' must start with a number");
  std::string suffix = text.substr(i);
  for (auto& c : suffix) c = char(std::tolower(static_cast<unsigned char>(c)));
  uint64_t mult = 1;
  if (suffix.empty() || suffix == "b") mult = 1;
  else if (suffix == "k" || suffix == "kb") mult = 1000;
  else if (suffix == "m" || suffix == "mb") mult = 1000 * 1000;
  else if (suffix == "g" || suffix == "gb") mult = 1000 * 1000 * 1000;
  else if (suffix == "ki" || suffix == "kib") mult = 1ull << 10;
  else if (suffix == "mi" || suffix == "mib") mult = 1ull << 20;
  else if (suffix == "gi" || suffix == "gib") mult = 1ull << 30;
  else return InvalidArgumentError("size '" + text + "' has an unknown suffix '" + text.substr(i) +
                                   "' (use K, M, G, KiB, MiB or GiB)");
  if (value > UINT64_MAX / mult) return InvalidArgumentError("size '" + text + "' is too large");
  return value * mult;
}

std::string FormatBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = double(bytes);
  while (v >= 1024 && u < 4 && (bytes % 1024 == 0 || v >= 10 * 1024)) {
    v /= 1024;
    ++u;
    if (bytes % 1024 != 0) break;
    bytes /= 1024;
  }
  char buf[64];
  if (v == double(uint64_t(v))) std::snprintf(buf, sizeof buf, "%llu %s", (unsigned long long)v, units[u]);
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string SelfExe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "switchml";
  buf[n] = 0;
  return buf;
}

StatusOr<Child> Spawn(const std::string& name, const std::vector<std::string>& argv,
                      const std::string& log_path) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addclose(&fa, 0);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  Child c;
  c.name = name;
  c.log_path = log_path;
  int rc = posix_spawn(&c.pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return UnavailableError("cannot start " + name + " (" + argv[0] + "): " + std::strerror(rc));
  return c;
}

namespace {
void Reap(Child& c, int options) {
  if (c.exited || c.pid <= 0) return;
  int status = 0;
  pid_t r = waitpid(c.pid, &status, options);
  if (r == c.pid) {
    c.exited = true;
    if (WIFEXITED(status)) c.exit_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) c.exit_code = 128 + WTERMSIG(status);
  }
}
}  // namespace

bool StillRunning(Child& c) {
  Reap(c, WNOHANG);
  return !c.exited;
}

void WaitAll(std::vector<Child*> children, std::chrono::steady_clock::time_point deadline) {
  while (true) {
    bool all = true;
    for (Child* c : children) {
      Reap(*c, WNOHANG);
      all = all && c->exited;
    }
    if (all) return;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (Child* c : children) {
    if (!c->exited) {
      kill(c->pid, SIGKILL);
      c->killed = true;
      Reap(*c, 0);
    }
  }
}

void Terminate(Child& c, std::chrono::milliseconds grace) {
  if (c.pid <= 0 || c.exited) return;
  kill(c.pid, SIGTERM);
  WaitAll({&c}, std::chrono::steady_clock::now() + grace);
}

std::string Tail(const std::string& path, int lines) {
  std::ifstream in(path);
  std::deque<std::string> q;
  std::string line;
  while (std::getline(in, line)) {
    q.push_back(line);
    if (int(q.size()) > lines) q.pop_front();
  }
  std::ostringstream os;
  for (auto& l : q) os << "    " << l << "\n";
  return os.str();
}

void AddConfigFileOption(CLI::App& app) {
  app.add_option("--config", "Read options from a TOML file (`name = value` per line, the long "
                             "option's name without dashes; a repeatable option as an array); "
                             "the command line wins");
}

StatusOr<std::vector<std::string>> ExpandConfigFile(const CLI::App& command,
                                                    const std::vector<std::string>& args) {
  std::string path;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) return InvalidArgumentError("--config needs a FILE");
      path = args[++i];
    } else if (args[i].starts_with("--config=")) {
      path = args[i].substr(9);
    } else {
      rest.push_back(args[i]);
    }
  }
  if (path.empty()) return args;
  const std::string where = "--config " + path;
  // A directory, a FIFO or /dev/zero would make the parser wait or read forever.
  if (Status s = CheckSmallFile(path, "--config", 1 << 20); !s.ok()) return s;
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::Error& e) {
    return InvalidArgumentError(where + ": " + e.what());
  }
  // What the command line gives itself: those keys of the file are left out.
  auto on_command_line = [&](const std::string& name) {
    for (const std::string& a : rest) {
      if (a == "--" + name || a.starts_with("--" + name + "=")) return true;
    }
    return false;
  };
  std::vector<std::string> out;
  for (const CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--" || !item.parents.empty()) {
      return InvalidArgumentError(where + ": sections are not supported ('" + item.fullname() +
                                  "'); write every option at the top level");
    }
    const CLI::Option* op = command.get_option_no_throw("--" + item.name);
    if (op == nullptr || item.name == "config" || item.name == "help") {
      return InvalidArgumentError(where + ": unknown key '" + item.name + "': not an option of `" +
                                  command.get_name() + "` (see its --help)");
    }
    if (on_command_line(item.name)) continue;
    if (op->get_expected_max() == 0) {  // a flag: `name = true` or `name = false`
      for (const std::string& v : item.inputs) out.push_back("--" + item.name + "=" + v);
      continue;
    }
    for (const std::string& v : item.inputs) {
      out.push_back("--" + item.name);
      out.push_back(v);
    }
  }
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

}  // namespace switchml::tools
