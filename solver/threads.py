"""CPU threads: how many the solver may use, and stepping independent cloths
side by side.

Independent cloths (each its own Model and State, no contacts between them)
share nothing while they step, and the step kernels release the GIL
(jit.KERNEL: nogil=True), so a pool of Python threads steps several of them
at once. Each cloth's step runs exactly the code it runs alone, on one
thread, so the results are bit-identical for any thread count and in any
order the pool picks the cloths in (tests/solver/test_threads.py).

While jobs run side by side numba runs with one thread in each of them
(numba.set_num_threads is per calling thread), and a kernel with
parallel=True that a step may call must check numba.get_num_threads() > 1
and take its serial twin otherwise (as skinning.skin does): numba's
workqueue threading layer, its fallback where neither OpenMP nor TBB loads
(as in some Blender builds), aborts the process when two threads launch
parallel regions at once, even at one thread each
(tests/solver/test_threads.py steps cloths side by side on it).

A large self-colliding cloth splits its self-collision detection over
numba's threads (selfcollision.DETECT_SPLIT_MIN_PATCHES: two parallel
regions, a few hundred microseconds of work, a step). The rest of the step of one
cloth stays serial inside by default. Its default loop runs
a few dozen colour batches and per-vertex passes per substep, each a few
microseconds on a 10k-vertex sheet, and launching a numba parallel region
costs about as much under the OpenMP layer and ten times more under
workqueue (benchmarks/bench_solver.py times both: the "parallel_region_launch"
rows): split per batch, the launches would eat what the second core gives.
For a much larger cloth the split pays while the cores are free, and costs
far more than it gives while they are not: loop.run_threaded, behind
COLOUR_SPLIT_MIN_VERTICES (off by default).
"""

import threading
from concurrent.futures import ThreadPoolExecutor

import numba

# A process-wide thread count set by the command line (bake/headless.py
# --threads) in place of each cloth's own setting; None: none set.
_override = None
_pools = {}
_pools_lock = threading.Lock()

# run_all keeps jobs on the calling thread unless the work besides the
# longest job (what a second thread can take) is at least this long, in the
# units of its `cost` (ns): waking a pool thread takes tens of microseconds,
# so two jobs of 25 us each run slower on two threads than on one, and two
# of 100 us faster (benchmarks/bench_solver.py, the "pool_dispatch" rows,
# on a 2-core machine with both cores free).
MIN_PARALLEL_COST_NS = 100_000
# A step's cost estimate per vertex and substep (ns) where nothing better is
# known (scene.runtime passes each simulation's last step time instead).
NS_PER_VERTEX_SUBSTEP = 10.0


def available():
    """The most threads numba can run (NUMBA_NUM_THREADS, by default every
    core of the machine)."""
    return max(1, int(numba.config.NUMBA_NUM_THREADS))


def set_override(threads):
    """Use `threads` in place of every cloth's own setting (0: every core;
    None: each cloth's own again). bake/headless.py calls it for --threads."""
    global _override
    if threads is not None:
        threads = int(threads)
        if threads < 0:
            raise ValueError(f"threads must be >= 0, got {threads}")
    _override = threads


def resolve(requested):
    """The thread count to use for a setting of `requested` (0 or None =
    every core): set_override's when one is set, within what numba has."""
    if _override is not None:
        requested = _override
    n = available() if not requested else int(requested)
    return max(1, min(n, available()))


def _launched():
    """Whether numba has started its threading layer in this process (asking
    for or setting the thread count starts it: tens of milliseconds once)."""
    from numba.np.ufunc import parallel

    return bool(getattr(parallel, "_is_initialized", True))


