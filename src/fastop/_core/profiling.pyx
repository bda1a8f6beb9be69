# cython: freethreading_compatible = False
"""The profiler's recorder: a flag the hooks check once per op, and the C buffer events
go to while it is set.

Hooks (one check each): eager dispatch (every eager op call, optimizer updates and the
ops of composite gradient rules included), the backward walk (each node, and the walk
itself), the C path of kernel gradient rules, PyLayer's apply, and a static plan's run
loop (each op record). With the flag off a hook costs one load and a branch. With it
on, a hook reads ``CLOCK_MONOTONIC`` before and after the call and appends one
:c:type:`Event` — a strong reference to what ran (an OpDef, a PyLayer class, a name),
both times, the thread's index and the offset of its inputs' dtypes and shapes in a pool
of int64 words — to arrays that grow by doubling: no Python object is made per event.
:class:`Trace` owns one session's events; :mod:`fastop.profiler` decodes them once, when
they are read.

Sessions nest: :func:`start` while a session records joins it (a script using a
:class:`~fastop.profiler.Profiler` run under ``python -m fastop profile``); it ends when
every :func:`start` has had its :func:`stop`. Each user reads its own time window.

All of this runs with the GIL held (the build is not free-threaded): appends from
several threads are serialized by it, and nothing between reserving an event and
filling it can let another thread run.
"""
from cpython.mem cimport PyMem_Realloc, PyMem_Free
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from libc.stdint cimport int64_t, INT64_MAX
from fastop._core.storage cimport DenseTensor, fastop_view, FASTOP_NUM_DTYPES

import threading

__all__ = ["Trace", "start", "stop", "is_active", "now", "record_range",
           "EVENT_KINDS"]

EVENT_KINDS = {"op": EVENT_OP, "static_op": EVENT_STATIC_OP, "pylayer": EVENT_PYLAYER,
               "node": EVENT_NODE, "backward": EVENT_BACKWARD, "run": EVENT_RUN,
               "user": EVENT_USER, "step": EVENT_STEP}

# Shape records: [count, entry...]; an entry is a tensor (dtype code >= 0, ndim, dims),
# ABSENT (None), OTHER (a scalar or any non-tensor), or LIST k followed by k entries.
cdef enum:
    ENTRY_OTHER = -1
    ENTRY_ABSENT = -2
    ENTRY_LIST = -3
    MAX_ENTRIES = 16          # per record, and per list: the rest is not recorded
    MAX_RECORD_WORDS = 1 + MAX_ENTRIES * (2 + MAX_ENTRIES * 10)


cdef struct Event:
    PyObject* what            # a strong reference
    int64_t start
    int64_t end
    int kind
    int thread                # index into Trace.threads
    Py_ssize_t shapes         # offset of the inputs' record in the pool, -1: none


cdef extern from *:
    """
    /* The calling thread's index in the session it last recorded in. */
    static _Thread_local long long fastop_profiler_thread_session = 0;
    static _Thread_local int fastop_profiler_thread_index = -1;
    """
    long long _thread_session "fastop_profiler_thread_session"
    int _thread_index "fastop_profiler_thread_index"


cdef int _active = 0          # the flag the hooks check
cdef Trace _trace = None      # where events go while _active
cdef int _users = 0           # starts not yet stopped (sessions nest)
cdef long long _sessions = 0


cdef const int* profiling_flag() noexcept:
    return &_active


