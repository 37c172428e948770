// Transport credentials of every distgrad gRPC server and channel (internal to rpc/).
//
// With DISTGRAD_TLS_CERT and DISTGRAD_TLS_KEY (PEM files) set, servers speak TLS with that
// certificate and channels verify peers against DISTGRAD_TLS_CA (or the certificate itself, for
// a job sharing one self-signed certificate); the certificate must name the host "distgrad" (a
// subjectAltName DNS:distgrad), which channels expect whatever address they dial. Otherwise
// plain TCP. Read once per process.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string_view>

namespace distgrad::rpc {

struct TransportCredentials {
  std::shared_ptr<grpc::ServerCredentials> server;
  std::shared_ptr<grpc::ChannelCredentials> channel;
  bool tls = false;

  // Channel arguments that go with `channel` (the TLS host name to expect).
  void configure(grpc::ChannelArguments& arguments) const;
};

const TransportCredentials& transport_credentials();

// Whether a presented job token equals the expected one, in time that depends only on their
// lengths (Note [Job token] in rpc/agent.h).
bool same_token(std::string_view presented, std::string_view expected);

}  // namespace distgrad::rpc
