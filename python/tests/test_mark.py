"""gpu_tracker.mark and Tracker(phase=...): a phase mark reaches the tracker of the command the
script runs under, and is a quiet False where there is none."""
import csv
import sys

import gpu_tracker as gput


def test_mark_outside_a_tracked_job_is_false_and_quiet(capfd):
    assert gput.mark('train') is False
    assert gput.mark('') is False
    assert capfd.readouterr().err == ''


def test_mark_with_a_stale_variable_is_false(monkeypatch, scratch):
    monkeypatch.setenv('GPU_TRACKER_MARK', str(scratch / 'nobody'))
    assert gput.mark('train') is False
    with gput.Tracker(sleep_time=0.1, phase='eval', disable_logs=True):
        pass  # a phase nobody takes does not fail the block


def test_marks_reach_the_running_tracker(gpu_tracker_bin, scratch):
    script = scratch / 'train.py'
    script.write_text(
        'import time, gpu_tracker as g\n'
        'print(g.mark("load"))\n'
        'time.sleep(0.3)\n'
        'with g.Tracker(sleep_time=0.1, phase="train", disable_logs=True):\n'
        '    time.sleep(0.3)\n')
    import subprocess
    p = subprocess.run([str(gpu_tracker_bin), '-e', f'{sys.executable} {script}', '--st', '0.1',
                        '--events', str(scratch / 'events.csv')], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == 'True'
    events = (scratch / 'events.csv').read_text()
    rows = list(csv.reader(events.splitlines()))
    flat = [cell for row in rows for cell in row]
    assert 'load' in flat and 'train' in flat, events
