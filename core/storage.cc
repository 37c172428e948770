#include "core/storage.h"

#include <cstring>

#include "core/allocator.h"
#include "core/shared_memory.h"

namespace distgrad {

Storage::Impl::~Impl() {
  if (allocator != nullptr) {
    allocator->deallocate(data, nbytes);
  } else if (deleter) {
    deleter(data);
  }
}

Storage Storage::allocate(size_t nbytes, Device device) {
  Allocator& allocator = allocator_for(device);
  Storage storage;
  storage.impl_ = std::make_shared<Impl>();
  storage.impl_->data = allocator.allocate(nbytes);
  storage.impl_->nbytes = nbytes;
  storage.impl_->device = device;
  storage.impl_->allocator = &allocator;
  return storage;
}

Storage Storage::wrap(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter) {
  Storage storage;
  storage.impl_ = std::make_shared<Impl>();
  storage.impl_->data = data;
  storage.impl_->nbytes = nbytes;
  storage.impl_->device = device;
  storage.impl_->deleter = std::move(deleter);
  return storage;
}

Storage Storage::in_shared_memory(std::shared_ptr<SharedMemory> memory) {
  Storage storage;
  storage.impl_ = std::make_shared<Impl>();
  storage.impl_->data = memory->data();
  storage.impl_->nbytes = memory->data_bytes();
  storage.impl_->device = Device::cpu();
  storage.impl_->shared_memory = std::move(memory);
  return storage;
}

void Storage::move_to_shared_memory() const {
  if (impl_->shared_memory || !impl_->device.is_cpu()) return;
  std::shared_ptr<SharedMemory> memory = SharedMemory::create(impl_->nbytes, SharedMemory::Kind::kTensorStorage);
  if (impl_->nbytes > 0) std::memcpy(memory->data(), impl_->data, impl_->nbytes);
  if (impl_->allocator != nullptr) {
    impl_->allocator->deallocate(impl_->data, impl_->nbytes);
  } else if (impl_->deleter) {
    impl_->deleter(impl_->data);
  }
  impl_->allocator = nullptr;
  impl_->deleter = nullptr;
  impl_->data = memory->data();
  impl_->shared_memory = std::move(memory);
}

}  // namespace distgrad
