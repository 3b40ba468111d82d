"""The device timeline, loaded and analysed outside the program (its capture inside the program is
``stepscope.record.device``):

- ``rawread``, ``kineto``, ``native``, ``analysis``: a Kineto (torch.profiler) trace read and gunzipped (stdlib
  only), parsed into columns (the C scanner ``native._kscan``, else msgspec); idle gaps per stream, host syncs, top
  ops and kernels;
- ``runview``, ``flops``: a run joined with its Kineto trace (clock map, syncs to span and Python line, per-span
  device time) and FLOPs from recorded shapes against the device's peak;
- ``xla_load``, ``xla``, ``xla_run``: a PyTorch/XLA profiler capture read into columns, analysed, and joined with
  the run;
- ``ranks``: a job's device time rank by rank (HTA's definitions);
- ``view``: the one device view of a recorded run, shown by ``stepscope device``, the report and the web UI.
"""
