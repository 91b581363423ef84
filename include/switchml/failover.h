// switchml/failover.h — surviving a failing switch: the integrations' side of recovery onto the
// host network (docs/reliability.md, "Surviving a failing switch").
//
// A framework integration (the PyTorch backend, the MPI interposer) that has its own collectives
// on the host network (Gloo, MPI) implements HostPath over them and keeps one Failover per
// Context. When a call fails because the switch (a shard, the controller) is gone
// (Failover::SwitchFailed), every rank runs Failover::Agree(true) once: the ranks agree that the
// switch failed, finish the calls the switch left unfinished from shadow copies and intact inputs
// on the host path (Context results identical on every rank), and say which calls the caller must
// run on the host path itself (RunOnHost). A rank that saw no failure must learn of the others'
// at its next point of synchronisation: while on the switch path, an integration calls
// Agree(false) before every collective it runs on the host network and at barriers and shutdown,
// so no rank waits in a host collective for a rank that waits for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "switchml/status.h"
#include "switchml/types.h"

namespace switchml {

class Context;
class AllReduceHandle;

// The collectives recovery needs from the host network. Every rank of the job calls the same
// methods in the same order with the same sizes; every method must end within a deadline (the
// implementation's own: it must exceed the context's call_timeout plus the time a rank may take
// to its next call, since each rank joins at its own first failure or synchronisation point)
// and returns an error instead of hanging.
class HostPath {
 public:
  virtual ~HostPath() = default;
  // Every rank passes the same number of values; returns num_workers x mine.size() values,
  // rank r's at [r * mine.size(), (r + 1) * mine.size()).
  virtual StatusOr<std::vector<int64_t>> AllGather(std::span<const int64_t> mine) = 0;
  // Copies data[0..bytes) of rank `root` to data[0..bytes) of every other rank.
  virtual Status Broadcast(void* data, size_t bytes, uint32_t root) = 0;
  // In place element-wise SUM of data[0..n) (int32, wrapping, or float32) over the ranks. Every
  // rank must get bit-identical results (the float32 summation order may not depend on the rank).
  virtual Status AllReduce(void* data, size_t n, DataType type) = 0;
};

// What a recovery did.
struct RecoveryReport {
  // Calls [first_call, end_call) were finished by recovery: their handles now report their
  // results (OK, or the failure every worker agreed on, e.g. a call some worker rejected). Calls
  // before first_call had finished on every worker before the switch failed. Call numbers count
  // the context's AllReduceAsync calls from 0.
  uint64_t first_call = 0;
  uint64_t end_call = 0;
  // Calls [end_call, submitted) were submitted here but not by every worker: no worker
  // completed any of their packets, their inputs are intact, and their handles keep their
  // failure; the caller runs them on the host path, in order (RunOnHost).
  uint64_t submitted = 0;
  uint64_t packets_broadcast = 0;     // packets completed from another rank's shadow copy
  uint64_t elements_host_reduced = 0; // elements all-reduced on the host path
  // The rank(s) whose switch failure started it (the lowest first), for logs.
  std::vector<uint32_t> failed_ranks;
};

class Failover {
 public:
  // `context` and `host` must outlive this object.
  Failover(Context& context, HostPath& host);
  ~Failover();
  Failover(const Failover&) = delete;
  Failover& operator=(const Failover&) = delete;

  // Whether a failed call's status means the switch path is gone (its code is UNAVAILABLE, or
  // this context broke with UNAVAILABLE: the later calls fail with other codes naming it). False
  // for OK and for every other failure (a rank that died, the caller's own mistakes).
  bool SwitchFailed(const Status& call_status) const;

  // Whether this context broke because the switch failed (its next calls fail; Agree then
  // reports this rank as failed even at a probe).
  bool SwitchFailedBefore() const;

  // Breaks the context as a switch failure would (UNAVAILABLE: `why`): running calls stop, the
  // next calls fail, and the ranks recover at the next agreement. For tests and fire drills:
  // exercises the whole failover without killing a switch.
  void InjectSwitchFailure(const std::string& why);

  // Whether the context broke for another reason than the switch (a rank died, a timeout the
  // controller does not explain): no recovery will follow, so probing (Agree(false)) is useless.
  bool BrokenOtherwise() const;

  // The agreement; every rank calls it at the same points: once at its first call that failed
  // with SwitchFailed (`failed` = true), and, while on the switch path, at each synchronisation
  // point (`failed` = false: before a host-network collective, at barriers, at shutdown; a rank
  // whose context broke because the switch failed counts as failed there too). Blocks
  // in one host-path all-gather. If no rank failed, returns nullopt (nothing changed). Otherwise
  // every rank recovers: a rank whose context is still healthy gives it up (its running calls
  // stop at once and are finished by the recovery like the others'), then Context recovery runs
  // (see RecoveryReport), and from then on the context refuses new calls: the caller runs
  // every later all-reduce on the host path. Call it from a thread that no completion callback
  // needs (it waits for the context's calls to stop). Errors: the host path's (the agreement
  // or the recovery could not complete: the calls keep their failure), FAILED_PRECONDITION when
  // called again after a recovery.
  //
  // `busy` (probes only): whether this rank has an all-reduce that may still fail on the switch
  // (submitted, or called and not yet submitted, and not finished). last_agreement_idle() then
  // says, identically on every rank, whether no rank was busy: an integration may skip its next
  // probes while no switch all-reduce is called (docs/reliability.md, "Skipping the probe").
  StatusOr<std::optional<RecoveryReport>> Agree(bool failed, bool busy = false);

  // Whether the last Agree found no failure and no rank busy (false before any Agree). The same
  // on every rank: it depends only on the all-gathered flags.
  bool last_agreement_idle() const;

  // Completion callbacks (AllReduceHandle::OnComplete) of the calls a recovery finishes have run
  // already, with the failure; their handles' status() / Wait() report the recovered result.
  //
  // After a recovery: whether the call of `handle` (of this context) is one the caller must run
  // on the host path itself (no rank finished any of it; its input is intact). False for calls
  // the recovery finished (their handles report their results) and before any recovery.
  bool RunOnHost(const AllReduceHandle& handle) const;

  // Whether a recovery completed (the context is then on the host path for good).
  bool recovered() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace switchml
