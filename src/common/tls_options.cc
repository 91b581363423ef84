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
  SWITCHML_ASSIGN_OR_RETURN(tls.insecure, InsecureFromEnvironment(get));
  if (Status s = tls.Validate(); !s.ok()) {
    // Name the variables the user set, not the fields.
    return InvalidArgumentError(RenameTlsFields(
        s.message(), {"SWITCHML_TLS_CA", "SWITCHML_TLS_CERT", "SWITCHML_TLS_KEY", "SWITCHML_TLS_SERVER_NAME",
                      "SWITCHML_INSECURE"}));
  }
  return tls;
}

StatusOr<bool> InsecureFromEnvironment(const std::function<const char*(const char*)>& get) {
  const char* v = get ? get("SWITCHML_INSECURE") : std::getenv("SWITCHML_INSECURE");
  const std::string insecure = v == nullptr ? std::string() : std::string(v);
  if (insecure.empty() || insecure == "0") return false;
  if (insecure == "1") return true;
  return InvalidArgumentError("SWITCHML_INSECURE must be 0 or 1, got '" + insecure + "'");
}

std::string RenameTlsFields(std::string message, const std::array<const char*, 5>& names) {
  static constexpr std::array<const char*, 5> kFields = {"tls.ca_file", "tls.cert_file", "tls.key_file",
                                                         "tls.server_name", "tls.insecure"};
  for (size_t i = 0; i < kFields.size(); ++i) {
    for (size_t at = message.find(kFields[i]); at != std::string::npos; at = message.find(kFields[i], at)) {
      message.replace(at, std::strlen(kFields[i]), names[i]);
    }
  }
  return message;
}

}  // namespace switchml
