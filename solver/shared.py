"""What the kernel modules share (a module of its own: kernels imports
selfcollision_kernels, and both use it): numba compiler pieces and the
flag compaction."""

import types

import numba
import numpy as np
from llvmlite import binding as llvm_binding
from numba import njit
from numba.core import types as nb_types
from numba.core.compiler import Compiler
from numba.extending import intrinsic

# AMD Zen hosts gather slowly: a 16-lane AVX-512 gather of float32 takes
# ~5.8 ns on the Zen 4 host, 16 scalar loads put into a vector ~3 ns.
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

    Measured on the Zen 4 host (cached layered bench, contact solve): the
    filter and row passes ~25% faster than with gathers."""
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


@njit(cache=True, error_model="numpy", nogil=True, _nrt=False)
def compact_flags(sel, out):
    """The indices i with sel[i] != 0 (0 or 1), in order, into out; returns
    their count. sel's length is a multiple of 8 with zeros past the items:
    it is read as uint64 words and a zero word (eight vertices far from
    every capsule, eight contacts clear of their triangles) costs one test.
    A branch per item on the test itself mispredicted (the capsule box test:
    2.6 ns per vertex at 10k, at the ends of the runs a grid makes).
    out needs as many items as sel, not as the items: every byte of a
    nonzero word is written at out[count] before its flag is counted, so
    with all n items listed the padding bytes write out[n]."""
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
