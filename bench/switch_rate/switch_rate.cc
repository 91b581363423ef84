// bench/switch_rate/switch_rate.cc — the `switch-rate` scenario (issue #4): how many packets one
// software-switch thread aggregates per second, against the limit of its I/O path.
//
//   build/switch_rate --mode switch  --workers 4 --elements-per-packet 256 --seconds 5
//   build/switch_rate --mode forward --workers 4 --elements-per-packet 256 --seconds 5
//
// Both modes run in one process on 127.0.0.1, with the same synthetic senders:
//  * n synthetic workers, each with its own UdpChannel (its own UDP port), all driven by ONE
//    sender thread (on a 2-core machine the switch thread gets one core, the senders the other).
//    Worker k keeps a window of W slots in flight, self-clocked like the reference client
//    (docs/protocol.md#outstanding-window): it sends slot s's next packet only when slot s's
//    previous result arrived, with the other set bit (round r uses set r & 1, tsi r), so
//    contract C4 (docs/protocol.md#c4-strict-set-alternation) holds and every packet is
//    aggregated without retransmissions. Packets are built once (payload = k+1 in every int32
//    element); only the 10-byte prefix is rewritten per send.
//  * --mode switch: an in-process dataplane::SwitchServer (the production I/O loop: RecvBurstNoCopy(32)
//    → SwitchCore::ProcessBurst → GroupByDestination → SendBurst) with a UdpChannel; the workers
//    register as ranks of the reference session (job 0) in port mode. A round of slot s
//    completes when all n workers' packets arrived; each worker then gets the sum n(n+1)/2.
//    With --dut-threads T the switch runs T I/O threads (`switchml switch --io-threads T`):
//    every worker registers T worker threads, so I/O thread i owns the same slots as forwarder
//    thread i below, and the workers send each slot to its owner's port (what the switch's
//    registration grant says); a request at the wrong thread is counted as misrouted.
//  * --mode forward: a plain forwarder thread with the same I/O method (a UdpChannel with the same
//    options, RecvBurstNoCopy(32) → echo every datagram to its sender → GroupByDestination →
//    SendBurst): the limit of that I/O path on this machine. Each echo is a completed "round".
//    With --dut-threads T the forwarder runs T such threads, each with its own socket, thread i
//    owning the slots [i*W/T, (i+1)*W/T) of every worker's window, and --steering chooses how a
//    request reaches its owner: ports (a port per thread; workers send each slot to its
//    owner's port), reuseport (one SO_REUSEPORT port, the kernel's 4-tuple hash) or
//    reuseport-cbpf (one port, a classic BPF program picks the thread from the slot in the
//    payload). Each thread counts requests for slots it does not own (misrouted: a failure
//    except with reuseport) and records the slots it saw; CPU and run-queue time are reported
//    per thread and summed (docs/switch-rate.md#several-io-threads-steering).
// Both modes report requests/s into the switch (forwarder), responses/s out of it, the CPU time
// of its thread per request, and its syscalls per request; the switch/forwarder request-rate
// ratio is the scenario's figure of merit (target ≥ 0.8, reported, never asserted).
//
// Correctness: every response's slot, set and tsi must be the ones in flight (else it counts as
// `unexpected`); the first and last element of every response, and all elements of every
// --verify-every-th response per worker, must equal the expected value (else `wrong`). A run
// fails (exit 1) if any response was wrong or unexpected, if nothing completed, or if the
// windows stalled (no response for --stall-timeout while packets were in flight: a lost packet,
// which this benchmark does not retransmit), or if a request was misrouted (forward mode with
// ports or reuseport-cbpf steering). Every wait has a deadline.
//
// Exit status: 0 = run completed with only correct results, 1 = failed run (reason printed),
// 2 = bad arguments or setup error.
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "control/job_layout.h"
#include "dataplane/switch_config.h"
#include "dataplane/switch_host.h"
#include "dataplane/switch_server.h"
#include "switchml/status.h"
#include "transport/channel.h"
#include "transport/udp_channel.h"
#include "wire/packet.h"

