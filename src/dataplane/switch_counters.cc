#include "dataplane/switch_counters.h"

#include <algorithm>

namespace switchml::dataplane {

std::vector<std::pair<std::string, uint64_t>> SwitchCounters::Named() const {
  std::vector<std::pair<std::string, uint64_t>> rows;
  rows.reserve(kNumCounters);
  Visit(*this, [&](const char* name, uint64_t v) { rows.emplace_back(name, v); });
  return rows;
}

std::string SwitchCounters::FormatTable() const { return FormatCounterTable(Named()); }

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
