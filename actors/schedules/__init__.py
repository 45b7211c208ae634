"""Schedules: runs started on a timetable (docs/schedules.md). ``state.py`` folds the
``schedule.*`` events, ``times.py`` says when a schedule is due (cronsim and ``zoneinfo``),
``decide.py`` decides the events, ``desk.py`` is the one writer and the node's timer.

Exceptions (their failure kinds are in :mod:`transports.failures`)::

    ScheduleError               a schedule request refused; nothing appended
    ├── InvalidSchedule         a malformed field; .field names which
    ├── ScheduleExists          create of a name that exists
    ├── UnknownSchedule         no schedule of that name
    └── ScheduleConflict        pause of a paused one, resume of a stopped one, ...
    ScheduleRefused             (desk.py) the principal may not run in the session now;
                                recorded as schedule.run_not_started, never raised out
    InvalidSpec                 (times.py) malformed timing; .field is cron, every or tz
                                (decide.py reports it as InvalidSchedule)
"""
