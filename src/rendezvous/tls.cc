#include "rendezvous/tls.h"

#include "common/small_file.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

namespace switchml::rendezvous {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;

std::string Quoted(const std::string& path) { return "'" + path + "'"; }

// PEM files are a few KiB; a bundle of every public CA is about 200 KiB.
constexpr uintmax_t kMaxPemBytes = 4 << 20;

StatusOr<std::string> ReadFile(const std::string& path, const std::string& what) {
  return ReadSmallFile(path, what, kMaxPemBytes);
}

std::string Asn1Time(const ASN1_TIME* t) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || ASN1_TIME_print(bio.get(), t) != 1) return "?";
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string Subject(X509* cert) {
  char buf[256];
  X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof buf);
  return buf;
}

// Every certificate in `pem` (at least one), each valid now; otherwise InvalidArgument naming
// `what`, the file and the certificate.
StatusOr<std::vector<X509Ptr>> Certificates(const std::string& pem, const std::string& path,
                                            const std::string& what) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::vector<X509Ptr> certs;
  while (X509* c = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(c);
  ERR_clear_error();  // the end of the file reads as an error
  if (certs.empty()) {
    return InvalidArgumentError(what + " " + Quoted(path) +
                                ": no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)");
  }
  for (const X509Ptr& c : certs) {
    if (X509_cmp_current_time(X509_get0_notAfter(c.get())) < 0) {
      return InvalidArgumentError(what + " " + Quoted(path) + ": the certificate " + Subject(c.get()) +
                                  " expired on " + Asn1Time(X509_get0_notAfter(c.get())));
    }
    if (X509_cmp_current_time(X509_get0_notBefore(c.get())) > 0) {
      return InvalidArgumentError(what + " " + Quoted(path) + ": the certificate " + Subject(c.get()) +
                                  " is not valid before " + Asn1Time(X509_get0_notBefore(c.get())));
    }
  }
  return certs;
}

// A CA bundle, a certificate chain or a key, read and checked.
StatusOr<std::string> ReadCertificates(const std::string& path, const std::string& what) {
  SWITCHML_ASSIGN_OR_RETURN(std::string pem, ReadFile(path, what));
  SWITCHML_RETURN_IF_ERROR(Certificates(pem, path, what).status());
  return pem;
}

// The chain and its key; the key must be the one of the chain's first certificate.
struct KeyPair {
  std::string cert_pem;
  std::string key_pem;
};
StatusOr<KeyPair> ReadKeyPair(const std::string& cert_path, const std::string& cert_what,
                              const std::string& key_path, const std::string& key_what) {
  KeyPair pair;
  SWITCHML_ASSIGN_OR_RETURN(pair.cert_pem, ReadFile(cert_path, cert_what));
  SWITCHML_ASSIGN_OR_RETURN(std::vector<X509Ptr> certs, Certificates(pair.cert_pem, cert_path, cert_what));
  SWITCHML_ASSIGN_OR_RETURN(pair.key_pem, ReadFile(key_path, key_what));
  BioPtr bio(BIO_new_mem_buf(pair.key_pem.data(), static_cast<int>(pair.key_pem.size())));
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (!key) {
    return InvalidArgumentError(key_what + " " + Quoted(key_path) +
                                ": no unencrypted PEM private key in it (expected -----BEGIN PRIVATE KEY-----)");
  }
  if (X509_check_private_key(certs.front().get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgumentError(key_what + " " + Quoted(key_path) + " is not the key of the certificate " +
                                Subject(certs.front().get()) + " in " + cert_what + " " + Quoted(cert_path));
  }
  return pair;
}

// The host part of "host:port" / "[v6]:port" / "v6addr" (no port).
std::string_view HostOf(std::string_view hostport) {
  if (!hostport.empty() && hostport.front() == '[') {
    const size_t close = hostport.find(']');
    return close == std::string_view::npos ? hostport.substr(1) : hostport.substr(1, close - 1);
  }
  const size_t first = hostport.find(':');
  if (first == std::string_view::npos) return hostport;
  if (hostport.find(':', first + 1) != std::string_view::npos) return hostport;  // bare IPv6
  return hostport.substr(0, first);
}

const char* const kSecuringDoc = "docs/operations.md \"Securing\"";

}  // namespace

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost") return true;
  const std::string h(host);
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] == 127;
  }
  return false;
}

bool IsLoopbackTarget(std::string_view address) {
  if (address.starts_with("unix:") || address.starts_with("unix-abstract:")) return true;
  if (address.starts_with("dns:")) {
    address.remove_prefix(4);
    while (address.starts_with("/")) address.remove_prefix(1);  // dns:///host:port
  } else if (address.starts_with("ipv4:") || address.starts_with("ipv6:")) {
    address.remove_prefix(5);
  }
  return IsLoopbackHost(HostOf(address));
}