cdef class Trace:
    """The events of one profiling session (from :func:`start` to :func:`stop`)."""
    cdef Event* buf
    cdef Py_ssize_t n, cap
    cdef int64_t* pool
    cdef Py_ssize_t pool_n, pool_cap
    cdef readonly list threads          # per thread index: (ident, native id, name)
    cdef readonly long long session
    cdef readonly int64_t started       # ns, CLOCK_MONOTONIC
    cdef readonly int64_t stopped       # 0 while recording
    cdef readonly bint record_shapes

    def __cinit__(self):
        self.threads = []

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.n):
            Py_DECREF(<object>self.buf[i].what)
        PyMem_Free(self.buf)
        PyMem_Free(self.pool)

    def __len__(self):
        return self.n

    def __repr__(self):
        return f"<Trace of {self.n} events on {len(self.threads)} threads>"

    cdef Event* reserve(self) except NULL:
        cdef Event* grown
        if self.n == self.cap:
            grown = <Event*>PyMem_Realloc(self.buf, max(1024, 2 * self.cap) * sizeof(Event))
            if grown is NULL:
                raise MemoryError("fastop.profiler: no memory for more events")
            self.buf = grown
            self.cap = max(1024, 2 * self.cap)
        self.n += 1
        return &self.buf[self.n - 1]

    cdef int64_t* pool_room(self) except NULL:
        """Room for one shape record at the end of the pool."""
        cdef int64_t* grown
        cdef Py_ssize_t cap
        if self.pool_cap - self.pool_n < MAX_RECORD_WORDS:
            cap = max(8 * MAX_RECORD_WORDS, 2 * self.pool_cap)
            grown = <int64_t*>PyMem_Realloc(self.pool, cap * sizeof(int64_t))
            if grown is NULL:
                raise MemoryError("fastop.profiler: no memory for more input shapes")
            self.pool, self.pool_cap = grown, cap
        return self.pool + self.pool_n

    cdef Py_ssize_t encode(self, object inputs) except -2:
        """Append the dtypes and shapes of `inputs` (a tuple or list) to the pool; the
        record's offset."""
        if inputs is None or not self.record_shapes:
            return -1
        cdef int64_t* out = self.pool_room()
        cdef Py_ssize_t start = self.pool_n, i, k = 1
        cdef Py_ssize_t n = min(len(inputs), <Py_ssize_t>MAX_ENTRIES)
        out[0] = n
        for i in range(n):
            k = _encode_value(out, k, inputs[i], True)
        self.pool_n = start + k
        return start

    cdef Py_ssize_t encode_views(self, fastop_view** views, int n) except -2:
        if not self.record_shapes:
            return -1
        cdef int64_t* out = self.pool_room()
        cdef Py_ssize_t start = self.pool_n, k = 1
        cdef int i
        n = min(n, <int>MAX_ENTRIES)
        out[0] = n
        for i in range(n):
            if views[i] == NULL:
                out[k] = ENTRY_ABSENT
                k += 1
            else:
                k = _encode_view(out, k, views[i])
        self.pool_n = start + k
        return start

    cdef int add_thread(self) except -1:
        """The calling thread's index, registering it (name, ids) on its first event."""
        t = threading.current_thread()
        self.threads.append((t.ident, threading.get_native_id(), t.name))
        return len(self.threads) - 1

    def events(self, int64_t since=0, int64_t until=INT64_MAX) -> list:
        """The events that began at or after `since` and ended by `until`, in the order
        recorded (by end time per thread), as ``(kind, what, start_ns, end_ns,
        thread_index, inputs)``: `inputs` None when not recorded, else a tuple per
        input of ``(dtype_code, shape_tuple)`` for a tensor, None for an absent input,
        ``(-1, None)`` for a non-tensor, or a list of those (a list input)."""
        cdef Py_ssize_t i, pos
        cdef Event* e
        result = []
        for i in range(self.n):
            e = &self.buf[i]
            if e.start < since or e.end > until:
                continue
            inputs = None
            if e.shapes >= 0:
                pos = e.shapes
                inputs = tuple(self._decode_list(&pos))
            result.append((e.kind, <object>e.what, e.start, e.end, e.thread, inputs))
        return result

    cdef list _decode_list(self, Py_ssize_t* pos):
        cdef int64_t count = self.pool[pos[0]]
        pos[0] += 1
        return [self._decode_entry(pos) for _ in range(count)]

    cdef object _decode_entry(self, Py_ssize_t* pos):
        cdef int64_t tag = self.pool[pos[0]]
        cdef int64_t ndim
        if tag == ENTRY_ABSENT:
            pos[0] += 1
            return None
        if tag == ENTRY_OTHER:
            pos[0] += 1
            return (-1, None)
        if tag == ENTRY_LIST:
            pos[0] += 1
            return self._decode_list(pos)
        ndim = self.pool[pos[0] + 1]
        shape = tuple([self.pool[pos[0] + 2 + d] for d in range(ndim)])
        pos[0] += 2 + ndim
        return (int(tag), shape)


