/* ops.c -- the op table's names and lowering roles (ops.def), for the core and Python. */
#include "internal.h"

const char *const sw_op_names[SW_OP_COUNT] = {
#define SW_OP(id, name, role, attrs, cpu, cuda) [SW_OP_##id] = name,
#include "ops.def"
};

const sw_op_kind sw_op_roles[SW_OP_COUNT] = {
#define SW_OP(id, name, role, attrs, cpu, cuda) [SW_OP_##id] = role,
#include "ops.def"
};
