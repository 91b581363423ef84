// tools/commands.h — the subcommands of the `switchml` binary. Each Add*Command registers its
// flags on `app` and returns a callback that runs it (after parsing) and yields the exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace switchml::tools {

using Runner = std::function<int()>;
Runner AddSwitchCommand(CLI::App& app);
Runner AddAllReduceCommand(CLI::App& app);
Runner AddDemoCommand(CLI::App& app);
Runner AddJobsCommand(CLI::App& app);
Runner AddControllerCommand(CLI::App& app);
Runner AddTopCommand(CLI::App& app);

}  // namespace switchml::tools