cdef Py_ssize_t _encode_view(int64_t* out, Py_ssize_t k, const fastop_view* v) noexcept:
    cdef int d
    if v.dtype < 0 or v.dtype >= FASTOP_NUM_DTYPES or v.ndim < 0:
        out[k] = ENTRY_OTHER                # a slot with nothing bound yet
        return k + 1
    out[k] = v.dtype
    out[k + 1] = v.ndim
    for d in range(v.ndim):
        out[k + 2 + d] = v.shape[d]
    return k + 2 + v.ndim


cdef Py_ssize_t _encode_value(int64_t* out, Py_ssize_t k, object x, bint top) except -1:
    cdef Py_ssize_t i, n
    if isinstance(x, DenseTensor):
        return _encode_view(out, k, &(<DenseTensor>x).view)
    if x is None:
        out[k] = ENTRY_ABSENT
        return k + 1
    if top and type(x) is list:             # a variadic input: one level
        n = min(len(<list>x), <Py_ssize_t>MAX_ENTRIES)
        out[k] = ENTRY_LIST
        out[k + 1] = n
        k += 2
        for i in range(n):
            k = _encode_value(out, k, (<list>x)[i], False)
        return k
    out[k] = ENTRY_OTHER
    return k + 1


cdef inline Trace _session_trace(int64_t start):
    """The trace to record into: None if profiling stopped, or was restarted, after
    `start` (the call began outside this session)."""
    cdef Trace trace = _trace
    if trace is None or start < trace.started:
        return None
    return trace


cdef inline int _thread_of(Trace trace) except -1:
    global _thread_session, _thread_index
    if _thread_session != trace.session:
        _thread_index = trace.add_thread()
        _thread_session = trace.session
    return _thread_index


cdef inline int _append(Trace trace, object what, int kind, int64_t start, int64_t end,
                        int thread, Py_ssize_t shapes) except -1:
    # nothing here runs Python code: no other thread can record in between
    cdef Event* e = trace.reserve()
    Py_INCREF(what)
    e.what = <PyObject*>what
    e.start = start
    e.end = end
    e.kind = kind
    e.thread = thread
    e.shapes = shapes
    return 0


cdef int record(object what, int kind, int64_t start, object inputs) except -1:
    cdef int64_t end = now_ns()
    cdef Trace trace = _session_trace(start)
    if trace is None:
        return 0
    cdef int thread = _thread_of(trace)     # may run Python (a thread's first event)
    if trace is not _trace:
        return 0
    _append(trace, what, kind, start, end, thread, trace.encode(inputs))
    return 0


cdef int record_views(object what, int kind, int64_t start, fastop_view** views,
                      int n) except -1:
    cdef int64_t end = now_ns()
    cdef Trace trace = _session_trace(start)
    if trace is None:
        return 0
    cdef int thread = _thread_of(trace)
    if trace is not _trace:
        return 0
    _append(trace, what, kind, start, end, thread, trace.encode_views(views, n))
    return 0


# --------------------------------------------------------------------------- Python API

def start(bint record_shapes=True) -> Trace:
    """Record: from now on every hook records into a :class:`Trace` — a new one, or the
    one of the session already recording (sessions nest), which is returned."""
    global _trace, _active, _sessions, _users
    cdef Trace trace = _trace
    if trace is None:
        trace = Trace.__new__(Trace)
        _sessions += 1
        trace.session = _sessions
        trace.started = now_ns()
        _trace = trace
    trace.record_shapes = trace.record_shapes or record_shapes
    _users += 1
    _active = 1
    return trace


def stop() -> None:
    """The end of one :func:`start`'s recording; the last one ends the session."""
    global _trace, _active, _users
    if not _users:
        raise RuntimeError("fastop.profiler: no profiling session is recording")
    _users -= 1
    if _users == 0:
        _active = 0
        _trace.stopped = now_ns()
        _trace = None


def is_active() -> bool:
    """Whether a session is recording."""
    return bool(_active)


def now() -> int:
    """The recorder's clock, in nanoseconds (CLOCK_MONOTONIC)."""
    return now_ns()


def record_range(what, int kind, int64_t start) -> None:
    """Record an event of `kind` (a user range, a step) from `start` (:func:`now`) to now,
    on the calling thread; nothing when no session is recording."""
    if _active:
        record(what, kind, start, None)
