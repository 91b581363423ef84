// `switchml jobs ...`: drive a controller's switchml.v1.JobService (several jobs per switch).
//
//   switchml jobs create --controller H:P --workers 4 --slots 256 [--idle-timeout-s 60 |
//                        --no-idle-timeout] [--switches K]   (K > 1: a standalone controller
//                        places the job on K switches, each serving a share of its threads)
//                        --window W [--threads T] instead of --slots: the fewest slots that
//                        hold workers with T threads and W packets in flight on K switches
//   switchml jobs create --controller H:P --workers 8 --leaf 0:4 --leaf 1:4 [--parent 2] ...
//                        a two-level job (standalone controller): rack k = the k-th --leaf
//                        SWITCH:WORKERS, the next WORKERS ranks on that switch, under a parent
//                        job on --parent (default: a reachable non-leaf switch with room);
//                        --leaf 0,1:4 --leaf 2,3:4 [--parent 4,5]: K = 2 shards per level
//       prints SWITCHML_JOB_ID=<id> and SWITCHML_JOB_TOKEN=<token> (shell syntax, so a launch
//       script can `eval "$(switchml jobs create ...)"`), or JSON with --json
//   switchml jobs list   --controller H:P [--json]      jobs (job 0, the reference session,
//                                                        first), free slots, switch drop
//                                                        counters by reason, transport counters
//   switchml jobs show   ID --controller H:P [--token T]  one job: workers, counters, state
//   switchml jobs delete ID --token T --controller H:P  frees the job's slots at once
//   switchml jobs slots  ID [--first S] [--count N]     bitmaps/counters per slot and set (like
//                                                        the reference CLI's show_bitmap);
//                                                        ID 0 = the reference session
// Every command but `show --token` needs the operator credential: --operator-token-file FILE
// (wins) or SWITCHML_OPERATOR_TOKEN (rendezvous/operator_auth.h), sent as gRPC metadata.
// Errors print the controller's message and exit 1.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "control/job_layout.h"
#include "rendezvous/job_client.h"
#include "dataplane/switch_counters.h"
#include "commands.h"
#include "job_flags.h"

namespace switchml::tools {
namespace {

struct JobsArgs {
  std::string controller = "127.0.0.1:50099";
  uint32_t rpc_timeout_ms = 5000;
  bool json = false;
  // create
  uint32_t workers = 0;
  uint32_t slots = 0;
  uint32_t window = 0;   // --window: size the job for this window instead of --slots
  uint32_t threads = 1;  // --threads (with --window)
  uint32_t elements_per_packet = 256;
  uint32_t switches = 1;
  std::vector<std::string> leaves;  // --leaf I:N (a two-level job)
  std::string parent;               // --parent I[,I...]
  std::string type = "unspecified";
  double idle_timeout_s = 0;
  bool no_idle_timeout = false;
  OperatorTokenFlag operator_token;
  ClientTlsFlags tls;
  std::string token;
  std::string name;
  // show / delete / slots
  uint32_t job_id = 0;
  uint32_t first = 0;
  uint32_t count = 8;
};

std::string Ipv4(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 255) + "." +
         std::to_string((ip >> 8) & 255) + "." + std::to_string(ip & 255);
}

// A two-level job's racks ([{"switches", "workers"}] in rank order, a switch per shard) and
// parent switches (a switch per shard); null for a one-level job.
nlohmann::json RacksJson(const control::JobSpec& spec) {
  if (spec.racks.empty()) return nullptr;
  nlohmann::json racks = nlohmann::json::array();
  for (const auto& r : spec.racks) racks.push_back({{"switches", r.switches}, {"workers", r.workers}});
  return {{"leaves", racks}, {"parent", spec.parent_switches}};
}

// "0,1" for switches {0, 1}.
std::string SwitchList(const std::vector<uint32_t>& switches) {
  std::string out;
  for (uint32_t i : switches) out += (out.empty() ? "" : ",") + std::to_string(i);
  return out;
}

nlohmann::json ToJson(const control::JobInfo& j) {
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& w : j.workers) {
    workers.push_back({{"rank", w.rank}, {"ipv4", Ipv4(w.ipv4)}, {"udp_ports", w.udp_ports},
                       {"received", w.received}, {"idle_ms", w.idle_for.count()}});
  }
  nlohmann::json counters = nlohmann::json::object();
  control::JobCounters::Visit(j.counters, [&](const char* name, uint64_t v) { counters[name] = v; });
  return {{"job_id", j.job_id},
          {"name", j.spec.name},
          {"state", control::JobStateName(j.state)},
          {"num_workers", j.spec.num_workers},
          {"num_registered", j.num_registered},
          {"num_slots", j.spec.num_slots},
          {"switches", j.spec.switches},
          {"racks", RacksJson(j.spec)},
          {"slot_base", j.slot_base},
          {"elements_per_packet", j.spec.elements_per_packet},
          {"data_type", control::JobDataTypeName(j.spec.data_type)},
          {"idle_timeout_ms", j.spec.idle_timeout.count()},
          {"idle_ms", j.idle_for.count()},
          {"end_reason", j.end_reason},
          {"switch_lost", j.switch_lost},
          {"placement", j.assignment.placement},
          {"barrier_waiters", j.barrier_waiters},
          {"broadcast_waiters", j.broadcast_waiters},
          {"workers", workers},
          {"counters", counters}};
}