namespace switchml::bench {
namespace {

using Clock = std::chrono::steady_clock;
using transport::Endpoint;
using transport::RxDatagram;
using transport::TxDatagram;
using transport::UdpChannel;
using transport::UdpChannelOptions;

constexpr uint32_t kLocalhost = 0x7F000001;  // 127.0.0.1
constexpr size_t kRxBurst = 32;              // datagrams per RecvBurst, as the switch

struct Options {
  std::string mode = "switch";
  uint32_t workers = 4;
  uint32_t window = 128;
  uint32_t elements = 256;
  double seconds = 5.0;
  double warmup = 1.0;
  double stall_timeout = 2.0;
  bool no_udp_offload = false;
  uint32_t verify_every = 8;
  int corrupt_worker = -1;
  double drop_probability = 0.0;
  std::string json_path;
  bool no_header = false;
  // --mode forward only: forwarder threads and how requests are steered to them.
  uint32_t dut_threads = 1;
  std::string steering = "ports";  // ports | reuseport | reuseport-cbpf
  bool no_owner_split = false;     // testing aid: GSO runs may cross owner boundaries
  uint32_t cbpf_pool_offset = 6;   // testing aid: where the cBPF program reads the pool index
};

// The slot ownership of a window W over T threads: the switch's (control::JobLayout of one
// worker's T threads, each owning W/T slots, I/O thread i serving worker thread i), which the
// forwarder mimics. W must be a multiple of T (checked in main).
inline control::JobLayout WindowLayout(uint32_t threads, uint32_t window) {
  StatusOr<control::JobLayout> l = control::JobLayout::Make(
      {.job_slots = window, .worker_threads = threads, .window_packets = window});
  return l.ok() ? *l : control::JobLayout::Whole(window);
}
// The DUT thread that owns slot s.
inline uint32_t OwnerOf(uint32_t slot, const control::JobLayout& layout) {
  return layout.ThreadOfSlot(slot);
}

// ---- Thread CPU time ----

pid_t GetTid() { return pid_t(syscall(SYS_gettid)); }

// CPU time (seconds) consumed so far by thread `tid` of this process, or -1 if unreadable.
// Uses the kernel's per-thread CPU clock (the clockid glibc's pthread_getcpuclockid builds:
// ~tid << 3 | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED; nanosecond resolution), falling back to
// /proc/self/task/TID/schedstat.
double ThreadCpuSeconds(pid_t tid) {
  const clockid_t cid = clockid_t((~unsigned(tid)) << 3) | 4 | 2;
  timespec ts{};
  if (clock_gettime(cid, &ts) == 0) return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  uint64_t ns = 0;
  if (f >> ns) return double(ns) * 1e-9;
  return -1.0;
}

// Seconds thread `tid` has spent runnable but waiting for a CPU (second field of
// /proc/self/task/TID/schedstat), or -1 if unreadable: how much other load delayed it.
double ThreadRunqueueWaitSeconds(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  uint64_t run_ns = 0;
  uint64_t wait_ns = 0;
  if (f >> run_ns >> wait_ns) return double(wait_ns) * 1e-9;
  return -1.0;
}

std::set<pid_t> ListTasks() {
  std::set<pid_t> tids;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return tids;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') tids.insert(pid_t(std::atoi(e->d_name)));
  }
  closedir(d);
  return tids;
}

// ---- The device under test: switch or forwarder ----

// Counters of the switch/forwarder thread that other threads may read at any time.
struct DutCounters {
  uint64_t received = 0;  // datagrams received
  uint64_t sent = 0;      // datagrams sent
};

class DeviceUnderTest {
 public:
  virtual ~DeviceUnderTest() = default;
  virtual Endpoint endpoint() const = 0;
  virtual pid_t tid() const = 0;
  virtual DutCounters counters() const = 0;  // thread-safe
  // Stops the thread; afterwards channel_stats() may be read.
  virtual void Stop() = 0;
  virtual const transport::UdpChannelStats& channel_stats() const = 0;
  virtual nlohmann::json Extra() const { return nlohmann::json::object(); }
  // Several I/O threads (the forwarder with --dut-threads T): per thread, in thread order.
  // Thread i serves endpoints()[i] (all equal when the sockets share a port).
  virtual std::vector<Endpoint> endpoints() const { return {endpoint()}; }
  virtual std::vector<pid_t> tids() const { return {tid()}; }
  virtual std::vector<DutCounters> thread_counters() const { return {counters()}; }
  // Requests that arrived at a thread other than their slot's owner (whole run); after Stop().
  virtual uint64_t misrouted() const { return 0; }
};

class SwitchDut final : public DeviceUnderTest {
 public:
  // With threads = T > 1 the switch runs T I/O threads (SwitchConfig::io_threads), one channel
  // each, and every synthetic worker registers num_worker_threads = T with its window, so that
  // I/O thread i owns the slots [i*W/T, (i+1)*W/T) (OwnerOf) and the grant names I/O thread
  // i's port for worker thread i: the workers send each slot there (a port per thread).
  static StatusOr<std::unique_ptr<SwitchDut>> Create(const UdpChannelOptions& opt,
                                                     const std::vector<uint16_t>& worker_ports,
                                                     double drop_probability, uint32_t threads,
                                                     uint32_t window, uint32_t elements) {
    // The switch as `switchml switch` assembles it (dataplane::SwitchHost), its channels made
    // here so that their UdpChannelStats can be summed after Stop().
    std::vector<UdpChannel*> raw;
    dataplane::SwitchHostConfig hc;  // SwitchConfig defaults, as `switchml switch` runs
    hc.switch_config.ingress_drop_probability = drop_probability;  // testing aid (0 = off)
    hc.switch_config.io_threads = threads;
    hc.io = dataplane::SwitchHostConfig::Io::kFactory;
    hc.bind = opt.local;
    hc.channel_factory = [&](uint32_t) -> StatusOr<std::unique_ptr<transport::Channel>> {
      SWITCHML_ASSIGN_OR_RETURN(std::unique_ptr<UdpChannel> ch, UdpChannel::Create(opt));
      raw.push_back(ch.get());
      return std::unique_ptr<transport::Channel>(std::move(ch));
    };
    SWITCHML_ASSIGN_OR_RETURN(std::unique_ptr<dataplane::SwitchHost> host,
                              dataplane::SwitchHost::Create(std::move(hc)));
    dataplane::SwitchServer* server = host->server();
    const uint32_t n = uint32_t(worker_ports.size());
    for (uint32_t k = 0; k < n; ++k) {
      control::WorkerRegistration reg;
      reg.rank = k;
      reg.num_workers = n;
      reg.ipv4 = kLocalhost;
      reg.udp_ports = {worker_ports[k]};
      if (threads > 1) {
        reg.protocol_version = control::kClientProtocolVersion;
        reg.num_worker_threads = threads;
        reg.window_packets = window;
        reg.elements_per_packet = elements;
      }
      control::JobRegistration job0;  // the reference session: job 0, no token
      job0.job_id = control::kReferenceJobId;
      job0.worker = reg;
      SWITCHML_ASSIGN_OR_RETURN(control::JobWorkerGrant grant, server->RegisterJobWorker(job0));
      if (threads > 1) {
        const std::vector<transport::Endpoint> eps = server->local_endpoints();
        bool same = grant.switch_info.thread_routes.size() == threads;
        for (uint32_t i = 0; same && i < threads; ++i) {
          same = grant.switch_info.thread_routes[i].udp_port == eps[i].port;
        }
        if (!same) {
          return InternalError("the switch's grant does not map worker thread i to I/O thread i");
        }
      }
    }
    auto dut = std::unique_ptr<SwitchDut>(new SwitchDut(std::move(host), std::move(raw)));
    const std::set<pid_t> before = ListTasks();
    SWITCHML_RETURN_IF_ERROR(dut->host_->Start());
    // The new threads named "swml-io-<i>" (SwitchServer::Start), by i; the control thread is not
    // one of them.
    dut->tids_.assign(threads, 0);
    uint32_t found = 0;
    for (pid_t t : ListTasks()) {
      if (before.count(t) != 0) continue;
      std::string comm;
      std::ifstream("/proc/self/task/" + std::to_string(t) + "/comm") >> comm;
      if (!comm.starts_with("swml-io-")) continue;
      const uint32_t i = uint32_t(std::atoi(comm.c_str() + 8));
      if (i < threads && dut->tids_[i] == 0) {
        dut->tids_[i] = t;
        ++found;
      }
    }
    if (found != threads) {
      return InternalError("cannot identify the switch I/O threads: " + std::to_string(found) +
                           " threads named swml-io-<i> appeared at Start(), expected " +
                           std::to_string(threads));
    }
    return dut;
  }

  Endpoint endpoint() const override { return server_->local_endpoint(); }
  pid_t tid() const override { return tids_[0]; }
  DutCounters counters() const override {
    const dataplane::ServerCounters c = server_->counters();
    return {c.core.datagrams_received, c.core.datagrams_sent};
  }
  std::vector<Endpoint> endpoints() const override { return server_->local_endpoints(); }
  std::vector<pid_t> tids() const override { return tids_; }
  std::vector<DutCounters> thread_counters() const override {
    std::vector<DutCounters> v;
    for (uint32_t i = 0; i < server_->io_threads(); ++i) {
      const dataplane::ServerCounters c = server_->io_thread_counters(i);
      v.push_back({c.core.datagrams_received, c.core.datagrams_sent});
    }
    return v;
  }
  void Stop() override {
    host_->Stop();
    total_ = {};
    for (const UdpChannel* ch : channels_) total_ += ch->stats();
  }
  // Summed over the I/O threads' channels; valid after Stop().
  const transport::UdpChannelStats& channel_stats() const override { return total_; }
  // Requests at an I/O thread that does not own their slot (the switch drops them).
  uint64_t misrouted() const override { return server_->counters().core.wrong_io_thread; }
  nlohmann::json Extra() const override {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [name, value] : server_->counters().Named()) {
      if (value != 0) j[name] = value;
    }
    return j;
  }

