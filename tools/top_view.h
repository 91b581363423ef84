// tools/top_view.h — what `switchml top` shows: one screen of switches and jobs from two
// snapshots of a controller's ListJobs (its JobList and switch counters), with rates over the
// time between them. Pure (no I/O), so that the screen's contents are unit-tested; cmd_top.cc
// fetches the snapshots, clears the terminal and reads the keyboard.
//
//   TopSnapshot now{.when = steady_clock::now(), .list = *list, .counters = counters};
//   std::string screen = RenderTop(&previous, now, "10.0.0.1:50099");   // or nullptr first
//
// Thread-compatible.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "control/switch_control.h"

namespace switchml::tools {

struct TopSnapshot {
  std::chrono::steady_clock::time_point when{};
  control::JobList list;
  // The switch counters as ListJobs returns them: a switch's own names, or a standalone
  // controller's "switch<i>.<name>".
  std::vector<std::pair<std::string, uint64_t>> counters;
};

// The screen for `now`, rates against `previous` (nullptr: the first screen, rates shown as
// "-"). One line per switch (datagrams in and out per second, drops per second, rounds per
// second, two-level uplink traffic, health) and per job (state, workers registered of the
// job's, slots, datagrams and rounds per second, drops per second, idle time, name or end
// reason), job 0 (the reference session) first when it has a session.
std::string RenderTop(const TopSnapshot* previous, const TopSnapshot& now,
                      const std::string& controller);

// A job's datagrams dropped for any reason (its JobCounters' drop buckets).
uint64_t JobDrops(const control::JobCounters& c);

}  // namespace switchml::tools
