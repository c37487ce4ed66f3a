"""CosmoFlow (MLPerf HPC) in PyTorch: model, TFRecord data pipeline, distributed training."""
