"""The API of gpu_tracker 5.0.1: signatures and defaults, states and their errors, units,
the keys of to_json() and the shape of str()."""
import dataclasses
import inspect
import json
import os
import pathlib
import re

import pytest

import gpu_tracker as gput
from gpu_tracker.tracker import ResourceUsage

# gpu_tracker 5.0.1's Tracker.__init__ parameters and defaults, read from the installed package.
REFERENCE_ARGS = [
    ('sleep_time', 1.0), ('ram_unit', 'gigabytes'), ('gpu_ram_unit', 'gigabytes'), ('time_unit', 'hours'),
    ('n_expected_cores', None), ('gpu_uuids', None), ('disable_logs', False), ('process_id', None),
    ('resource_usage_file', None), ('n_join_attempts', 5), ('join_timeout', 10.0), ('gpu_brand', None),
    ('tracking_file', None), ('overwrite', False),
]

# Every leaf of gpu_tracker 5.0.1's to_json(), as dotted paths, in its order.
REFERENCE_KEYS = (
    ['max_ram.unit', 'max_ram.system_capacity', 'max_ram.system']
    + [f'max_ram.{who}.{k}' for who in ('main', 'descendants', 'combined')
       for k in ('total_rss', 'private_rss', 'shared_rss')]
    + [f'max_gpu_ram.{k}' for k in ('unit', 'system_capacity', 'system', 'main', 'descendants', 'combined')]
    + ['cpu_utilization.system_core_count', 'cpu_utilization.n_expected_cores']
    + [f'cpu_utilization.{who}.{k}' for who in ('system', 'main', 'descendants', 'combined')
       for k in ('max_sum_percent', 'max_hardware_percent', 'mean_sum_percent', 'mean_hardware_percent')]
    + [f'cpu_utilization.{w}_n_threads' for w in ('main', 'descendants', 'combined')]
    + ['gpu_utilization.system_gpu_count', 'gpu_utilization.n_expected_gpus']
    + [f'gpu_utilization.gpu_percentages.{k}'
       for k in ('max_sum_percent', 'max_hardware_percent', 'mean_sum_percent', 'mean_hardware_percent')]
    + ['compute_time.unit', 'compute_time.time']
)


def leaves(d, pre=''):
    out = []
    for k, v in d.items():
        out += leaves(v, f'{pre}{k}.') if isinstance(v, dict) else [f'{pre}{k}']
    return out


def test_exports_and_version():
    for name in ('Tracker', 'SubTracker', 'sub_track', 'SubTrackingAnalyzer', 'TrackingComparison', 'mark'):
        assert hasattr(gput, name), name
    assert gput.__version__[0].isdigit()


def test_constructor_arguments_and_defaults_are_gpu_trackers_plus_phase():
    params = list(inspect.signature(gput.Tracker.__init__).parameters.values())[1:]
    assert [(p.name, p.default) for p in params[:-1]] == REFERENCE_ARGS
    assert params[-1].name == 'phase' and params[-1].kind is inspect.Parameter.KEYWORD_ONLY
    assert params[-1].default is None


def test_to_json_has_exactly_gpu_trackers_keys_and_units():
    with gput.Tracker(sleep_time=0.1, ram_unit='megabytes', time_unit='seconds', disable_logs=True) as t:
        pass
    doc = t.to_json()
    assert leaves(doc) == REFERENCE_KEYS
    assert doc == dataclasses.asdict(t.resource_usage)
    assert isinstance(t.resource_usage, ResourceUsage)
    assert doc['max_ram']['unit'] == 'megabytes' and doc['compute_time']['unit'] == 'seconds'
    assert doc['max_gpu_ram']['unit'] == 'gigabytes'
    json.dumps(doc)  # plain JSON types only
    # The library's own figures are kept beside: per-GPU list, how the figures were taken.
    assert 'tracking' in t.details and t.details['tracking']['samples'] >= 1


