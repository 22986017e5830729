"""SubTracker, @sub_track and SubTrackingAnalyzer: gpu_tracker 5.0.1's rows, default names,
file formats and per-block results."""
import csv
import inspect
import math
import os
import sqlite3
import statistics
import time

import pytest

import gpu_tracker as gput


def rows(path):
    with open(path, newline='') as f:
        return list(csv.DictReader(f))


def test_sub_tracker_writes_a_start_and_a_stop_row(scratch):
    with gput.SubTracker(code_block_name='load', sub_tracking_file='sub.csv'):
        time.sleep(0.01)
    with gput.SubTracker(code_block_name='load', sub_tracking_file='sub.csv'):
        pass
    r = rows('sub.csv')
    assert list(r[0]) == ['process_id', 'code_block_name', 'position', 'timestamp']
    assert [x['position'] for x in r] == ['0', '1', '0', '1']
    assert {x['process_id'] for x in r} == {str(os.getpid())} and {x['code_block_name'] for x in r} == {'load'}
    assert float(r[1]['timestamp']) - float(r[0]['timestamp']) >= 0.01


def test_default_names_and_file(scratch):
    line = inspect.currentframe().f_lineno + 1
    with gput.SubTracker():
        pass
    r = rows(f'{os.getpid()}.csv')
    assert r[0]['code_block_name'] == f'{os.path.relpath(__file__)}:{line}'

    @gput.sub_track(sub_tracking_file='f.csv')
    def step():
        return 42
    assert step() == 42 and step.__name__ == 'step'
    assert rows('f.csv')[0]['code_block_name'] == f'{os.path.abspath(__file__)}:step'
    with gput.SubTracker(code_block_attribute='attr', sub_tracking_file='g.csv'):
        pass
    assert rows('g.csv')[0]['code_block_name'] == f'{os.path.relpath(__file__)}:attr'


def test_file_errors(scratch):
    with pytest.raises(ValueError):
        gput.SubTracker(sub_tracking_file='x.txt')
    (scratch / 'old.csv').write_text('junk\n')
    with pytest.raises(FileExistsError):
        with gput.SubTracker(code_block_name='a', sub_tracking_file='old.csv'):
            pass
    with gput.SubTracker(code_block_name='a', sub_tracking_file='old.csv', overwrite=True):
        pass
    assert [x['position'] for x in rows('old.csv')] == ['0', '1']


def test_sqlite_sub_tracking_file(scratch):
    for _ in range(2):
        with gput.SubTracker(code_block_name='b', sub_tracking_file='s.sqlite'):
            pass
    db = sqlite3.connect('s.sqlite')
    assert db.execute('SELECT position FROM data').fetchall() == [(0,), (1,), (0,), (1,)]
    db.close()


def session(tracking_file, sub_file):
    """A tracked run: one 0.45 s block called twice, a function called three times."""
    @gput.sub_track(code_block_name='fn', sub_tracking_file=sub_file)
    def fn():
        time.sleep(0.05)

    with gput.Tracker(sleep_time=0.1, tracking_file=tracking_file, ram_unit='megabytes', disable_logs=True):
        for _ in range(2):
            with gput.SubTracker(code_block_name='block', sub_tracking_file=sub_file):
                time.sleep(0.45)
        for _ in range(3):
            fn()


@pytest.mark.parametrize('ext', ['.csv', '.sqlite'])
def test_analysis_per_code_block(scratch, ext):
    session('t' + ext, 's' + ext)
    analyzer = gput.SubTrackingAnalyzer(tracking_file='t' + ext, sub_tracking_file='s' + ext)
    assert analyzer.load_code_block_names() == ['block', 'fn']
    res = analyzer.sub_tracking_results()
    doc = res.to_json()
    assert doc['static_data']['ram_unit'] == 'megabytes'
    assert set(doc['overall']) >= {'main_ram', 'system_ram', 'cpu_main_sum_utilization_percent'}
    assert 'timestamp' not in doc['overall']
    block, fn = res.code_block_results
    assert (block.name, block.num_calls, fn.name, fn.num_calls) == ('block', 2, 'fn', 3)
    # The counts and times follow from the two files, whatever pace a busy machine gave the
    # sampler (it lengthens its interval up to 8 times when samples cost too much): the blocks
    # span 0.9 s, so even at 0.8 s a sample falls inside one.
    stamps = sample_timestamps('t' + ext)
    calls = block_calls('s' + ext, 'block')
    inside = [t for t in stamps if any(a <= t <= b for a, b in calls)]
    assert block.num_timepoints == len(inside) >= 1, (stamps, calls)
    assert block.num_non_empty_calls == sum(any(a <= t <= b for t in stamps) for a, b in calls)
    durations = [b - a for a, b in calls]
    ct = doc['code_block_results'][0]['compute_time']
    assert ct['total'] == pytest.approx(sum(durations)) and ct['min'] == pytest.approx(min(durations))
    assert ct['max'] == pytest.approx(max(durations)) and ct['min'] >= 0.45
    assert ct['std'] == pytest.approx(statistics.pstdev(durations), abs=1e-9)
    ru = doc['code_block_results'][0]['resource_usage']['main_ram']
    assert ru['min'] <= ru['mean'] <= ru['max'] and ru['min'] > 1
    fn_ru = doc['code_block_results'][1]['resource_usage']['main_ram']
    assert fn.num_timepoints == 0 or fn_ru['max'] > 1
    if fn.num_timepoints == 0:
        assert math.isnan(fn_ru['mean'])


