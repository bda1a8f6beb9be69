# The static executor's compiled plan: slot table, op records, arena. The Python front
# end (fastop.static.executor) builds a Plan from a Program; Plan.run is the loop.
from fastop._core.storage cimport fastop_view, fastop_attrs, DenseTensor
from fastop._core.kernel cimport infer_fn, kernel_fn, MAX_OPERANDS
from libc.stdint cimport int64_t

# How an op is run: a Cython kernel called through its C pointers, a Python callable, or
# a view kernel (CKernel.is_view) that points its output into its first input's memory.
cdef enum OpKind:
    OP_C = 0
    OP_PY = 1
    OP_VIEW = 2

# Where a slot's memory comes from (see Plan's docstring).
cdef enum SlotKind:
    SLOT_ARENA = 0      # a temporary written by a C kernel: an offset into the arena
    SLOT_FRESH = 1      # a fetched (or rewritten) temporary: allocated on every run
    SLOT_EXTERNAL = 2   # written by a Python op: the memory its result came in
    SLOT_FEED = 3       # a fed array, borrowed without copying
    SLOT_PERSIST = 4    # a persistable variable living in the scope
    SLOT_CONST = 5      # a constant bound once at plan time
    SLOT_VIEW = 6       # written by a view kernel: a view of its input's memory

cdef struct OpRecord:
    int kind
    int n_in
    int n_out
    int ins[MAX_OPERANDS]      # slot indices
    int outs[MAX_OPERANDS]
    infer_fn infer
    kernel_fn fn
    int dispatch               # the input whose dtype selected fn (-1: none)
    int dtype                  # that dtype
    Py_ssize_t grain           # release the GIL when the first output has this many elements
    bint reads_output          # an output slot is also an input slot (an update in place)
    bint writes_persist        # an output is a persistable: its memory may be an input's
    bint ordered               # runs on the caller, after the previous ordered op
    bint releases              # let the GIL go in the timing run (may run beside others)
    int64_t first_ns           # its time in the timing run
    fastop_attrs attrs


# Which ops of a Plan may run at once (executor.pyx).
cdef class Schedule:
    cdef readonly int n_ops
    cdef readonly list regions    # [(lo, hi)]: ops lo..hi-1 run scheduled
    cdef readonly list heavy_ops  # plan op indices offered to pool threads
    cdef int* heavy               # per op: may run on a pool thread
    cdef int* indegree            # per op: dependencies inside its region
    cdef int* dep_start           # CSR: op i's dependents inside its region are
    cdef int* deps                #   deps[dep_start[i]:dep_start[i + 1]]
    cdef int* region_heavy        # per region: its heavy ops


cdef class Plan:
    cdef readonly int n_slots
    cdef readonly int n_ops
    cdef int capacity
    cdef OpRecord* ops
    cdef fastop_view* views       # current view of every slot
    cdef fastop_view* planned     # arena slots: their planned view
    cdef int* kinds
    cdef int* first_def           # op index of a slot's first write (-1: never written)
    cdef int* last_use            # op index of a slot's last read or write
    cdef char* dirty              # arena slot re-pointed for this run only
    cdef list live_until          # per slot: last op that needs its memory (views, fetches)
    cdef dict region_last         # arena slot -> the last op that may run before its
                                  # uses end (regions), when later than live_until's
    cdef list release_at          # per op: arena slots a first (tracing) run frees after it
    cdef list objs                # per slot: the DenseTensor owning its memory, or None
                                  # (view slots: the owner of the memory they view; None
                                  # for the arena)
    cdef list names               # per slot: the variable name
    cdef list py_calls            # per op: the Python callable (OP_PY) or the CKernel
    cdef list py_ins              # per Python or view op: tuple of input slots (-1: None)
    cdef list py_outs             # per Python or view op: tuple of output slots
    cdef list op_defs             # per op: what the profiler names it by (an OpDef, or None)
    cdef dict consts              # const slot -> its bound DenseTensor
    cdef list feed_slots          # [(name, slot)]; planned[slot]: the fed dtype/shape
    cdef list persist_slots       # [(name, slot, must_exist)]
    cdef list fetch_slots
    cdef DenseTensor arena
    cdef readonly bint traced     # the arena is laid out (after the first good run)
    cdef readonly bint stale      # a shape changed this run: lay the arena out again
    cdef readonly Py_ssize_t arena_bytes
    cdef readonly Py_ssize_t min_live_bytes
    cdef readonly int current_op  # the op being run (for error notes)
    cdef readonly bint running    # inside run(): a Python op may not re-enter this plan
    cdef readonly unsigned long thread   # the thread that runs (or last ran) it
    cdef dict scope
    # running independent ops at once (see the module docstring)
    cdef readonly int num_threads # threads a run may use (1: every op on the caller)
    cdef bint timing              # the next run times each op, then plans concurrency
    cdef readonly Schedule schedule   # the concurrent regions (None: a serial plan)
    cdef int* waiting             # per op of the running region: ops it still waits for
    cdef int* ready               # the running region's ready ops
    cdef int n_ready
    cdef int left                 # ops of the region not finished
    cdef int heavy_left           # heavy ops of the region not taken
    cdef int completions          # bumped (atomically) as each op of the region ends
    cdef bint failed
    cdef object error             # the first exception an op of the region raised
    cdef int error_op
    cdef int64_t profiled         # the run is profiled (its start time; 0: not)

    cdef int _check_slot(self, object s, str what, bint absent_ok) except -1
    cdef OpRecord* _new_record(self, int kind, list ins, list outs, str who) except NULL
    cdef int _run_c(self, int i) except -1
    cdef int _kernel_error(self, int i, int status, fastop_view** ins) except -1
    cdef list _fetch(self)
    cdef int _run_py(self, int i) except -1
    cdef int _run_op(self, int i) except -1
    cdef int _run_profiled(self, int i) except -1
    cdef int _record_op(self, int i, int64_t start) except -1
    cdef int _run_view(self, int i) except -1
    cdef int _provide(self, int s, const fastop_view* meta) except -1
    cdef DenseTensor _wrap(self, int s)
    cdef object _run(self, dict feeds, dict scope, bint check)
    cdef bint _bind(self, dict feeds, bint check) except -1
    cdef void _release(self)
    cdef int _lifetimes(self) except -1
    cdef int _lay_out_arena(self) except -1
    cdef int _run_timed(self, int64_t start) except -1
    cdef int _run_scheduled(self, int64_t start) except -1
    cdef int _run_region(self, int r) except -1
    cdef void _work(self) noexcept
    cdef int _take(self, bint caller)
    cdef void _finish(self, int i)
    cdef int _plan_concurrency(self) except -1
    cdef tuple _dependencies(self)
    cdef int _keep_apart(self, list preds, dict touches) except -1
    cdef int _alloc_run_state(self) except -1

