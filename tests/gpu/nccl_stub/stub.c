/* stub.c -- a one-GPU, one-rank stand-in for the CUDA runtime and NCCL calls cuda/comm_nccl.c makes,
 * so that its request table, queue, groups, events, timeouts and bootstrap run without a GPU
 * (tests/gpu/test_nccl.py builds it with driver.c).  Host memory stands in for device memory.
 *
 * What it imitates: a non-blocking communicator (init and every second launch answer
 * ncclInProgress, then ncclCommGetAsyncError answers ncclInProgress twice before ncclSuccess);
 * a group matches its sends to this rank with its receives from it in order and copies the bytes,
 * a receive left unmatched hangs the stream (its events never complete), a send and a receive of
 * different sizes fail the group; an event completes at its third query; one rank's allreduce
 * and allgather copy.  Compiled against the real cuda_runtime_api.h and nccl.h, so every
 * prototype is checked.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

struct CUstream_st { int hung; };
struct CUevent_st { struct CUstream_st *stream; int queries_left; };
struct ncclComm { int nranks, rank, blocking, pending_polls, launches; };

typedef struct { int send; const void *in; void *out; size_t bytes; int peer; } op;
static op group_ops[256];
static int ngroup, depth;
static ncclComm_t group_comm;
static cudaStream_t group_stream;
static char last_error[256];
int stub_gpus = 1;            /* the driver sets 0 for "no GPU" */
int stub_inits, stub_aborts, stub_destroys, stub_groups;
unsigned char stub_id_seen[128];

cudaError_t cudaGetDeviceCount(int *n) {
    *n = stub_gpus;
    return stub_gpus ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaSetDevice(int d) { return d >= 0 && d < stub_gpus ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaFree(void *p) { (void)p; return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaErrorNoDevice ? "no CUDA-capable device" : "stub error"; }
const char *cudaGetErrorName(cudaError_t e) { return e == cudaErrorNoDevice ? "cudaErrorNoDevice" : "cudaErrorStub"; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    *s = calloc(1, sizeof **s);
    return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) { free(s); return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    (void)flags;
    *e = calloc(1, sizeof **e);
    return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    e->stream = s;
    e->queries_left = 2;
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (e->stream && e->stream->hung) {
        return cudaErrorNotReady;
    }
    if (e->queries_left > 0) {
        e->queries_left--;
        return cudaErrorNotReady;
    }
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return cudaSuccess; }

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    default: return "stub NCCL error";
    }
}
const char *ncclGetLastError(ncclComm_t c) { (void)c; return last_error; }
ncclResult_t ncclGetVersion(int *v) { *v = 23203; return ncclSuccess; }
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    for (int k = 0; k < 128; k++) {
        id->internal[k] = (char)(k * 3 + 1);
    }
    return ncclSuccess;
}

/* non-blocking: every second call answers ncclInProgress, settled after two polls */
static ncclResult_t launch(ncclComm_t c) {
    if (c->blocking) {
        return ncclSuccess;
    }
    if (c->launches++ % 2 == 0) {
        c->pending_polls = 2;
        return ncclInProgress;
    }
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
    if (nranks != 1 || rank != 0) {
        snprintf(last_error, sizeof last_error, "the stub has one rank, not rank %d of %d", rank, nranks);
        return ncclInvalidUsage;
    }
    memcpy(stub_id_seen, id.internal, 128);
    ncclComm_t c = calloc(1, sizeof *c);
    c->nranks = nranks;
    c->rank = rank;
    c->blocking = config ? config->blocking : 1;
    c->pending_polls = c->blocking ? 0 : 3;
    *comm = c;
    stub_inits++;
    return c->blocking ? ncclSuccess : ncclInProgress;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *st) {
    if (c->pending_polls > 0) {
        c->pending_polls--;
        *st = ncclInProgress;
    } else {
        *st = ncclSuccess;
    }
    return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t c) { c->pending_polls = 1; return ncclInProgress; }
ncclResult_t ncclCommDestroy(ncclComm_t c) { stub_destroys++; free(c); return ncclSuccess; }
ncclResult_t ncclCommAbort(ncclComm_t c) { stub_aborts++; free(c); return ncclSuccess; }

ncclResult_t ncclGroupStart(void) { depth++; return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) {
    if (--depth > 0) {
        return ncclSuccess;
    }
    stub_groups++;
    /* the k-th send to this rank goes to the k-th receive from it */
    int used[256] = {0};
    for (int k = 0; k < ngroup; k++) {
        if (group_ops[k].send) {
            continue;
        }
        int matched = 0;
        for (int j = 0; j < ngroup && !matched; j++) {
            if (group_ops[j].send && !used[j]) {
                if (group_ops[j].bytes != group_ops[k].bytes) {
                    snprintf(last_error, sizeof last_error, "a send of %zu bytes met a receive of %zu",
                             group_ops[j].bytes, group_ops[k].bytes);
                    ngroup = 0;
                    return ncclInvalidUsage;
                }
                memcpy(group_ops[k].out, group_ops[j].in, group_ops[k].bytes);
                used[j] = matched = 1;
            }
        }
        if (!matched) {
            group_stream->hung = 1;   /* a receive waiting for a send that never comes */
        }
    }
    for (int j = 0; j < ngroup; j++) {
        if (group_ops[j].send && !used[j]) {
            group_stream->hung = 1;
        }
    }
    ngroup = 0;
    return launch(group_comm);
}

static ncclResult_t p2p(int send, const void *in, void *out, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                        cudaStream_t s) {
    if (t != ncclUint8 || peer != c->rank || !depth || ngroup == 256) {
        snprintf(last_error, sizeof last_error, "the stub takes bytes to this rank, in a group");
        return ncclInvalidArgument;
    }
    group_ops[ngroup++] = (op){send, in, out, count, peer};
    group_comm = c;
    group_stream = s;
    return ncclSuccess;
}
ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    return p2p(1, buf, NULL, count, t, peer, c, s);
}
ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    return p2p(0, NULL, buf, count, t, peer, c, s);
}
ncclResult_t ncclAllReduce(const void *in, void *out, size_t count, ncclDataType_t t, ncclRedOp_t o, ncclComm_t c,
                           cudaStream_t s) {
    (void)s;
    if (t != ncclFloat || o != ncclSum) {
        return ncclInvalidArgument;
    }
    if (in != out) {
        memcpy(out, in, count * sizeof(float));
    }
    return launch(c);
}
ncclResult_t ncclAllGather(const void *in, void *out, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
    (void)s;
    if (t != ncclUint8) {
        return ncclInvalidArgument;
    }
    memcpy(out, in, count);
    return launch(c);
}
