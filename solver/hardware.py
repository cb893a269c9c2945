"""Every CPU-specific code path of the solver, chosen once here by
architecture and by the features numba compiles for, each with a portable
twin.

The portable switch: ``DRAPE_PORTABLE=1`` in the environment (or numba's own
``NUMBA_CPU_NAME=generic``) compiles every kernel for a generic CPU of the
architecture and takes every portable twin below. ``make test`` runs the
solver tests once more that way, so both branches of each choice run in CI.
With the switch the solver compiles for numba's "generic" CPU name, so its
cache entries never mix with a host build's.

What is specialised, and why (the benchmark that shows it):

- ``rsqrt``: on x86, the ``rsqrtss`` estimate plus one Newton step instead
  of ``sqrt`` + divide in the distance and tether kernels (``make bench``'s
  solver rows). Portable twin: ``1 / sqrt(x)``.
- ``prefer_scalar_loads``: on AMD Zen, whose AVX-512 gathers cost about
  twice 16 scalar loads, vectorised loops that read through an index array
  load lane by lane (``make bench-selfcollision``'s cached layered row).
  Portable twin: nothing (LLVM's own choice).
- ``compact_flags``: with AVX-512 (F and BW), 64 flags at a time through
  ``vpcompressd`` (the capsule sweep's candidate list and the self-contact
  list, ``make bench``'s capsule rows). Portable twin: ``_compact_words``,
  eight flags per 64-bit word.
"""

import os
import platform
import warnings

import numba
import numpy as np
from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import njit
from numba.core import cgutils
from numba.core import types as nb_types
from numba.core.registry import cpu_target
from numba.extending import intrinsic

from .jit import EXACT_FLAT, FASTMATH


def _portable_requested():
    return os.environ.get("DRAPE_PORTABLE", "").strip().lower() not in ("", "0", "false", "no", "off")


if _portable_requested() and numba.config.CPU_NAME != "generic":
    if "_toplevel_target_context" in vars(cpu_target):
        warnings.warn("DRAPE_PORTABLE is set but numba already compiled for this CPU in this process: "
                      "set it (or NUMBA_CPU_NAME=generic) before anything imports numba", stacklevel=1)
    else:
        numba.config.CPU_NAME = "generic"
        numba.config.CPU_FEATURES = ""

# True: every kernel takes its portable twin.
PORTABLE = _portable_requested() or numba.config.CPU_NAME == "generic"
X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")
# The CPU numba compiles for, and its features (NUMBA_CPU_NAME and
# NUMBA_CPU_FEATURES apply; a "generic" build has no features).
CPU_NAME = (llvm_binding.get_host_cpu_name() if numba.config.CPU_NAME in (None, "", "host")
            else numba.config.CPU_NAME)
_FEATURES = set((getattr(cpu_target.target_context.codegen(), "_tm_features", "") or "").split(","))

# AMD Zen CPUs gather slowly: a 16-lane AVX-512 gather of float32 costs
# about twice as much as 16 scalar loads put into a vector.
SLOW_GATHERS = not PORTABLE and CPU_NAME.startswith("znver")
# AVX-512 hosts compact 64 flags at a time (_compact_blocks).
COMPRESS_FLAGS = not PORTABLE and X86 and {"+avx512f", "+avx512bw"} <= _FEATURES
# x86's rsqrtss (SSE, every x86-64 CPU has it).
X86_RSQRT = not PORTABLE and X86


@intrinsic
def _rsqrt_estimate(typingctx, x):
    """x86's rsqrtss: 1/sqrt(x) to 12 bits in one cheap instruction."""
    sig = nb_types.float32(nb_types.float32)

    def codegen(context, builder, signature, args):
        v4 = ir.VectorType(ir.FloatType(), 4)
        vec = builder.insert_element(ir.Constant(v4, ir.Undefined), args[0], ir.Constant(ir.IntType(32), 0))
        fn = builder.module.declare_intrinsic("llvm.x86.sse.rsqrt.ss", fnty=ir.FunctionType(v4, [v4]))
        return builder.extract_element(builder.call(fn, [vec]), ir.Constant(ir.IntType(32), 0))

    return sig, codegen


@njit(inline="always", cache=True, fastmath=set(FASTMATH))
def _rsqrt_x86(x):
    """1/sqrt(x) in float32: the estimate plus one Newton step (relative
    error ~2e-7, float32's own). LLVM keeps sqrt + div on CPUs with a fast
    sqrt unit; in the distance kernels this is ~11% faster. Needs x > 0
    (rsqrt(0) is NaN here): callers clamp or skip."""
    y = _rsqrt_estimate(x)
    return y * (np.float32(1.5) - np.float32(0.5) * x * y * y)


@njit(inline="always", cache=True, fastmath=set(FASTMATH))
def _rsqrt_portable(x):
    """1/sqrt(x) in float32 (the portable twin of _rsqrt_x86)."""
    return np.float32(1.0) / np.sqrt(x)


# rsqrt(x): 1/sqrt(x) in float32 for x > 0.
rsqrt = _rsqrt_x86 if X86_RSQRT else _rsqrt_portable


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


# _compact_blocks: one byte compare gives the mask of 64 flags, and four
# register compresses (vpcompressd) write the indices of the set ones.
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
