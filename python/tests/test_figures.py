"""Figures from the library's sampler: an exact peak where sampling would miss it, another
process tracked by pid, the tracking file's rows, no process and no file of its own, and GPU
figures through the project's fake NVML."""
import csv
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

import gpu_tracker as gput
from conftest import run_python

COLUMNS = [
    'main_ram', 'descendants_ram', 'combined_ram', 'system_ram', 'main_gpu_ram', 'descendants_gpu_ram',
    'combined_gpu_ram', 'system_gpu_ram', 'gpu_sum_utilization_percent', 'gpu_hardware_utilization_percent',
    'main_n_threads', 'descendants_n_threads', 'combined_n_threads', 'cpu_system_sum_utilization_percent',
    'cpu_system_hardware_utilization_percent', 'cpu_main_sum_utilization_percent',
    'cpu_main_hardware_utilization_percent', 'cpu_descendants_sum_utilization_percent',
    'cpu_descendants_hardware_utilization_percent', 'cpu_combined_sum_utilization_percent',
    'cpu_combined_hardware_utilization_percent', 'timestamp',
]
STATIC = ['ram_unit', 'gpu_ram_unit', 'time_unit', 'ram_system_capacity', 'gpu_ram_system_capacity',
          'system_core_count', 'n_expected_cores', 'system_gpu_count', 'n_expected_gpus']


def test_a_short_allocation_between_samples_is_the_exact_peak():
    with gput.Tracker(sleep_time=0.1, ram_unit='megabytes', disable_logs=True) as t:
        time.sleep(0.3)  # past the first samples
        block = b'\x01' * 200_000_000  # touched pages: resident
        time.sleep(0.05)
        del block
        time.sleep(0.3)
    assert t.resource_usage.max_ram.main.total_rss >= 200
    assert t.resource_usage.max_ram.combined.total_rss >= 200


def test_tracking_runs_on_a_thread_without_holding_the_gil():
    def children():
        return set(open(f'/proc/{os.getpid()}/task/{os.getpid()}/children').read().split())

    before, kids = set(os.listdir('/proc/self/task')), children()
    t = gput.Tracker(sleep_time=0.1, disable_logs=True)
    t.start()
    try:
        assert len(set(os.listdir('/proc/self/task')) - before) >= 1
        assert children() <= kids  # no tracking process
        counted = []
        stop_at = time.time() + 0.5
        worker = threading.Thread(target=lambda: counted.append(sum(1 for _ in iter(lambda: time.time() > stop_at, True))))
        worker.start()
        worker.join()
        assert counted and counted[0] > 1000  # Python ran freely while samples were taken
    finally:
        t.stop()
    assert t.details['tracking']['samples'] >= 2


