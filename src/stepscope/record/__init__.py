"""Everything that runs inside the profiled program (stdlib only; torch and torch_xla are only looked up or imported
lazily, inside functions, once the program has them).

- ``api``, ``settings``: the public API and the one settings object a recording is made from;
- ``session``: a recording (spans, samples, memory lane, the recorder thread, writing the store);
- ``parts``: what a session records besides (device trace, compile report, collectives, DDP, memory history, end
  signals, forks followed...), assembled in one place for `stepscope run`, the API, a capture window and a forked child;
- ``launch``: ``python -m stepscope.record.launch``, the entry point ``stepscope run`` starts the program with;
- ``launchspec``: what ``stepscope run`` hands the launcher and the program's followed processes (typed, both ends);
- ``processes``, ``forks``, ``endsignals``: children followed (and the start-up hook's ``STEPSCOPE_SERVER``), forks,
  and the end of a run by signal;
- ``envinfo``, ``dynamo_hooks``: the run's environment facts; torch.compile kept off stepscope's own frames;
- ``tracing/``: turning named functions into spans (PEP 669 ``sys.monitoring`` or code swap), probes, which calls
  the C recorder takes (``tracing.recorder``), collectives, sync sites, mirroring into the device profiler;
- ``native/``: the C recorder's extension (its .c/.h sources, the stub ``_native.pyi``) and its loader;
- ``spans/``: the span buffer, the current span, span names from arguments;
- ``steps/``: denoising steps as spans (scopes, markers, sampler loops) and the pipeline's work facts;
- ``sampling/``: the stack sampler (timer signals for the main thread, a thread for the rest);
- ``memory/``: the memory lane and CUDA memory history;
- ``device/``: the device trace (torch.profiler / Kineto, PyTorch/XLA), the compile report and the peak probe,
  captured in the program;
- ``control``: the control server ``stepscope capture --pid`` talks to;
- ``apps/``: presets for apps (ComfyUI, InvokeAI, diffusers).

A test (tests/test_layout.py) checks that nothing here imports, at module level, anything outside the standard
library, ``stepscope.record``, ``stepscope.core``'s stdlib modules and the store's writing side.
"""