void PrintJobLine(const control::JobInfo& j, bool reference = false) {
  std::string what = j.state == control::JobState::kEnded ? j.end_reason : j.spec.name;
  if (j.spec.switches > 1) what += " [on " + std::to_string(j.spec.switches) + " switches]";
  if (!j.spec.racks.empty()) {
    std::string racks;
    for (const auto& r : j.spec.racks) {
      racks += (racks.empty() ? "" : " ") + SwitchList(r.switches) + ":" + std::to_string(r.workers);
    }
    what += " [two-level: leaves " + racks + ", parent " +
            (j.spec.parent_switches.empty() ? "?" : SwitchList(j.spec.parent_switches)) + "]";
  }
  if (j.assignment.placement > 1) {
    what += " [re-placed: placement " + std::to_string(j.assignment.placement) + "]";
  }
  // Job 0 before any rank 0 registered has no session at all.
  const char* state = reference && j.spec.num_workers == 0 ? "no_session"
                                                            : control::JobStateName(j.state);
  if (reference) what = "REFERENCE SESSION (job 0: reference clients, Session/UdpSession, no token)";
  std::printf("%6u  %-20s %4u/%-4u %6u  [%u, %u)  %5u  %10llu  %s\n", j.job_id, state,
              j.num_registered, j.spec.num_workers, j.spec.num_slots, j.slot_base,
              j.slot_base + j.spec.num_slots, j.spec.elements_per_packet,
              (unsigned long long)j.counters.received, what.c_str());
}

int Fail(const std::string& what, const Status& s) {
  std::cerr << "switchml jobs " << what << ": error: " << s.ToString() << "\n";
  return 1;
}

// The job's slots: --slots, or the fewest that hold the windows of workers with --threads
// threads and --window packets in flight on `shards` switches (--switches, or per level of a
// two-level job, control::JobLayout).
StatusOr<uint32_t> JobSlots(const JobsArgs& a, uint32_t shards) {
  if ((a.slots == 0) == (a.window == 0)) {
    return InvalidArgumentError(
        a.slots == 0 ? "give the job's size: --slots N, or --window W [--threads T]"
                     : "--slots and --window both size the job; give one of them");
  }
  if (a.slots != 0) return a.slots;
  const uint32_t slots = control::JobLayout::SlotsFor(shards, a.threads, a.window);
  auto layout = control::JobLayout::Make({.job_slots = slots,
                                          .num_shards = shards,
                                          .worker_threads = a.threads,
                                          .window_packets = a.window});
  if (!layout.ok()) {
    return InvalidArgumentError("--window " + std::to_string(a.window) + " --threads " +
                                std::to_string(a.threads) + " on " + std::to_string(shards) +
                                " switch(es): " + layout.status().message());
  }
  return slots;
}

