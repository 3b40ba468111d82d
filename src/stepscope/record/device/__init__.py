"""The device side as captured inside the program (torch and torch_xla imported lazily): the torch.profiler (Kineto)
trace with clock markers (``capture``), the PyTorch/XLA profiler session and metrics (``xla_capture``), Dynamo's
graph breaks and recompiles (``compile_report``) and the matmul peak probe (``peaks``). Loading and analysis are in
``stepscope.device``.
"""
