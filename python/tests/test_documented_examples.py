"""gpu_tracker 5.0.1's documented usage (its tutorial's code cells, with a CPU workload in place
of its torch example function), run unchanged against this package."""
import json

import gpu_tracker as gput


def example_function():
    data = [i * i for i in range(300_000)]
    return sum(data)


def test_context_manager_and_print(capsys):
    with gput.Tracker(n_expected_cores=1, sleep_time=0.1) as tracker:
        example_function()
    print(tracker)
    assert capsys.readouterr().out.startswith('Max RAM:\n   Unit: gigabytes\n')


def test_start_stop():
    tracker = gput.Tracker()
    tracker.start()
    example_function()
    tracker.stop()
    assert tracker.resource_usage.compute_time.time > 0


def test_units_and_attributes(capsys):
    with gput.Tracker(ram_unit='megabytes', gpu_ram_unit='megabytes', time_unit='seconds', sleep_time=0.1) as tracker:
        example_function()
    print(tracker)
    print(json.dumps(tracker.to_json(), indent=1))
    out = capsys.readouterr().out
    assert '"unit": "megabytes"' in out
    assert tracker.resource_usage.max_ram.unit == 'megabytes'
    assert tracker.resource_usage.max_ram.main.total_rss > 5
    assert repr(tracker.resource_usage.max_ram.main).startswith('RSSValues(total_rss=')
    assert repr(tracker.resource_usage.max_gpu_ram).startswith("MaxGPURAM(unit='megabytes'")
    assert tracker.resource_usage.compute_time.unit == 'seconds'


def test_child_process_from_multiprocessing():
    import multiprocessing as mp
    ctx = mp.get_context(method='spawn')
    child_process = ctx.Process(target=example_function)
    with gput.Tracker(n_expected_cores=2, sleep_time=0.4) as tracker:
        child_process.start()
        example_function()
        child_process.join()
    child_process.close()
    assert tracker.resource_usage.max_ram.descendants.total_rss > 0


def test_error_inside_the_block(capsys):
    try:
        with gput.Tracker() as tracker:
            example_function()
            raise RuntimeError('AN ERROR')
    except Exception as error:
        print(f'The following error occured while tracking: {error}')
    finally:
        print(tracker.resource_usage.max_gpu_ram.main)
    assert capsys.readouterr().out.endswith('AN ERROR\n0.0\n')


def test_constructor_forms():
    gput.Tracker(resource_usage_file='path/to/my-file.pkl')
    gput.Tracker(gpu_brand='nvidia')
    gput.Tracker(tracking_file='my-file.csv')
    gput.Tracker(tracking_file='my-file.sqlite')


def test_sub_tracking_and_analysis():
    tracker = gput.Tracker(sleep_time=0.5, tracking_file='tracking.csv', overwrite=False)
    tracker.start()
    for _ in range(5):
        with gput.SubTracker(code_block_name='my-code-block', sub_tracking_file='sub-tracking.csv', overwrite=False):
            example_function()

    @gput.sub_track(code_block_name='my-function', sub_tracking_file='sub-tracking.csv', overwrite=False)
    def my_function(*args, **kwargs):
        example_function()

    for _ in range(3):
        my_function()
    tracker.stop()
    analyzer = gput.SubTrackingAnalyzer(tracking_file='tracking.csv', sub_tracking_file='sub-tracking.csv')
    results = analyzer.sub_tracking_results()
    assert type(results).__name__ == 'SubTrackingResults'
    [my_code_block_results, my_function_results] = results.code_block_results
    assert my_code_block_results.name == 'my-code-block' and my_code_block_results.num_calls == 5
    assert my_function_results.name == 'my-function' and my_function_results.num_calls == 3
    assert results.static_data['ram_unit'] == 'gigabytes'
    print(results)


def test_the_example_script_for_5_0_1_runs_unchanged(scratch, capsys):
    import pathlib
    import runpy
    script = pathlib.Path(__file__).parents[1] / 'examples' / 'gpu_tracker_script.py'
    runpy.run_path(str(script), run_name='__main__')
    assert (scratch / 'tracking.csv').is_file() and (scratch / 'sub-tracking.csv').is_file()
    out = capsys.readouterr().out
    peak = float(out.split('peak of main, MB: ')[1].split()[0])
    assert peak >= 100  # the 100 MB held 50 ms between samples 0.1 s apart
    assert 'block work calls 3 ' in out