 private:
  SwitchDut(std::unique_ptr<dataplane::SwitchHost> host, std::vector<UdpChannel*> channels)
      : host_(std::move(host)), server_(host_->server()), channels_(std::move(channels)) {}
  std::unique_ptr<dataplane::SwitchHost> host_;
  dataplane::SwitchServer* server_;    // host_'s
  std::vector<UdpChannel*> channels_;  // owned by server_
  std::vector<pid_t> tids_;
  transport::UdpChannelStats total_;
};

// The plain forwarder: the switch's I/O loop with the aggregation replaced by an echo. With T
// threads, each has its own UdpChannel and runs the same loop; nothing is shared on the packet
// path. Steering (how a request reaches its slot's owner thread, OwnerOf):
//  * ports: thread i binds its own port; the workers send slot s to the owner's port.
//  * reuseport: the T sockets form one SO_REUSEPORT group on one port; the kernel's 4-tuple hash
//    picks the thread (all of one worker's requests land on one thread, whatever the slot).
//  * reuseport-cbpf: the same group plus a classic BPF program (SO_ATTACH_REUSEPORT_CBPF) that
//    computes the owner from the pool index in the payload (bytes 6..7, slot = pool & 0x3fff).
// Every thread checks each request's slot against its own index (misrouted) and records which
// slots it saw.
class ForwarderDut final : public DeviceUnderTest {
 public:
  static StatusOr<std::unique_ptr<ForwarderDut>> Create(const UdpChannelOptions& base,
                                                        uint32_t threads,
                                                        const std::string& steering,
                                                        uint32_t window, uint32_t pool_offset) {
    auto dut = std::unique_ptr<ForwarderDut>(new ForwarderDut(threads, window));
    UdpChannelOptions copt = base;
    copt.reuse_port = steering != "ports";
    for (uint32_t i = 0; i < threads; ++i) {
      auto t = std::make_unique<Thread>();
      SWITCHML_ASSIGN_OR_RETURN(t->channel, UdpChannel::Create(copt));
      if (copt.reuse_port) copt.local = t->channel->local_endpoint();  // the rest join its port
      t->slots_seen.assign(window, 0);
      dut->threads_.push_back(std::move(t));
    }
    if (steering == "reuseport-cbpf") {
      SWITCHML_RETURN_IF_ERROR(
          dut->threads_[0]->channel->AttachReuseportCbpf(OwnerProgram(threads, window, pool_offset)));
    }
    for (uint32_t i = 0; i < threads; ++i) {
      Thread* t = dut->threads_[i].get();
      t->thread = std::thread([d = dut.get(), t, i] { d->Run(*t, i); });
    }
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    for (const auto& t : dut->threads_) {
      while (t->tid.load(std::memory_order_acquire) == 0) {
        if (Clock::now() > deadline) {
          return InternalError("a forwarder thread did not start within 5 s");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    return dut;
  }
  ~ForwarderDut() override { Stop(); }

  // owner = (pool & 0x3fff) * T / W. For a UDP reuseport group the kernel runs the program with
  // the datagram's data at the UDP payload, so the pool index is at offset 6 (verified by the
  // misrouted count: offset 14, as if the program saw the 8-byte UDP header, misroutes).
  static std::vector<sock_filter> OwnerProgram(uint32_t threads, uint32_t window,
                                               uint32_t pool_offset) {
    return {
        BPF_STMT(BPF_LD | BPF_H | BPF_ABS, pool_offset),  // A = pool index (bytes 6..7, big-endian)
        BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x3fff),  // slot
        BPF_STMT(BPF_ALU | BPF_MUL | BPF_K, threads),
        BPF_STMT(BPF_ALU | BPF_DIV | BPF_K, window),
        BPF_STMT(BPF_RET | BPF_A, 0),                 // socket index in bind order = thread
    };
  }

  Endpoint endpoint() const override { return threads_[0]->channel->local_endpoint(); }
  pid_t tid() const override { return threads_[0]->tid.load(std::memory_order_acquire); }
  DutCounters counters() const override {
    DutCounters c;
    for (const DutCounters& t : thread_counters()) {
      c.received += t.received;
      c.sent += t.sent;
    }
    return c;
  }
  std::vector<Endpoint> endpoints() const override {
    std::vector<Endpoint> e;
    for (const auto& t : threads_) e.push_back(t->channel->local_endpoint());
    return e;
  }
  std::vector<pid_t> tids() const override {
    std::vector<pid_t> v;
    for (const auto& t : threads_) v.push_back(t->tid.load(std::memory_order_acquire));
    return v;
  }
  std::vector<DutCounters> thread_counters() const override {
    std::vector<DutCounters> v;
    for (const auto& t : threads_) {
      v.push_back({t->received.load(std::memory_order_relaxed), t->sent.load(std::memory_order_relaxed)});
    }
    return v;
  }
  void Stop() override {
    if (stopped_) return;
    stop_.store(true, std::memory_order_release);
    for (const auto& t : threads_) t->channel->Wake();
    for (const auto& t : threads_) {
      if (t->thread.joinable()) t->thread.join();
    }
    stopped_ = true;
    total_ = {};
    for (const auto& t : threads_) total_ += t->channel->stats();
  }
  // Summed over the threads; valid after Stop().
  const transport::UdpChannelStats& channel_stats() const override { return total_; }
  uint64_t misrouted() const override {
    uint64_t m = 0;
    for (const auto& t : threads_) m += t->misrouted;
    return m;
  }
  // After Stop(): per thread its slots (as ranges), misrouted requests and channel counters.
  nlohmann::json Extra() const override {
    uint64_t send_errors = 0;
    uint64_t send_dropped = 0;
    nlohmann::json per = nlohmann::json::array();
    for (const auto& t : threads_) {
      send_errors += t->send_errors;
      send_dropped += t->send_dropped;
      nlohmann::json ranges = nlohmann::json::array();
      for (uint32_t s = 0; s < window_; ++s) {
        if (!t->slots_seen[s]) continue;
        uint32_t e = s;
        while (e + 1 < window_ && t->slots_seen[e + 1]) ++e;
        ranges.push_back({s, e});
        s = e;
      }
      const transport::UdpChannelStats& c = t->channel->stats();
      per.push_back({{"port", t->channel->local_endpoint().port},
                     {"slot_ranges", ranges},
                     {"misrouted", t->misrouted},
                     {"received", c.received},
                     {"recv_syscalls", c.recv_syscalls},
                     {"send_syscalls", c.send_syscalls},
                     {"gro_messages", c.gro_messages},
                     {"gso_messages", c.gso_messages}});
    }
    return {{"send_errors", send_errors}, {"send_dropped", send_dropped}, {"threads", per}};
  }

 private:
  struct Thread {
    std::unique_ptr<UdpChannel> channel;
    std::thread thread;
    std::atomic<pid_t> tid{0};
    std::atomic<uint64_t> received{0};
    std::atomic<uint64_t> sent{0};
    // Owned by the thread; read after Stop.
    uint64_t send_errors = 0;
    uint64_t send_dropped = 0;
    uint64_t misrouted = 0;
    std::vector<uint8_t> slots_seen;  // per slot of the window: 1 if a request arrived here
  };

  ForwarderDut(uint32_t threads, uint32_t window)
      : num_threads_(threads), window_(window), layout_(WindowLayout(threads, window)) {}

  void Run(Thread& t, uint32_t index) {
    t.tid.store(GetTid(), std::memory_order_release);
    UdpChannel& channel = *t.channel;
    auto bytes = std::make_unique<uint8_t[]>(kRxBurst * wire::kMaxPacketBytes);
    std::array<RxDatagram, kRxBurst> rx{};
    std::vector<TxDatagram> tx;
    std::vector<TxDatagram> grouped;
    tx.reserve(kRxBurst);
    uint64_t received = 0;
    uint64_t sent = 0;
    uint64_t misrouted = 0;
    uint8_t* const seen = t.slots_seen.data();
    while (!stop_.load(std::memory_order_acquire)) {
      // As SwitchServer::Run: in place (views valid until the next receive, after the echo).
      transport::PointAt(rx, bytes.get(), uint32_t(wire::kMaxPacketBytes));
      StatusOr<size_t> got = channel.RecvBurstNoCopy(rx, dataplane::SwitchServer::kRecvTimeout);
      if (!got.ok()) {
        std::cerr << "forwarder: " << got.status() << "\n";
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      if (*got == 0) continue;
      tx.clear();
      for (size_t i = 0; i < *got; ++i) {
        // Steering check: the pool index (bytes 6..7, big-endian) names the slot.
        const uint8_t* d = rx[i].data;
        const uint32_t slot = rx[i].size >= 8 ? ((uint32_t(d[6]) << 8 | d[7]) & 0x3fff) : window_;
        if (slot < window_) {
          seen[slot] = 1;
          misrouted += OwnerOf(slot, layout_) != index ? 1 : 0;
        } else {
          ++misrouted;
        }
        tx.push_back({rx[i].data, rx[i].size, rx[i].from});
      }
      transport::GroupByDestination(tx, &grouped);
      size_t done = 0;
      while (done < grouped.size()) {  // as SwitchServer::SendAll
        StatusOr<size_t> n = channel.SendBurst(std::span<const TxDatagram>(grouped).subspan(done));
        if (!n.ok()) {
          ++t.send_errors;
          t.send_dropped += grouped.size() - done;
          break;
        }
        if (*n == 0) {
          if (stop_.load(std::memory_order_relaxed)) {
            t.send_dropped += grouped.size() - done;
            break;
          }
          std::this_thread::yield();
          continue;
        }
        done += *n;
      }
      received += *got;
      sent += done;
      t.received.store(received, std::memory_order_relaxed);
      t.sent.store(sent, std::memory_order_relaxed);
    }
    t.misrouted = misrouted;
  }

  const uint32_t num_threads_;
  const uint32_t window_;
  const control::JobLayout layout_;
  std::vector<std::unique_ptr<Thread>> threads_;
  std::atomic<bool> stop_{false};
  bool stopped_ = false;
  transport::UdpChannelStats total_;
};

// ---- The synthetic workers (one sender thread) ----

struct WorkerTotals {
  uint64_t sent = 0;        // requests the kernel accepted
  uint64_t accepted = 0;    // responses matching a slot in flight
  uint64_t wrong = 0;       // accepted responses with a wrong element
  uint64_t unexpected = 0;  // responses for no slot in flight (or undecodable)
  uint64_t verified_elements = 0;
  uint64_t send_syscalls = 0;
  uint64_t recv_syscalls = 0;
};

struct Worker {
  std::unique_ptr<UdpChannel> channel;
  std::unique_ptr<uint8_t[]> tx_bytes;    // window × packet bytes, payload pre-filled
  std::vector<uint32_t> round;            // per slot: round in flight
  std::vector<uint8_t> in_flight;         // per slot: sent, result not yet received
  std::vector<uint16_t> pending;          // slots to send next
  std::vector<uint16_t> scratch;          // pending, ordered by owner thread
  std::unique_ptr<uint8_t[]> rx_bytes;
  std::array<RxDatagram, kRxBurst> rx{};
  std::vector<TxDatagram> tx;
  uint64_t responses_seen = 0;  // for the full-verification sampling
  WorkerTotals totals;
  bool maybe_more = false;  // the last RecvBurst was full: more may be staged in the channel
};

struct Snapshot {
  Clock::time_point when;
  WorkerTotals workers;  // summed
  DutCounters dut;         // summed over the DUT threads
  double dut_cpu = 0;      // summed over the DUT threads
  double sender_cpu = 0;
  double dut_wait = 0;     // runqueue wait, summed over the DUT threads
  double sender_wait = 0;
  // Per DUT thread (same order as DeviceUnderTest::tids()).
  std::vector<DutCounters> dut_threads;
  std::vector<double> dut_thread_cpu;
  std::vector<double> dut_thread_wait;
};

struct SenderResult {
  Snapshot start;  // end of warm-up
  Snapshot end;
  bool stalled = false;
  std::string error;  // a channel error that ended the run
  uint64_t in_flight_at_stall = 0;
};

class Senders {
 public:
  Senders(const Options& opt, bool is_switch) : opt_(opt), is_switch_(is_switch) {}

  // Opens one channel per worker. Returns their ports (for registration).
  StatusOr<std::vector<uint16_t>> Open(const UdpChannelOptions& copt) {
    const size_t bytes = wire::PacketBytes(opt_.elements);
    const uint8_t size_code = *wire::SizeCodeForElements(opt_.elements);
    std::vector<uint16_t> ports;
    workers_.resize(opt_.workers);
    for (uint32_t k = 0; k < opt_.workers; ++k) {
      Worker& w = workers_[k];
      SWITCHML_ASSIGN_OR_RETURN(w.channel, UdpChannel::Create(copt));
      ports.push_back(w.channel->local_endpoint().port);
      w.tx_bytes = std::make_unique<uint8_t[]>(opt_.window * bytes);
      const int32_t value = int32_t(k + 1) + (int(k) == opt_.corrupt_worker ? 1 : 0);
      const uint32_t be = __builtin_bswap32(uint32_t(value));
      for (uint32_t s = 0; s < opt_.window; ++s) {
        uint8_t* p = w.tx_bytes.get() + s * bytes;
        wire::Header h;
        h.size_code = size_code;
        h.slot = uint16_t(s);
        EncodePrefix(h, p);
        for (uint32_t e = 0; e < opt_.elements; ++e) std::memcpy(p + wire::kPrefixBytes + 4 * e, &be, 4);
      }
      w.round.assign(opt_.window, 0);
      w.in_flight.assign(opt_.window, 0);
      w.rx_bytes = std::make_unique<uint8_t[]>(kRxBurst * wire::kMaxPacketBytes);
      for (size_t i = 0; i < kRxBurst; ++i) {
        w.rx[i].data = w.rx_bytes.get() + i * wire::kMaxPacketBytes;
        w.rx[i].capacity = uint32_t(wire::kMaxPacketBytes);
      }
      w.tx.reserve(opt_.window);
      w.pending.reserve(opt_.window);
      w.scratch.reserve(opt_.window);
    }
    return ports;
  }

  int32_t expected_value(uint32_t k) const {
    const uint32_t n = opt_.workers;
    return is_switch_ ? int32_t(n * (n + 1) / 2) : int32_t(k + 1);
  }

  // The sender thread's body: warm-up, measurement, stop. `dut` is read for snapshots only.
  // targets[i]: where requests for slots owned by DUT thread i go (one entry: all to it).
  SenderResult Run(const DeviceUnderTest& dut, const std::vector<Endpoint>& targets) {
    SenderResult result;
    const pid_t self = GetTid();
    const int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) {
      result.error = std::string("epoll_create1: ") + std::strerror(errno);
      return result;
    }
    for (uint32_t k = 0; k < workers_.size(); ++k) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u32 = k;
      if (epoll_ctl(ep, EPOLL_CTL_ADD, workers_[k].channel->native_handle(), &ev) != 0) {
        result.error = std::string("epoll_ctl: ") + std::strerror(errno);
        close(ep);
        return result;
      }
    }
    const std::vector<pid_t> dut_tids = dut.tids();
    auto snapshot = [&] {
      Snapshot s;
      s.when = Clock::now();
      for (Worker& w : workers_) {
        w.totals.send_syscalls = w.channel->stats().send_syscalls;
        w.totals.recv_syscalls = w.channel->stats().recv_syscalls;
        s.workers.sent += w.totals.sent;
        s.workers.accepted += w.totals.accepted;
        s.workers.wrong += w.totals.wrong;
        s.workers.unexpected += w.totals.unexpected;
        s.workers.verified_elements += w.totals.verified_elements;
        s.workers.send_syscalls += w.totals.send_syscalls;
        s.workers.recv_syscalls += w.totals.recv_syscalls;
      }
      s.dut_threads = dut.thread_counters();
      for (const DutCounters& c : s.dut_threads) {
        s.dut.received += c.received;
        s.dut.sent += c.sent;
      }
      for (pid_t t : dut_tids) {
        s.dut_thread_cpu.push_back(ThreadCpuSeconds(t));
        s.dut_thread_wait.push_back(ThreadRunqueueWaitSeconds(t));
        s.dut_cpu += s.dut_thread_cpu.back();
        s.dut_wait += s.dut_thread_wait.back();
      }
      s.sender_cpu = ThreadCpuSeconds(self);
      s.sender_wait = ThreadRunqueueWaitSeconds(self);
      return s;
    };

    const auto t0 = Clock::now();
    const auto measure_from = t0 + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(opt_.warmup));
    const auto measure_to = measure_from + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(opt_.seconds));
    const auto stall_after = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(opt_.stall_timeout));
    bool measuring = false;
    auto last_progress = t0;

    for (Worker& w : workers_) {
      for (uint32_t s = 0; s < opt_.window; ++s) w.pending.push_back(uint16_t(s));
    }
    std::vector<epoll_event> events(workers_.size());
    std::vector<uint8_t> ready(workers_.size(), 0);
    for (;;) {
      // Send what is due (the initial windows, the refills of the last pass, leftovers of a
      // full socket buffer).
      for (Worker& w : workers_) {
        if (!w.pending.empty() && !Flush(w, targets, &result)) break;
      }
      if (!result.error.empty()) break;

      const auto now = Clock::now();
      if (!measuring && now >= measure_from) {
        result.start = snapshot();
        measuring = true;
      }
      if (measuring && now >= measure_to) {
        result.end = snapshot();
        break;
      }
      if (now - last_progress > stall_after) {
        result.stalled = true;
        for (const Worker& w : workers_) result.in_flight_at_stall += opt_.window - w.pending.size();
        result.end = snapshot();
        if (!measuring) result.start = result.end;
        break;
      }

      bool any_more = false;
      for (const Worker& w : workers_) any_more |= w.maybe_more;
      const int n = epoll_wait(ep, events.data(), int(events.size()), any_more ? 0 : 5);
      if (n < 0 && errno != EINTR) {
        result.error = std::string("epoll_wait: ") + std::strerror(errno);
        break;
      }
      for (int i = 0; i < n; ++i) ready[events[i].data.u32] = 1;
      bool progress = false;
      for (uint32_t k = 0; k < workers_.size(); ++k) {
        Worker& w = workers_[k];
        if (!ready[k] && !w.maybe_more) continue;
        ready[k] = 0;
        StatusOr<size_t> got = w.channel->RecvBurst(w.rx, std::chrono::microseconds(0));
        if (!got.ok()) {
          result.error = "worker " + std::to_string(k) + ": " + got.status().ToString();
          break;
        }
        w.maybe_more = *got == w.rx.size();
        if (*got > 0) progress = true;
        for (size_t i = 0; i < *got; ++i) Handle(k, w.rx[i]);
      }
      if (!result.error.empty()) break;
      if (progress) last_progress = Clock::now();
    }
    close(ep);
    return result;
  }

 private:
  // Sends w.pending; false on a channel error (recorded in result). With T > 1 DUT threads the
  // pending slots are ordered by owner thread and each owner's go out in their own SendBurst
  // (to targets[owner], or the shared port), so no GSO message spans two owners: the kernel
  // steers a GSO message whole, by its first datagram. The same in every steering mode, so the
  // senders do the same work; --no-owner-split (testing aid) sends them all in one SendBurst.
  bool Flush(Worker& w, const std::vector<Endpoint>& targets, SenderResult* result) {
    const size_t bytes = wire::PacketBytes(opt_.elements);
    const uint8_t size_code = *wire::SizeCodeForElements(opt_.elements);
    const uint32_t threads = opt_.dut_threads;
    const control::JobLayout layout = WindowLayout(threads, opt_.window);
    if (threads > 1) {
      w.scratch.clear();
      for (uint32_t o = 0; o < threads; ++o) {
        for (uint16_t s : w.pending) {
          if (OwnerOf(s, layout) == o) w.scratch.push_back(s);
        }
      }
      w.pending.swap(w.scratch);
    }
    size_t accepted = 0;  // a prefix of w.pending
    size_t begin = 0;
    while (begin < w.pending.size()) {
      const uint32_t owner = OwnerOf(w.pending[begin], layout);
      size_t end = begin + 1;
      if (opt_.no_owner_split) {
        end = w.pending.size();
      } else {
        while (end < w.pending.size() && OwnerOf(w.pending[end], layout) == owner) ++end;
      }
      w.tx.clear();
      for (size_t i = begin; i < end; ++i) {
        const uint16_t s = w.pending[i];
        uint8_t* p = w.tx_bytes.get() + s * bytes;
        wire::Header h;
        h.size_code = size_code;
        h.tsi = w.round[s];
        h.slot = s;
        h.set = uint8_t(w.round[s] & 1);
        wire::EncodePrefix(h, p);
        const Endpoint to = targets.size() > 1 ? targets[OwnerOf(s, layout)] : targets[0];
        w.tx.push_back({p, uint32_t(bytes), to});
      }
      StatusOr<size_t> sent = w.channel->SendBurst(w.tx);
      if (!sent.ok()) {
        result->error = "send: " + sent.status().ToString();
        return false;
      }
      accepted += *sent;
      if (*sent < w.tx.size()) break;  // socket buffer full: the rest stays pending
      begin = end;
    }
    w.totals.sent += accepted;
    for (size_t i = 0; i < accepted; ++i) w.in_flight[w.pending[i]] = 1;
    w.pending.erase(w.pending.begin(), w.pending.begin() + std::ptrdiff_t(accepted));
    return true;
  }

  void Handle(uint32_t k, const RxDatagram& d) {
    Worker& w = workers_[k];
    wire::PacketView pkt;
    if (d.truncated || wire::Decode({d.data, d.size}, &pkt) != wire::DecodeError::kOk ||
        pkt.num_elements != opt_.elements || pkt.header.slot >= opt_.window) {
      ++w.totals.unexpected;
      return;
    }
    const uint16_t s = pkt.header.slot;
    const uint32_t r = w.round[s];
    if (!w.in_flight[s] || pkt.header.set != (r & 1) || pkt.header.tsi != r) {
      ++w.totals.unexpected;  // not the result of the packet in flight on this slot
      return;
    }
    const uint32_t want = __builtin_bswap32(uint32_t(expected_value(k)));
    auto element = [&](uint32_t i) {
      uint32_t v;
      std::memcpy(&v, pkt.payload + 4 * size_t(i), 4);
      return v;
    };
    bool ok = element(0) == want && element(opt_.elements - 1) == want;
    w.totals.verified_elements += 2;
    if (opt_.verify_every > 0 && w.responses_seen % opt_.verify_every == 0) {
      for (uint32_t i = 1; i + 1 < opt_.elements; ++i) ok &= element(i) == want;
      w.totals.verified_elements += opt_.elements - 2;
    }
    ++w.responses_seen;
    ++w.totals.accepted;
    if (!ok) ++w.totals.wrong;
    w.round[s] = r + 1;
    w.in_flight[s] = 0;
    w.pending.push_back(s);
  }

  const Options opt_;
  const bool is_switch_;
  std::vector<Worker> workers_;
};

