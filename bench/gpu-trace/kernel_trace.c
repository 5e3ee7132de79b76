/* Every kernel's start and end on the GPU, graph nodes included (what Nsight Systems'
 * --cuda-graph-trace=node shows; the GPU machine has no nsys), through CUPTI's activity
 * API. Loaded by the CUDA driver itself: CUDA_INJECTION64_PATH=kernel_trace.so; writes
 * CSV to $RLX_KTRACE_OUT (default stderr) at exit:
 *   start_ns,end_ns,graph_id,graph_node_id,grid,block,regs,name,device
 * RLX_KTRACE_API=1 adds the copies ("memcpy:HtoD", grid = bytes) and the host's CUDA
 * runtime calls ("api:cudaGraphLaunch", device "host"), on the same clock: what a decode
 * step does between two graph replays (step_table.py prints it).
 * Build: cc -shared -fPIC -O2 -I/usr/local/cuda/include kernel_trace.c
 *        -L/usr/local/cuda/lib64 -lcupti -o kernel_trace.so */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>

static FILE *out;

static void CUPTIAPI buf_req(uint8_t **buf, size_t *size, size_t *max_records)
{
    *size = 16u << 20;
    *buf = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buf_done(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *r = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            static const char *kinds[] = {"?", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"};
            const CUpti_ActivityMemcpy6 *c = (const CUpti_ActivityMemcpy6 *)r;
            fprintf(out, "%llu,%llu,%u,%llu,%llu,0,0,memcpy:%s,%u\n", (unsigned long long)c->start,
                    (unsigned long long)c->end, c->graphId, (unsigned long long)c->graphNodeId,
                    (unsigned long long)c->bytes, kinds[c->copyKind < sizeof kinds / sizeof *kinds ? c->copyKind : 0], c->deviceId);
            continue;
        }
        if (r->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
            const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)r;
            const char *name = NULL;
            if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name) != CUPTI_SUCCESS || !name) name = "?";
            fprintf(out, "%llu,%llu,0,0,0,0,0,api:%s,host\n", (unsigned long long)a->start, (unsigned long long)a->end,
                    name);
            continue;
        }
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
        fprintf(out, "%llu,%llu,%u,%llu,%d,%d,%u,%s,%u\n", (unsigned long long)k->start, (unsigned long long)k->end,
                k->graphId, (unsigned long long)k->graphNodeId, k->gridX * k->gridY * k->gridZ,
                k->blockX * k->blockY * k->blockZ, k->registersPerThread, k->name ? k->name : "?", k->deviceId);
    }
    free(buf);
}

static void flush_all(void)
{
    cuptiActivityFlushAll(1);
    if (out && out != stderr) fclose(out);
}

int InitializeInjection(void)
{
    const char *p = getenv("RLX_KTRACE_OUT");
    out = p ? fopen(p, "w") : stderr;
    if (!out) out = stderr;
    if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityRegisterCallbacks(buf_req, buf_done) != CUPTI_SUCCESS) {
        fprintf(stderr, "kernel_trace: CUPTI refused the kernel activity\n");
        return 0;
    }
    const char *api = getenv("RLX_KTRACE_API");
    if (api && *api == '1' &&
        (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
         cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS))
        fprintf(stderr, "kernel_trace: CUPTI refused the copy or runtime activity\n");
    atexit(flush_all);
    return 1;
}
