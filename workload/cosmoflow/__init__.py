"""CosmoFlow training workload (MLPerf HPC) for amlhpc."""