// ---- Reporting ----

struct Row {
  nlohmann::json j;
  bool ok = false;
  std::string verdict;
};

Row Evaluate(const Options& opt, bool is_switch, bool gso, bool gro, const SenderResult& r,
             const transport::UdpChannelStats& dut_stats, const nlohmann::json& extra,
             uint64_t misrouted) {
  const Snapshot& a = r.start;
  const Snapshot& b = r.end;
  const double secs = std::chrono::duration<double>(b.when - a.when).count();
  const double safe = secs > 0 ? secs : 1e-9;
  const uint64_t requests = b.dut.received - a.dut.received;
  const uint64_t dut_sent = b.dut.sent - a.dut.sent;
  const uint64_t sent = b.workers.sent - a.workers.sent;
  const uint64_t responses = b.workers.accepted - a.workers.accepted;
  const uint64_t rounds = is_switch ? responses / opt.workers : responses;
  const double dut_cpu = b.dut_cpu - a.dut_cpu;
  const double sender_cpu = b.sender_cpu - a.sender_cpu;
  const uint64_t dut_syscalls = dut_stats.send_syscalls + dut_stats.recv_syscalls;

  Row row;
  nlohmann::json& j = row.j;
  j["mode"] = is_switch ? "switch" : "forward";
  j["dut_threads"] = opt.dut_threads;
  j["steering"] = opt.steering;
  j["workers"] = opt.workers;
  j["window"] = opt.window;
  j["elements_per_packet"] = opt.elements;
  j["packet_bytes"] = wire::PacketBytes(opt.elements);
  j["udp_offload"] = !opt.no_udp_offload;
  j["gso_enabled"] = gso;
  j["gro_enabled"] = gro;
  j["seconds"] = secs;
  j["requests"] = requests;
  j["requests_sent_by_workers"] = sent;
  j["responses"] = responses;
  j["responses_sent_by_dut"] = dut_sent;
  j["rounds_completed"] = rounds;
  j["requests_per_s"] = double(requests) / safe;
  j["responses_per_s"] = double(responses) / safe;
  j["aggregated_melem_per_s"] = is_switch ? double(rounds) * opt.elements / safe / 1e6 : 0.0;
  j["added_melem_per_s"] = double(requests) * opt.elements / safe / 1e6;
  j["payload_gbit_per_s_in"] = double(requests) * 4.0 * opt.elements * 8 / safe / 1e9;
  j["dut_cpu_s"] = dut_cpu;
  j["dut_cpu_utilization"] = dut_cpu / safe;
  j["dut_cpu_us_per_request"] = requests > 0 ? dut_cpu * 1e6 / double(requests) : 0.0;
  // Per DUT thread (the sums above are over all of them).
  nlohmann::json per = nlohmann::json::array();
  for (size_t t = 0; t < b.dut_threads.size() && t < a.dut_threads.size(); ++t) {
    const uint64_t req = b.dut_threads[t].received - a.dut_threads[t].received;
    const double cpu = b.dut_thread_cpu[t] - a.dut_thread_cpu[t];
    per.push_back({{"requests", req},
                   {"requests_per_s", double(req) / safe},
                   {"cpu_s", cpu},
                   {"cpu_utilization", cpu / safe},
                   {"cpu_us_per_request", req > 0 ? cpu * 1e6 / double(req) : 0.0},
                   {"runqueue_wait_fraction", (b.dut_thread_wait[t] - a.dut_thread_wait[t]) / safe}});
  }
  j["dut_thread"] = per;
  // Requests that arrived at a thread other than their slot's owner (whole run, warm-up
  // included): must be 0 with ports and reuseport-cbpf steering.
  j["misrouted"] = misrouted;
  j["misrouted_fraction"] =
      dut_stats.received > 0 ? double(misrouted) / double(dut_stats.received) : 0.0;
  // Time the thread was runnable but not running (other processes on the machine's cores).
  j["dut_runqueue_wait_fraction"] = (b.dut_wait - a.dut_wait) / safe;
  j["sender_runqueue_wait_fraction"] = (b.sender_wait - a.sender_wait) / safe;
  j["sender_cpu_utilization"] = sender_cpu / safe;
  j["sender_cpu_us_per_request"] = sent > 0 ? sender_cpu * 1e6 / double(sent) : 0.0;
  // Whole run (warm-up included): the channel's counters belong to its thread and are read
  // after it stopped.
  j["dut_syscalls_per_request"] =
      dut_stats.received > 0 ? double(dut_syscalls) / double(dut_stats.received) : 0.0;
  j["dut_datagrams_per_recv_syscall"] =
      dut_stats.recv_syscalls > 0 ? double(dut_stats.received) / double(dut_stats.recv_syscalls) : 0.0;
  j["dut_datagrams_per_send_syscall"] =
      dut_stats.send_syscalls > 0 ? double(dut_stats.sent) / double(dut_stats.send_syscalls) : 0.0;
  j["dut_channel"] = {{"received", dut_stats.received},         {"sent", dut_stats.sent},
                      {"recv_syscalls", dut_stats.recv_syscalls}, {"send_syscalls", dut_stats.send_syscalls},
                      {"gro_messages", dut_stats.gro_messages},   {"gso_messages", dut_stats.gso_messages},
                      {"gso_fallbacks", dut_stats.gso_fallbacks}, {"send_eagain", dut_stats.send_eagain},
                      {"truncated", dut_stats.truncated},         {"send_dropped", dut_stats.send_dropped}};
  const uint64_t sender_syscalls = (b.workers.send_syscalls - a.workers.send_syscalls) +
                                   (b.workers.recv_syscalls - a.workers.recv_syscalls);
  j["sender_syscalls_per_request"] = sent > 0 ? double(sender_syscalls) / double(sent) : 0.0;
  j["wrong_results"] = b.workers.wrong;
  j["unexpected_responses"] = b.workers.unexpected;
  j["verified_elements"] = b.workers.verified_elements;
  j["stalled"] = r.stalled;
  j["dut_counters"] = extra;
  {
    std::ifstream f("/proc/loadavg");
    double l1 = 0;
    if (f >> l1) j["loadavg_1min"] = l1;
  }
  if (!r.error.empty()) j["error"] = r.error;

  if (!r.error.empty()) {
    row.verdict = "FAIL (" + r.error + ")";
  } else if (r.stalled) {
    char secs_text[32];
    std::snprintf(secs_text, sizeof(secs_text), "%.1f", opt.stall_timeout);
    row.verdict = std::string("FAIL (stalled: no response for ") + secs_text + " s with " +
                  std::to_string(r.in_flight_at_stall) + " packets in flight; a lost packet?)";
  } else if (b.workers.wrong > 0) {
    row.verdict = "FAIL (" + std::to_string(b.workers.wrong) + " wrong results)";
  } else if (b.workers.unexpected > 0) {
    row.verdict = "FAIL (" + std::to_string(b.workers.unexpected) + " unexpected responses)";
  } else if (misrouted > 0 && opt.steering != "reuseport") {
    row.verdict = "FAIL (" + std::to_string(misrouted) + " misrouted requests: not at their slot's owner thread)";
  } else if (requests == 0 || responses == 0) {
    row.verdict = "FAIL (nothing completed in the measurement window)";
  } else {
    row.ok = true;
    row.verdict = "ok";
  }
  j["verdict"] = row.verdict;
  j["ok"] = row.ok;
  return row;
}

