// TlsOptions (include/switchml/options.h): the checks every end shares and the one parser of
// the workers' TLS environment variables. Here, not in the client library, because both the
// library and the rendezvous module (rendezvous/tls.h) use them.
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "switchml/options.h"

namespace switchml {

Status TlsOptions::Validate() const {
  if (cert_file.empty() != key_file.empty()) {
    return InvalidArgumentError(cert_file.empty() ? "tls.key_file is set but tls.cert_file is not"
                                                  : "tls.cert_file is set but tls.key_file is not");
  }
  if (!cert_file.empty() && ca_file.empty()) {
    return InvalidArgumentError("tls.cert_file is set but tls.ca_file is not: a client certificate is only "
                                "sent over TLS, which needs the CA of the controller's certificate");
  }
  if (!server_name.empty() && ca_file.empty()) {
    return InvalidArgumentError("tls.server_name is set but tls.ca_file is not (it names the certificate "
                                "TLS expects)");
  }
  return OkStatus();
}

StatusOr<TlsOptions> TlsOptionsFromEnvironment(const std::function<const char*(const char*)>& get) {
  auto read = [&](const char* name) -> std::string {
    const char* v = get ? get(name) : std::getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  TlsOptions tls;
  tls.ca_file = read("SWITCHML_TLS_CA");
  tls.cert_file = read("SWITCHML_TLS_CERT");
  tls.key_file = read("SWITCHML_TLS_KEY");
  tls.server_name = read("SWITCHML_TLS_SERVER_NAME");
  const std::string insecure = read("SWITCHML_INSECURE");
  if (insecure == "1") {
    tls.insecure = true;
  } else if (!insecure.empty() && insecure != "0") {
    return InvalidArgumentError("SWITCHML_INSECURE must be 0 or 1, got '" + insecure + "'");
  }
  if (Status s = tls.Validate(); !s.ok()) {
    // Name the variables the user set, not the fields.
    std::string m = s.message();
    for (const auto& [field, var] : {std::pair{"tls.ca_file", "SWITCHML_TLS_CA"},
                                     std::pair{"tls.cert_file", "SWITCHML_TLS_CERT"},
                                     std::pair{"tls.key_file", "SWITCHML_TLS_KEY"},
                                     std::pair{"tls.server_name", "SWITCHML_TLS_SERVER_NAME"},
                                     std::pair{"tls.insecure", "SWITCHML_INSECURE"}}) {
      for (size_t at = m.find(field); at != std::string::npos; at = m.find(field, at)) {
        m.replace(at, std::strlen(field), var);
      }
    }
    return InvalidArgumentError(m);
  }
  return tls;
}

}  // namespace switchml
