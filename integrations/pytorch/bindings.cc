// Python module switchml._torch: exposes SwitchMLBackend (a torch.distributed c10d Backend)
// and its settings. switchml/torch.py registers the backend.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/pybind.h>

#include "backend.h"

namespace py = pybind11;

namespace switchml::pytorch {

// The Python holder of a SwitchMLBackend: an intrusive_ptr that drops its reference with the GIL
// released. The last reference may go from Python (`b = switchml.torch.backend()` outliving
// destroy_process_group()); the destructor then joins the inner ProcessGroupGloo's threads, and
// one of them may be destroying a work whose tensors need the GIL to release their Python
// objects: with the GIL held, that is a deadlock at exit. Only member: an intrusive_ptr, as
// pybind11 may copy one of torch's intrusive_ptr<Backend> holders into this type.
template <typename T>
class NoGilHolder {
 public:
  NoGilHolder() = default;
  explicit NoGilHolder(T* p) : ptr_(c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(p)) {}
  explicit NoGilHolder(c10::intrusive_ptr<T> p) : ptr_(std::move(p)) {}
  NoGilHolder(const NoGilHolder&) = default;
  NoGilHolder& operator=(const NoGilHolder&) = default;
  ~NoGilHolder() {
    if (ptr_ && PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      ptr_.reset();
    }
  }
  T* get() const noexcept { return ptr_.get(); }

 private:
  c10::intrusive_ptr<T> ptr_;
};

}  // namespace switchml::pytorch

PYBIND11_DECLARE_HOLDER_TYPE(T, switchml::pytorch::NoGilHolder<T>, true);

namespace switchml::pytorch {
namespace {

using switchml::pytorch::SwitchMLBackend;

py::dict StatsToDict(const switchml::Stats& s) {
  py::dict d;
  d["calls_submitted"] = s.calls_submitted;
  d["calls_completed"] = s.calls_completed;
  d["calls_recovered"] = s.calls_recovered;
  d["calls_failed"] = s.calls_failed;
  // Deprecated keys (one release): the old names, with the same values.
  d["jobs_submitted"] = s.calls_submitted;
  d["jobs_completed"] = s.calls_completed;
  d["jobs_failed"] = s.calls_failed;
  d["packets_sent"] = s.packets_sent;
  d["retransmissions"] = s.retransmissions;
  d["results_received"] = s.results_received;
  d["duplicates"] = s.duplicates;
  d["malformed"] = s.malformed;
  d["timeouts"] = s.timeouts;
  d["send_stalls"] = s.send_stalls;
  return d;
}

switchml::pytorch::FakeDeviceOps& FakeOps(SwitchMLBackend& pg) {
  TORCH_CHECK(pg.test_staging() != nullptr, "switchml: call _test_staging_enable() first");
  return *pg.test_staging();
}

}  // namespace
}  // namespace switchml::pytorch

