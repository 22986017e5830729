"""A child forked (os.fork, multiprocessing's fork start method) inside a running Tracker has a
copy of the tracker but not its sampler thread: its stop() and its with block's end raise
RuntimeError at once, its interpreter exits without waiting on the thread, and the parent's
tracking goes on and stops normally. Every child is waited for with a bound: one that hangs is
killed and fails the test."""
import inspect
import os
import signal
import sys
import textwrap
import time

import pytest

import gpu_tracker as gput
from conftest import run_python

# Python 3.12+ warns that fork() in a process with threads may deadlock the child: the point here.
pytestmark = pytest.mark.filterwarnings('ignore::DeprecationWarning')

BOUND_S = 10.0

# Exit statuses of the children forked in this process.
REFUSED = 0  # stop() and __exit__ raised the RuntimeError meant, and dropping the tracker returned
WRONG_MESSAGE = 1
STOPPED = 2  # stop() returned in the child
OTHER_ERROR = 3  # another exception (the PanicException of a join in the child, say)


def wait_bounded(pid, bound):
    """The child's exit status, or None when it had not exited after `bound` s (then killed)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


# The same in the scripts run in a fresh interpreter.
WAIT_SRC = inspect.getsource(wait_bounded)


def exit_status(pid):
    status = wait_bounded(pid, BOUND_S)
    if status is None:
        pytest.fail(f'the forked child {pid} had not exited after {BOUND_S} s (killed)')
    return status


def refuse_in_child(tracker, parent):
    """In a forked child: stop() and __exit__ must raise the RuntimeError naming the parent, and
    dropping the child's copy of the tracker must return. Never returns: the child's exit status
    says what happened."""
    code = OTHER_ERROR
    # An exception in a destructor is only printed: here it fails the child.
    unraisable = []
    sys.unraisablehook = unraisable.append
    try:
        for leave in (tracker.stop, lambda: tracker.__exit__(None, None, None)):
            try:
                leave()
                code = STOPPED
                break
            except RuntimeError as e:
                ok = f'started in process {parent}' in str(e) and 'forked child cannot stop it' in str(e)
                code = REFUSED if ok and tracker.state is gput.Tracker.State.STARTED else WRONG_MESSAGE
                if code != REFUSED:
                    break
        # The child's copy of the native session goes now, as the interpreter's exit would drop it.
        tracker._session = None
        if unraisable:
            code = OTHER_ERROR
    except BaseException:
        code = OTHER_ERROR
    finally:
        os._exit(code)


def assert_sane(tracker, at_least_s):
    """The parent's figures after its children: stopped, and about the time it slept at least
    (the clock starts on the sampler thread, a little after start() returns)."""
    assert tracker.state is gput.Tracker.State.STOPPED
    u = tracker.resource_usage
    assert u.compute_time.unit == 'seconds' and u.compute_time.time >= at_least_s - 0.05
    assert u.max_ram.main.total_rss > 0 and u.max_ram.system > 0
    assert u.cpu_utilization.system_core_count >= 1 and u.cpu_utilization.main_n_threads >= 1


def test_a_child_forked_inside_a_running_tracker_cannot_stop_it_and_the_parent_still_can():
    parent = os.getpid()
    with gput.Tracker(sleep_time=0.1, ram_unit='megabytes', time_unit='seconds', disable_logs=True) as t:
        time.sleep(0.25)
        pid = os.fork()
        if pid == 0:
            refuse_in_child(t, parent)
        t0 = time.monotonic()
        assert exit_status(pid) == REFUSED
        took = time.monotonic() - t0
        time.sleep(0.25)
    assert took < 2, f'the child took {took:.2f} s to refuse'
    assert_sane(t, 0.5)
    # Samples went on after the fork: more than the first and the last.
    assert t.details['tracking']['samples'] >= 4


def test_children_forked_while_the_sampler_samples_exit_each_time():
    parent = os.getpid()
    slept = 0.0
    with gput.Tracker(sleep_time=0.1, ram_unit='megabytes', time_unit='seconds', disable_logs=True) as t:
        for i in range(20):
            # 0 to 95 ms after the previous fork: the forks fall over the whole sampling interval.
            pause = (i * 0.037) % 0.1
            time.sleep(pause)
            slept += pause
            pid = os.fork()
            if pid == 0:
                refuse_in_child(t, parent)
            assert exit_status(pid) == REFUSED, f'fork {i}'
    assert_sane(t, slept)


# In a fresh interpreter: the child leaves the with block (RuntimeError), or never stops the
# tracker; then sys.exit, so the interpreter's own exit drops the child's copy of the tracker.
SCRIPT = textwrap.dedent('''
    import os, signal, sys, time
    import gpu_tracker as gput
    ''') + WAIT_SRC + textwrap.dedent('''
    parent = os.getpid()
    pid = None
    if mode == 'with':
        try:
            with gput.Tracker(sleep_time=0.1, time_unit='seconds', disable_logs=True) as t:
                time.sleep(0.2)
                pid = os.fork()
        except RuntimeError as e:
            if pid != 0:
                raise
            sys.exit(7 if f'started in process {parent}' in str(e) else 8)
        if pid == 0:
            sys.exit(9)  # the child left the with block without an error
    else:
        t = gput.Tracker(sleep_time=0.1, time_unit='seconds', disable_logs=True)
        t.start()
        time.sleep(0.2)
        pid = os.fork()
        if pid == 0:
            sys.exit(7)  # the tracker is still running here
        time.sleep(0.2)
    status = wait_bounded(pid, BOUND)
    if mode != 'with':
        t.stop()
    print('child', status, t.state.name, t.resource_usage.compute_time.time, flush=True)
    ''')


@pytest.mark.parametrize('mode', ['with', 'exit'])
def test_a_forked_child_leaving_the_with_block_or_exiting_exits_promptly(mode):
    p = run_python(f'BOUND = {BOUND_S}\nmode = {mode!r}\n' + SCRIPT, timeout=60)
    words = p.stdout.split()
    # 7: the child exited as the script meant; None: it hung and was killed.
    assert words[:3] == ['child', '7', 'STOPPED'], (p.stdout, p.stderr)
    assert float(words[3]) >= 0.15
    # Nothing went wrong on the way out of the child's interpreter either (an exception in a
    # finalizer is only printed).
    assert 'Exception ignored' not in p.stderr and 'anic' not in p.stderr, p.stderr
