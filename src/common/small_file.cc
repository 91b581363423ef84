#include "common/small_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace switchml {

Status CheckSmallFile(const std::string& path, const std::string& what, uintmax_t max_bytes) {
  const std::string where = what + " '" + path + "': cannot read it: ";
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec) return InvalidArgumentError(where + ec.message());
  if (!std::filesystem::is_regular_file(status)) return InvalidArgumentError(where + "not a regular file");
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return InvalidArgumentError(where + ec.message());
  if (size > max_bytes) {
    return InvalidArgumentError(where + std::to_string(size) + " bytes, more than the " +
                                std::to_string(max_bytes) + " such a file may hold");
  }
  return OkStatus();
}

StatusOr<std::string> ReadSmallFile(const std::string& path, const std::string& what, uintmax_t max_bytes) {
  SWITCHML_RETURN_IF_ERROR(CheckSmallFile(path, what, max_bytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError(what + " '" + path + "': cannot read it: " + std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace switchml
