"""Pure analyses over a recorded run (``store.reader.load_run``'s ``RunData``, spans as numpy columns): they return
data and never print, plot or open anything; ``output/`` draws what they return.

- ``calltree``: the samples as an index (``ProfileIndex``): call trees of any window, wall or CPU time, idle;
- ``phases``, ``summary``: start-up / work / shutdown, and the run summary (``stepscope run``, ``--json``);
- ``spans``, ``steptable``, ``threadrows``, ``steploop``, ``slow``: span statistics, the step and repeat tables
  (and their spans by thread and start), where a step ends, the one rule for "slow";
- ``explain``, ``suggest``, ``fixhints``: why repeats are slow, what to trace next, which ``stepscope try`` fixes
  apply;
- ``diff``, ``difftree``, ``envfacts``, ``timestats``, ``runpick``: two runs compared (``stepscope diff``, the
  compare page) and the differential call tree (also ``explain``'s);
- ``memlane``, ``memory``: a window's memory on the memory lane, and the run's memory summary and OOM record;
- ``ranks``, ``nodes``: a job's processes and its steps rank by rank; a node-graph app's per-node tables.
"""
