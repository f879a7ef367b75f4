"""The hot-key function: windowed write load from the readings table's stream, and adaptive sub-sharding.

Modules, from the pure core outwards:

* :mod:`.detector`       windows, thresholds, hysteresis, top-k, which split or merge to schedule
                         (pure: no boto3, no clock; the workload simulator drives it too)
* :mod:`.records`        a DynamoDB stream record in, an :class:`~.detector.Observation` or a reason to skip it out
                         (pure)
* :mod:`.settings`       the environment, parsed at cold start
* :mod:`.control_table`  the load of stream runs, window-close claims and alert cooldowns in the control table
* :mod:`.alerts`         the SNS notification
* :mod:`.logic`          one batch: parse, cut into runs, store their load, close due windows
* :mod:`.handler`        the Lambda entry point (thin)
"""