int Run(const std::string& cmd, const JobsArgs& a) {
  if (cmd == "create") {  // argument errors before connecting
    auto racks = ParseLeafFlags(a.leaves, a.workers, a.parent);
    if (!racks.ok()) return Fail(cmd, racks.status());
    auto slots = JobSlots(a, racks->racks.empty() ? a.switches : racks->shards());
    if (!slots.ok()) return Fail(cmd, slots.status());
    if (!racks->racks.empty() && a.switches != 1 && a.switches != racks->shards()) {
      return Fail(cmd, InvalidArgumentError(
                           "--switches " + std::to_string(a.switches) + " but every --leaf names " +
                           std::to_string(racks->shards()) +
                           " switch(es): a two-level job has as many shards per level as each "
                           "rack names switches (leave --switches out)"));
    }
  }
  auto cred = a.operator_token.Resolve("switchml jobs " + cmd);
  if (!cred.ok()) return Fail(cmd, cred.status());
  auto tls = a.tls.Resolve();
  if (!tls.ok()) return Fail(cmd, tls.status());
  auto client = rendezvous::JobClient::Connect(a.controller,
                                               std::chrono::milliseconds(a.rpc_timeout_ms), *tls);
  if (!client.ok()) return Fail(cmd, client.status());
  rendezvous::JobClient& c = **client;
  c.set_operator_token(cred->token);

  if (cmd == "create") {
    control::JobSpec spec;
    spec.num_workers = a.workers;
    const LeafPlacement leaves = *ParseLeafFlags(a.leaves, a.workers, a.parent);  // checked above
    spec.switches = leaves.racks.empty() ? a.switches : leaves.shards();
    spec.num_slots = *JobSlots(a, spec.switches);  // checked above
    spec.elements_per_packet = a.elements_per_packet;
    spec.racks = leaves.racks;
    spec.parent_switches = leaves.parent_switches;
    if (a.type == "int32") {
      spec.data_type = control::JobDataType::kInt32;
    } else if (a.type == "float32") {
      spec.data_type = control::JobDataType::kFloat32;
    } else if (a.type != "unspecified") {
      return Fail(cmd, InvalidArgumentError("--type must be int32, float32 or unspecified, got '" +
                                            a.type + "'"));
    }
    if (!(a.idle_timeout_s >= 0) || a.idle_timeout_s > 4e6) {
      return Fail(cmd, InvalidArgumentError("--idle-timeout-s must be in [0, 4e6], got " +
                                            std::to_string(a.idle_timeout_s)));
    }
    if (a.no_idle_timeout && a.idle_timeout_s != 0) {
      return Fail(cmd, InvalidArgumentError("--no-idle-timeout and --idle-timeout-s " +
                                            std::to_string(a.idle_timeout_s) +
                                            " contradict each other"));
    }
    spec.idle_timeout = a.no_idle_timeout
                            ? rendezvous::JobClient::kNoIdleTimeout
                            : std::chrono::milliseconds(int64_t(a.idle_timeout_s * 1000));
    spec.token = a.token;
    spec.name = a.name;
    auto job = c.CreateJob(spec);
    if (!job.ok()) return Fail(cmd, job.status());
    if (a.json) {
      nlohmann::json j = ToJson(*job);
      j["token"] = job->token;
      std::cout << j.dump(2) << "\n";
    } else {
      std::printf("SWITCHML_JOB_ID=%u\nSWITCHML_JOB_TOKEN=%s\n", job->job_id, job->token.c_str());
    }
    return 0;
  }
  if (cmd == "list") {
    std::vector<std::pair<std::string, uint64_t>> counters;
    auto list = c.ListJobs(&counters);
    if (!list.ok()) return Fail(cmd, list.status());
    if (a.json) {
      nlohmann::json jobs = nlohmann::json::array();
      for (const auto& j : list->jobs) jobs.push_back(ToJson(j));
      nlohmann::json sw;
      for (const auto& [k, v] : counters) sw[k] = v;
      nlohmann::json out{{"pool_slots", list->pool_slots},
                         {"free_slots", list->free_slots},
                         {"largest_free_range", list->largest_free_range},
                         {"jobs", jobs},
                         {"switch_counters", sw}};
      if (!list->switches.empty()) {
        nlohmann::json health = nlohmann::json::array();
        for (const auto& h : list->switches) {
          health.push_back({{"address", h.address},
                            {"up", h.up},
                            {"for_ms", h.for_ms.count()},
                            {"last_error", h.last_error},
                            {"jobs_replaced", h.jobs_replaced}});
        }
        out["switches"] = health;
      }
      if (list->reference_session) out["reference_session"] = ToJson(*list->reference_session);
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    std::printf("slot pool: %u slots, %u free (largest free range %u)\n", list->pool_slots,
                list->free_slots, list->largest_free_range);
    std::printf("%6s  %-20s %9s %6s  %-10s %5s  %10s  %s\n", "job", "state", "workers", "slots",
                "range", "elems", "received", "name / end reason");
    if (list->reference_session) PrintJobLine(*list->reference_session, /*reference=*/true);
    for (const auto& j : list->jobs) PrintJobLine(j);
    if (const auto& ref = list->reference_session) {
      // Its counters in full: an operator looking at a stuck reference session starts here.
      std::printf("job 0 (reference session) counters:");
      const nlohmann::json job0 = ToJson(*ref)["counters"];
      for (const auto& [name, value] : job0.items()) {
        std::printf(" %s=%llu", name.c_str(), (unsigned long long)value.get<uint64_t>());
      }
      std::printf("\n");
    }
    // A standalone controller reports each switch's health (an older one only
    // "switch<i>.reachable"); the jobs of a switch that did not answer are missing above.
    for (size_t i = 0; i < list->switches.size(); ++i) {
      const auto& h = list->switches[i];
      if (h.up) {
        std::printf("switch%zu (%s): up for %.1f s, %llu job(s) re-placed away from it\n", i,
                    h.address.c_str(), h.for_ms.count() / 1000.0,
                    (unsigned long long)h.jobs_replaced);
      } else {
        std::printf("switch%zu: UNREACHABLE (its jobs and counters are not listed): %s down for "
                    "%.1f s, %llu job(s) re-placed away from it; last error: %s\n",
                    i, h.address.c_str(), h.for_ms.count() / 1000.0,
                    (unsigned long long)h.jobs_replaced, h.last_error.c_str());
      }
    }
    for (const auto& [name, v] : counters) {
      if (!list->switches.empty()) break;
      if (v == 0 && name.size() > 10 && name.compare(name.size() - 10, 10, ".reachable") == 0) {
        std::printf("%s: UNREACHABLE (its jobs and counters are not listed)\n",
                    name.substr(0, name.size() - 10).c_str());
      }
    }
    // A standalone controller prefixes each switch's counters with "switch<i>.".
    auto base = [](const std::string& name) {
      const size_t dot = name.rfind('.');
      return dot == std::string::npos ? name : name.substr(dot + 1);
    };
    std::printf("switch drops by reason (every job, job 0 included):\n");
    for (const auto& [name, v] : counters) {
      if (dataplane::IsDropCounter(base(name))) {
        std::printf("  %-36s %llu\n", name.c_str(), (unsigned long long)v);
      }
    }
    // The transport's own counters (switch --io raw: raw_*, kernel UDP: udp_*), drops or not.
    bool header = false;
    for (const auto& [name, v] : counters) {
      const std::string k = base(name);
      if (dataplane::IsDropCounter(k) || (!k.starts_with("raw_") && !k.starts_with("udp_"))) continue;
      if (!header) std::printf("switch transport counters:\n");
      header = true;
      std::printf("  %-36s %llu\n", name.c_str(), (unsigned long long)v);
    }
    return 0;
  }
  if (cmd == "show") {
    auto job = c.GetJob(a.job_id, a.token);
    if (!job.ok()) return Fail(cmd, job.status());
    std::cout << ToJson(*job).dump(2) << "\n";
    return 0;
  }
  if (cmd == "delete") {
    Status s = c.DeleteJob(a.job_id, a.token);
    if (!s.ok()) return Fail(cmd, s);
    std::printf("job %u deleted; its slots are free\n", a.job_id);
    return 0;
  }
  if (cmd == "slots") {
    auto slots = c.InspectSlots(a.job_id, a.first, a.count);
    if (!slots.ok()) return Fail(cmd, slots.status());
    if (a.json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& s : *slots) {
        nlohmann::json sets = nlohmann::json::array();
        for (const auto& set : s.sets) {
          sets.push_back({{"bitmap", std::vector<uint64_t>(set.bitmap, set.bitmap + 4)},
                          {"counter", set.counter},
                          {"num_elements", set.num_elements},
                          {"exp0", set.exp0},
                          {"exp1", set.exp1}});
        }
        out.push_back({{"slot", s.slot}, {"sets", sets}});
      }
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    std::printf("%6s  %-18s %-18s %8s %8s %6s\n", "slot", "bitmap set0", "bitmap set1", "missing0",
                "missing1", "elems");
    for (const auto& s : *slots) {
      std::printf("%6u  %016llx   %016llx   %8u %8u %6u\n", s.slot,
                  (unsigned long long)s.sets[0].bitmap[0], (unsigned long long)s.sets[1].bitmap[0],
                  s.sets[0].counter, s.sets[1].counter,
                  std::max(s.sets[0].num_elements, s.sets[1].num_elements));
    }
    return 0;
  }
  return Fail(cmd, InvalidArgumentError("unknown jobs command"));
}

}  // namespace

