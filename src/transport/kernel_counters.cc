#include "transport/kernel_counters.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace switchml::transport {
namespace {

std::vector<std::string_view> Words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

}  // namespace

StatusOr<std::vector<std::pair<std::string, int64_t>>> ParseSnmpTable(std::string_view text,
                                                                      std::string_view source) {
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!Words(line).empty()) lines.push_back(line);
    pos = end + 1;
  }
  auto bad = [&](size_t i, const std::string& why) {
    return InvalidArgumentError(std::string(source) + " line " + std::to_string(i + 1) +
                                " ('" + std::string(lines[i].substr(0, 40)) + "'): " + why);
  };
  std::vector<std::pair<std::string, int64_t>> out;
  for (size_t i = 0; i < lines.size(); i += 2) {
    const std::vector<std::string_view> names = Words(lines[i]);
    const std::string_view section = names[0];
    if (section.size() < 2 || section.back() != ':') return bad(i, "no 'Section:' prefix");
    if (i + 1 >= lines.size()) return bad(i, "a header line without its values line");
    const std::vector<std::string_view> values = Words(lines[i + 1]);
    if (values[0] != section) {
      return bad(i + 1, "expected the values of " + std::string(section) + " here");
    }
    if (values.size() != names.size()) {
      return bad(i + 1, std::to_string(values.size() - 1) + " values for " +
                            std::to_string(names.size() - 1) + " names");
    }
    const std::string prefix(section.substr(0, section.size() - 1));
    for (size_t k = 1; k < names.size(); ++k) {
      int64_t v = 0;
      const auto [ptr, ec] = std::from_chars(values[k].data(), values[k].data() + values[k].size(), v);
      if (ec != std::errc() || ptr != values[k].data() + values[k].size()) {
        return bad(i + 1, "value '" + std::string(values[k]) + "' of " + prefix + "." +
                              std::string(names[k]) + " is not an integer");
      }
      out.emplace_back(prefix + "." + std::string(names[k]), v);
    }
  }
  return out;
}

std::vector<std::pair<std::string, uint64_t>> KernelDropCounters(
    const std::vector<std::pair<std::string, int64_t>>& parsed) {
  static constexpr std::pair<std::string_view, std::string_view> kWanted[] = {
      {"Ip.InHdrErrors", "kernel_ip_in_hdr_errors"},
      {"IpExt.InCsumErrors", "kernel_ip_in_csum_errors"},
      {"Ip.InAddrErrors", "kernel_ip_in_addr_errors"},
      {"Ip.InDiscards", "kernel_ip_in_discards"},
      {"Udp.InErrors", "kernel_udp_in_errors"},
      {"Udp.InCsumErrors", "kernel_udp_in_csum_errors"},
      {"Udp.RcvbufErrors", "kernel_udp_rcvbuf_errors"},
      {"Udp.MemErrors", "kernel_udp_mem_errors"},
  };
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& [field, name] : kWanted) {
    for (const auto& [k, v] : parsed) {
      if (k == field) {
        out.emplace_back(std::string(name), v < 0 ? 0 : uint64_t(v));
        break;
      }
    }
  }
  return out;
}

std::vector<std::pair<std::string, uint64_t>> ReadKernelDropCounters(Status* error) {
  std::vector<std::pair<std::string, int64_t>> all;
  for (const char* path : {"/proc/net/snmp", "/proc/net/netstat"}) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (!in.is_open()) {
      if (error != nullptr && error->ok()) *error = UnavailableError(std::string("cannot read ") + path);
      continue;
    }
    StatusOr<std::vector<std::pair<std::string, int64_t>>> parsed = ParseSnmpTable(text.str(), path);
    if (!parsed.ok()) {
      if (error != nullptr && error->ok()) *error = parsed.status();
      continue;
    }
    all.insert(all.end(), parsed->begin(), parsed->end());
  }
  return KernelDropCounters(all);
}

}  // namespace switchml::transport
