// Transport credentials and the job token of every distgrad gRPC server and channel (internal
// to rendezvous/ and rpc/: it includes gRPC).
//
// With DISTGRAD_TLS_CERT and DISTGRAD_TLS_KEY (PEM files) set, servers speak TLS with that
// certificate and channels verify peers against DISTGRAD_TLS_CA (or the certificate itself, for
// a job sharing one self-signed certificate); the certificate must name the host "distgrad" (a
// subjectAltName DNS:distgrad), which channels expect whatever address they dial. Otherwise
// plain TCP. Read once per process.
//
// Note [Job token]
// Every request (Worker and Store) carries the job's token (DISTGRAD_TOKEN) as gRPC metadata,
// and servers refuse requests without it with UNAUTHENTICATED (compared in constant time). The
// token is never written to the Store. Without a token, servers listen on loopback only, and a
// non-loopback MASTER_ADDR is refused unless DISTGRAD_INSECURE=1 says the network is trusted.
// With DISTGRAD_TLS_CERT and DISTGRAD_TLS_KEY (and DISTGRAD_TLS_CA to verify peers) every
// connection is TLS.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string_view>

namespace distgrad::rendezvous {

struct TransportCredentials {
  std::shared_ptr<grpc::ServerCredentials> server;
  std::shared_ptr<grpc::ChannelCredentials> channel;
  bool tls = false;

  // Channel arguments that go with `channel` (the TLS host name to expect).
  void configure(grpc::ChannelArguments& arguments) const;
};

const TransportCredentials& transport_credentials();

// The gRPC metadata key that carries the job token.
inline constexpr char kTokenMetadataKey[] = "distgrad-token";

// Whether a presented job token equals the expected one, in time that depends only on their
// lengths.
bool same_token(std::string_view presented, std::string_view expected);

// What a server's call carries under kTokenMetadataKey, against the job's token (every call is
// accepted when `expected` is empty). Looks at the client's metadata only, so a server can
// refuse a call before it reads the call's message.
enum class TokenCheck { kAccepted, kMissing, kWrong };
TokenCheck check_job_token(const grpc::ServerContextBase& context, std::string_view expected);

// gRPC's receive limit for a limit of `max_message_bytes` (0: none): -1 for no limit, which is
// also what a limit beyond gRPC's int means.
int grpc_message_limit(uint64_t max_message_bytes);

}  // namespace distgrad::rendezvous