class numba_threads:
    """Context: numba's thread count for the calling thread set to `n`
    (resolved), restored on exit. Before numba has started its threads the
    count is numba's default, every thread it has: asking for that starts
    nothing (a first play of one cloth does not pay the start)."""

    def __init__(self, n):
        self.n = resolve(n)

    def __enter__(self):
        self.saved = None
        if self.n == available() and not _launched():
            return self.n
        self.saved = numba.get_num_threads()
        if self.saved != self.n:
            numba.set_num_threads(self.n)
        return self.n

    def __exit__(self, *exc):
        if self.saved is not None and numba.get_num_threads() != self.saved:
            numba.set_num_threads(self.saved)
        return False


# ---------------------------------------------------------------- one large cloth
#
# A cloth of at least this many vertices, stepped with 2 numba threads or
# more, runs loop.run_threaded: each colour of its stretch, shear, bend and
# limit constraints split over the threads in fixed blocks (bit-identical to
# loop.run). Off (infinity) by default. Below some 50k vertices the launches
# cost what the second thread saves (a colour of the 10k-vertex sheet is ~10
# us of work, a launch a few us: the "colour_pass" and
# "parallel_region_launch" rows of benchmarks/bench_solver.py show the
# stretch pass of the 10k sheet gaining nothing on 2 threads and that of a
# 100k one nearly halving when both cores are free). But a step launches
# about 30 regions per substep, and each waits for its slowest thread:
# with other work on the cores (another program, a render) every region
# waits for a thread to be scheduled again, and the whole step gets several
# times slower than on one thread (the "large_sheet_swinging_capsule_threads"
# rows with cores_used below 2). Set a vertex count here to turn it on.
COLOUR_SPLIT_MIN_VERTICES = float("inf")
# run_threaded (and the threaded self-collision detection) compile in a
# background thread the first time a cloth could use them; the steps take
# the serial kernels meanwhile (the same result).
BACKGROUND_COMPILE = True
_compiled = set()      # (kernel, argument types, fast) compiled
_compiling = {}        # (kernel, argument types, fast) -> the thread compiling them
_compile_lock = threading.Lock()


class _ColourSplit:
    """Stands in for loop.run: the same arguments; calls loop.run_threaded,
    with the colour offsets added to the constraint records, once compiled
    for them."""

    def __init__(self, model, fast_records):
        offsets = [getattr(c, "colour_offsets", None) for c in model.constraints]
        self.swap = {id(r): r + (o,) for r, o in zip(fast_records, offsets) if o is not None}
        self.keep = fast_records  # the ids above stay theirs

    def __call__(self, *args):
        from . import loop

        split = tuple(self.swap.get(id(a), a) for a in args)
        if compile_in_background(loop.run_threaded, split):
            return loop.run_threaded(*split)
        return loop.run(*args)


def _compile_now(kernel, types, fast):
    from .jit import compiled_fast

    try:
        if fast:
            with compiled_fast():
                kernel.compile(types)
        else:
            kernel.compile(types)
    except Exception:  # noqa: BLE001 - the serial kernel goes on; a failure is not retried
        return
    _compiled.add((kernel, types, fast))


def compile_key(kernel, args, fast=True):
    """What start_compile takes: `kernel` (a numba dispatcher) for the types
    of `args`; fast: compiled as the step kernels are (inside
    jit.compiled_fast), else with numba's defaults, as its serial twin is,
    so that both round alike (the vectoriser's setting changes how the code
    they share rounds; jit.compiled_fast holds on its own thread only).
    Typing the arguments costs microseconds per array: make it once."""
    return kernel, tuple(numba.typeof(a) for a in args), bool(fast)


def start_compile(key):
    """Whether the kernel of `key` (compile_key) is compiled; if not, its
    compile starts in a background thread (once; at once and in this thread
    when BACKGROUND_COMPILE is off) and the caller takes its serial twin
    meanwhile, and for good when the compile failed."""
    if key in _compiled:
        return True
    with _compile_lock:
        if key in _compiling:
            return False
        if not BACKGROUND_COMPILE:
            _compiling[key] = None
    if not BACKGROUND_COMPILE:
        _compile_now(*key)
        return key in _compiled
    worker = threading.Thread(target=_compile_now, args=key, name="drape-compile-threaded", daemon=True)
    with _compile_lock:
        _compiling[key] = worker
    worker.start()
    return False


