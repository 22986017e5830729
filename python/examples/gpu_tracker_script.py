"""A script written for gpu_tracker 5.0.1 (a tracked block, to_json(), str(), a sub-tracked
block and its analysis); it runs unchanged with this package. Run it in an empty directory:
it writes tracking.csv and sub-tracking.csv there."""
import json
import time

import gpu_tracker as gput


@gput.sub_track(code_block_name='work', sub_tracking_file='sub-tracking.csv', overwrite=True)
def work():
    data = b'\x01' * 100_000_000  # 100 MB, held 50 ms
    time.sleep(0.05)
    return len(data)


with gput.Tracker(sleep_time=0.1, ram_unit='megabytes', time_unit='seconds', tracking_file='tracking.csv',
                  overwrite=True) as tracker:
    time.sleep(0.3)
    for _ in range(3):
        work()
        time.sleep(0.2)

print(tracker)
usage = tracker.to_json()
print(json.dumps(sorted(usage)), json.dumps(sorted(usage['max_ram'])))
print('peak of main, MB:', round(tracker.resource_usage.max_ram.main.total_rss, 1))
results = gput.SubTrackingAnalyzer('tracking.csv', 'sub-tracking.csv').sub_tracking_results()
block = results.code_block_results[0]
print('block', block.name, 'calls', block.num_calls, 'timepoints', block.num_timepoints)