bool IsLoopbackPeer(std::string_view peer) {
  if (peer.starts_with("unix:") || peer.starts_with("unix-abstract:")) return true;
  if (peer.starts_with("ipv4:") || peer.starts_with("ipv6:")) peer.remove_prefix(5);
  else return false;
  // What is left is "1.2.3.4:port" or "[v6]:port" (gRPC percent-encodes nothing here).
  return IsLoopbackHost(HostOf(peer));
}

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const TlsOptions& tls,
                                                                      grpc::ChannelArguments* args) {
  SWITCHML_RETURN_IF_ERROR(tls.Validate());
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  SWITCHML_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadCertificates(tls.ca_file, "tls.ca_file"));
  if (!tls.cert_file.empty()) {
    SWITCHML_ASSIGN_OR_RETURN(KeyPair pair,
                              ReadKeyPair(tls.cert_file, "tls.cert_file", tls.key_file, "tls.key_file"));
    ssl.pem_cert_chain = std::move(pair.cert_pem);
    ssl.pem_private_key = std::move(pair.key_pem);
  }
  if (!tls.server_name.empty() && args != nullptr) args->SetSslTargetNameOverride(tls.server_name);
  return grpc::SslCredentials(ssl);
}

Status CheckClientTlsFiles(const TlsOptions& tls) {
  grpc::ChannelArguments args;
  return ChannelCredentials(tls, &args).status();
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const ServerTlsOptions& tls) {
  if (!tls.enabled()) {
    if (!tls.key_file.empty() || !tls.client_ca_file.empty()) {
      return InvalidArgumentError(std::string(tls.key_file.empty() ? "--tls-client-ca" : "--tls-key") +
                                  " is set but --tls-cert is not: TLS needs the server's certificate");
    }
    return grpc::InsecureServerCredentials();
  }
  if (tls.key_file.empty()) return InvalidArgumentError("--tls-cert is set but --tls-key is not");
  SWITCHML_ASSIGN_OR_RETURN(KeyPair pair, ReadKeyPair(tls.cert_file, "--tls-cert", tls.key_file, "--tls-key"));
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_key_cert_pairs.push_back({pair.key_pem, pair.cert_pem});
  if (!tls.client_ca_file.empty()) {
    SWITCHML_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadCertificates(tls.client_ca_file, "--tls-client-ca"));
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

Status CheckClientMaySendTokens(const TlsOptions& tls, std::string_view address, const char* who) {
  if (tls.enabled() || tls.insecure || IsLoopbackTarget(address)) return OkStatus();
  return FailedPreconditionError(
      std::string(who) + ": refusing to send tokens over plaintext gRPC to " + std::string(address) +
      ", which is not on this host: give the CA of its certificate to use TLS (--tls-ca, "
      "SWITCHML_TLS_CA, Options::tls.ca_file), or allow plaintext with --insecure / SWITCHML_INSECURE=1 "
      "(the tokens can then be read on the network); see " + kSecuringDoc);
}

Status CheckServerMayAcceptTokens(const ServerTlsOptions& tls, std::string_view peer, std::string_view rpc) {
  if (tls.enabled() || tls.insecure || IsLoopbackPeer(peer)) return OkStatus();
  return PermissionDeniedError(
      std::string(rpc) + ": tokens are refused over plaintext gRPC from " + std::string(peer) +
      " (not this host): start this server with --tls-cert/--tls-key and its clients with a CA "
      "(SWITCHML_TLS_CA, --tls-ca), or accept plaintext tokens with --insecure; see " + kSecuringDoc);
}

std::string DescribeServerTransport(const ServerTlsOptions& tls, std::string_view listen_address) {
  const std::string at(listen_address);
  if (tls.enabled()) {
    return "gRPC over TLS on " + at + " (certificate " + Quoted(tls.cert_file) +
           (tls.client_ca_file.empty() ? std::string(")")
                                       : "; client certificates required, signed by " +
                                             Quoted(tls.client_ca_file) + ")");
  }
  if (IsLoopbackTarget(listen_address)) return "plaintext gRPC on " + at + " (this host only)";
  if (tls.insecure) {
    return "warning: --insecure: tokens (jobs', the operator's) are accepted over plaintext gRPC on " + at +
           " from any host; anyone on the network path can read and reuse them (use --tls-cert/--tls-key; " +
           kSecuringDoc + ")";
  }
  return "plaintext gRPC on " + at +
         ": calls with tokens (jobs, operators) are accepted only from this host; serve other hosts with "
         "--tls-cert/--tls-key (or --insecure); the reference services stay open";
}

std::string ConnectionFailureHint(const TlsOptions& tls) {
  if (tls.enabled()) {
    return " (TLS with CA " + Quoted(tls.ca_file) +
           ": if the controller is up, check that it serves TLS, that its certificate is signed by that CA, "
           "is valid now and names the host you connect to" +
           (tls.server_name.empty() ? std::string() : " (here '" + tls.server_name + "')") +
           ", and, if it requires client certificates, that this client's are given (tls.cert_file/tls.key_file, "
           "--tls-cert/--tls-key, SWITCHML_TLS_CERT/SWITCHML_TLS_KEY) and signed by a CA it trusts)";
  }
  return " (plaintext: if the controller serves TLS, give its CA: --tls-ca, SWITCHML_TLS_CA)";
}

}  // namespace switchml::rendezvous
