// controller/fake_switch_for_tests.h — test-only: a SwitchControl whose every method fails with
// Unimplemented, for tests that need a switch but exercise only a few of its methods (they
// override those).
//
//   struct OnlyRegistration : UnimplementedSwitchForTests {
//     StatusOr<JobWorkerGrant> RegisterJobWorker(const JobRegistration& r) override { ... }
//   };
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "control/switch_control.h"

namespace switchml::controller {

class UnimplementedSwitchForTests : public control::SwitchControl {
 public:
  StatusOr<control::JobInfo> CreateJob(const control::JobSpec&) override {
    return Unimplemented("CreateJob");
  }
  Status DeleteJob(uint32_t, const std::string&) override { return Unimplemented("DeleteJob"); }
  StatusOr<control::JobWorkerGrant> RegisterJobWorker(
      const control::JobRegistration&) override {
    return Unimplemented("RegisterJobWorker");
  }
  StatusOr<control::JobInfo> GetJob(uint32_t) const override { return Unimplemented("GetJob"); }
  control::JobList ListJobs() const override { return {}; }
  StatusOr<std::vector<control::SlotInfo>> InspectSlots(uint32_t, uint32_t,
                                                          uint32_t) const override {
    return Unimplemented("InspectSlots");
  }
  std::vector<std::pair<std::string, uint64_t>> CounterValues() const override { return {}; }
  Status CheckJobAccess(uint32_t, const std::string&) const override {
    return Unimplemented("CheckJobAccess");
  }

 private:
  static Status Unimplemented(const std::string& method) {
    return UnimplementedError(method + " is not implemented by this test switch");
  }
};

}  // namespace switchml::controller
