#include "rendezvous/credentials.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "core/error.h"
#include "rendezvous/world.h"

namespace distgrad::rendezvous {
namespace {

constexpr char kTlsHostName[] = "distgrad";

std::string read_pem(const std::string& path, const char* variable) {
  std::ifstream in(path);
  DISTGRAD_CHECK(in.good(), "TLS: cannot read ", variable, "=", path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

TransportCredentials read_credentials() {
  const std::string cert = getenv_or("DISTGRAD_TLS_CERT", ""), key = getenv_or("DISTGRAD_TLS_KEY", "");
  if (cert.empty() && key.empty()) {
    return {grpc::InsecureServerCredentials(), grpc::InsecureChannelCredentials(), false};
  }
  DISTGRAD_CHECK(!cert.empty() && !key.empty(), "TLS needs both DISTGRAD_TLS_CERT and DISTGRAD_TLS_KEY; found only ",
                 cert.empty() ? "DISTGRAD_TLS_KEY" : "DISTGRAD_TLS_CERT");
  const std::string ca = getenv_or("DISTGRAD_TLS_CA", "");
  grpc::SslServerCredentialsOptions server_options;
  server_options.pem_key_cert_pairs.push_back({read_pem(key, "DISTGRAD_TLS_KEY"), read_pem(cert, "DISTGRAD_TLS_CERT")});
  grpc::SslCredentialsOptions channel_options;
  channel_options.pem_root_certs = ca.empty() ? read_pem(cert, "DISTGRAD_TLS_CERT") : read_pem(ca, "DISTGRAD_TLS_CA");
  return {grpc::SslServerCredentials(server_options), grpc::SslCredentials(channel_options), true};
}

}  // namespace

void TransportCredentials::configure(grpc::ChannelArguments& arguments) const {
  if (tls) arguments.SetSslTargetNameOverride(kTlsHostName);
}

const TransportCredentials& transport_credentials() {
  static const TransportCredentials credentials = read_credentials();
  return credentials;
}

bool same_token(std::string_view presented, std::string_view expected) {
  unsigned char difference = presented.size() == expected.size() ? 0 : 1;
  const size_t size = std::max(presented.size(), expected.size());
  for (size_t i = 0; i < size; ++i) {
    difference |=
        static_cast<unsigned char>((i < presented.size() ? presented[i] : 0) ^ (i < expected.size() ? expected[i] : 0));
  }
  return difference == 0;
}

int grpc_message_limit(uint64_t max_message_bytes) {
  if (max_message_bytes == 0 || max_message_bytes > static_cast<uint64_t>(std::numeric_limits<int>::max())) return -1;
  return static_cast<int>(max_message_bytes);
}

TokenCheck check_job_token(const grpc::ServerContextBase& context, std::string_view expected) {
  if (expected.empty()) return TokenCheck::kAccepted;
  const auto& metadata = context.client_metadata();
  const auto sent = metadata.find(kTokenMetadataKey);
  if (sent == metadata.end()) return TokenCheck::kMissing;
  return same_token(std::string_view(sent->second.data(), sent->second.size()), expected) ? TokenCheck::kAccepted
                                                                                          : TokenCheck::kWrong;
}

}  // namespace distgrad::rendezvous
