"""Everything that runs inside the profiled program (stdlib only; torch and torch_xla are only looked up or imported
lazily, inside functions, once the program has them).

- ``api``, ``settings``: the public API and the one settings object a recording is made from;
- ``session``: a recording (spans, samples, memory lane, the recorder thread, writing the store);
- ``launch``: ``python -m stepscope.record.launch``, the entry point ``stepscope run`` starts the program with;
- ``processes``, ``forks``, ``endsignals``: children followed, forks, and the end of a run by signal;
- ``tracing/``: turning named functions into spans (PEP 669 ``sys.monitoring`` or code swap), probes, which calls
  the C recorder takes (``tracing.recorder``);
- ``native/``: the C recorder's extension (its .c/.h sources, the stub ``_native.pyi``) and its loader;
- ``steps/``: denoising steps as spans (scopes, markers, sampler loops);
- ``sampling/``: the stack sampler (timer thread or signal);
- ``memory/``: the memory lane and CUDA memory history;
- ``device/``: the device trace (torch.profiler / Kineto, PyTorch/XLA) and compile report, captured in the program;
- ``control``: the control server ``stepscope capture --pid`` talks to;
- ``apps/``: presets for apps (ComfyUI, InvokeAI, diffusers).

A test (tests/test_layout.py) checks that nothing here imports, at module level, anything outside the standard
library, ``stepscope.record``, ``stepscope.core`` and the store's writing side.
"""