PYBIND11_MODULE(_torch, m) {
  using switchml::pytorch::FakeOps;
  using switchml::pytorch::SwitchMLBackend;
  using switchml::pytorch::SwitchMLConfig;
  m.doc() = "SwitchML backend for torch.distributed (use `import switchml.torch`).";
  // The base classes (Backend, Store) are registered by torch's own module.
  py::module_::import("torch.distributed");

  py::class_<SwitchMLConfig>(m, "SwitchMLConfig")
      .def(py::init<>())
      .def_readwrite("controller_address", &SwitchMLConfig::controller_address)
      .def_readwrite("num_worker_threads", &SwitchMLConfig::num_worker_threads)
      .def_readwrite("window_packets", &SwitchMLConfig::window_packets)
      .def_readwrite("elements_per_packet", &SwitchMLConfig::elements_per_packet)
      .def_readwrite("call_timeout", &SwitchMLConfig::call_timeout)
      // Deprecated name of call_timeout (one release): the same field.
      .def_readwrite("job_timeout", &SwitchMLConfig::call_timeout)
      .def_readwrite("bind_ip", &SwitchMLConfig::bind_ip)
      .def_readwrite("advertise_ip", &SwitchMLConfig::advertise_ip)
      .def_readwrite("job_id", &SwitchMLConfig::job_id)
      .def_readwrite("job_token", &SwitchMLConfig::job_token)
      .def_readwrite("staging_chunk_bytes", &SwitchMLConfig::staging_chunk_bytes)
      .def_readwrite("half_via_switch", &SwitchMLConfig::half_via_switch)
      .def_readwrite("failover", &SwitchMLConfig::failover)
      .def_readwrite("rejoin", &SwitchMLConfig::rejoin)
      .def_readwrite("rejoin_min_backoff", &SwitchMLConfig::rejoin_min_backoff)
      .def_readwrite("rejoin_max_backoff", &SwitchMLConfig::rejoin_max_backoff);

  py::class_<SwitchMLBackend, c10d::Backend, switchml::pytorch::NoGilHolder<SwitchMLBackend>>(
      m, "SwitchMLBackend")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, const SwitchMLConfig& config,
                       const c10::intrusive_ptr<c10d::Backend>& gloo, const c10::intrusive_ptr<c10d::Backend>& host) {
             return switchml::pytorch::NoGilHolder<SwitchMLBackend>(
                 c10::make_intrusive<SwitchMLBackend>(store, rank, size, timeout, config, gloo, host));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("config"),
           py::arg("gloo"), py::arg("host") = c10::intrusive_ptr<c10d::Backend>(),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("controller_address", &SwitchMLBackend::controller_address)
      .def("stats",
           [](const SwitchMLBackend& pg) {
             py::dict d = switchml::pytorch::StatsToDict(pg.GetStats());
             for (const auto& [key, count] : pg.FallbackCounts()) d[py::str(key)] = count;
             for (const auto& [key, count] : pg.FailoverCounts()) d[py::str(key)] = count;
             return d;
           },
           "The SwitchML client library's counters for this group (calls_submitted/completed/recovered/"
           "failed: recovered = failed on the switch and finished by the failover's recovery, no "
           "longer counted as failed; packets, retransmissions; jobs_* are deprecated aliases of "
           "calls_*), and "
           "the all-reduce calls sent to the inner Gloo group: fallback_allreduces (total) and one "
           "fallback_<reason> per reason (fallback_op_max, ..., fallback_dtype_float64, ...); and the "
           "failover's: failover (times the group moved to the host path after a switch failure), "
           "failover_recovered_calls (SwitchML calls in flight then that the recovery finished), "
           "failover_host_calls (SwitchML calls run on the host path), failover_returns (times it came "
           "back to the switch), failover_rejoin_attempts, failover_agreements (agreements this rank ran "
           "with the others: probes and its recovery's), failover_probes_skipped (probes skipped: no "
           "SwitchML all-reduce called since an agreement found every rank idle), on_host_path (1 "
           "while there). The library's "
           "counters are the current context's (a return to the switch starts a new one).")
      .def("_inject_switch_failure", &SwitchMLBackend::InjectSwitchFailure,
           "Tests and fire drills: this rank's SwitchML context breaks as if the switch had failed; "
           "the group then moves to the host path at the first agreement after the next SwitchML "
           "all-reduce (the next delegated collective or barrier, if one was called since the last "
           "agreement that found every rank idle).")
      // Tests only: CPU all-reduces take the device staging path with a fake device (staging.h).
      .def("_test_staging_enable",
           [](SwitchMLBackend& pg, int64_t chunk_bytes, std::chrono::milliseconds mark_timeout) {
             pg.EnableTestStaging(chunk_bytes, mark_timeout);
           },
           py::arg("chunk_bytes"), py::arg("mark_timeout"))
      .def("_test_staging_timeout",
           [](SwitchMLBackend& pg, std::chrono::milliseconds mark_timeout) { pg.SetTestStagingTimeout(mark_timeout); })
      .def("_test_staging_hold", [](SwitchMLBackend& pg) { FakeOps(pg).Hold(); })
      .def("_test_staging_unhold", [](SwitchMLBackend& pg) { FakeOps(pg).Unhold(); })
      .def("_test_staging_release", [](SwitchMLBackend& pg) { FakeOps(pg).Release(); })
      .def("_test_staging_counts", [](SwitchMLBackend& pg) {
        switchml::pytorch::FakeDeviceOps& ops = FakeOps(pg);
        py::dict d;
        d["copies_to_host"] = ops.copies_to_host.load();
        d["copies_to_device"] = ops.copies_to_device.load();
        d["calls_done"] = ops.calls_done.load();
        return d;
      });
}
