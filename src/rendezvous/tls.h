// rendezvous/tls.h — TLS for the gRPC control plane, both ends, and the plaintext rule.
//
// Every gRPC channel and server of the product gets its credentials here: clients
// (ControllerConnection: the library's workers, `switchml jobs`/`top`, a controller towards
// its switches) from switchml::TlsOptions, servers (ControllerServer: the switch's embedded
// controller and the standalone controller) from ServerTlsOptions. The PEM files are read and
// checked here first (readable, a certificate or key in them, the certificate valid now and
// matching its key), so a bad file is an error naming the option and the file rather than a
// gRPC server that does not start or a handshake that fails with a library's message.
//
// The plaintext rule (one home): tokens (a job's token, the operator credential) cross
// plaintext gRPC only between two ends on one host (loopback), unless the operator allowed
// it (`insecure`). A JobClient refuses to connect otherwise (everything it sends carries a
// token) and a server refuses a call that carries a token from a peer that is not on its
// host. The reference Session/Sync services carry no token and stay plaintext-compatible.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "switchml/options.h"
#include "switchml/status.h"

namespace grpc {
class ChannelArguments;
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace switchml::rendezvous {

// A server's TLS: its certificate chain and key (PEM; TLS is on when cert_file is set), and
// optionally the CA that must have signed every client's certificate (mutual TLS: clients
// without a certificate from it are refused during the handshake).
struct ServerTlsOptions {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
  // Plaintext only (no effect with TLS): accept tokens from peers that are not on this host
  // (they can be read on the way). The server logs a warning when it starts so.
  bool insecure = false;

  bool enabled() const { return !cert_file.empty(); }
};

// "localhost", 127.0.0.0/8, ::1 and ::ffff:127.x (IPv4-mapped); a host name other than
// localhost counts as remote (no resolution here).
bool IsLoopbackHost(std::string_view host);
// An address as given to a client: "host:port", "[v6]:port", "dns:///host:port", "unix:...".
bool IsLoopbackTarget(std::string_view address);
// A server's view of its caller (grpc::ServerContext::peer()): "ipv4:1.2.3.4:5",
// "ipv6:[::1]:5", "unix:...".
bool IsLoopbackPeer(std::string_view peer);

// Channel credentials for `tls` (TLS when tls.enabled(), else plaintext) and the channel
// arguments it needs (the server-name override). Errors: InvalidArgument naming the field
// (tls.ca_file, tls.cert_file, tls.key_file) and the file: unreadable, no PEM certificate or
// key in it, a certificate expired or not yet valid, a key that does not match.
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const TlsOptions& tls,
                                                                      grpc::ChannelArguments* args);

// Reads and checks the files ChannelCredentials would use (the same errors), so that a tool
// can report them before connecting, naming its own flags.
Status CheckClientTlsFiles(const TlsOptions& tls);

// Server credentials for `tls` (plaintext when !tls.enabled()). Errors as above, naming the
// flags (--tls-cert, --tls-key, --tls-client-ca).
StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const ServerTlsOptions& tls);

// The plaintext rule, client side: OK with TLS, to a loopback address, or with tls.insecure;
// otherwise FailedPrecondition naming the address and both ways out. `who` prefixes it.
Status CheckClientMaySendTokens(const TlsOptions& tls, std::string_view address, const char* who);

// The plaintext rule, server side, for one call carrying a token: OK with TLS, from a
// loopback peer, or with tls.insecure; otherwise PermissionDenied naming the rpc, the peer
// and both ways out.
Status CheckServerMayAcceptTokens(const ServerTlsOptions& tls, std::string_view peer, std::string_view rpc);

// One line for a server's log about how it serves `listen_address`: "gRPC over TLS
// (certificate F; client certificates required, CA F)"; plaintext off loopback: a note that
// calls with tokens are taken only from this host, or with insecure a line starting
// "warning:"; plaintext on loopback: "plaintext gRPC (this host only)".
std::string DescribeServerTransport(const ServerTlsOptions& tls, std::string_view listen_address);

// A hint to append to a connection failure: what to check when TLS (or its absence on one
// side) may be why no connection was made. Empty when nothing TLS-related applies.
std::string ConnectionFailureHint(const TlsOptions& tls);

}  // namespace switchml::rendezvous