def test_units_scale_the_same_peak():
    with gput.Tracker(sleep_time=0.1, ram_unit='bytes', disable_logs=True) as a:
        pass
    with gput.Tracker(sleep_time=0.1, ram_unit='kilobytes', disable_logs=True) as b:
        pass
    assert a.resource_usage.max_ram.system_capacity == pytest.approx(b.resource_usage.max_ram.system_capacity * 1000)
    total = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    assert a.resource_usage.max_ram.system_capacity == pytest.approx(total, rel=0.05)


def test_str_is_the_indented_tree_with_gpu_trackers_labels():
    with gput.Tracker(sleep_time=0.1, disable_logs=True) as t:
        pass
    text = str(t)
    lines = text.split('\n')
    assert lines[0] == 'Max RAM:' and lines[1] == '   Unit: gigabytes'
    for label in ('Max GPU RAM:', 'CPU utilization:', 'GPU utilization:', 'Compute time:', '   Main:',
                  '      Total RSS: ', '      Max sum percent: ', '   Main number of threads: ',
                  '   Number of expected cores: ', '   GPU percentages:', '   Time: '):
        assert any(line.startswith(label) for line in lines), label
    assert not text.endswith('\n') and '{' not in text and '"' not in text
    # The same lines as gpu_tracker 5.0.1's str() (its output with every number made N).
    shape = (pathlib.Path(__file__).parent / 'data' / 'str-shape-5.0.1.txt').read_text().rstrip('\n')
    assert re.sub(r'-?\d+(\.\d+)?(e-?\d+)?', 'N', text) == shape


def test_repr_and_states():
    t = gput.Tracker(sleep_time=0.1, disable_logs=True)
    assert repr(t) == 'State: NEW' and t.state is gput.Tracker.State.NEW
    with pytest.raises(RuntimeError):
        t.stop()
    with pytest.raises(RuntimeError):
        t.to_json()
    with pytest.raises(RuntimeError):
        str(t)
    t.start()
    assert t.state is gput.Tracker.State.STARTED
    with pytest.raises(RuntimeError):
        t.start()
    t.stop()
    assert repr(t) == 'State: STOPPED'
    with pytest.raises(RuntimeError):
        t.stop()
    with pytest.raises(RuntimeError):
        t.start()
    with pytest.raises(RuntimeError):
        with t:
            pass


@pytest.mark.parametrize('kwargs', [
    {'ram_unit': 'mebibytes'}, {'gpu_ram_unit': 'GB'}, {'time_unit': 'weeks'}, {'sleep_time': 0.01},
    {'gpu_brand': 'intel'}, {'tracking_file': 'samples.txt'},
])
def test_bad_arguments_raise_value_error_in_the_constructor(kwargs):
    with pytest.raises(ValueError):
        gput.Tracker(**kwargs)


def test_an_existing_tracking_file_needs_overwrite(scratch):
    (scratch / 'old.csv').write_text('x\n')
    with pytest.raises(FileExistsError):
        gput.Tracker(tracking_file='old.csv')
    with gput.Tracker(sleep_time=0.1, tracking_file='old.csv', overwrite=True, disable_logs=True):
        pass
    assert (scratch / 'old.csv').read_text().startswith('ram_unit,')


def test_arguments_without_meaning_here_are_accepted(scratch):
    with gput.Tracker(sleep_time=0.1, resource_usage_file='x.pkl', n_join_attempts=1, join_timeout=0.5,
                      disable_logs=True) as t:
        pass
    assert t.resource_usage is not None
    assert os.listdir(scratch) == []  # no pickle file, nothing at all


def test_an_error_in_the_block_still_stops_tracking():
    with pytest.raises(KeyError):
        with gput.Tracker(sleep_time=0.1, disable_logs=True) as t:
            raise KeyError('x')
    assert t.state is gput.Tracker.State.STOPPED and t.resource_usage.compute_time.time > 0


def test_the_tracking_file_is_made_by_the_constructor(scratch):
    t = gput.Tracker(sleep_time=0.1, tracking_file='made.csv', disable_logs=True)
    assert (scratch / 'made.csv').is_file()
    with pytest.raises(FileExistsError):
        gput.Tracker(tracking_file='made.csv')
    with t:
        pass
