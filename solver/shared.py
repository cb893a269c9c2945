"""What the kernel modules share (a module of its own: kernels imports
selfcollision_kernels, and both use it): numba compiler pieces and the
flag compaction."""

import types

import numba
import numpy as np
from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import njit
from numba.core import cgutils
from numba.core import types as nb_types
from numba.core.compiler import Compiler
from numba.core.registry import cpu_target
from numba.extending import intrinsic

from .jit import EXACT_FLAT

# AMD Zen CPUs gather slowly: a 16-lane AVX-512 gather of float32 costs
# about twice as much as 16 scalar loads put into a vector.
# numba compiles for the host CPU by this name (NUMBA_CPU_NAME overrides
# it), and its cache keeps code per CPU name and features.
_CPU = numba.config.CPU_NAME
SLOW_GATHERS = (llvm_binding.get_host_cpu_name() if _CPU in (None, "", "host") else _CPU).startswith("znver")


class NoAliasCompiler(Compiler):
    """numba's compiler, declaring that no two array arguments overlap (what
    parallel=True declares for its loop bodies when it can prove it). Without
    it LLVM cannot vectorise a loop that writes several arrays and reads
    others, or reads through an index array (it could read what the loop
    wrote). Use it with @njit(pipeline_class=NoAliasCompiler) and pass only
    disjoint arrays (distinct rows of one 2-D array are disjoint)."""

    def __init__(self, typingctx, targetctx, library, args, return_type, flags, locals):
        flags = flags.copy()
        flags.noalias = True
        super().__init__(typingctx, targetctx, library, args, return_type, flags, locals)


@intrinsic
def prefer_scalar_loads(typingctx):
    """Call first thing in an njit function whose vectorised loops read
    through an index array: on a host with slow gathers (SLOW_GATHERS) the
    function is compiled with LLVM's prefer-no-gather tuning, so its
    vectorised loops load each lane's item with a scalar load and insert it
    into the vector instead of gathering. Elsewhere, and where llvmlite
    refuses the attribute, it does nothing. Costs nothing at run time: it
    only sets the compiled function's "target-features" attribute (the
    compiler's own features plus the tuning flag; a function's attribute
    replaces the features it is compiled with, not adds to them).

    `make bench-selfcollision`'s cached layered row shows it: the contact
    solve's filter and row passes are faster with scalar loads on Zen."""
    def codegen(context, builder, signature, args):
        if SLOW_GATHERS:
            features = getattr(context.codegen(), "_tm_features", "")
            value = (features + "," if features else "") + "+prefer-no-gather"
            try:
                # llvmlite's FunctionAttributes only takes the flag names it
                # lists; a quoted key="value" pair is valid LLVM IR.
                set.add(builder.function.attributes, f'"target-features"="{value}"')
            except Exception:   # another llvmlite: compile as usual
                pass
        return context.get_dummy_value()
    return nb_types.none(), codegen


