// A worker that registers two functions under one name: init_rpc must refuse to start, naming it
// (run by tests/rpc/agent_test.cc; a registry holds every function of a process, so this needs a
// binary of its own).
#include "dist_autograd/init_rpc.h"
#include "rpc/rpc.h"

namespace {

int first() { return 1; }
int second() { return 2; }
DISTGRAD_REMOTE_NAMED(first, "twice_named");
DISTGRAD_REMOTE_NAMED(second, "twice_named");

}  // namespace

int main() { return distgrad::auto_init_rpc(nullptr, nullptr); }
