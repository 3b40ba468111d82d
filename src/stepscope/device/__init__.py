"""The device timeline: Kineto (torch.profiler) traces parsed into columns, and analyses over them."""
