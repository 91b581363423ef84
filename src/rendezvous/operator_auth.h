// rendezvous/operator_auth.h — the operator credential of the job service (switchml.v1).
//
// Job administration (CreateJob, DeleteJob, ListJobs, InspectSlots, and GetJob without the
// job's own token) needs the operator credential: a secret string the switch or controller is
// started with, which clients send as gRPC metadata kOperatorTokenMetadataKey on every call.
// Workers never need it: they present their job's token (RegisterWorker, Barrier, Broadcast,
// GetJob with the token). The reference services (switchml.proto: UdpSession, Barrier,
// Broadcast) stay unauthenticated, since reference clients cannot send metadata.
//
// Where a process gets the credential (`switchml switch|controller|jobs`):
//   1. --operator-token-file FILE, if given (it wins over the environment);
//   2. the environment variable SWITCHML_OPERATOR_TOKEN, if set and not empty;
//   3. otherwise none (a switch then generates one: tools/switch_service.h).
//
//   auto cred = ResolveOperatorToken(flag_file, std::getenv(kOperatorTokenEnv));
//   if (!cred.ok()) return fail(cred.status());      // unreadable/empty file, bad characters
//   if (!cred->warning.empty()) std::cerr << cred->warning << "\n";
//
// A token is 16..1024 printable ASCII characters without spaces (so it is valid gRPC
// metadata); a file's content is the token, surrounding whitespace (a final newline) removed.
// Comparisons take the same time wherever the strings differ (ConstantTimeEquals).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "switchml/status.h"

namespace switchml::rendezvous {

inline constexpr char kOperatorTokenMetadataKey[] = "x-switchml-operator-token";
inline constexpr char kOperatorTokenEnv[] = "SWITCHML_OPERATOR_TOKEN";
inline constexpr size_t kMinOperatorTokenLength = 16;
inline constexpr size_t kMaxOperatorTokenLength = 1024;

// How a client or server passes the credential, for error messages.
inline constexpr char kOperatorTokenHelp[] =
    "set SWITCHML_OPERATOR_TOKEN or pass --operator-token-file FILE (the token the switch or "
    "controller was started with; library clients: JobClient::set_operator_token)";

// True iff a == b. Looks at every byte of the longer string whatever the contents (no early
// exit), so the time taken does not tell where the strings differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// InvalidArgument naming `what` unless `token` is 16..1024 printable ASCII characters without
// spaces.
Status ValidateOperatorToken(const std::string& token, const std::string& what);

struct OperatorCredential {
  std::string token;    // empty = none configured
  std::string source;   // "--operator-token-file F", "SWITCHML_OPERATOR_TOKEN" or ""
  std::string warning;  // e.g. the file is readable by other users; empty if none
};

// Reads a token file. Errors: NotFound/PermissionDenied/InvalidArgument (cannot open or read
// it, it is empty, or the token is malformed), naming the file. A file that other users can
// read gives a warning, not an error.
StatusOr<OperatorCredential> ReadOperatorTokenFile(const std::string& path);

// The rule above: `file` (may be empty) wins over `env_value` (may be null or empty).
StatusOr<OperatorCredential> ResolveOperatorToken(const std::string& file, const char* env_value);

// 32 lowercase hex digits (128 bits) from the system's random source.
std::string GenerateOperatorToken();

// Writes `token` to a new file `dir_template`/operator-token where the directory is made by
// mkdtemp(3) from `dir_template` (e.g. "/tmp/switchml-switch.XXXXXX", mode 0700) and the file
// has mode 0600. Returns the file's path. Errors: Internal (naming the path and errno).
StatusOr<std::string> WritePrivateTokenFile(const std::string& dir_template,
                                            const std::string& token);

}  // namespace switchml::rendezvous
