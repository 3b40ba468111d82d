def load_models_gpu(models, memory_required=0):
    return None
