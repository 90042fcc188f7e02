/*
 * ir.c -- kernels, the arena, the value/op/block tables and diagnostics.
 *
 * How it works: a kernel is a handful of growable arrays indexed by 32-bit handles
 * (entry 0 of each is a sentinel, so a zero handle is "none") and one arena for
 * strings and operand lists.  Nothing inside a kernel is freed on its own: the arena
 * and the tables go together in loom_kernel_destroy().
 *
 * Diagnostics: every user error is appended to the kernel's list with the source
 * location of the builder call that caused it.  loom_kernel_errors() joins them.
 */
#include "ir.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const ir_opdesc ir_opdescs[IR_OP_COUNT] = {
    [IR_INVALID] = {"<invalid>", 0, 0, 0},
#define LOOM_OP(E, n, nop, nreg, rule, fl, sem, lay, pr, attrs) [IR_##E] = {#n, nop, nreg, fl},
#include "ops.h"
#undef LOOM_OP
};

/* ---------------------------------------------------------------- arena */

struct ir_arena_chunk {
    ir_arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *ir_arena_alloc(ir_arena *a, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    if (bytes == 0)
        bytes = 16;
    ir_arena_chunk *c = a->head;
    if (!c || c->used + bytes > c->cap) {
        size_t cap = bytes > 65536 ? bytes : 65536;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += bytes;
    memset(p, 0, bytes);
    return p;
}

char *ir_arena_strdup(ir_arena *a, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *p = ir_arena_alloc(a, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

void ir_arena_free(ir_arena *a)
{
    ir_arena_chunk *c = a->head;
    while (c) {
        ir_arena_chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
}

/* Grow a table so that index `need` fits; false (and k->oom) when out of memory. */
static bool grow(loom_kernel *k, void **arr, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need < *cap)
        return true;
    uint32_t nc = *cap ? *cap * 2 : 64;
    while (nc <= need)
        nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) {
        k->oom = true;
        return false;
    }
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *arr = p;
    *cap = nc;
    return true;
}

/* ---------------------------------------------------------------- kernels */

static _Atomic uint64_t next_uid = 1;

uint64_t ir_kernels_created(void) { return next_uid - 1; }

loom_kernel *loom_kernel_create_at(loom_src at, const char *name, int num_warps)
{
    loom_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->uid = next_uid++;
    k->name = strdup(name && *name ? name : "kernel");
    k->num_warps = num_warps;
    k->cluster = 1;
    k->nvals = k->nops = k->nblocks = 1; /* sentinels */
    pthread_mutex_init(&k->lock, NULL);
    if (!k->name || !grow(k, (void **)&k->vals, &k->capvals, 1, sizeof(ir_value)) ||
        !grow(k, (void **)&k->ops, &k->capops, 1, sizeof(ir_op)) ||
        !grow(k, (void **)&k->blocks, &k->capblocks, 1, sizeof(ir_block))) {
        loom_kernel_destroy(k);
        return NULL;
    }
    uint32_t body = ir_block_new(k, 0);
    k->open[k->nopen++] = body;
    if (num_warps < 1 || num_warps > 32)
        ir_error(k, at, NULL,
                 "num_warps is %d; it must be between 1 and 32", num_warps);
    /* the name is the PTX entry's symbol: LLVM aborts on one that is not an identifier */
    bool ident = !(k->name[0] >= '0' && k->name[0] <= '9');
    for (const char *c = k->name; *c; c++)
        ident = ident && ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_');
    if (!ident)
        ir_error(k, at, NULL, "kernel name '%s' is not an identifier (letters, digits and _, not first a digit)",
                 k->name);
    else if (strcmp(k->name, "_") == 0) /* PTX: [_$%] must be followed by a letter, digit, _ or $ */
        ir_error(k, at, NULL, "kernel name '_' is not a PTX identifier (ptxas refuses a lone _; add a letter or digit)");
    return k;
}

void loom_kernel_destroy(loom_kernel *k)
{
    if (!k)
        return;
    for (uint32_t b = 1; b < k->nblocks; b++)
        free(k->blocks[b].ops);
    for (int i = 0; i < k->ndiags; i++)
        free(k->diags[i].msg);
    free(k->diags);
    free(k->errtext);
    free(k->printed);
    free(k->vals);
    free(k->ops);
    free(k->blocks);
    ir_arena_free(&k->arena);
    free(k->name);
    pthread_mutex_destroy(&k->lock);
    free(k);
}

const char *loom_kernel_name(const loom_kernel *k) { return k ? k->name : ""; }
int loom_kernel_num_warps(const loom_kernel *k) { return k ? k->num_warps : 0; }

loom_shape loom_val_shape(const loom_kernel *k, loom_val v)
{
    uint32_t i = k ? ir_unhandle(k, v) : 0;
    if (!i)
        return LOOM_SCALAR;
    return k->vals[i].type.shape;
}

/* A deep copy of a finished kernel (no diagnostics, no builder state): passes that
 * rewrite IR work on it, so compiling never changes the user's kernel or its printed
 * text (which keys the module cache). */
loom_kernel *ir_kernel_clone(const loom_kernel *k)
{
    loom_kernel *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    c->name = strdup(k->name);
    c->num_warps = k->num_warps;
    c->cluster = k->cluster;
    c->ws_consumers = k->ws_consumers;
    c->ws_stages = k->ws_stages;
    c->ws_pingpong = k->ws_pingpong;
    c->ws_at = k->ws_at;
    c->nvals = k->nvals;
    c->nops = k->nops;
    c->nblocks = k->nblocks;
    if (!c->name || !grow(c, (void **)&c->vals, &c->capvals, k->nvals, sizeof(ir_value)) ||
        !grow(c, (void **)&c->ops, &c->capops, k->nops, sizeof(ir_op)) ||
        !grow(c, (void **)&c->blocks, &c->capblocks, k->nblocks, sizeof(ir_block)))
        goto fail;
    memcpy(c->vals, k->vals, k->nvals * sizeof(ir_value));
    memcpy(c->ops, k->ops, k->nops * sizeof(ir_op));
    memcpy(c->blocks, k->blocks, k->nblocks * sizeof(ir_block));
    memcpy(c->args, k->args, sizeof k->args);
    c->nargs = k->nargs;
    /* names, operand lists and block arguments point into k's arena: copy them */
    for (uint32_t v = 0; v < c->nvals; v++)
        if (k->vals[v].name && !(c->vals[v].name = ir_arena_strdup(&c->arena, k->vals[v].name)))
            goto fail;
    for (int a = 0; a < c->nargs; a++)
        c->args[a].name = c->vals[c->args[a].value].name;
    for (uint32_t o = 0; o < c->nops; o++) {
        ir_op *op = &c->ops[o];
        uint32_t *lists[2] = {op->opnd, op->res};
        uint32_t counts[2] = {op->nopnd, op->nres};
        for (int l = 0; l < 2; l++) {
            if (!counts[l])
                continue;
            uint32_t *n = ir_arena_alloc(&c->arena, counts[l] * sizeof(uint32_t));
            if (!n)
                goto fail;
            memcpy(n, lists[l], counts[l] * sizeof(uint32_t));
            if (l == 0)
                op->opnd = n;
            else
                op->res = n;
        }
    }
    for (uint32_t b = 1; b < c->nblocks; b++) {
        ir_block *blk = &c->blocks[b];
        const uint32_t *ops = blk->ops, *args = blk->args;
        blk->ops = NULL;
        blk->args = NULL;
        blk->capops = blk->nops;
        if (blk->nops && !(blk->ops = malloc(blk->nops * sizeof(uint32_t))))
            goto fail;
        if (blk->nops)
            memcpy(blk->ops, ops, blk->nops * sizeof(uint32_t));
        if (blk->nargs) {
            if (!(blk->args = ir_arena_alloc(&c->arena, blk->nargs * sizeof(uint32_t))))
                goto fail;
            memcpy(blk->args, args, blk->nargs * sizeof(uint32_t));
        }
    }
    return c;
fail:
    for (uint32_t b = 1; c->blocks && b < c->nblocks; b++)
        if (c->blocks[b].ops == k->blocks[b].ops)
            c->blocks[b].ops = NULL; /* not yet copied: still k's */
    loom_kernel_destroy(c);
    return NULL;
}

/* ---------------------------------------------------------------- diagnostics */

void ir_error(loom_kernel *k, loom_src at, const char *opname, const char *fmt, ...)
{
    char body[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    char line[768];
    if (opname)
        snprintf(line, sizeof line, "%s:%d: error: op '%s': %s", at.file ? at.file : "?", at.line,
                 opname, body);
    else
        snprintf(line, sizeof line, "%s:%d: error: %s", at.file ? at.file : "?", at.line, body);
    /* the same message for the same line is reported once */
    for (int i = 0; i < k->ndiags; i++)
        if (strcmp(k->diags[i].msg, line) == 0)
            return;
    if (k->ndiags == k->capdiags) {
        int nc = k->capdiags ? k->capdiags * 2 : 8;
        ir_diag *d = realloc(k->diags, (size_t)nc * sizeof *d);
        if (!d) {
            k->oom = true;
            return;
        }
        k->diags = d;
        k->capdiags = nc;
    }
    k->gen++;
    k->diags[k->ndiags].src = at;
    k->diags[k->ndiags].msg = strdup(line);
    if (k->diags[k->ndiags].msg)
        k->ndiags++;
}

int loom_kernel_num_errors(const loom_kernel *k) { return k ? k->ndiags + (k->oom ? 1 : 0) : 1; }

const char *loom_kernel_errors(const loom_kernel *k)
{
    if (!k)
        return "no kernel (loom_kernel_create returned NULL?)";
    loom_kernel *mk = (loom_kernel *)k;
    /* kept while the diagnostics stay: threads that share a finished kernel may all ask */
    pthread_mutex_lock(&mk->lock);
    if (mk->errtext && mk->errtext_gen == k->gen + 1) {
        pthread_mutex_unlock(&mk->lock);
        return mk->errtext;
    }
    size_t n = 1;
    for (int i = 0; i < k->ndiags; i++)
        n += strlen(k->diags[i].msg) + 1;
    if (k->oom)
        n += 64;
    char *s = malloc(n);
    if (!s) {
        pthread_mutex_unlock(&mk->lock);
        return "out of memory";
    }
    s[0] = 0;
    for (int i = 0; i < k->ndiags; i++) {
        strcat(s, k->diags[i].msg);
        strcat(s, "\n");
    }
    if (k->oom)
        strcat(s, "error: out of memory while building the kernel\n");
    free(mk->errtext);
    mk->errtext = s;
    mk->errtext_gen = k->gen + 1;
    pthread_mutex_unlock(&mk->lock);
    return s;
}

const char *ir_print_shared(loom_kernel *k)
{
    pthread_mutex_lock(&k->lock);
    const char *s = loom_print(k);
    pthread_mutex_unlock(&k->lock);
    return s;
}

/* ---------------------------------------------------------------- tables */

static uint32_t new_value(loom_kernel *k, ir_type t, ir_valkind kind, uint32_t def,
                          uint32_t index, uint32_t block)
{
    if (k->nvals >= IR_MAX_VALUES) { /* the handles' index bits (ir.h) */
        if (k->nvals == IR_MAX_VALUES && !k->oom)
            ir_error(k, (loom_src){"", 0}, NULL, "the kernel has more than 2^%d values", IR_HANDLE_BITS);
        k->oom = true;
        return 0;
    }
    if (!grow(k, (void **)&k->vals, &k->capvals, k->nvals, sizeof(ir_value)))
        return 0;
    k->gen++;
    uint32_t v = k->nvals++;
    k->vals[v] = (ir_value){.type = t, .kind = kind, .def = def, .index = index, .block = block};
    return v;
}

uint32_t ir_block_new(loom_kernel *k, uint32_t parent)
{
    if (!grow(k, (void **)&k->blocks, &k->capblocks, k->nblocks, sizeof(ir_block)))
        return 0;
    k->gen++;
    uint32_t b = k->nblocks++;
    k->blocks[b] = (ir_block){.parent = parent};
    return b;
}

/* A copy of list[0..n) with room for one more, in the arena (lists are short). */
static uint32_t *grow_list(loom_kernel *k, const uint32_t *list, uint32_t n)
{
    uint32_t *nl = ir_arena_alloc(&k->arena, (n + 1) * sizeof(uint32_t));
    if (!nl) {
        k->oom = true;
        return NULL;
    }
    if (n)
        memcpy(nl, list, n * sizeof(uint32_t));
    return nl;
}

uint32_t ir_block_add_arg(loom_kernel *k, uint32_t b, ir_type t)
{
    uint32_t *na = grow_list(k, ir_blk(k, b)->args, ir_blk(k, b)->nargs);
    if (!na)
        return 0;
    uint32_t v = new_value(k, t, IR_V_BLOCKARG, b, ir_blk(k, b)->nargs, b);
    ir_block *blk = ir_blk(k, b);
    na[blk->nargs] = v;
    blk->args = na;
    blk->nargs++;
    return v;
}

uint32_t ir_op_new(loom_kernel *k, loom_src at, ir_opkind kind, const uint32_t *opnd, int nopnd)
{
    if (k->nopen == 0)
        return 0;
    if (!grow(k, (void **)&k->ops, &k->capops, k->nops, sizeof(ir_op)))
        return 0;
    k->gen++;
    uint32_t o = k->nops++;
    ir_op *op = ir_opp(k, o);
    *op = (ir_op){.kind = (uint16_t)kind, .src = at};
    if (nopnd > 0) {
        op->opnd = ir_arena_alloc(&k->arena, (size_t)nopnd * sizeof(uint32_t));
        if (!op->opnd) {
            k->oom = true;
            k->nops--;
            return 0;
        }
        /* operands are indices (below IR_MAX_VALUES); an op built by hand from API handles
         * (tests do) drops their kernel tag (ir.h) */
        for (int i = 0; i < nopnd; i++)
            op->opnd[i] = opnd[i] & (IR_MAX_VALUES - 1);
    }
    op->nopnd = (uint16_t)nopnd;
    uint32_t b = k->open[k->nopen - 1];
    op->block = b;
    ir_block *blk = ir_blk(k, b);
    if (blk->nops == blk->capops) {
        uint32_t nc = blk->capops ? blk->capops * 2 : 16;
        uint32_t *p = realloc(blk->ops, nc * sizeof(uint32_t));
        if (!p) {
            k->oom = true;
            k->nops--;
            return 0;
        }
        blk->ops = p;
        blk->capops = nc;
    }
    blk->ops[blk->nops++] = o;
    return o;
}

uint32_t ir_op_add_result(loom_kernel *k, uint32_t o, ir_type t)
{
    uint32_t *nr = grow_list(k, ir_opp(k, o)->res, ir_opp(k, o)->nres);
    if (!nr)
        return 0;
    uint32_t v = new_value(k, t, IR_V_RESULT, o, ir_opp(k, o)->nres, ir_opp(k, o)->block);
    ir_op *op = ir_opp(k, o);
    nr[op->nres] = v;
    op->res = nr;
    op->nres++;
    return v;
}

void ir_op_unlink(loom_kernel *k, uint32_t o)
{
    k->gen++;
    ir_block *blk = ir_blk(k, ir_opp(k, o)->block);
    for (uint32_t i = 0; i < blk->nops; i++)
        if (blk->ops[i] == o) {
            memmove(&blk->ops[i], &blk->ops[i + 1], (blk->nops - i - 1) * sizeof(uint32_t));
            blk->nops--;
            break;
        }
    ir_opp(k, o)->kind = IR_INVALID;
}

/* ---------------------------------------------------------------- arguments */

/* The bytes from the first element to past the last one the strides reach; SIZE_MAX when
 * that does not fit in 63 bits (dims up to 2^40 with large strides overflow int64). */
size_t ir_tensor_min_bytes(loom_dtype dt, const loom_shape *s, const int64_t *strides)
{
    int64_t last = 0, span;
    for (int d = 0; d < s->rank; d++) {
        if (s->dim[d] == 0)
            return 0;
        if (__builtin_mul_overflow(s->dim[d] - 1, strides[d], &span) || __builtin_add_overflow(last, span, &last))
            return SIZE_MAX;
    }
    int64_t bytes;
    if (__builtin_add_overflow(last, 1, &last) || __builtin_mul_overflow(last, (int64_t)loom_dtype_size(dt), &bytes))
        return SIZE_MAX;
    return (size_t)bytes;
}

static bool arg_slot(loom_kernel *k, loom_src at, const char *name)
{
    if (!name || !*name) {
        ir_error(k, at, NULL, "argument %d has no name", k->nargs);
        return false;
    }
    for (int i = 0; i < k->nargs; i++)
        if (strcmp(k->args[i].name, name) == 0) {
            ir_error(k, at, NULL, "argument '%s' is declared twice", name);
            return false;
        }
    if (k->nargs == LOOM_MAX_ARGS) {
        ir_error(k, at, NULL, "too many arguments (at most %d)", LOOM_MAX_ARGS);
        return false;
    }
    if (k->nopen != 1 || ir_blk(k, 1)->nops != 0) {
        ir_error(k, at, NULL, "argument '%s' is declared after the first op; declare every argument first", name);
        return false;
    }
    return true;
}

loom_val loom_arg_tensor_at(loom_src at, loom_kernel *k, const char *name, loom_dtype dt,
                            loom_shape shape, const int64_t *strides, loom_access access)
{
    if (!k || !arg_slot(k, at, name))
        return LOOM_NONE;
    if ((unsigned)dt >= LOOM_DTYPE_COUNT) {
        ir_error(k, at, NULL, "argument '%s': unknown dtype %d", name, (int)dt);
        return LOOM_NONE;
    }
    if (shape.rank < 1 || shape.rank > LOOM_MAX_RANK) {
        ir_error(k, at, NULL, "argument '%s': tensor rank %d is not between 1 and %d", name,
                 shape.rank, LOOM_MAX_RANK);
        return LOOM_NONE;
    }
    uint8_t dyn[LOOM_MAX_RANK] = {0};
    for (int d = 0; d < shape.rank; d++) {
        if (shape.dim[d] >= 0)
            continue;
        /* LOOM_DIM(h): a dim argument of this kernel */
        bool handle = shape.dim[d] >= -(int64_t)UINT32_MAX; /* (no negation of INT64_MIN) */
        uint32_t h = handle ? (uint32_t)-shape.dim[d] : 0, dv = handle ? ir_unhandle(k, h) : 0;
        const ir_value *val = dv ? &k->vals[dv] : NULL;
        if (!val || val->kind != IR_V_ARG || !k->args[val->def].is_dim) {
            ir_error(k, at, NULL,
                     "argument '%s': dimension %d is %lld, neither a size nor LOOM_DIM of a run-time dim this kernel "
                     "declared (loom_arg_dim)",
                     name, d, (long long)shape.dim[d]);
            return LOOM_NONE;
        }
        if (!strides && d > 0) {
            ir_error(k, at, NULL,
                     "argument '%s': dimension %d is the run-time dim '%s', but with row-major strides only dim 0 may "
                     "be run-time (the outer dims' strides would change with it); give static strides",
                     name, d, k->args[val->def].name);
            return LOOM_NONE;
        }
        dyn[d] = (uint8_t)(val->def + 1);
        shape.dim[d] = k->args[val->def].dim_max;
    }
    for (int d = 0; d < shape.rank; d++)
        if (shape.dim[d] < 1 || shape.dim[d] > ((int64_t)1 << 40)) {
            ir_error(k, at, NULL, "argument '%s': dimension %d is %lld; it must be %s", name, d,
                     (long long)shape.dim[d], shape.dim[d] < 1 ? "positive" : "at most 2^40 (between 1 and 2^40)");
            return LOOM_NONE;
        }
    if (access < LOOM_IN || access > LOOM_INOUT) {
        ir_error(k, at, NULL, "argument '%s': access must be LOOM_IN, LOOM_OUT or LOOM_INOUT", name);
        return LOOM_NONE;
    }
    ir_arg *a = &k->args[k->nargs];
    *a = (ir_arg){.name = ir_arena_strdup(&k->arena, name), .is_tensor = true, .dtype = dt,
                  .shape = shape, .access = access};
    memcpy(a->dyn, dyn, sizeof dyn);
    int64_t st = 1;
    for (int d = shape.rank - 1; d >= 0; d--) {
        if (strides) {
            if (strides[d] < 0) {
                ir_error(k, at, NULL, "argument '%s': stride %d is negative", name, d);
                return LOOM_NONE;
            }
            if (strides[d] > ((int64_t)1 << 40)) { /* as dims: byte strides then fit in 64 bits */
                ir_error(k, at, NULL, "argument '%s': stride %d is %lld; it must be at most 2^40", name, d,
                         (long long)strides[d]);
                return LOOM_NONE;
            }
            a->strides[d] = strides[d];
        } else {
            a->strides[d] = st;
        }
        if (__builtin_mul_overflow(st, shape.dim[d], &st))
            st = INT64_MAX; /* only reached by a tensor the extent check below refuses */
    }
    a->min_bytes = ir_tensor_min_bytes(dt, &shape, a->strides);
    if (a->min_bytes == SIZE_MAX) {
        ir_error(k, at, NULL, "argument '%s': its extent (dims times strides) does not fit in 64 bits", name);
        return LOOM_NONE;
    }
    ir_type t = {.kind = IR_T_TENSOR, .dtype = (uint8_t)dt, .shape = shape};
    uint32_t v = new_value(k, t, IR_V_ARG, (uint32_t)k->nargs, 0, 1);
    if (!v)
        return LOOM_NONE;
    k->vals[v].name = a->name;
    a->value = v;
    k->nargs++;
    return ir_handle(k, v);
}

loom_val loom_arg_scalar_at(loom_src at, loom_kernel *k, const char *name, loom_dtype dt)
{
    if (!k || !arg_slot(k, at, name))
        return LOOM_NONE;
    if (dt != LOOM_I32 && dt != LOOM_I64 && dt != LOOM_F32) {
        ir_error(k, at, NULL, "argument '%s': a scalar argument must be i32, i64 or f32", name);
        return LOOM_NONE;
    }
    ir_arg *a = &k->args[k->nargs];
    *a = (ir_arg){.name = ir_arena_strdup(&k->arena, name), .is_tensor = false, .dtype = dt,
                  .access = LOOM_IN};
    ir_type t = {.kind = IR_T_TILE, .dtype = (uint8_t)dt, .shape = {0, {0}}};
    uint32_t v = new_value(k, t, IR_V_ARG, (uint32_t)k->nargs, 0, 1);
    if (!v)
        return LOOM_NONE;
    k->vals[v].name = a->name;
    a->value = v;
    k->nargs++;
    return ir_handle(k, v);
}

loom_val loom_arg_dim_at(loom_src at, loom_kernel *k, const char *name, int64_t max, int64_t multiple)
{
    if (!k)
        return LOOM_NONE;
    if (max < 1 || max > INT32_MAX) {
        ir_error(k, at, NULL, "run-time dim '%s': max is %lld; it must be 1 to 2^31 - 1 (an i32)", name ? name : "?",
                 (long long)max);
        return LOOM_NONE;
    }
    if (multiple < 1 || multiple > max || max % multiple) {
        ir_error(k, at, NULL, "run-time dim '%s': multiple is %lld; it must be at least 1 and divide max (%lld)",
                 name ? name : "?", (long long)multiple, (long long)max);
        return LOOM_NONE;
    }
    loom_val v = loom_arg_scalar_at(at, k, name, LOOM_I32);
    if (v) {
        ir_arg *a = &k->args[k->nargs - 1];
        a->is_dim = true;
        a->dim_max = max;
        a->dim_multiple = multiple;
        k->gen++;
    }
    return v;
}

bool ir_has_dyn(const loom_kernel *k)
{
    for (int i = 0; i < k->nargs; i++)
        if (k->args[i].is_dim)
            return true;
    return false;
}

void ir_arg_shape_at(const loom_kernel *k, int i, const int32_t *dimval, loom_shape *shape, size_t *bytes)
{
    const ir_arg *a = &k->args[i];
    loom_shape s = a->shape;
    bool changed = false;
    for (int d = 0; d < s.rank; d++)
        if (a->dyn[d] && dimval) {
            s.dim[d] = dimval[a->dyn[d] - 1];
            changed = true;
        }
    if (shape)
        *shape = s;
    if (bytes)
        *bytes = !changed ? a->min_bytes : ir_tensor_min_bytes(a->dtype, &s, a->strides);
}

bool ir_dims_check(const loom_kernel *k, const int32_t *dimval, char *err, size_t errlen)
{
    for (int i = 0; i < k->nargs; i++) {
        const ir_arg *a = &k->args[i];
        if (!a->is_dim)
            continue;
        int64_t v = dimval[i];
        if (v < 1 || v > a->dim_max || v % a->dim_multiple) {
            if (a->dim_multiple > 1)
                snprintf(err, errlen,
                         "argument %d ('%s') is the run-time dim %lld; it must be 1 to %lld and a multiple of %lld", i,
                         a->name, (long long)v, (long long)a->dim_max, (long long)a->dim_multiple);
            else
                snprintf(err, errlen, "argument %d ('%s') is the run-time dim %lld; it must be 1 to %lld", i, a->name,
                         (long long)v, (long long)a->dim_max);
            return false;
        }
    }
    return true;
}

int loom_kernel_arg_shape(const loom_kernel *k, int i, const loom_arg *args, loom_shape *shape, size_t *bytes)
{
    if (!k || i < 0 || i >= k->nargs || !k->args[i].is_tensor)
        return 0;
    int32_t dv[LOOM_MAX_ARGS] = {0};
    for (int j = 0; args && j < k->nargs; j++)
        if (k->args[j].is_dim)
            dv[j] = args[j].s.i32;
    ir_arg_shape_at(k, i, args ? dv : NULL, shape, bytes);
    return 1;
}

int loom_kernel_num_args(const loom_kernel *k) { return k ? k->nargs : 0; }

int loom_kernel_arg_info(const loom_kernel *k, int i, loom_arg_info *out)
{
    if (!k || i < 0 || i >= k->nargs || !out)
        return 0;
    const ir_arg *a = &k->args[i];
    *out = (loom_arg_info){.name = a->name, .is_tensor = a->is_tensor, .dtype = a->dtype,
                           .shape = a->shape, .access = a->access, .min_bytes = a->min_bytes,
                           .is_dim = a->is_dim, .dim_max = a->dim_max, .dim_multiple = a->dim_multiple};
    memcpy(out->strides, a->strides, sizeof a->strides);
    for (int d = 0; d < LOOM_MAX_RANK; d++)
        out->dim_of[d] = d < a->shape.rank && a->dyn[d] ? a->dyn[d] - 1 : -1;
    return 1;
}

loom_val loom_name(loom_kernel *k, loom_val h, const char *name)
{
    uint32_t v = k ? ir_unhandle(k, h) : 0;
    if (v && name) {
        k->vals[v].name = ir_arena_strdup(&k->arena, name);
        k->gen++;
    }
    return h;
}

/* ---------------------------------------------------------------- small helpers */

const char *loom_status_name(loom_status s)
{
    switch (s) {
    case LOOM_OK: return "ok";
    case LOOM_ERR_INVALID: return "invalid argument";
    case LOOM_ERR_VERIFY: return "verification failed";
    case LOOM_ERR_BOUNDS: return "out-of-bounds access";
    case LOOM_ERR_RUNTIME: return "runtime fault";
    case LOOM_ERR_NO_GPU: return "no GPU";
    case LOOM_ERR_CUDA: return "CUDA error";
    case LOOM_ERR_COMPILE: return "compile error";
    case LOOM_ERR_NOMEM: return "out of memory";
    case LOOM_ERR_UNSUPPORTED: return "unsupported";
    case LOOM_ERR_TIMEOUT: return "timed out";
    case LOOM_ERR_NOT_TUNED: return "not tuned";
    }
    return "unknown status";
}

const char *loom_dtype_name(loom_dtype t)
{
    static const char *names[] = {"f16", "bf16", "f32", "i32", "i64", "i1", "e4m3", "e5m2"};
    return (unsigned)t < LOOM_DTYPE_COUNT ? names[t] : "?";
}

size_t loom_dtype_size(loom_dtype t)
{
    static const size_t sz[] = {2, 2, 4, 4, 8, 1, 1, 1};
    return (unsigned)t < LOOM_DTYPE_COUNT ? sz[t] : 0;
}

bool ir_dtype_is_float(loom_dtype t)
{
    return t == LOOM_F16 || t == LOOM_BF16 || t == LOOM_F32 || ir_dtype_is_fp8(t);
}
bool ir_dtype_is_fp8(loom_dtype t) { return t == LOOM_E4M3 || t == LOOM_E5M2; }
bool ir_dtype_is_int(loom_dtype t) { return t == LOOM_I32 || t == LOOM_I64; }

bool ir_scalar_const(const loom_kernel *k, uint32_t v, ir_const *out)
{
    const ir_value *val = &k->vals[v];
    if (val->kind != IR_V_RESULT || val->type.shape.rank != 0)
        return false;
    const ir_op *op = &k->ops[val->def];
    if (op->kind != IR_CONST)
        return false;
    out->isf = ir_dtype_is_float((loom_dtype)op->iattr[0]);
    out->f = op->fattr;
    out->i = op->iattr[1];
    return true;
}

bool ir_shape_eq(const loom_shape *a, const loom_shape *b)
{
    if (a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dim[i] != b->dim[i])
            return false;
    return true;
}

bool ir_type_eq(const ir_type *a, const ir_type *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->swizzle == b->swizzle &&
           a->trans == b->trans && a->slots == b->slots && ir_shape_eq(&a->shape, &b->shape);
}

/* Saturates at INT64_MAX, so that a shape of four dims of 2^20 is not taken for an empty one. */
int64_t ir_shape_numel(const loom_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        if (__builtin_mul_overflow(n, s->dim[i], &n))
            return INT64_MAX;
    return n;
}

const char *ir_type_str(const ir_type *t, char *buf, size_t n)
{
    char dims[64] = "";
    size_t p = 0;
    for (int i = 0; i < t->shape.rank && p < sizeof dims; i++)
        p += (size_t)snprintf(dims + p, sizeof dims - p, "%s%lld", i ? "x" : "",
                              (long long)t->shape.dim[i]);
    const char *dt = loom_dtype_name((loom_dtype)t->dtype);
    if (t->kind == IR_T_TENSOR)
        snprintf(buf, n, "tensor<%s[%s]>", dt, dims);
    else if (t->kind == IR_T_SMEM)
        snprintf(buf, n, "smem<%s[%s]%s%s%.0d%s%.0d>", dt, dims, t->trans ? " T" : "",
                 t->slots > 1 ? " x" : "", t->slots > 1 ? t->slots : 0, t->swizzle ? " swz" : "",
                 t->swizzle);
    else if (t->kind == IR_T_MBAR)
        snprintf(buf, n, "mbar[%s]", dims);
    else if (t->shape.rank == 0)
        snprintf(buf, n, "%s", dt);
    else
        snprintf(buf, n, "%s[%s]", dt, dims);
    return buf;
}

bool ir_uses_op(const loom_kernel *k, ir_opkind kind)
{
    for (uint32_t o = 1; o < k->nops; o++)
        if (k->ops[o].kind == kind && k->ops[o].block)
            return true;
    return false;
}

static int64_t lowbit(int64_t x) { return x & -x; }

int64_t ir_view_align(const loom_kernel *k, uint32_t v)
{
    const ir_value *val = &k->vals[v];
    if (val->kind != IR_V_RESULT)
        return 1;
    const ir_op *op = &k->ops[val->def];
    if (op->kind == IR_SMEM_ALLOC)
        return val->type.swizzle ? 1024 : 128; /* codegen/smem.c places rings so */
    if (op->nopnd < 1 || (op->kind != IR_SMEM_SLOT && op->kind != IR_SMEM_TRANS && op->kind != IR_SMEM_PART))
        return 1;
    const ir_type *t = &k->vals[op->opnd[0]].type;
    int64_t a = ir_view_align(k, op->opnd[0]), es = (int64_t)loom_dtype_size((loom_dtype)t->dtype), off = 0;
    if (op->kind == IR_SMEM_SLOT) /* + index * the slot's bytes */
        off = ir_shape_numel(&t->shape) * es;
    else if (op->kind == IR_SMEM_PART) /* + rows of the whole width, or whole chunks (rule_smem_part) */
        off = op->iattr[0] == 0 ? op->iattr[1] * t->shape.dim[1] * es
                                : op->iattr[1] * es / (t->swizzle ? t->swizzle : 1) * t->shape.dim[0] *
                                      (t->swizzle ? t->swizzle : 1);
    return off && lowbit(off) < a ? lowbit(off) : a;
}
