#include "top_view.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>

#include "cli_util.h"
#include "dataplane/switch_counters.h"

namespace switchml::tools {

uint64_t JobDrops(const control::JobCounters& c) {
  return c.duplicates_dropped + c.late_duplicates_dropped + c.size_mismatch +
         c.slot_out_of_range + c.too_large + c.not_running + c.wrong_io_thread;
}

namespace {

// One switch's counters: "" for a switch's own controller, "switch<i>" for a standalone one's.
struct SwitchTotals {
  uint64_t received = 0, sent = 0, drops = 0, rounds = 0, uplink = 0;
  bool has_uplink = false;
};

std::map<std::string, SwitchTotals> BySwitch(
    const std::vector<std::pair<std::string, uint64_t>>& counters) {
  std::map<std::string, SwitchTotals> out;
  for (const auto& [full, v] : counters) {
    const size_t dot = full.rfind('.');
    const std::string sw = dot == std::string::npos ? "" : full.substr(0, dot);
    const std::string name = dot == std::string::npos ? full : full.substr(dot + 1);
    SwitchTotals& t = out[sw];
    if (name == "datagrams_received") t.received = v;
    else if (name == "datagrams_sent") t.sent = v;
    else if (name == "multicast_rounds") t.rounds = v;
    else if (name == "uplink_sent" || name == "uplink_resent") {
      t.uplink += v;
      t.has_uplink = t.has_uplink || v != 0;
    } else if (dataplane::IsDropCounter(name)) {
      t.drops += v;
    }
  }
  return out;
}

// "12.3k" style rate of (now - before) over dt seconds; "-" without a previous value.
std::string Rate(std::optional<uint64_t> before, uint64_t now, double dt) {
  if (!before || dt <= 0) return "-";
  const double r = double(now >= *before ? now - *before : 0) / dt;
  if (r >= 1e9) return StrPrintf("%.1fG", r / 1e9);
  if (r >= 1e6) return StrPrintf("%.1fM", r / 1e6);
  if (r >= 1e3) return StrPrintf("%.1fk", r / 1e3);
  return StrPrintf("%.0f", r);
}

std::string Seconds(std::chrono::milliseconds ms) {
  const double s = double(ms.count()) / 1000;
  if (s >= 3600) return StrPrintf("%.1fh", s / 3600);
  if (s >= 60) return StrPrintf("%.1fm", s / 60);
  return StrPrintf("%.1fs", s);
}

const control::JobInfo* FindJob(const TopSnapshot* s, uint32_t job_id, bool reference) {
  if (s == nullptr) return nullptr;
  if (reference) return s->list.reference_session ? &*s->list.reference_session : nullptr;
  for (const auto& j : s->list.jobs) {
    if (j.job_id == job_id) return &j;
  }
  return nullptr;
}

}  // namespace

std::string RenderTop(const TopSnapshot* previous, const TopSnapshot& now,
                      const std::string& controller) {
  const double dt =
      previous == nullptr ? 0 : std::chrono::duration<double>(now.when - previous->when).count();
  std::string out;
  size_t live = 0;
  for (const auto& j : now.list.jobs) live += j.state != control::JobState::kEnded;
  out += StrPrintf("switchml top: controller %s, %zu live job(s), slot pool %u of %u free%s\n",
                   controller.c_str(), live, now.list.free_slots, now.list.pool_slots,
                   previous == nullptr ? " (rates from the next refresh on)" : "");
  out += "\n";

  // Switches.
  const auto totals = BySwitch(now.counters);
  const auto before = previous == nullptr ? std::map<std::string, SwitchTotals>{}
                                          : BySwitch(previous->counters);
  const int sw_widths[] = {-10, 8, 8, 8, 8, 8, -40};
  auto sw_line = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) {
      const int w = sw_widths[i];
      line += i == 0 ? "" : " ";
      line += w < 0 ? StrPrintf("%-*s", -w, cells[i].c_str()) : StrPrintf("%*s", w, cells[i].c_str());
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line + "\n";
  };
  out += sw_line({"SWITCH", "RX/s", "TX/s", "ROUNDS/s", "DROPS/s", "UP/s", "HEALTH"});
  for (const auto& [name, t] : totals) {
    auto b = before.find(name);
    auto prev = [&](uint64_t SwitchTotals::*f) -> std::optional<uint64_t> {
      if (b == before.end()) return std::nullopt;
      return b->second.*f;
    };
    std::string health = "up";
    // A standalone controller's "switch<i>": its probed health, in --switch order.
    if (name.starts_with("switch")) {
      const size_t i = size_t(std::strtoul(name.c_str() + 6, nullptr, 10));
      if (i < now.list.switches.size()) {
        const control::SwitchHealth& h = now.list.switches[i];
        health = (h.up ? "up " : "DOWN ") + Seconds(h.for_ms) + " " + h.address;
        if (!h.up && !h.last_error.empty()) health += ": " + h.last_error;
      }
    }
    out += sw_line({name.empty() ? "switch" : name, Rate(prev(&SwitchTotals::received), t.received, dt),
                    Rate(prev(&SwitchTotals::sent), t.sent, dt),
                    Rate(prev(&SwitchTotals::rounds), t.rounds, dt),
                    Rate(prev(&SwitchTotals::drops), t.drops, dt),
                    t.has_uplink ? Rate(prev(&SwitchTotals::uplink), t.uplink, dt) : "-", health});
  }
  // Switches a standalone controller could not reach have no counters at all.
  for (size_t i = 0; i < now.list.switches.size(); ++i) {
    if (totals.count("switch" + std::to_string(i)) != 0) continue;
    const control::SwitchHealth& h = now.list.switches[i];
    out += sw_line({"switch" + std::to_string(i), "-", "-", "-", "-", "-",
                    (h.up ? "up " : "DOWN ") + Seconds(h.for_ms) + " " + h.address +
                        (h.last_error.empty() ? "" : ": " + h.last_error)});
  }
  out += "\n";

