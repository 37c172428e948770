// The order of the calls of a distributed autograd context, which every sum across workers
// follows (Note [Call order]).
//
// Note [Call order]
// A distributed backward pass adds gradients that come from several workers: a leaf sent in
// sixteen calls gets sixteen contributions, a worker's parameter used by several calls gets one
// per call. Adding them in the order their messages arrive would make two runs with one seed
// differ in the last bits, so they are added in the order of the calls instead:
// - Each call made inside a context gets a position in the tree of the context's calls, its
//   CallPath, assigned by the thread that makes it in program order: the driver's third call is
//   {2}; the first call the function serving it makes, {2, 0}. The request carries it, the reply
//   echoes it; both messages of the call are ordered by it, the reply after the request
//   (MessageOrder), and so are their SendBackward and RecvBackward.
// - A run of the local engine sends gradient messages as it meets RecvBackward nodes, in an
//   order that depends on when their messages arrived; it then waits for the messages, and goes
//   on from the gradients their replies bring, in MessageOrder (dist_autograd/backward_pass.h).
//   The gradients a reply brings for several messages are run in MessageOrder too.
// - Runs started by gradient messages run at the same time, on any thread: each accumulates its
//   leaves' gradients apart, under its RunOrder (the MessageOrder of the send it started from,
//   then the RunOrder of the run that sent the message), and a pass's gradients are added up in
//   RunOrder (the driver's own run, RunOrder {}, first) when the pass ends or they are read.
// The one sum left to arrival order: two messages for the same send from one run (a run that
// reaches the same RecvBackward twice, from two replies whose graphs overlap on that worker).
#pragma once

#include <compare>
#include <cstdint>
#include <vector>

#include "rpc/codec.h"

namespace distgrad::dist_autograd {

// The indices of a call and of the calls that led to it, from the driver's context down.
using CallPath = std::vector<uint32_t>;

// The place of a message (and of its SendBackward and RecvBackward) in the order of its context.
struct MessageOrder {
  CallPath call;
  bool reply = false;  // the reply's message, ordered after the request's

  friend auto operator<=>(const MessageOrder&, const MessageOrder&) = default;
};
DISTGRAD_CODEC(MessageOrder, call, reply);  // gradient messages carry their sender's RunOrder

// The place of a run of the local engine in a pass: the send it started from, then the run that
// sent the message, and so on back to the driver's run ({}).
using RunOrder = std::vector<MessageOrder>;

}  // namespace distgrad::dist_autograd