def renamed(fn, name):
    """A copy of the plain function fn under another name, for a second
    dispatcher of the same code (one serial, one parallel=True). numba's
    cache names an entry after the function (qualified name and first line)
    and keys it on the signature, not on the flags: two dispatchers of one
    function shared one entry, and either could load the other's code."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    copy.__qualname__ = name
    copy.__doc__ = fn.__doc__
    return copy


@njit(**EXACT_FLAT)
def _compact_words(sel, out):
    """compact_flags read as uint64 words: a zero word (eight vertices far
    from every capsule, eight contacts clear of their triangles) costs one
    test. A branch per item on the test itself mispredicted (the capsule box
    test: 2.6 ns per vertex at 10k, at the ends of the runs a grid makes).
    Every byte of a nonzero word is written at out[count] before its flag is
    counted, so with all n items listed the padding bytes write out[n]."""
    words = sel.view(np.uint64)
    count = 0
    for w in range(np.uint64(words.shape[0])):
        if words[w] == 0:
            continue
        base = np.uint64(8) * w
        for b in range(np.uint64(8)):
            out[count] = base + b
            count += sel[base + b]
    return count


# AVX-512 hosts compact 64 flags at a time (_compact_blocks): one byte
# compare gives their mask, and four register compresses (vpcompressd) write
# the indices of the set ones. The features are those numba compiles for
# (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES apply; a "generic" build has none).
_FEATURES = set((getattr(cpu_target.target_context.codegen(), "_tm_features", "") or "").split(","))
COMPRESS_FLAGS = {"+avx512f", "+avx512bw"} <= _FEATURES
_I1, _I16, _I32, _I64 = ir.IntType(1), ir.IntType(16), ir.IntType(32), ir.IntType(64)
_V64B = ir.VectorType(ir.IntType(8), 64)
_V16I = ir.VectorType(_I32, 16)


def _flag_mask(context, builder, sel_type, sel, base):
    """<64 x i1>: sel[base:base + 64] != 0 (sel C-contiguous uint8)."""
    data = context.make_array(sel_type)(context, builder, sel).data
    v = builder.load(builder.bitcast(builder.gep(data, [base]), _V64B.as_pointer()), align=1)
    return builder.icmp_unsigned("!=", v, ir.Constant(_V64B, None))


@intrinsic
def _any64(typingctx, sel, base):
    """Whether any of sel[base:base + 64] is set."""
    def codegen(context, builder, signature, args):
        mask = builder.bitcast(_flag_mask(context, builder, signature.args[0], args[0], args[1]), _I64)
        return builder.icmp_unsigned("!=", mask, ir.Constant(_I64, 0))
    return nb_types.boolean(sel, base), codegen


@intrinsic
def _compress64(typingctx, sel, base, out, count):
    """The indices of the set flags of sel[base:base + 64] written from
    out[count] on (16 items are stored per 16 flags: out must reach
    base + 64); returns count plus their number."""
    def codegen(context, builder, signature, args):
        mask = _flag_mask(context, builder, signature.args[0], args[0], args[1])
        out_data = context.make_array(signature.args[2])(context, builder, args[2]).data
        base, count = args[1], args[3]
        compress = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_V16I, [_V16I, _V16I, ir.VectorType(_I1, 16)]),
            "llvm.x86.avx512.mask.compress.v16i32")
        popcount = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I16, [_I16]), "llvm.ctpop.i16")
        first = builder.insert_element(ir.Constant(_V16I, ir.Undefined), builder.trunc(base, _I32),
                                       ir.Constant(_I32, 0))
        first = builder.shuffle_vector(first, ir.Constant(_V16I, ir.Undefined), ir.Constant(_V16I, None))
        for j in range(4):
            lanes = list(range(16 * j, 16 * j + 16))
            part = builder.shuffle_vector(mask, ir.Constant(ir.VectorType(_I1, 64), ir.Undefined),
                                          ir.Constant(_V16I, lanes))
            picked = builder.call(compress, [builder.add(first, ir.Constant(_V16I, lanes)),
                                             ir.Constant(_V16I, None), part])
            builder.store(picked, builder.bitcast(builder.gep(out_data, [count]), _V16I.as_pointer()), align=1)
            count = builder.add(count, builder.zext(builder.call(popcount, [builder.bitcast(part, _I16)]), _I64))
        return count
    return nb_types.int64(sel, base, out, count), codegen


@njit(**EXACT_FLAT)
def _compact_blocks(sel, out):
    """compact_flags on an AVX-512 host (see COMPRESS_FLAGS): 64 flags a
    block, a block with none set skipped, the last items (fewer than 64)
    as _compact_words does them. Only for contiguous uint8 flags and 32-bit
    indices, with out as long as sel (else _compact_words: with numba's
    bounds checks on, a short out then raises there). The cached layered
    bench's contact list (3,744 flags, ~8% set, spread): 0.85 -> 0.29 us;
    a run of 600 of 10,208 vertex flags: 1.10 -> 0.34 us."""
    n = sel.shape[0]
    if sel.strides[0] != 1 or out.strides[0] != 4 or out.itemsize != 4 or out.shape[0] < n:
        return _compact_words(sel, out)
    count = 0
    base = np.uint64(0)
    while base + np.uint64(64) <= np.uint64(n):
        if _any64(sel, base):
            count = _compress64(sel, base, out, count)
        base += np.uint64(64)
    while base < np.uint64(n):
        out[count] = base
        count += sel[base]
        base += np.uint64(1)
    return count


# compact_flags(sel, out): the indices i with sel[i] != 0 (0 or 1), in
# order, into out; returns their count. sel: uint8, its length a multiple of
# 8 with zeros past the items. out needs as many items as sel, not as the
# items: indices are written past the listed ones. Chosen once here, so the
# kernels that call it compile only the one for this host.
compact_flags = _compact_blocks if COMPRESS_FLAGS else _compact_words
