// The CUDA side of the RMSNorm example plugin, compiled into cubins by
// `tensoracle cubin produce rmsnorm_kernels.cu --arch ...` (NVRTC) and embedded into the
// plugin library by tensoracle_add_cubin_plugin. One block of 256 threads per row: each thread
// sums the squares of its share of the row, the block adds the partial sums, then every
// thread scales its elements. The sum is in float32 (the CPU implementation sums in double:
// the two differ in the last bits).
extern "C" __global__ void rmsnorm_f32(const float* x, const float* weight, float* y, long long d, float epsilon) {
  __shared__ float partial[256];
  const long long row = blockIdx.x;
  const float* in = x + row * d;
  float* out = y + row * d;
  float sum = 0.f;
  for (long long i = threadIdx.x; i < d; i += blockDim.x) sum += in[i] * in[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned step = blockDim.x / 2; step > 0; step /= 2) {
    if (threadIdx.x < step) partial[threadIdx.x] += partial[threadIdx.x + step];
    __syncthreads();
  }
  const float scale = rsqrtf(partial[0] / static_cast<float>(d) + epsilon);
  for (long long i = threadIdx.x; i < d; i += blockDim.x) out[i] = in[i] * scale * weight[i];
}
