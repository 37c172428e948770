#include "dist_autograd/init_rpc.h"

#include <cstdio>

#include "dist_autograd/interceptor.h"
#include "rpc/rpc.h"

namespace distgrad::rpc {

void init_rpc(const RpcOptions& options) {
  RpcOptions with_autograd = options;
  with_autograd.interceptors.push_back(dist_autograd::make_interceptor());
  start_agent(with_autograd);
}

int auto_init_rpc(const std::function<void()>& worker_init_fn, const std::function<void()>& main,
                  const RpcOptions& options) {
  auto report = [](const std::exception& error) {
    std::fprintf(stderr, "[%s] error: %s\n", get_worker_name().c_str(), error.what());
    std::fflush(stderr);
  };
  bool main_failed = false;
  try {
    init_rpc(options);
    const bool rejoined = rejoined_world();  // past the others' start barriers (Note [Rejoining workers])
    if (!rejoined) barrier();
    if (worker_init_fn) worker_init_fn();
    if (!rejoined) barrier();
    try {
      if (main) main();
    } catch (const std::exception& error) {
      // As torch's `try: main() finally: rpc.shutdown()`: the others still finish cleanly.
      report(error);
      main_failed = true;
    }
    shutdown(true);
    return main_failed ? 1 : 0;
  } catch (const std::exception& error) {
    if (!main_failed) report(error);  // after a failed main, its error is the one to report
    try {
      shutdown(false);
    } catch (const std::exception&) {  // already failing: the first error is the one to report
    }
    return 1;
  }
}

}  // namespace distgrad::rpc
