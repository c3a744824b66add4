// Shared by every kernel source. NVRTC compiles without the C++ standard
// library, so the integer types are spelled out here.
typedef unsigned int u32;
typedef unsigned long long u64;

#define DEVICE __device__ __forceinline__
