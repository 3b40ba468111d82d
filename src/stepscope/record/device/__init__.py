"""The device trace and compile report as captured inside the program (torch.profiler / Kineto, PyTorch/XLA); loading and analysis are in ``stepscope.device``."""
