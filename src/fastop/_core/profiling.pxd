# The profiler's C side, cimported by the modules that hold its hooks (eager dispatch,
# the autograd walk, PyLayer, the static executor). A hook is one check of the flag that
# `profiling_flag()` points at; when it is set, the hook takes the time before the call
# (`now_ns`) and calls `record` after it.
from libc.stdint cimport int64_t
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from fastop._core.storage cimport fastop_view


# What an event is (the `kind` of a record); `what` is the object it names.
cdef enum EventKind:
    EVENT_OP = 0          # an eager op call (what: its OpDef), or the backward op of a
                          # kernel rule run by the backward walk
    EVENT_STATIC_OP = 1   # an op record run by a static plan (what: its OpDef)
    EVENT_PYLAYER = 2     # a PyLayer's forward (what: the PyLayer class)
    EVENT_NODE = 3        # a backward node (what: its OpDef or PyLayer class)
    EVENT_BACKWARD = 4    # a backward walk (what: "backward" or "grad")
    EVENT_RUN = 5         # a static plan's run (what: "Executor.run")
    EVENT_USER = 6        # a user range, record_function / RecordEvent (what: its name)
    EVENT_STEP = 7        # a Profiler.step range (what: the step number)


cdef inline int64_t now_ns() noexcept nogil:
    """CLOCK_MONOTONIC in nanoseconds: the clock of time.perf_counter_ns on Linux."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


# The "profiling on" flag (read it through the pointer: one load per check).
cdef const int* profiling_flag() noexcept
# Record an event that began at `start` and ends now, on the calling thread. `inputs`
# (a tuple or list; None: none) gives the input shapes and dtypes. Call with the GIL.
cdef int record(object what, int kind, int64_t start, object inputs) except -1
# The same with the inputs as views (the static executor's slots; NULL: absent).
cdef int record_views(object what, int kind, int64_t start, fastop_view** views,
                      int n) except -1
