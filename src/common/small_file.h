// common/small_file.h — reading a small file an operator names (a certificate, a key, a config
// file) without trusting what the name points to: a directory, a FIFO or /dev/zero must be a
// clear error, not a hang or an unbounded read.
#pragma once

#include <cstdint>
#include <string>

#include "switchml/status.h"

namespace switchml {

// OK if `path` is a regular file of at most `max_bytes` bytes; otherwise InvalidArgument
// "<what> '<path>': cannot read it: <why>" (no such file, permission, not a regular file,
// N bytes, more than ...).
Status CheckSmallFile(const std::string& path, const std::string& what, uintmax_t max_bytes);

// CheckSmallFile, then the whole file (errors as CheckSmallFile's).
StatusOr<std::string> ReadSmallFile(const std::string& path, const std::string& what, uintmax_t max_bytes);

}  // namespace switchml
