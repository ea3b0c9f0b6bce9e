/* driver.c -- cuda/comm_nccl.c against stub.c's stand-in CUDA and NCCL (one rank, host memory):
 * the bootstrap's checks, sends and receives to itself grouped in any order, the table growing
 * past 64 requests, collectives, counters, stale handles, a refused group breaking the
 * communicator, a lone receive timing out by name, and freeing with and without requests left.
 * Prints "ok: ..." per check and "all ok" at the end; exits 1 at the first failure.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_nccl.h"

extern int stub_gpus, stub_inits, stub_aborts, stub_destroys, stub_groups;
extern unsigned char stub_id_seen[128];

static char error_text[1024];
sw_status sw_set_error(sw_status status, const char *file, int line, const char *fmt, ...) {
    (void)file;
    (void)line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_text, sizeof error_text, fmt, ap);
    va_end(ap);
    return status;
}
const char *sw_last_error(void) { return error_text; }

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            printf("FAILED at line %d: %s (last error: %s): ", __LINE__, #cond, error_text); \
            printf(" " __VA_ARGS__);                                                      \
            printf("\n");                                                                 \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

/* ---- a fake bootstrap: `fake_size` ranks, this one `fake_rank`; the others' records say `others_ok` */
static int fake_rank, fake_size = 1, others_ok = 1;
static int b_rank(const sw_comm *c) { (void)c; return fake_rank; }
static int b_size(const sw_comm *c) { (void)c; return fake_size; }
static int b_local(const sw_comm *c) { (void)c; return 0; }
static sw_status b_allgather(sw_comm *c, const void *in, size_t bytes, void *out, sw_comm_req *req) {
    (void)c;
    for (int r = 0; r < fake_size; r++) {
        memcpy((char *)out + (size_t)r * bytes, in, bytes);
        if (r != fake_rank) {
            int32_t ok = others_ok;
            memcpy((char *)out + (size_t)r * bytes, &ok, sizeof ok);
        }
    }
    *req = 1;
    return SW_OK;
}
static sw_status b_wait(sw_comm *c, sw_comm_req req, double t) { (void)c; (void)req; (void)t; return SW_OK; }
static int64_t b_max_tag(const sw_comm *c) { (void)c; return 32767; }
static const sw_comm_i BOOT = {.abi_version = SW_COMM_ABI_VERSION, .struct_size = sizeof(sw_comm_i), .name = "fake",
                               .rank = b_rank, .size = b_size, .local_rank = b_local, .max_tag = b_max_tag,
                               .wait = b_wait, .allgather = b_allgather};

static void wait_ok(const sw_comm_i *i, sw_comm *c, sw_comm_req r) {
    sw_status s = i->wait(c, r, 5.0);
    CHECK(s == SW_OK, "wait of request %lld: status %d", (long long)r, s);
}

