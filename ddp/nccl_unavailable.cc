// make_nccl_backend in builds without CUDA or without NCCL.
#include "core/error.h"
#include "ddp/collective_backend.h"

namespace distgrad::ddp {

std::unique_ptr<CollectiveBackend> make_nccl_backend(const GroupSetup& setup, int device) {
  DISTGRAD_FAIL("process group '", setup.group_name, "': a collective on cuda:", device,
                " needs NCCL, and this distgrad was built without it (configure with CUDA and NCCL present)");
}

}  // namespace distgrad::ddp
