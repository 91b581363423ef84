#include "rendezvous/operator_auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace switchml::rendezvous {
namespace {

std::string Str(uint64_t v) { return std::to_string(v); }

std::string Trim(const std::string& s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // volatile: keep the compiler from turning the loop into an early-exit comparison.
  volatile unsigned diff = a.size() == b.size() ? 0u : 1u;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | unsigned(x ^ y);
  }
  return diff == 0;
}

Status ValidateOperatorToken(const std::string& token, const std::string& what) {
  if (token.size() < kMinOperatorTokenLength || token.size() > kMaxOperatorTokenLength) {
    return InvalidArgumentError(what + ": the operator token must have " +
                                Str(kMinOperatorTokenLength) + ".." +
                                Str(kMaxOperatorTokenLength) + " characters, got " +
                                Str(token.size()));
  }
  for (size_t i = 0; i < token.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    if (c < 0x21 || c > 0x7E) {
      return InvalidArgumentError(what + ": the operator token must be printable ASCII without "
                                  "spaces; character " + Str(i) + " is not");
    }
  }
  return OkStatus();
}

StatusOr<OperatorCredential> ReadOperatorTokenFile(const std::string& path) {
  const std::string what = "--operator-token-file '" + path + "'";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    const std::string m = what + ": cannot open: " + std::strerror(e);
    if (e == ENOENT) return NotFoundError(m);
    if (e == EACCES) return PermissionDeniedError(m);
    return InvalidArgumentError(m);
  }
  struct stat st {};
  std::string content;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (ok) {
    char buf[4096];
    while (content.size() <= 2 * kMaxOperatorTokenLength) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        ok = false;
        break;
      }
      if (n == 0) break;
      content.append(buf, size_t(n));
    }
  }
  const int e = errno;
  ::close(fd);
  if (!ok) {
    return InvalidArgumentError(what + ": not a readable regular file (" + std::strerror(e) +
                                ")");
  }
  OperatorCredential cred;
  cred.token = Trim(content);
  cred.source = what;
  if (cred.token.empty()) return InvalidArgumentError(what + ": the file is empty");
  SWITCHML_RETURN_IF_ERROR(ValidateOperatorToken(cred.token, what));
  if ((st.st_mode & (S_IRGRP | S_IROTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", unsigned(st.st_mode & 07777));
    cred.warning = "warning: " + what + " is readable by other users (mode " + mode +
                   "); chmod 600 it";
  }
  return cred;
}

StatusOr<OperatorCredential> ResolveOperatorToken(const std::string& file,
                                                  const char* env_value) {
  if (!file.empty()) return ReadOperatorTokenFile(file);
  OperatorCredential cred;
  if (env_value == nullptr || *env_value == '\0') return cred;
  cred.token = Trim(env_value);
  cred.source = kOperatorTokenEnv;
  SWITCHML_RETURN_IF_ERROR(ValidateOperatorToken(cred.token, kOperatorTokenEnv));
  return cred;
}

std::string GenerateOperatorToken() {
  std::random_device rd;  // /dev/urandom (or the CPU's generator) on Linux
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 4; ++i) {
    uint32_t v = rd();
    for (int j = 0; j < 8; ++j, v >>= 4) out.push_back(kHex[v & 15]);
  }
  return out;
}

StatusOr<std::string> WritePrivateTokenFile(const std::string& dir_template,
                                            const std::string& token) {
  std::vector<char> dir(dir_template.begin(), dir_template.end());
  dir.push_back('\0');
  if (::mkdtemp(dir.data()) == nullptr) {
    return InternalError("cannot create a directory from '" + dir_template +
                         "': " + std::strerror(errno));
  }
  const std::string path = std::string(dir.data()) + "/operator-token";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return InternalError("cannot create '" + path + "': " + std::strerror(errno));
  const std::string line = token + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == ssize_t(line.size());
  const int e = errno;
  ::close(fd);
  if (!ok) return InternalError("cannot write '" + path + "': " + std::strerror(e));
  return path;
}

}  // namespace switchml::rendezvous