def compile_now(key):
    """Compile the kernel of `key` (compile_key) on this thread, now (or load
    it from numba's cache): what scene/warmup_child.py does ahead of a play.
    Returns whether it is compiled."""
    if key not in _compiled:
        _compile_now(*key)
    return key in _compiled


def compile_in_background(kernel, args, fast=True):
    """start_compile(compile_key(kernel, args, fast))."""
    return start_compile(compile_key(kernel, args, fast))


def wait_for_compiles(timeout=None):
    """Wait until the background compiles have ended."""
    for worker in list(_compiling.values()):
        if worker is not None:
            worker.join(timeout)


def colour_split(model, cached, params, run):
    """What step() calls for a model of at least COLOUR_SPLIT_MIN_VERTICES
    vertices at the default settings: `run` (loop.run) unless it steps with
    2 threads or more (params.threads, and numba's count on this thread: 1
    in run_all's jobs), then a _ColourSplit (kept on `cached`)."""
    if resolve(params.threads) < 2 or numba.get_num_threads() < 2:
        return run
    split = getattr(cached, "colour_split", None)
    if split is None:
        split = cached.colour_split = _ColourSplit(model, cached.fast_records)
    return split


def _serial_worker():
    numba.set_num_threads(1)


def _pool(width):
    with _pools_lock:
        pool = _pools.get(width)
        if pool is None:
            pool = _pools[width] = ThreadPoolExecutor(max_workers=width, thread_name_prefix="drape-step",
                                                      initializer=_serial_worker)
        return pool


def shutdown():
    """Let the pools' idle threads end (scene.runtime.unregister: an add-on
    disabled or reloaded leaves none behind); the next run_all starts anew."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.shutdown(wait=False)


def _call(job):
    try:
        return job(), None
    except BaseException as exc:  # noqa: BLE001 - handed back to the caller, in order
        return None, exc


def run_all(jobs, threads, cost=None):
    """Call every job (a callable taking nothing) and return [(result,
    exception or None)] in the order of `jobs`. With `threads` (resolved)
    above 1 and more than one job they run on that many threads (at most one
    per job): the calling thread and pool threads, each taking the next job
    until none is left, the costliest first when `cost` (about how long each
    job takes, ns) is given, so the long ones do not start last. Else, or
    when the cost says a second thread would get less than
    MIN_PARALLEL_COST_NS of work, one after the other on the calling thread.
    A job must not share mutable data with another."""
    jobs = list(jobs)
    width = min(resolve(threads), len(jobs))
    if width > 1 and cost is not None and sum(cost) - max(cost) < MIN_PARALLEL_COST_NS:
        width = 1
    if width <= 1:
        return [_call(job) for job in jobs]
    order = list(range(len(jobs)))
    if cost is not None:
        order.sort(key=lambda i: -cost[i])
    queue = iter(order)
    taken = threading.Lock()
    out = [None] * len(jobs)

    def drain():
        while True:
            with taken:
                i = next(queue, None)
            if i is None:
                return
            out[i] = _call(jobs[i])

    pool = _pool(width - 1)
    helpers = [pool.submit(drain) for _ in range(width - 1)]
    with numba_threads(1):  # as in the pool's threads (see the module's docstring)
        drain()
    for helper in helpers:
        helper.result()
    return out


def step_all(steps, threads):
    """solver.step for several independent cloths: `steps` is a list of
    (model, state, inputs, dt, params), one per cloth (no two share a model
    or a state). Raises the first failure in list order, after every cloth
    has stepped."""
    from .step import step

    cost = [NS_PER_VERTEX_SUBSTEP * s[0].n * max(1, int(getattr(s[4], "substeps", 2))) for s in steps]
    outcomes = run_all([lambda s=s: step(*s) for s in steps], threads, cost=cost)
    for _result, exc in outcomes:
        if exc is not None:
            raise exc
    return [s[1] for s in steps]