void PrintHeader() {
  std::printf("%-8s %2s %-14s %3s %5s %7s %11s %11s %10s %10s %6s %6s %8s %8s %6s %-11s %8s  %s\n",
              "mode", "T", "steering", "n", "elems", "offload", "requests/s", "responses/s",
              "Melem/s_ag", "Melem/s_in", "dutCPU", "dutRQ", "us/req", "sys/req", "sndCPU",
              "thrCPU%", "misrt", "verdict");
}

void PrintRow(const nlohmann::json& j) {
  const bool sw = j["mode"] == "switch";
  char agg[32];
  if (sw) {
    std::snprintf(agg, sizeof(agg), "%.1f", j["aggregated_melem_per_s"].get<double>());
  } else {
    std::snprintf(agg, sizeof(agg), "-");
  }
  std::string per_thread;
  for (const auto& t : j["dut_thread"]) {
    if (!per_thread.empty()) per_thread += "/";
    per_thread += std::to_string(int(100 * t["cpu_utilization"].get<double>() + 0.5));
  }
  std::printf("%-8s %2u %-14s %3u %5u %7s %11.0f %11.0f %10s %10.1f %5.0f%% %5.0f%% %8.2f %8.3f %5.0f%% %-11s %8llu  %s\n",
              j["mode"].get<std::string>().c_str(), j["dut_threads"].get<uint32_t>(),
              j["steering"].get<std::string>().c_str(), j["workers"].get<uint32_t>(),
              j["elements_per_packet"].get<uint32_t>(), j["udp_offload"].get<bool>() ? "gso+gro" : "off",
              j["requests_per_s"].get<double>(), j["responses_per_s"].get<double>(), agg,
              j["added_melem_per_s"].get<double>(), 100 * j["dut_cpu_utilization"].get<double>(),
              100 * j["dut_runqueue_wait_fraction"].get<double>(),
              j["dut_cpu_us_per_request"].get<double>(), j["dut_syscalls_per_request"].get<double>(),
              100 * j["sender_cpu_utilization"].get<double>(), per_thread.c_str(),
              static_cast<unsigned long long>(j["misrouted"].get<uint64_t>()),
              j["verdict"].get<std::string>().c_str());
}