def holder(megabytes):
    """A Python process that holds `megabytes` MB, says `held` on its stdout once they are
    resident, and ends when its stdin closes: a test waits for the line, not for a time (a busy
    machine starts Python and fills the bytes slowly; stop 44's CI tracked a half-filled block)."""
    child = subprocess.Popen([sys.executable, '-c',
                              f"import sys; x = b'\\x01' * {megabytes}_000_000; print('held', flush=True); "
                              "sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == 'held\n'
    return child


def release(child):
    child.stdin.close()
    assert child.wait(timeout=60) == 0


def test_a_child_left_by_a_thread_that_ended_is_still_counted():
    # A thread starts a child and ends; the kernel hands the child to the main thread. The
    # child fills its memory only then, so only samples taken after the thread ended (two
    # threads left: the main one and the tracker's) can count it.
    started = []
    with gput.Tracker(sleep_time=0.1, ram_unit='megabytes', disable_logs=True) as t:
        thread = threading.Thread(target=lambda: started.append(subprocess.Popen(
            [sys.executable, '-c', "import sys; sys.stdin.readline(); x = b'\\x01' * 120_000_000; "
             "print('held', flush=True); sys.stdin.read()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)))
        thread.start()
        thread.join()
        child = started[0]
        child.stdin.write('go\n')
        child.stdin.flush()
        assert child.stdout.readline() == 'held\n'
        time.sleep(0.3)
    release(child)
    assert t.resource_usage.max_ram.descendants.total_rss >= 120


def test_process_id_tracks_another_process_and_its_figures_only():
    child = holder(150)
    try:
        with gput.Tracker(sleep_time=0.1, ram_unit='megabytes', process_id=child.pid, disable_logs=True) as t:
            time.sleep(0.3)
    finally:
        release(child)
    ram = t.resource_usage.max_ram
    assert ram.main.total_rss >= 150
    assert ram.descendants.total_rss == 0
    assert t.resource_usage.cpu_utilization.main_n_threads == 1


def test_descendants_are_counted_apart_from_the_main_process():
    # The child holds its memory until the tracker has stopped: the last sample, at the stop,
    # reads it whatever pace a busy machine gave the samples before.
    with gput.Tracker(sleep_time=0.1, ram_unit='megabytes', disable_logs=True) as t:
        child = holder(120)
    release(child)
    ram = t.resource_usage.max_ram
    assert ram.descendants.total_rss >= 120
    assert ram.combined.total_rss >= ram.descendants.total_rss
    assert t.resource_usage.cpu_utilization.descendants_n_threads >= 1


def test_the_csv_tracking_file_has_gpu_trackers_rows(scratch):
    with gput.Tracker(sleep_time=0.1, tracking_file='samples.csv', ram_unit='megabytes', disable_logs=True) as t:
        time.sleep(0.6)
    lines = (scratch / 'samples.csv').read_text().splitlines()
    static = next(csv.DictReader(lines[:2]))
    assert list(static) == STATIC and static['ram_unit'] == 'megabytes'
    rows = list(csv.DictReader(lines[2:]))
    assert list(rows[0]) == COLUMNS
    # Every sample is a row (a busy machine may have lengthened the interval: fewer samples).
    assert len(rows) == t.details['tracking']['samples'] >= 2
    stamps = [float(r['timestamp']) for r in rows]
    assert stamps == sorted(stamps) and abs(stamps[-1] - time.time()) < 60
    assert all(float(r['main_ram']) > 1 for r in rows)


def test_the_sqlite_tracking_file_has_tables_data_and_static_data(scratch):
    with gput.Tracker(sleep_time=0.1, tracking_file='samples.sqlite', disable_logs=True) as t:
        time.sleep(0.4)
    assert sorted(os.listdir(scratch)) == ['samples.sqlite']
    db = sqlite3.connect(scratch / 'samples.sqlite')
    cols = [r[1] for r in db.execute('PRAGMA table_info(data)')]
    assert cols == COLUMNS
    assert db.execute('SELECT COUNT(*) FROM data').fetchone()[0] == t.details['tracking']['samples'] >= 2
    assert [r[1] for r in db.execute('PRAGMA table_info(static_data)')] == STATIC
    assert db.execute('SELECT ram_unit FROM static_data').fetchone()[0] == 'gigabytes'
    db.close()


GPU0 = 'GPU-00000000-1111-2222-3333-444444444444'
GPU1 = 'GPU-55555555-6666-7777-8888-999999999999'


def scenario(pid: int) -> dict:
    """Two GPUs: the first (80 GB) holds 2 GB for process `pid`,
    at 50 % then 90 % utilization; the second (40 GB) holds nothing of ours, at 10 %."""
    return {'devices': [
        {'uuid': GPU0, 'name': 'Simulated A', 'memory_total': 80_000_000_000, 'memory_used_base': 1_000_000_000,
         'utilization': [{'at_ms': 0, 'gpu': 50, 'memory': 5}, {'at_ms': 300, 'gpu': 90, 'memory': 20}],
         'processes': [{'pid': pid, 'used_memory': 2_000_000_000}]},
        {'uuid': GPU1, 'name': 'Simulated B', 'memory_total': 40_000_000_000, 'memory_used_base': 250_000_000,
         'utilization': [{'at_ms': 0, 'gpu': 10, 'memory': 1}], 'processes': []},
    ]}


def gpu_run(fake_nvml, scratch, uuids=None) -> dict:
    """Tracks a block in a fresh interpreter that first writes the scenario naming its own pid
    (the fake NVML reads it when the tracker opens NVML, at start)."""
    scn = scratch / 'scn.json'
    code = (f'import json, os, sys, time\nsys.path.insert(0, {os.path.dirname(__file__)!r})\n'
            f'from test_figures import scenario\n'
            f'open({str(scn)!r}, "w").write(json.dumps(scenario(os.getpid())))\n'
            f'import gpu_tracker as g\n'
            f'with g.Tracker(sleep_time=0.1, gpu_brand="nvidia", gpu_uuids={uuids!r}) as t:\n'
            f'    time.sleep(0.8)\nprint(json.dumps(t.to_json()))\n')
    p = run_python(code, env={'GPU_TRACKER_NVML_LIB': str(fake_nvml), 'FAKE_NVML_SCENARIO': str(scn)})
    return json.loads(p.stdout)


def test_gpu_figures_from_the_fake_nvml(fake_nvml, scratch):
    doc = gpu_run(fake_nvml, scratch)
    g = doc['max_gpu_ram']
    assert g['system_capacity'] == pytest.approx(120.0)
    assert g['main'] == pytest.approx(2.0) and g['combined'] == pytest.approx(2.0) and g['descendants'] == 0
    assert g['system'] >= 3.0
    u = doc['gpu_utilization']
    assert u['system_gpu_count'] == 2 and u['n_expected_gpus'] == 2
    assert u['gpu_percentages']['max_sum_percent'] == pytest.approx(100.0)
    assert u['gpu_percentages']['max_hardware_percent'] == pytest.approx(50.0)


def test_gpu_uuids_select_the_gpus_of_utilization(fake_nvml, scratch):
    u = gpu_run(fake_nvml, scratch, uuids=[GPU1])['gpu_utilization']
    assert u['system_gpu_count'] == 2 and u['n_expected_gpus'] == 1
    assert u['gpu_percentages']['max_sum_percent'] == pytest.approx(10.0)


def test_an_unknown_gpu_uuid_is_a_value_error_in_the_constructor(fake_nvml, scratch):
    scn = scratch / 'scn.json'
    scn.write_text(json.dumps(scenario(1)))
    code = ('import gpu_tracker as g\n'
            'try:\n    g.Tracker(gpu_uuids={"GPU-not-here"})\nexcept ValueError as e:\n    print("ValueError", e)\n')
    out = run_python(code, env={'GPU_TRACKER_NVML_LIB': str(fake_nvml), 'FAKE_NVML_SCENARIO': str(scn)}).stdout
    assert out.startswith('ValueError') and 'GPU-not-here' in out and GPU0 in out
