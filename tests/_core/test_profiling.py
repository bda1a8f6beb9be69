"""The profiler's C recorder: sessions, the event buffer, input encoding, threads."""
import threading

import numpy as np
import pytest

import fastop
from fastop._core import profiling
from fastop._core.profiling import EVENT_KINDS
from fastop._core.storage import float32

F32 = float32.code          # the dtype code a float32 input is recorded with

OP, USER, STEP = EVENT_KINDS["op"], EVENT_KINDS["user"], EVENT_KINDS["step"]


def ops_of(trace):
    return [e for e in trace.events() if e[0] == OP]


def test_sessions_nest_and_end_with_their_last_stop():
    assert not profiling.is_active()
    outer = profiling.start()
    fastop.exp(fastop.ones([2]))
    inner = profiling.start(record_shapes=False)
    middle = profiling.now()
    fastop.tanh(fastop.ones([2]))
    assert inner is outer and profiling.is_active()
    profiling.stop()
    assert profiling.is_active()                        # the outer one still records
    fastop.sigmoid(fastop.ones([2]))
    profiling.stop()
    assert not profiling.is_active() and outer.started <= outer.stopped
    assert [e[1].name for e in ops_of(outer) if e[1].name != "fastop::full"] == \
        ["fastop::exp", "fastop::tanh", "fastop::sigmoid"]
    assert [e[1].name for e in outer.events(since=middle, until=outer.stopped)
            if e[1].name != "fastop::full"] == ["fastop::tanh", "fastop::sigmoid"]
    with pytest.raises(RuntimeError, match="no profiling session"):
        profiling.stop()
    assert profiling.start() is not outer               # a new session
    profiling.stop()


def test_an_op_call_becomes_one_event_with_its_op_times_thread_and_inputs():
    x = fastop.to_tensor(np.ones((2, 3), np.float32))
    trace = profiling.start()
    before = profiling.now()
    y = x * 2.5
    after = profiling.now()
    profiling.stop()
    (kind, what, start, end, thread, inputs), = ops_of(trace)
    assert what is fastop.ops.registry.get("fastop::multiply")
    assert before <= start <= end <= after
    assert trace.threads[thread][2] == threading.current_thread().name
    assert trace.threads[thread][1] == threading.get_native_id()
    assert inputs == ((F32, (2, 3)), (-1, None))          # float32 [2, 3], a scalar
    assert np.allclose(y.numpy(), 2.5)


def test_list_inputs_are_recorded_entry_by_entry_up_to_sixteen():
    parts = [fastop.ones([1, k + 1]) for k in range(20)]
    trace = profiling.start()
    fastop.concat(parts[:2], axis=1)
    fastop.concat(parts, axis=1)
    profiling.stop()
    concats = [e for e in ops_of(trace) if e[1].name == "fastop::concat"]
    assert concats[0][5] == ([(F32, (1, 1)), (F32, (1, 2))],)
    recorded = concats[1][5][0]
    assert len(recorded) == 16 and recorded[-1] == (F32, (1, 16))


def test_record_shapes_off_records_no_inputs():
    trace = profiling.start(record_shapes=False)
    fastop.tanh(fastop.ones([3]))
    profiling.stop()
    assert all(e[5] is None for e in trace.events()) and trace.events()


def test_ranges_are_recorded_only_inside_their_session():
    early = profiling.now()
    profiling.record_range("not recording", USER, early)     # no session: nothing
    trace = profiling.start()
    profiling.record_range("began before the session", USER, early)
    start = profiling.now()
    profiling.record_range("inside", USER, start)
    profiling.record_range(7, STEP, start)
    profiling.stop()
    assert [(e[0], e[1]) for e in trace.events()] == [(USER, "inside"), (STEP, 7)]


def test_each_thread_is_registered_once_per_session():
    def work():
        fastop.tanh(fastop.ones([2]))
        fastop.exp(fastop.ones([2]))
    trace = profiling.start()
    threads = [threading.Thread(target=work, name=f"worker-{i}") for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    profiling.stop()
    names = [name for _, _, name in trace.threads]
    assert sorted(names) == ["worker-0", "worker-1", "worker-2"]
    by_thread = {}
    for e in trace.events():
        by_thread.setdefault(trace.threads[e[4]][2], []).append(e[1].name)
    assert all(ops.count("fastop::tanh") == 1 and ops.count("fastop::exp") == 1
               for ops in by_thread.values())
    again = profiling.start()            # a new session registers the thread again
    fastop.tanh(fastop.ones([2]))
    profiling.stop()
    assert [name for _, _, name in again.threads] == ["MainThread"]


def test_the_buffer_grows_past_its_first_block():
    x = fastop.ones([2])
    trace = profiling.start()
    for _ in range(5000):
        x = x + 1
    profiling.stop()
    assert len(trace) == 5000 == len(trace.events())
    starts = [e[2] for e in trace.events()]
    assert starts == sorted(starts)