int RunBenchmark(const Options& opt) {
  const bool is_switch = opt.mode == "switch";
  UdpChannelOptions copt;
  copt.local = {kLocalhost, 0};
  copt.gso = !opt.no_udp_offload;
  copt.gro = !opt.no_udp_offload;

  Senders senders(opt, is_switch);
  StatusOr<std::vector<uint16_t>> ports = senders.Open(copt);
  if (!ports.ok()) {
    std::cerr << "switch_rate: cannot open the worker channels: " << ports.status() << "\n";
    return 2;
  }
  std::unique_ptr<DeviceUnderTest> dut;
  if (is_switch) {
    auto d = SwitchDut::Create(copt, *ports, opt.drop_probability, opt.dut_threads, opt.window,
                               opt.elements);
    if (!d.ok()) {
      std::cerr << "switch_rate: cannot start the switch: " << d.status() << "\n";
      return 2;
    }
    dut = std::move(*d);
  } else {
    auto d = ForwarderDut::Create(copt, opt.dut_threads, opt.steering, opt.window,
                                  opt.cbpf_pool_offset);
    if (!d.ok()) {
      std::cerr << "switch_rate: cannot start the forwarder: " << d.status() << "\n";
      return 2;
    }
    dut = std::move(*d);
  }
  // Whether the kernel granted the offloads (a probe channel with the same options).
  bool gso = false;
  bool gro = false;
  if (auto probe = UdpChannel::Create(copt); probe.ok()) {
    gso = (*probe)->gso_enabled();
    gro = (*probe)->gro_enabled();
  }

  SenderResult result;
  // ports: one target per DUT thread; a reuseport group: its one port.
  std::vector<Endpoint> targets = dut->endpoints();
  if (opt.steering != "ports") targets.resize(1);
  std::thread sender([&] { result = senders.Run(*dut, targets); });
  sender.join();  // Run() ends by its own deadlines (measurement end or stall timeout)
  dut->Stop();
  Row row = Evaluate(opt, is_switch, gso, gro, result, dut->channel_stats(), dut->Extra(),
                     dut->misrouted());

  if (!opt.no_header) PrintHeader();
  PrintRow(row.j);
  std::fflush(stdout);
  if (!opt.json_path.empty()) {
    std::ofstream f(opt.json_path);
    f << row.j.dump(2) << "\n";
    if (!f) {
      std::cerr << "switch_rate: cannot write --json " << opt.json_path << "\n";
      return 2;
    }
  }
  if (!row.ok) std::cerr << "switch_rate: " << row.verdict << "\n";
  return row.ok ? 0 : 1;
}

}  // namespace
}  // namespace switchml::bench

