"""Atomic integer operations for compiled kernels (numba has none on the
CPU): what the threads of one parallel region use to hand out work.
LLVM's atomicrmw, so every architecture numba compiles for has them."""

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def fetch_add(typingctx, arr, index, value):
    """arr[index] += value as one atomic, sequentially consistent operation
    on a 1-d int64 array; returns the value before. No bounds check."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64 and arr.ndim == 1
            and isinstance(index, types.Integer) and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        aryty, indty, valty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        i = context.cast(builder, args[1], indty, types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [i])
        v = context.cast(builder, args[2], valty, types.int64)
        return builder.atomic_rmw("add", ptr, v, "seq_cst")

    return types.int64(arr, index, value), codegen
