/* gpu_mem.cu: the backend's ABI 1.2 members, free device memory and the same-run
 * ceilings (device copy bandwidth, GEMM rate through the vendor library or the own GEMM). */
#ifndef RLX_GPU_MEM_H
#define RLX_GPU_MEM_H
#include "gpu_vendor.h"
#include "rlx/plugin.h"

/* 0, or nonzero with err set */
int gpu_mem_query(int device, rlx_mem_info *out, char *err, size_t errlen);
int gpu_ceilings(int device, gpuStream_t s, gpu_blas *blas, rlx_ceilings *io, char *err, size_t errlen);
#endif