int main(int argc, char** argv) {
  using switchml::bench::Options;
  Options opt;
  CLI::App app{
      "switch_rate: packets per second one software-switch thread aggregates, fed by n synthetic "
      "workers on 127.0.0.1 (--mode switch), against a plain UDP forwarder with the same I/O "
      "method (--mode forward). Prints a header and one result row; exit 1 if any result was "
      "wrong or the run stalled."};
  app.add_option("--mode", opt.mode, "switch or forward")
      ->check(CLI::IsMember({"switch", "forward"}))
      ->capture_default_str();
  app.add_option("--workers", opt.workers, "Synthetic workers (each its own UDP socket), 1..64")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--window", opt.window, "Slots each worker keeps in flight, 1..8192")
      ->check(CLI::Range(1, 8192))
      ->capture_default_str();
  app.add_option("--elements-per-packet", opt.elements, "int32 elements per packet: 64, 256, 512 or 1024")
      ->check(CLI::IsMember({64, 256, 512, 1024}))
      ->capture_default_str();
  app.add_option("--seconds", opt.seconds, "Measured duration (after the warm-up)")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  app.add_option("--warmup", opt.warmup, "Warm-up seconds before measuring")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  app.add_option("--stall-timeout", opt.stall_timeout,
                 "Fail the run when no response arrives for this many seconds")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  app.add_flag("--no-udp-offload", opt.no_udp_offload,
               "Plain sendmmsg/recvmmsg: no UDP GSO/GRO on any channel");
  app.add_option("--verify-every", opt.verify_every,
                 "Check every element of every Nth response per worker (first and last element of "
                 "all responses are always checked); 0 = only first/last")
      ->capture_default_str();
  app.add_option("--corrupt-worker", opt.corrupt_worker,
                 "Testing aid: this worker sends a wrong value, so results must be reported wrong")
      ->check(CLI::Range(-1, 63));
  app.add_option("--switch-drop-probability", opt.drop_probability,
                 "Testing aid (--mode switch): the switch's drop simulator discards this fraction "
                 "of requests; without retransmission the windows stall and the run must fail")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--json", opt.json_path, "Write the result (one JSON object) to this file");
  app.add_flag("--no-header", opt.no_header, "Print only the result row");
  app.add_option("--dut-threads", opt.dut_threads,
                 "Threads T of the device, 1..8, each with its own socket; slot s is owned by "
                 "thread s*T/window. --mode forward: forwarder threads; --mode switch: the "
                 "switch's I/O threads (SwitchConfig::io_threads; window a multiple of T)")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  app.add_option("--steering", opt.steering,
                 "--mode forward, how requests reach the owner thread: ports (a port per thread, "
                 "workers send each slot to its owner's port), reuseport (one SO_REUSEPORT port, "
                 "kernel 4-tuple hash: misrouted counted, not failed) or reuseport-cbpf (one port, "
                 "a classic BPF program steers by the slot in the payload). A run with any "
                 "misrouted request fails in ports and reuseport-cbpf mode")
      ->check(CLI::IsMember({"ports", "reuseport", "reuseport-cbpf"}))
      ->capture_default_str();
  app.add_flag("--no-owner-split", opt.no_owner_split,
               "Testing aid: each worker sends all its pending slots in one burst, so a GSO "
               "message may span two owner threads (reuseport-cbpf then misroutes its tail)");
  app.add_option("--cbpf-pool-offset", opt.cbpf_pool_offset,
                 "Testing aid: payload offset the reuseport-cbpf program reads the pool index "
                 "from (right: 6; 14 = as if the program saw the UDP header: must misroute)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (opt.mode == "switch" && opt.steering != "ports") {
    std::cerr << "switch_rate: --steering " << opt.steering
              << ": the switch's I/O threads each have their own port (--mode switch: ports)\n";
    return 2;
  }
  if (opt.window % opt.dut_threads != 0) {
    std::cerr << "switch_rate: --window " << opt.window << " must be a multiple of --dut-threads "
              << opt.dut_threads << " (each I/O thread owns window/T slots)\n";
    return 2;
  }
  if (opt.corrupt_worker >= int(opt.workers)) {
    std::cerr << "switch_rate: --corrupt-worker " << opt.corrupt_worker << " must be < --workers "
              << opt.workers << "\n";
    return 2;
  }
  return switchml::bench::RunBenchmark(opt);
}
