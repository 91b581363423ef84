// `switchml top --controller H:P`: a live view of a controller's switches and jobs, refreshed
// every --interval-s like `top` (tools/top_view.h draws it). On a terminal it redraws in place
// and `q` quits; otherwise (a pipe, a log) it prints one screen per refresh. --iterations N
// stops after N screens. The first ListJobs must succeed (a wrong address or credential is an
// error naming it, exit 1); a later failure is shown at the top of the screen and the view
// keeps retrying. Needs the operator credential, as `switchml jobs list`.
#include <poll.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "rendezvous/job_client.h"
#include "cli_util.h"
#include "commands.h"
#include "job_flags.h"
#include "top_view.h"

namespace switchml::tools {
namespace {

struct TopArgs {
  std::string controller = "127.0.0.1:50099";
  uint32_t rpc_timeout_ms = 5000;
  double interval_s = 1.0;
  uint32_t iterations = 0;  // 0 = until q or a signal
  OperatorTokenFlag operator_token;
  ClientTlsFlags tls;
};

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

// Raw keyboard input on a terminal (no echo, no line buffering), restored on destruction.
class RawTerminal {
 public:
  RawTerminal() {
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= ~tcflag_t(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  bool active() const { return active_; }

 private:
  termios saved_{};
  bool active_ = false;
};

// Waits up to `d` for `q` on the keyboard (true) or a signal.
bool WaitForQuit(const RawTerminal& term, std::chrono::milliseconds d) {
  const auto deadline = std::chrono::steady_clock::now() + d;
  while (!g_stop.load()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    if (!term.active()) {
      usleep(useconds_t(std::min<int64_t>(left.count(), 100) * 1000));
      continue;
    }
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (poll(&p, 1, int(std::min<int64_t>(left.count(), 100))) > 0) {
      char c = 0;
      if (read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q')) return true;
    }
  }
  return true;
}

int Run(const TopArgs& a) {
  if (!(a.interval_s >= 0.1 && a.interval_s <= 3600)) {
    std::cerr << "switchml top: --interval-s must be in [0.1, 3600], got " << a.interval_s << "\n";
    return 2;
  }
  auto cred = a.operator_token.Resolve("switchml top");
  if (!cred.ok()) {
    std::cerr << "switchml top: error: " << cred.status().ToString() << "\n";
    return 1;
  }
  auto tls = a.tls.Resolve();
  if (!tls.ok()) {
    std::cerr << "switchml top: error: " << tls.status().ToString() << "\n";
    return 1;
  }
  auto client = rendezvous::JobClient::Connect(a.controller,
                                               std::chrono::milliseconds(a.rpc_timeout_ms), *tls);
  if (!client.ok()) {
    std::cerr << "switchml top: error: " << client.status().ToString() << "\n";
    return 1;
  }
  (*client)->set_operator_token(cred->token);
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  RawTerminal term;
  const bool tty = isatty(STDOUT_FILENO) != 0;
  std::unique_ptr<TopSnapshot> previous;
  std::string last_error;
  for (uint32_t n = 0; a.iterations == 0 || n < a.iterations; ++n) {
    auto now = std::make_unique<TopSnapshot>();
    now->when = std::chrono::steady_clock::now();
    auto list = (*client)->ListJobs(&now->counters);
    if (!list.ok()) {
      if (previous == nullptr) {
        std::cerr << "switchml top: error: " << list.status().ToString() << "\n";
        return 1;
      }
      last_error = list.status().ToString();
    } else {
      now->list = std::move(*list);
      last_error.clear();
    }
    std::string screen;
    if (!last_error.empty()) {
      screen = "switchml top: the last refresh failed (retrying every " +
               StrPrintf("%.1f", a.interval_s) + " s): " + last_error + "\n";
      if (previous != nullptr) screen += RenderTop(nullptr, *previous, a.controller);
    } else {
      screen = RenderTop(previous.get(), *now, a.controller);
      previous = std::move(now);
    }
    if (tty) std::fputs("\x1b[H\x1b[2J", stdout);  // home, clear
    std::fputs(screen.c_str(), stdout);
    if (!tty) std::fputs("\n", stdout);
    std::fflush(stdout);
    if (a.iterations != 0 && n + 1 >= a.iterations) break;
    if (WaitForQuit(term, std::chrono::milliseconds(int64_t(a.interval_s * 1000)))) break;
  }
  return 0;
}

}  // namespace

Runner AddTopCommand(CLI::App& app) {
  auto a = std::make_shared<TopArgs>();
  app.add_option("--controller", a->controller, "Controller address host:port")->capture_default_str();
  app.add_option("--interval-s", a->interval_s, "Seconds between refreshes (0.1..3600)")
      ->capture_default_str();
  app.add_option("--iterations", a->iterations, "Stop after N screens (0 = until q or Ctrl-C)")
      ->capture_default_str();
  app.add_option("--rpc-timeout-ms", a->rpc_timeout_ms, "Deadline of each call to the controller")
      ->capture_default_str();
  a->operator_token.Register(app, "to send to the controller (gRPC metadata)");
  a->tls.Register(app);
  return [a] { return Run(*a); };
}

}  // namespace switchml::tools
