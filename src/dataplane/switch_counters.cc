#include "dataplane/switch_counters.h"

#include <algorithm>
#include <iterator>

namespace switchml::dataplane {

std::vector<std::pair<std::string, uint64_t>> SwitchCounters::Named() const {
  std::vector<std::pair<std::string, uint64_t>> rows;
  rows.reserve(kNumCounters);
  Visit(*this, [&](const char* name, uint64_t v) { rows.emplace_back(name, v); });
  return rows;
}

std::string SwitchCounters::FormatTable() const { return FormatCounterTable(Named()); }

bool IsDropCounter(std::string_view name) {
  static constexpr std::string_view kDrops[] = {
      "rx_truncated", "unknown_sender", "job_ended", "job_not_running", "job_slot_out_of_range",
      "slot_out_of_range", "too_large", "size_mismatch", "aggregator_invalid",
      "sim_ingress_drops", "sim_egress_drops", "duplicates_dropped", "late_duplicates_dropped",
      "parent_stale", "wrong_io_thread", "send_dropped", "raw_ring_drops", "raw_refused_checksum",
      "raw_not_for_us", "raw_truncated", "raw_send_no_mac", "udp_socket_drops",
      // Malformed frames (transport/frame.h's structural verdicts).
      "raw_frames_truncated", "raw_frames_not_ipv4", "raw_frames_bad_ipv4_header",
      "raw_frames_fragment", "raw_frames_not_udp", "raw_frames_bad_udp_length"};
  if (name.starts_with("decode_")) return true;
  return std::find(std::begin(kDrops), std::end(kDrops), name) != std::end(kDrops);
}

std::string FormatCounterTable(const std::vector<std::pair<std::string, uint64_t>>& rows) {
  size_t name_width = 7;  // "counter"
  size_t value_width = 5;  // "value"
  std::vector<std::string> values;
  values.reserve(rows.size());
  for (const auto& [name, value] : rows) {
    name_width = std::max(name_width, name.size());
    values.push_back(std::to_string(value));
    value_width = std::max(value_width, values.back().size());
  }
  std::string out;
  auto line = [&](const std::string& name, const std::string& value) {
    out += name;
    out.append(name_width - name.size() + 2, ' ');
    out.append(value_width - value.size(), ' ');
    out += value;
    out += '\n';
  };
  line("counter", "value");
  for (size_t i = 0; i < rows.size(); ++i) line(rows[i].first, values[i]);
  return out;
}

}  // namespace switchml::dataplane
