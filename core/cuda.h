// Queries about CUDA support that work in every build.
//
// In a build without CUDA (or on a machine without a GPU) `is_available()` is false and
// creating a CUDA tensor throws an Error saying why; tests use this to skip cleanly.
#pragma once

namespace distgrad::cuda {

// True when distgrad was compiled with CUDA support.
bool is_built();
// Number of visible CUDA devices; 0 without CUDA support or without a usable driver.
int device_count();
inline bool is_available() { return device_count() > 0; }
// Waits until all work queued on `device`'s current stream has finished.
void synchronize(int device = 0);

}  // namespace distgrad::cuda
