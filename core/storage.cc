#include "core/storage.h"

#include "core/allocator.h"

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

}  // namespace distgrad