def sample_timestamps(path):
    """The timestamps of a tracking file's samples, read here rather than by the analyzer."""
    if path.endswith('.csv'):
        with open(path, newline='') as f:
            lines = f.read().splitlines()
        header = next(i for i, line in enumerate(lines) if 'timestamp' in line.split(','))
        return [float(r['timestamp']) for r in csv.DictReader(lines[header:])]
    db = sqlite3.connect(path)
    try:
        return [t for (t,) in db.execute('SELECT timestamp FROM data')]
    finally:
        db.close()


def block_calls(path, name):
    """(start, stop) of each call of block `name` in a sub-tracking file, in order."""
    if path.endswith('.csv'):
        found = [(int(r['position']), float(r['timestamp'])) for r in rows(path) if r['code_block_name'] == name]
    else:
        db = sqlite3.connect(path)
        try:
            found = list(db.execute('SELECT position, timestamp FROM data WHERE code_block_name = ?', (name,)))
        finally:
            db.close()
    starts = [t for p, t in found if p == 0]
    stops = [t for p, t in found if p == 1]
    return list(zip(starts, stops))


def test_combining_sub_tracking_files(scratch):
    for name, f in (('a', 'one.csv'), ('b', 'two.csv')):
        with gput.SubTracker(code_block_name=name, sub_tracking_file=f):
            pass
    analyzer = gput.SubTrackingAnalyzer(tracking_file=None, sub_tracking_file='all.csv')
    analyzer.combine_sub_tracking_files(['one.csv', 'two.csv'])
    assert analyzer.load_code_block_names() == ['a', 'b']
    with pytest.raises(ValueError):
        analyzer.combine_sub_tracking_files(['one.csv'])


def test_an_unfinished_call_is_left_out(scratch):
    with open('u.csv', 'w') as f:
        f.write('process_id,code_block_name,position,timestamp\n1,x,0,10.0\n1,x,1,11.5\n1,x,0,12.0\n')
    assert gput.SubTrackingAnalyzer(None, 'u.csv').load_timestamp_pairs('x') == [(10.0, 11.5)]


def test_comparing_two_runs(scratch):
    import pickle
    for run in ('A', 'B'):
        session(f't{run}.csv', f's{run}.csv')
        res = gput.SubTrackingAnalyzer(f't{run}.csv', f's{run}.csv').sub_tracking_results()
        with open(f'{run}.pkl', 'wb') as f:
            pickle.dump(res, f)
    cmp = gput.TrackingComparison(file_path_map={'A': 'A.pkl', 'B': 'B.pkl'})
    res = cmp.compare(statistic='max')
    doc = res.to_json()
    assert set(doc['overall_resource_usage']['main_ram']) == {'A', 'B'}
    assert set(doc['code_block_resource_usage']['main_ram']) == {'block', 'fn'}
    times = doc['code_block_compute_time']['block']
    assert times['A'] >= 0.45 and times['B'] >= 0.45
    assert list(doc['overall_resource_usage']['main_ram'].values()) == sorted(doc['overall_resource_usage']['main_ram'].values())
    with pytest.raises(ValueError):
        cmp.compare(statistic='median')


def test_results_are_dicts_without_pandas_and_pandas_objects_with_it(scratch, monkeypatch):
    from gpu_tracker import sub_tracker
    session('t.csv', 's.csv')
    with monkeypatch.context() as m:
        m.setattr(sub_tracker, '_pandas', lambda: None)
        plain = gput.SubTrackingAnalyzer('t.csv', 's.csv').sub_tracking_results()
    assert isinstance(plain.overall, dict) and isinstance(plain.static_data, dict)
    assert set(plain.overall['main_ram']) == {'min', 'max', 'mean', 'std'}
    pd = pytest.importorskip('pandas')
    framed = gput.SubTrackingAnalyzer('t.csv', 's.csv').sub_tracking_results()
    assert isinstance(framed.overall, pd.DataFrame) and list(framed.overall.columns) == ['min', 'max', 'mean', 'std']
    assert isinstance(framed.code_block_results[0].compute_time, pd.Series)
    assert framed.to_json() == plain.to_json()
