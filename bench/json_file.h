// bench/json_file.h — reading a benchmark's --json output back (the `summarize` subcommands of
// allreduce_perf and dnn_bench).
#pragma once

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "switchml/status.h"

namespace switchml::bench {

// Parses the JSON document in file `path`. Errors: NotFound ("cannot open PATH") or
// InvalidArgument ("PATH is not JSON: <parser message>").
inline StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return NotFoundError("cannot open " + path);
  try {
    return nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    return InvalidArgumentError(path + " is not JSON: " + e.what());
  }
}

}  // namespace switchml::bench