  // Jobs: job 0 first when it has a session, then the controller's list (live, then ended).
  out += StrPrintf("%6s %-19s %9s %6s %8s %8s %8s %7s  %s\n", "JOB", "STATE", "WORKERS", "SLOTS",
                   "RX/s", "ROUNDS/s", "DROPS/s", "IDLE", "NAME / END REASON");
  auto job_line = [&](const control::JobInfo& j, bool reference) {
    const control::JobInfo* p = FindJob(previous, j.job_id, reference);
    auto prev = [&](uint64_t v) -> std::optional<uint64_t> {
      if (p == nullptr) return std::nullopt;
      return v;
    };
    std::string what = j.state == control::JobState::kEnded ? j.end_reason : j.spec.name;
    if (reference) what = "reference session";
    if (j.spec.switches > 1) what += " [" + std::to_string(j.spec.switches) + " switches]";
    if (j.assignment.uplink.enabled()) what += " [leaf " + std::to_string(j.assignment.uplink.leaf) + "]";
    out += StrPrintf("%6u %-19s %4u/%-4u %6u %8s %8s %8s %7s  %s\n", j.job_id,
                     control::JobStateName(j.state), j.num_registered, j.spec.num_workers,
                     j.spec.num_slots,
                     Rate(prev(p ? p->counters.received : 0), j.counters.received, dt).c_str(),
                     Rate(prev(p ? p->counters.multicast_rounds : 0), j.counters.multicast_rounds, dt).c_str(),
                     Rate(prev(p ? JobDrops(p->counters) : 0), JobDrops(j.counters), dt).c_str(),
                     Seconds(j.idle_for).c_str(), what.c_str());
  };
  if (now.list.reference_session && now.list.reference_session->spec.num_workers > 0) {
    job_line(*now.list.reference_session, true);
  }
  for (const auto& j : now.list.jobs) job_line(j, false);
  if (now.list.jobs.empty() &&
      !(now.list.reference_session && now.list.reference_session->spec.num_workers > 0)) {
    out += "  (no jobs)\n";
  }
  out += "\nq: quit\n";
  return out;
}

}  // namespace switchml::tools
