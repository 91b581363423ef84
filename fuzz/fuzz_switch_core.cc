// fuzz/fuzz_switch_core.cc — libFuzzer target for the switch's whole packet path
// (SwitchCore::ProcessBurst: decode, sender lookup, checks, aggregator, response encoding).
//
// Setup and input format: switch_core_setup.h (a 3-worker session on an 8-slot switch; the
// input is a flags byte then (sender, length, datagram) records cut into bursts).
//
// Invariants, checked after every burst:
//   * nothing crashes or reads out of bounds (ASan/UBSan);
//   * the sum rule of switch_counters.h: datagrams_received equals the sum of the terminal
//     buckets (every counter except datagrams_received, sim_egress_drops, datagrams_sent);
//   * datagrams_sent grew by the burst's output size, which is unicast replies + 3 per
//     multicast round (no egress drops here);
//   * every response decodes, is msg type 1, has a slot < 8 and <= 256 elements, goes to one
//     of the 3 workers' addresses, and its header (job number, tsi, slot, set, size code)
//     is that of a datagram of the same burst.
//
// Corpus: fuzz/corpus/fuzz_switch_core/ (real engine traffic, fuzz/make_corpus.cc).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "dataplane/switch_core.h"
#include "dataplane/switch_counters.h"
#include "fuzz_check.h"
#include "switch_core_setup.h"
#include "transport/channel.h"
#include "wire/packet.h"

namespace {

using namespace switchml;
using fuzz::kMaxBurst;
using fuzz::kMaxElements;
using fuzz::kSlots;
using fuzz::kWorkers;

uint64_t TerminalSum(const dataplane::SwitchCounters& c) {
  uint64_t sum = 0;
  dataplane::SwitchCounters::Visit(c, [&](std::string_view name, uint64_t v) {
    if (name != "datagrams_received" && name != "sim_egress_drops" && name != "datagrams_sent") {
      sum += v;
    }
  });
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  auto created = fuzz::MakeSwitch(/*flags=*/data[0]);
  FUZZ_CHECK(created.ok());
  dataplane::SwitchCore core = std::move(created).value();

  dataplane::Outbox out;
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<transport::RxDatagram> burst;
  size_t pos = 1;
  while (pos < size) {
    buffers.clear();
    burst.clear();
    // Parse one burst.
    while (pos < size && burst.size() < kMaxBurst) {
      const uint8_t ctl = data[pos++];
      size_t len = 0;
      if (pos < size) len = data[pos++];
      if (pos < size) len |= size_t{data[pos++]} << 8;
      len = std::min(len, size - pos);
      buffers.emplace_back(data + pos, data + pos + len);
      pos += len;
      transport::RxDatagram d;
      d.capacity = uint32_t(len);
      d.size = uint32_t(len);
      d.truncated = (ctl & fuzz::kCtlTruncated) != 0;
      d.from = fuzz::SenderAddress(ctl);
      burst.push_back(d);
      if (ctl & fuzz::kCtlEndBurst) break;
    }
    for (size_t i = 0; i < burst.size(); ++i) burst[i].data = buffers[i].data();

    const dataplane::SwitchCounters before = core.counters();
    core.ProcessBurst(burst, out);
    const dataplane::SwitchCounters& after = core.counters();

    FUZZ_CHECK(after.datagrams_received == before.datagrams_received + burst.size());
    FUZZ_CHECK(after.datagrams_received == TerminalSum(after));
    FUZZ_CHECK(after.sim_egress_drops == 0);
    FUZZ_CHECK(after.datagrams_sent == before.datagrams_sent + out.size());
    const uint64_t unicasts = after.unicast_replies - before.unicast_replies;
    const uint64_t multicasts = after.multicast_rounds - before.multicast_rounds;
    FUZZ_CHECK(out.size() == unicasts + kWorkers * multicasts);

    for (const transport::TxDatagram& t : out.datagrams()) {
      wire::PacketView resp;
      FUZZ_CHECK(t.data != nullptr);
      FUZZ_CHECK(wire::Decode({t.data, t.size}, &resp) == wire::DecodeError::kOk);
      FUZZ_CHECK(resp.header.msg_type == wire::kMsgTypeAllReduce);
      FUZZ_CHECK(resp.header.slot < kSlots);
      FUZZ_CHECK(resp.num_elements <= kMaxElements);
      bool to_worker = false;
      for (uint32_t rank = 0; rank < kWorkers; ++rank) to_worker |= t.to.ipv4 == fuzz::kIpv4[rank];
      FUZZ_CHECK(to_worker);
      // The response echoes the header of a datagram of this burst (not its exponents).
      bool echoed = false;
      for (const transport::RxDatagram& d : burst) {
        wire::PacketView req;
        if (d.truncated || wire::Decode({d.data, d.size}, &req) != wire::DecodeError::kOk) continue;
        echoed |= req.header.job_number == resp.header.job_number &&
                  req.header.tsi == resp.header.tsi && req.header.slot == resp.header.slot &&
                  req.header.set == resp.header.set &&
                  req.header.size_code == resp.header.size_code;
      }
      FUZZ_CHECK(echoed);
    }
  }
  return 0;
}