int main(void) {
    sw_comm *c;
    const sw_comm_i *i;
    sw_status s;

    stub_gpus = 0;
    s = sw_comm_nccl_new(NULL, 0, 5.0, &c, &i);
    CHECK(s == SW_ERR_INTERNAL && strstr(error_text, "rank 0: no usable GPU: no CUDA-capable device"), "status %d", s);
    stub_gpus = 1;
    s = sw_comm_nccl_new(NULL, 3, 5.0, &c, &i);
    CHECK(s == SW_ERR_INTERNAL && strstr(error_text, "GPU 3 does not exist (1 GPU seen)"), "status %d", s);
    printf("ok: no GPU, a GPU out of range\n");

    s = sw_comm_nccl_new(NULL, 0, 5.0, &c, &i);
    CHECK(s == SW_OK && c && stub_inits == 1, "status %d", s);
    CHECK(!strcmp(i->name, "nccl") && i->abi_version == SW_COMM_ABI_VERSION && i->struct_size == sizeof(sw_comm_i), "");
    CHECK(i->rank(c) == 0 && i->size(c) == 1 && i->local_rank(c) == 0 && i->max_tag(c) > 0, "");
    printf("ok: a one-rank communicator (init answered ncclInProgress, then ncclSuccess)\n");

    /* to itself, the receive started first */
    enum { N = 4096 };
    unsigned char *sbuf = malloc(N), *rbuf = calloc(1, N);
    for (int k = 0; k < N; k++) {
        sbuf[k] = (unsigned char)(k * 7 + 3);
    }
    sw_comm_req rr, sr;
    CHECK(i->irecv(c, rbuf, N, 0, 7, &rr) == SW_OK, "");
    CHECK(i->isend(c, sbuf, N, 0, 7, &sr) == SW_OK, "");
    wait_ok(i, c, rr);
    CHECK(!memcmp(sbuf, rbuf, N), "the bytes received differ");
    int done = 0, polls = 0;
    while (!done && polls++ < 1000) {
        CHECK(i->test(c, sr, &done) == SW_OK, "");
    }
    CHECK(done && stub_groups == 1, "the send did not complete (groups: %d)", stub_groups);
    int64_t sent[1], received[1];
    i->counters(c, sent, received);
    CHECK(sent[0] == N && received[0] == N, "counters %lld %lld", (long long)sent[0], (long long)received[0]);
    i->reset_counters(c);
    i->counters(c, sent, received);
    CHECK(sent[0] == 0 && received[0] == 0, "");
    printf("ok: a send and a receive to itself in one group, test, counters\n");

    s = i->wait(c, sr, 1.0);
    CHECK(s == SW_ERR_VALUE && strstr(error_text, "is not outstanding"), "a consumed handle: status %d", s);
    printf("ok: a consumed handle is refused\n");

    float x[10];
    for (int k = 0; k < 10; k++) {
        x[k] = (float)k;
    }
    sw_comm_req ar, gr;
    CHECK(i->allreduce_f32(c, x, 10, &ar) == SW_OK, "");
    wait_ok(i, c, ar);
    CHECK(x[9] == 9.0f, "");
    unsigned char gin[16], gout[16] = {0};
    memset(gin, 5, sizeof gin);
    CHECK(i->allgather(c, gin, 16, gout, &gr) == SW_OK, "");
    wait_ok(i, c, gr);
    CHECK(!memcmp(gin, gout, 16), "");
    printf("ok: allreduce and allgather over one rank\n");

    /* 100 pairs of sizes 1..100 in one group (the table grows past 64): matched in order */
    enum { P = 100 };
    unsigned char *pin[P], *pout[P];
    sw_comm_req preq[2 * P];
    for (int k = 0; k < P; k++) {
        pin[k] = malloc((size_t)k + 1);
        pout[k] = calloc(1, (size_t)k + 1);
        memset(pin[k], k, (size_t)k + 1);
        CHECK(i->isend(c, pin[k], (size_t)k + 1, 0, k, &preq[k]) == SW_OK, "");
    }
    for (int k = 0; k < P; k++) {
        CHECK(i->irecv(c, pout[k], (size_t)k + 1, 0, k, &preq[P + k]) == SW_OK, "");
    }
    for (int k = 2 * P - 1; k >= 0; k--) {
        wait_ok(i, c, preq[k]);
    }
    for (int k = 0; k < P; k++) {
        CHECK(!memcmp(pin[k], pout[k], (size_t)k + 1), "pair %d", k);
        free(pin[k]);
        free(pout[k]);
    }
    i->counters(c, sent, received);
    CHECK(sent[0] == P * (P + 1) / 2 && received[0] == sent[0], "");
    printf("ok: 100 pairs in one group, waited for in reverse\n");

    int unfinished = -1;
    sw_comm_nccl_free(c, &unfinished);
    CHECK(unfinished == 0 && stub_destroys == 1 && stub_aborts == 0, "unfinished %d", unfinished);
    printf("ok: freed with nothing left: finalized and destroyed\n");

    /* a lone receive: wait times out naming it, test says not done, free aborts */
    CHECK(sw_comm_nccl_new(NULL, 0, 5.0, &c, &i) == SW_OK, "");
    unsigned char lone[8];
    CHECK(i->irecv(c, lone, 8, 0, 99, &rr) == SW_OK, "");
    s = i->wait(c, rr, 0.05);
    CHECK(s == SW_ERR_TIMEOUT && strstr(error_text, "waited 0.05 s for the receive from rank 0, tag 99, 8 bytes") &&
          strstr(error_text, "on the GPU's stream"), "status %d", s);
    CHECK(i->test(c, rr, &done) == SW_OK && !done, "");
    sw_comm_nccl_free(c, &unfinished);
    CHECK(unfinished == 1 && stub_aborts == 1, "unfinished %d", unfinished);
    printf("ok: a lone receive times out by name; free aborts with 1 left\n");

    /* a group NCCL refuses (sizes differ): the requests fail, the communicator is broken */
    CHECK(sw_comm_nccl_new(NULL, 0, 5.0, &c, &i) == SW_OK, "");
    CHECK(i->isend(c, sbuf, 8, 0, 1, &sr) == SW_OK && i->irecv(c, rbuf, 16, 0, 1, &rr) == SW_OK, "");
    s = i->wait(c, rr, 1.0);
    CHECK(s == SW_ERR_INTERNAL && strstr(error_text, "the receive from rank 0, tag 1, 16 bytes failed: NCCL refused "
                                         "the send on rank 0: invalid usage"), "status %d", s);
    s = i->wait(c, sr, 1.0);
    CHECK(s == SW_ERR_INTERNAL, "status %d", s);
    s = i->isend(c, sbuf, 8, 0, 2, &sr);
    CHECK(s == SW_ERR_INTERNAL && strstr(error_text, "cannot start a send"), "status %d", s);
    CHECK(i->isend(c, sbuf, 8, 1, 2, &sr) == SW_ERR_VALUE && strstr(error_text, "to rank 1 of 1"), "");
    sw_comm_nccl_free(c, &unfinished);
    CHECK(unfinished == 0 && stub_aborts == 2, "unfinished %d aborts %d", unfinished, stub_aborts);
    printf("ok: a refused group fails its requests by name, breaks the communicator, free aborts\n");

    /* bootstraps */
    sw_comm_ext ext = {SW_COMM_ABI_VERSION, sizeof(sw_comm_i), &BOOT, (sw_comm *)&fake_rank};
    sw_comm_ext bad = ext;
    bad.table_size = sizeof(sw_comm_i) + 8;
    s = sw_comm_nccl_new(&bad, 0, 5.0, &c, &i);
    CHECK(s == SW_ERR_VALUE && strstr(error_text, "another comm ABI"), "status %d", s);
    memset(stub_id_seen, 0, sizeof stub_id_seen);
    s = sw_comm_nccl_new(&ext, 0, 5.0, &c, &i);
    CHECK(s == SW_OK && stub_id_seen[0] == 1 && stub_id_seen[127] == (unsigned char)(127 * 3 + 1), "status %d", s);
    sw_comm_nccl_free(c, NULL);
    printf("ok: a bootstrap of another ABI is refused; rank 0's id reaches ncclCommInitRank through the allgather\n");
    fake_rank = 1;
    fake_size = 2;
    others_ok = 0;
    s = sw_comm_nccl_new(&ext, 0, 5.0, &c, &i);
    CHECK(s == SW_ERR_INTERNAL && strstr(error_text, "rank 1: ranks 0 could not use their GPU"), "status %d", s);
    printf("ok: a rank whose peer has no GPU fails at once, naming it\n");
    free(sbuf);
    free(rbuf);
    printf("all ok\n");
    return 0;
}
