// switchml — command line of SwitchML-C++.
//
//   switchml demo                      start a switch and 4 workers here, all-reduce, verify
//   switchml switch [--port 48864]     run the software switch (with its session service)
//   switchml allreduce --rank R --workers N --controller HOST:PORT ...   one worker of a job
//   switchml jobs create|list|show|delete|slots --controller HOST:PORT   manage jobs
//   switchml controller --switch HOST:PORT ...   a standalone controller driving switches
//   switchml top --controller HOST:PORT          a live view of its switches and jobs
//
// `switchml <command> --help` lists each command's flags.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"SwitchML-C++: in-network aggregation (software switch, client, tools)", "switchml"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("switchml 0.1.0"));
  auto* sw = app.add_subcommand("switch", "Run the software switch and its session service");
  auto* ar = app.add_subcommand("allreduce", "Run one worker (rank) of an all-reduce job against a switch");
  auto* demo = app.add_subcommand(
      "demo", "Start a switch and N workers on this machine, all-reduce a tensor, verify every element");
  auto* jobs = app.add_subcommand("jobs", "Create, list, show, delete jobs; inspect slots (JobService)");
  auto* ctlr = app.add_subcommand("controller", "Run a standalone controller driving one or more switches over gRPC");
  auto* top = app.add_subcommand("top", "A live view of a controller's switches and jobs (rates, drops, slots, workers)");
  auto run_switch = switchml::tools::AddSwitchCommand(*sw);
  auto run_jobs = switchml::tools::AddJobsCommand(*jobs);
  auto run_ctlr = switchml::tools::AddControllerCommand(*ctlr);
  auto run_allreduce = switchml::tools::AddAllReduceCommand(*ar);
  auto run_demo = switchml::tools::AddDemoCommand(*demo);
  auto run_top = switchml::tools::AddTopCommand(*top);
  if (argc > 1 && argv[1][0] != '-') {
    const std::string cmd = argv[1];
    if (cmd != "switch" && cmd != "allreduce" && cmd != "demo" && cmd != "jobs" && cmd != "controller" &&
        cmd != "top") {
      std::cerr << "switchml: unknown command '" << cmd
                << "' (commands: switch, allreduce, demo, jobs, controller, top; see switchml --help)\n";
      return 2;
    }
  }
  // `switch` and `controller` take --config FILE: its options go in front of the command line's
  // (switchml::tools::ExpandConfigFile).
  std::vector<std::string> args(argv, argv + argc);
  if (argc > 1 && (args[1] == "switch" || args[1] == "controller")) {
    const CLI::App& command = args[1] == "switch" ? *sw : *ctlr;
    auto expanded = switchml::tools::ExpandConfigFile(command, {args.begin() + 2, args.end()});
    if (!expanded.ok()) {
      std::cerr << "switchml " << args[1] << ": " << expanded.status().message() << "\n";
      return 2;
    }
    args.resize(2);
    args.insert(args.end(), expanded->begin(), expanded->end());
  }
  std::vector<char*> args_c;
  for (std::string& a : args) args_c.push_back(a.data());
  try {
    app.parse(int(args_c.size()), args_c.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (sw->parsed()) return run_switch();
  if (ar->parsed()) return run_allreduce();
  if (demo->parsed()) return run_demo();
  if (jobs->parsed()) return run_jobs();
  if (ctlr->parsed()) return run_ctlr();
  if (top->parsed()) return run_top();
  return 2;
}