Runner AddJobsCommand(CLI::App& app) {
  auto a = std::make_shared<JobsArgs>();
  app.require_subcommand(1);
  auto common = [a](CLI::App* sub) {
    sub->add_option("--controller", a->controller, "Controller address host:port")
        ->capture_default_str();
    sub->add_option("--rpc-timeout-ms", a->rpc_timeout_ms, "Deadline of each controller call")
        ->capture_default_str();
    a->operator_token.Register(*sub, "to send to the controller (gRPC metadata "
                                     "x-switchml-operator-token)");
    a->tls.Register(*sub);
  };
  auto* create = app.add_subcommand("create", "Create a job; prints its id and token");
  common(create);
  create->add_option("--workers", a->workers, "Number of workers (ranks) in the job")->required();
  create->add_option("--slots", a->slots,
                     "Switch slots the job needs (>= every worker's window, e.g. 256); or "
                     "--window");
  create->add_option("--window", a->window,
                     "Instead of --slots: size the job for workers with this many packets in "
                     "flight (their --window) and --threads threads, on --switches switches");
  create->add_option("--threads", a->threads,
                     "With --window: worker threads per worker (their --threads)")
      ->capture_default_str();
  create->add_option("--elements-per-packet", a->elements_per_packet,
                     "Largest packet of the job, in elements (64, 256, 512, 1024)")
      ->capture_default_str();
  create->add_option("--type", a->type, "int32 or float32 (informative)")->capture_default_str();
  create->add_option("--switches", a->switches,
                     "Serve the job with K switches (a standalone controller driving >= K), "
                     "each a shard serving a contiguous share of every worker's threads; "
                     "workers need --threads >= K to use them all")
      ->capture_default_str();
  create->add_option("--leaf", a->leaves,
                     "Two-level job (a standalone controller): SWITCH:WORKERS, once per rack in "
                     "rank order: rack k is a leaf job of the next WORKERS ranks on the "
                     "controller's switch SWITCH (its --switch list, from 0); counts sum to "
                     "--workers. SWITCH,SWITCH,...:WORKERS: K shards per level, leaf shard s on "
                     "the s-th switch (every rack names K)");
  create->add_option("--parent", a->parent,
                     "With --leaf: the controller's switch that runs the parent job, or K "
                     "switches SWITCH,SWITCH,... (one per shard) (default: reachable switches "
                     "that are not leaves, with room)");
  create->add_option("--idle-timeout-s", a->idle_timeout_s,
                     "Tear the job down after this long without datagrams (0 = the switch's or "
                     "controller's default, 600 s unless it was started with another)")
      ->capture_default_str();
  create->add_flag("--no-idle-timeout", a->no_idle_timeout,
                   "Keep the job until it is deleted (no idle timeout)");
  create->add_option("--token", a->token,
                     "Token to use (default: a random one); no other live job may have it "
                     "(ALREADY_EXISTS)");
  create->add_option("--name", a->name, "Informative name");
  create->add_flag("--json", a->json, "Print the job as JSON");
  auto* list = app.add_subcommand(
      "list", "List jobs (job 0, the reference session, first), free slots, every drop reason "
              "and the transport counters of the switch");
  common(list);
  list->add_flag("--json", a->json, "Print JSON");
  auto* show = app.add_subcommand("show", "Show one job (workers, counters, state)");
  common(show);
  show->add_option("job_id", a->job_id, "Job id")->required();
  show->add_option("--token", a->token,
                   "The job's token: lets a job's user look without the operator credential");
  auto* del = app.add_subcommand("delete", "Delete a job; frees its slots at once");
  common(del);
  del->add_option("job_id", a->job_id, "Job id")->required();
  del->add_option("--token", a->token, "The job's token")->required();
  auto* slots = app.add_subcommand("slots", "Show per-slot bitmaps and counters of a job");
  common(slots);
  slots->add_option("job_id", a->job_id, "Job id (0 = the reference UdpSession session)")
      ->required();
  slots->add_option("--first", a->first, "First slot (job-relative)")->capture_default_str();
  slots->add_option("--count", a->count, "Number of slots (1..1024)")->capture_default_str();
  slots->add_flag("--json", a->json, "Print JSON");
  return [a, create, list, show, del, slots] {
    if (create->parsed()) return Run("create", *a);
    if (list->parsed()) return Run("list", *a);
    if (show->parsed()) return Run("show", *a);
    if (del->parsed()) return Run("delete", *a);
    if (slots->parsed()) return Run("slots", *a);
    return 2;
  };
}

}  // namespace switchml::tools
