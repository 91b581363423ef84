// controller/local_switch_for_tests.h — test-only: a started software switch on a UDP socket at
// 127.0.0.1 (kernel-chosen ports, one per I/O thread), for the controller's service tests.
//
//   auto sw = StartLocalSwitchForTests(/*num_slots=*/256);
//   ASSERT_TRUE(sw.ok()) << sw.status();
//   ... (*sw)->Stop();
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "controller/session_service.h"
#include "dataplane/switch_server.h"
#include "rendezvous/job_client.h"
#include "transport/udp_channel.h"

namespace switchml::controller {

inline StatusOr<std::unique_ptr<dataplane::SwitchServer>> StartLocalSwitchForTests(
    uint32_t num_slots, uint32_t max_workers = 8, uint32_t max_elements_per_packet = 256,
    uint32_t io_threads = 1) {
  dataplane::SwitchConfig sc;
  sc.num_slots = num_slots;
  sc.max_elements_per_packet = max_elements_per_packet;
  sc.max_workers = max_workers;
  sc.io_threads = io_threads;
  std::vector<std::unique_ptr<transport::Channel>> channels;
  for (uint32_t i = 0; i < io_threads; ++i) {
    transport::UdpChannelOptions uo;
    uo.local = transport::Endpoint{0x7F000001, 0};
    auto channel = transport::UdpChannel::Create(uo);
    if (!channel.ok()) return channel.status();
    channels.push_back(std::move(*channel));
  }
  auto server = dataplane::SwitchServer::Create(sc, std::move(channels));
  if (!server.ok()) return server.status();
  if (Status s = (*server)->Start(); !s.ok()) return s;
  return std::move(*server);
}

// A started controller (reference services + JobService) on 127.0.0.1 (kernel-chosen port) in
// front of `control` (a switch, or RemoteSwitches for a standalone controller), accepting
// `operator_token` for job administration.
inline StatusOr<std::unique_ptr<ControllerServer>> StartLocalControllerForTests(
    SwitchControl* control, const std::string& operator_token) {
  ServerOptions so;
  so.listen_address = "127.0.0.1:0";
  so.operator_token = operator_token;
  return ControllerServer::Start(so, control);
}

// A local switch with its controller in front and a JobClient holding the operator credential:
// the usual fixture of the service tests.
struct LocalControlPlaneForTests {
  std::unique_ptr<dataplane::SwitchServer> sw;
  std::unique_ptr<ControllerServer> controller;
  std::string address;  // the controller's, 127.0.0.1:PORT
  std::unique_ptr<rendezvous::JobClient> admin;
};

inline StatusOr<LocalControlPlaneForTests> StartLocalControlPlaneForTests(
    uint32_t num_slots, const std::string& operator_token, uint32_t io_threads = 1) {
  LocalControlPlaneForTests p;
  auto sw = StartLocalSwitchForTests(num_slots, /*max_workers=*/8,
                                     /*max_elements_per_packet=*/256, io_threads);
  if (!sw.ok()) return sw.status();
  p.sw = std::move(*sw);
  auto ctl = StartLocalControllerForTests(p.sw.get(), operator_token);
  if (!ctl.ok()) return ctl.status();
  p.controller = std::move(*ctl);
  p.address = "127.0.0.1:" + std::to_string(p.controller->port());
  auto client = rendezvous::JobClient::Connect(p.address, std::chrono::seconds(3));
  if (!client.ok()) return client.status();
  p.admin = std::move(*client);
  p.admin->set_operator_token(operator_token);
  return p;
}

}  // namespace switchml::controller
