"""How the solver's numba code is compiled: the options its kernels share,
the compiler pieces they use (no-alias arguments, the SLP vectoriser, a
second dispatcher of one function), and the one change Drape makes to
numba's code generation. The CPU-specific code is in hardware.py.

Imported by ``drape.solver`` before any kernel module, so it holds for every
kernel compiled in the process (``scene/_kernels.py`` imports the package
too).

Calls into other compiled functions run each library's own copy
--------------------------------------------------------------
numba links a called njit function into its caller's LLVM module as a
``linkonce_odr`` copy, optimised again inside the caller. The JIT engine
then resolves every such symbol to the first definition it loaded: in a
process that compiles, the callee's own library (compiled first); in a
process that loads from numba's disk cache, whichever cached library that
holds a copy was called first. The copies are not the same machine code
(each is optimised in its own module, under fastmath reassociation), so the
same build rounded differently cold and warm, and the layered skirts drifted
apart within a few frames. Linked copies are made ``internal`` before the
caller's module is optimised: each library then always runs its own copies,
and a library loaded from the cache behaves exactly as when it was compiled
(tests/solver/test_determinism.py). The change keeps the semantics of any
numba code (the ODR copies were interchangeable by contract) and only
removes the sharing between libraries.
"""

import threading
import types

from llvmlite import binding as _ll
from numba.core import codegen as _codegen
from numba.core import config as _numba_config
from numba.core.compiler import Compiler

# fastmath without 'nnan'/'ninf': the NaN/Inf guard must survive optimisation.
FASTMATH = frozenset({"nsz", "arcp", "contract", "afn", "reassoc"})
# The step kernels: float32 fastmath that keeps NaN/Inf tests, no Python
# zero-division checks, the GIL released.
KERNEL = dict(cache=True, fastmath=set(FASTMATH), error_model="numpy", nogil=True)
# Self collision and skinning: full fastmath (their inputs are checked for
# NaN/Inf before they run).
FAST = dict(cache=True, fastmath=True, error_model="numpy", nogil=True)
# Kernels that allocate nothing: without numba's reference counting an array
# argument costs no atomic increment and decrement per call.
FLAT = dict(KERNEL, _nrt=False)
# No fastmath at all: set-up code (topology, mesh simplification) and
# integer kernels, where speed matters less than plain IEEE results.
PLAIN = dict(cache=True)
EXACT_FLAT = dict(cache=True, error_model="numpy", nogil=True, _nrt=False)
# FAST without reference counting: the self-collision helpers that allocate nothing.
FAST_FLAT = dict(FAST, _nrt=False)


_vectoriser = threading.local()   # .depth: how deep this thread is inside compiled_fast


class compiled_fast:
    """Context for calling the step kernels: whatever numba compiles inside
    it, on this thread, is compiled with LLVM's SLP vectoriser on (numba
    leaves it off by default), which turns the x, y, z, 0 record arithmetic
    of the fast constraint kernels into 4-wide SIMD (bending ~76 -> ~40
    instructions per element). Scoped to the thread that compiles: numba
    compiles on the calling thread, and a compile on another thread (a
    background compile, a cloth stepped beside this one) keeps its own
    setting, so a kernel and its threaded twin compiled apart round alike
    (solver.threads.compile_in_background). A kernel keeps the code of its
    first compilation, in the process and in numba's cache: one first
    compiled outside this context (a test calling it directly) may round
    differently when the step later links it."""

    _lock = threading.Lock()   # the process-wide fallback (numba without a per-call builder)
    _depth = 0
    _saved = None

    def __enter__(self):
        _vectoriser.depth = getattr(_vectoriser, "depth", 0) + 1
        if not _THREAD_SCOPED:
            cls = compiled_fast
            with cls._lock:
                if cls._depth == 0:
                    cls._saved = _numba_config.SLP_VECTORIZE
                    _numba_config.SLP_VECTORIZE = 1
                cls._depth += 1

    def __exit__(self, *exc):
        _vectoriser.depth -= 1
        if not _THREAD_SCOPED:
            cls = compiled_fast
            with cls._lock:
                cls._depth -= 1
                if cls._depth == 0:
                    _numba_config.SLP_VECTORIZE = cls._saved
        return False


def vectoriser_on():
    """Whether what numba compiles now, on this thread, gets the SLP vectoriser."""
    return getattr(_vectoriser, "depth", 0) > 0 or bool(_numba_config.SLP_VECTORIZE)


def _thread_scoped_vectoriser():
    """Make numba's pass builder (_pass_builder; _pass_manager_builder in
    older numba) read this thread's compiled_fast; False where neither is
    there (compiled_fast then sets numba's process-wide switch)."""
    cls = _codegen.CPUCodegen
    if getattr(cls, "_drape_thread_vectoriser", False):
        return True
    for name in ("_pass_builder", "_pass_manager_builder"):
        build = getattr(cls, name, None)
        if build is not None:
            break
    else:
        return False

    def builder(self, **kwargs):
        if "slp_vectorize" not in kwargs and getattr(_vectoriser, "depth", 0) > 0:
            kwargs["slp_vectorize"] = True
        return build(self, **kwargs)

    setattr(cls, name, builder)
    cls._drape_thread_vectoriser = True
    return True


_THREAD_SCOPED = _thread_scoped_vectoriser()


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



def specialised(fn, name, **constants):
    """A copy of the plain function fn under another name, reading the given
    module globals as these constants (call it after the module defines
    everything fn uses). numba prunes a branch on a constant before typing
    it, so one source compiles to variants that hold only what they run
    (loop.run and loop.run_general); the distinct name keeps their cache
    entries apart (see renamed)."""
    scope = dict(fn.__globals__)
    scope.update(constants)
    copy = types.FunctionType(fn.__code__, scope, name, fn.__defaults__, fn.__closure__)
    copy.__qualname__ = name
    copy.__doc__ = fn.__doc__
    return copy


def _internalize_linked_copies():
    cls = _codegen.CPUCodeLibrary
    if getattr(cls, "_drape_internal_copies", False):
        return
    optimize = cls._optimize_final_module

    def _optimize_final_module(self):
        for fn in self._final_module.functions:
            if not fn.is_declaration and fn.linkage == _ll.Linkage.linkonce_odr:
                fn.linkage = _ll.Linkage.internal
        optimize(self)

    cls._optimize_final_module = _optimize_final_module
    cls._drape_internal_copies = True


_internalize_linked_copies()
